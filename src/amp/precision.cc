// Rounding and 16-bit storage of the activation dtypes (DTypeUse::kActivations). Loops call the inline branch-free
// converters of src/core/half.h, so GCC vectorizes them, in one build per ISA
// (kernels/isa_builds.h, LEANEMB_ISA_KERNEL).
#include "amp/precision.h"

#include <cstring>
#include <string>

#include "core/half.h"
#include "kernels/isa_builds.h"

namespace leanemb::amp {

size_t precision_bytes(DType p) { return p == DType::kF32 ? 4 : 2; }

namespace {

// out[i] = x[i] rounded to p's grid (out may equal x).
inline void round_into_impl(const float* x, size_t n, DType p, float* out) {
  switch (p) {
    case DType::kF32:
      if (out != x && n != 0) std::memmove(out, x, n * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = rounded_value(x[i], DType::kBF16);
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) out[i] = rounded_value(x[i], DType::kF16);
      return;
    default: LEANEMB_CHECK(false, "round: not an activation dtype");
  }
}

LEANEMB_ISA_KERNEL(void, round_into, (const float* x, size_t n, DType p, float* out), (x, n, p, out))

inline void pack_impl(std::span<const float> x, DType p, void* out) {
  const float* v = x.data();
  const size_t n = x.size();
  switch (p) {
    case DType::kF32:
      if (n != 0) std::memcpy(out, v, n * sizeof(float));
      return;
    case DType::kBF16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) o[i] = f32_to_bf16_rne(v[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) o[i] = f32_to_f16_rne(v[i]);
      return;
    }
    default: LEANEMB_CHECK(false, "pack: not an activation dtype");
  }
}

inline void unpack_impl(const void* in, DType p, std::span<float> out) {
  float* o = out.data();
  const size_t n = out.size();
  switch (p) {
    case DType::kF32:
      if (n != 0) std::memcpy(o, in, n * sizeof(float));
      return;
    case DType::kBF16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) o[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) o[i] = f16_to_f32(h[i]);
      return;
    }
    default: LEANEMB_CHECK(false, "unpack: not an activation dtype");
  }
}

}  // namespace

void round_to_precision(std::span<float> x, DType p) { round_into(x.data(), x.size(), p, x.data()); }

void copy_rounded(std::span<const float> x, DType p, float* out) { round_into(x.data(), x.size(), p, out); }

LEANEMB_ISA_KERNEL(void, pack, (std::span<const float> x, DType p, void* out), (x, p, out))
LEANEMB_ISA_KERNEL(void, unpack, (const void* in, DType p, std::span<float> out), (in, p, out))

}  // namespace leanemb::amp
