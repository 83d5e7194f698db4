#include "dist/payload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/half.h"

namespace leanemb::dist {

size_t payload_bytes_per_row(DType t, int64_t dim) {
  const auto d = static_cast<size_t>(dim);
  switch (t) {
    case DType::kF32: return 4 * d;
    case DType::kBF16:
    case DType::kF16: return 2 * d;
    case DType::kInt8Rowwise: return 8 + d;
    default: break;  // not a payload dtype (check_sizes rejects it)
  }
  return 0;
}

namespace {

Status check_sizes(const char* fn, DType t, int64_t dim, size_t floats, size_t bytes) {
  LEANEMB_RETURN_IF_ERROR(check_dtype(DTypeUse::kPayload, t));
  if (dim < 1) return invalid_argument(std::string("dist: ") + fn + ": dim must be >= 1, got " + std::to_string(dim));
  const auto d = static_cast<size_t>(dim);
  if (floats % d != 0) {
    return invalid_argument(std::string("dist: ") + fn + ": " + std::to_string(floats) +
                            " floats are not a whole number of rows of dim " + std::to_string(dim));
  }
  const size_t want = floats / d * payload_bytes_per_row(t, dim);
  if (bytes != want) {
    return invalid_argument(std::string("dist: ") + fn + ": " + std::to_string(floats / d) + " rows of " +
                            std::string(dtype_name(t)) + " dim " + std::to_string(dim) + " take " +
                            std::to_string(want) + " bytes, the buffer has " + std::to_string(bytes));
  }
  return Status::ok_status();
}

void encode_int8_row(const float* x, size_t d, uint8_t* out) {
  float lo = x[0], hi = x[0];
  bool finite = true;
  for (size_t j = 0; j < d; ++j) {
    finite &= std::isfinite(x[j]);
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  uint8_t* codes = out + 8;
  // A range beyond FLT_MAX (hi - lo overflows) is treated like a non-finite row.
  if (!finite || !std::isfinite(hi - lo)) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(out, &nan, 4);
    std::memcpy(out + 4, &nan, 4);
    std::memset(codes, 0, d);
    return;
  }
  const float scale = (hi - lo) / 255.0f;
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (size_t j = 0; j < d; ++j) {
    const float q = std::nearbyint((x[j] - lo) * inv);
    codes[j] = static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
  }
  std::memcpy(out, &scale, 4);
  std::memcpy(out + 4, &lo, 4);
}

void decode_int8_row(const uint8_t* in, size_t d, float* out) {
  float scale, lo;
  std::memcpy(&scale, in, 4);
  std::memcpy(&lo, in + 4, 4);
  const uint8_t* codes = in + 8;
  for (size_t j = 0; j < d; ++j) out[j] = static_cast<float>(codes[j]) * scale + lo;
}

}  // namespace

Status encode_rows(DType t, int64_t dim, std::span<const float> in, std::span<uint8_t> out) {
  LEANEMB_RETURN_IF_ERROR(check_sizes("encode_rows", t, dim, in.size(), out.size()));
  const size_t d = static_cast<size_t>(dim);
  const size_t n = in.size() / d;
  switch (t) {
    case DType::kF32:
      if (!in.empty()) std::memcpy(out.data(), in.data(), in.size_bytes());
      break;
    case DType::kBF16:
      for (size_t i = 0; i < in.size(); ++i) {
        const uint16_t h = f32_to_bf16_rne(in[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < in.size(); ++i) {
        const uint16_t h = f32_to_f16_rne(in[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::kInt8Rowwise:
      for (size_t r = 0; r < n; ++r) encode_int8_row(in.data() + r * d, d, out.data() + r * (8 + d));
      break;
    default: break;  // rejected by check_sizes
  }
  return Status::ok_status();
}

Status decode_rows(DType t, int64_t dim, std::span<const uint8_t> in, std::span<float> out) {
  LEANEMB_RETURN_IF_ERROR(check_sizes("decode_rows", t, dim, out.size(), in.size()));
  const size_t d = static_cast<size_t>(dim);
  const size_t n = out.size() / d;
  switch (t) {
    case DType::kF32:
      if (!out.empty()) std::memcpy(out.data(), in.data(), out.size_bytes());
      break;
    case DType::kBF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, in.data() + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, in.data() + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    case DType::kInt8Rowwise:
      for (size_t r = 0; r < n; ++r) decode_int8_row(in.data() + r * (8 + d), d, out.data() + r * d);
      break;
    default: break;  // rejected by check_sizes
  }
  return Status::ok_status();
}

}  // namespace leanemb::dist
