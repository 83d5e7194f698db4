// Row initialization kernels: the uniform initializer's counter-based draws and the
// round-to-nearest store of initial weights. Tables initialize every row at creation and cached
// tables create rows on first touch (each miss of a never-written row), so these run per row in
// the fetch path. Both compile for AVX-512, AVX2 and the baseline ISA (isa_builds.h,
// LEANEMB_ISA_KERNEL); the loops are the reference's arithmetic with no reassociation, so every
// build gives its bits.
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/isa_builds.h"
#include "kernels/row_access.h"

namespace leanemb::kernels {

namespace {

// (bits >> 8) < 2^24 converts exactly, through int32 so that the conversion vectorizes.
inline float uniform_value(uint32_t key, int64_t j, float bound) {
  const float u = (static_cast<float>(static_cast<int32_t>(column_bits(key, static_cast<uint32_t>(j)) >> 8)) + 0.5f) *
                  (1.0f / 16777216.0f);
  return (2.0f * u - 1.0f) * bound;
}

}  // namespace

void ref_uniform_fill(uint32_t key, int64_t d, float bound, float* out) {
  for (int64_t j = 0; j < d; ++j) {
    const uint32_t bits = column_bits(key, static_cast<uint32_t>(j));
    const float u = (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
    out[j] = (2.0f * u - 1.0f) * bound;
  }
}

namespace {

inline void uniform_fill_impl(uint32_t key, int64_t d, float bound, float* __restrict out) {
  for (int64_t j = 0; j < d; ++j) out[j] = uniform_value(key, j, bound);
}

inline void store_weights_rne_impl(const RowLayout& l, uint8_t* __restrict row, const float* __restrict w) {
  const int64_t d = l.dim;
  switch (l.weight_dtype) {
    case DType::kF32:
      for (int64_t j = 0; j < d; ++j) store_f32(row + 4 * j, w[j]);
      break;
    case DType::kF16:
      for (int64_t j = 0; j < d; ++j) store_u16(row + 2 * j, f32_to_f16_rne(w[j]));
      break;
    case DType::kBF16:
      for (int64_t j = 0; j < d; ++j) store_u16(row + 2 * j, f32_to_bf16_rne(w[j]));
      break;
    case DType::kFP8:
      for (int64_t j = 0; j < d; ++j) row[j] = f32_to_fp8_rn(w[j]);
      break;
    case DType::kQ8:
      q8_store<false>(row, w, d, 0, 0);
      break;
    case DType::kInt8Rowwise:
      ref_store_weights_rne(l, row, w);
      break;
    default: LEANEMB_CHECK(false, "not a row dtype");
  }
}

}  // namespace

LEANEMB_ISA_KERNEL(void, uniform_fill, (uint32_t key, int64_t d, float bound, float* __restrict out), (key, d, bound, out))
LEANEMB_ISA_KERNEL(void, store_weights_rne, (const RowLayout& l, uint8_t* __restrict row, const float* __restrict w),
                   (l, row, w))

}  // namespace leanemb::kernels
