// Rounding and 16-bit storage for the Precision enum. Loops call the inline branch-free
// converters of src/core/half.h, so GCC vectorizes them, in one build per ISA
// (kernels/isa_builds.h, LEANEMB_ISA_KERNEL).
#include "amp/precision.h"

#include <cstring>
#include <string>

#include "core/half.h"
#include "kernels/isa_builds.h"

namespace leanemb::amp {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

Result<Precision> parse_precision(std::string_view s) {
  if (s == "fp32" || s == "float32") return Precision::kFp32;
  if (s == "bf16" || s == "bfloat16") return Precision::kBf16;
  if (s == "fp16" || s == "float16") return Precision::kFp16;
  return invalid_argument("unknown precision '" + std::string(s) + "' (use fp32, bf16 or fp16)");
}

size_t precision_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

namespace {

// out[i] = x[i] rounded to p's grid (out may equal x).
inline void round_into_impl(const float* x, size_t n, Precision p, float* out) {
  switch (p) {
    case Precision::kFp32:
      if (out != x && n != 0) std::memmove(out, x, n * sizeof(float));
      return;
    case Precision::kBf16:
      for (size_t i = 0; i < n; ++i) out[i] = rounded_value(x[i], Precision::kBf16);
      return;
    case Precision::kFp16:
      for (size_t i = 0; i < n; ++i) out[i] = rounded_value(x[i], Precision::kFp16);
      return;
  }
}

LEANEMB_ISA_KERNEL(void, round_into, (const float* x, size_t n, Precision p, float* out), (x, n, p, out))

inline void pack_impl(std::span<const float> x, Precision p, void* out) {
  const float* v = x.data();
  const size_t n = x.size();
  switch (p) {
    case Precision::kFp32:
      if (n != 0) std::memcpy(out, v, n * sizeof(float));
      return;
    case Precision::kBf16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) o[i] = f32_to_bf16_rne(v[i]);
      return;
    }
    case Precision::kFp16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) o[i] = f32_to_f16_rne(v[i]);
      return;
    }
  }
}

inline void unpack_impl(const void* in, Precision p, std::span<float> out) {
  float* o = out.data();
  const size_t n = out.size();
  switch (p) {
    case Precision::kFp32:
      if (n != 0) std::memcpy(o, in, n * sizeof(float));
      return;
    case Precision::kBf16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) o[i] = bf16_to_f32(h[i]);
      return;
    }
    case Precision::kFp16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) o[i] = f16_to_f32(h[i]);
      return;
    }
  }
}

}  // namespace

void round_to_precision(std::span<float> x, Precision p) { round_into(x.data(), x.size(), p, x.data()); }

void copy_rounded(std::span<const float> x, Precision p, float* out) { round_into(x.data(), x.size(), p, out); }

LEANEMB_ISA_KERNEL(void, pack, (std::span<const float> x, Precision p, void* out), (x, p, out))
LEANEMB_ISA_KERNEL(void, unpack, (const void* in, Precision p, std::span<float> out), (in, p, out))

}  // namespace leanemb::amp
