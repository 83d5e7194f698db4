// Vectorized q8 row store and load (DType::kQ8, row_access.h) for the x86-64-v3 and v4 builds of
// the update kernels. Each gives q8_store<kSr> / load_row<kQ8>'s bytes and floats exactly:
//
//   * absmax: lane-wise max of |w| (MAXPS returns its second operand, the running max, when w is
//     NaN, as the scalar's `absmax < a ? a : absmax` keeps it), then across lanes; max is exact,
//     so the order does not matter. scale = absmax / 127 is the scalar's single division.
//   * codes: t = w / scale (VDIVPS, IEEE like DIVSS, never a reciprocal), then the scalar's code
//     in eight float / int32 lanes, exactly: the stochastic floor(t + u) as integer arithmetic on
//     floor(t * 2^24) (q8_code8_sr_v3 says why it is the double sum's floor), nearbyint as VROUNDPS
//     in the current rounding mode; NaN -> 0 and the clamp to [-127, 127] as the scalar's. The
//     random bits are column_bits8_v3 (vec8.h), column_bits' arithmetic.
//   * columns past the last full vector of 8: the scalar q8_store_codes with the same scale.
//   * load: int8 -> fp32 (exact) times the scale, one IEEE product per element as q8_load.
//
// The x86-64-v4 build runs sixteen-lane versions of the same operations (q8_store_v4,
// load_row_q8_v4: the same IEEE divisions, products and roundings lane by lane, VROUNDPS as
// VRNDSCALEPS with the same rounding, the codes narrowed by VPMOVDB, which truncates: they are in
// [-127, 127] already), with masked loads and stores for the columns past the last full vector.
// The baseline build runs the scalar code. Tested against the scalar store, byte for byte, in every
// build the CPU runs (Q8VecTest in q8_vec_test.cc; the exhaustive one over every float as well).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/isa.h"
#include "kernels/quant8_vec.h"  // hmax8_v3
#include "kernels/row_access.h"
#include "kernels/vec16.h"
#include "kernels/vec8.h"

namespace leanemb::kernels {

#ifdef LEANEMB_HAVE_V3

// max(0, max_j |w[j]|) ignoring NaNs, as q8_store's first loop.
LEANEMB_TARGET_V3 inline float q8_absmax_v3(const float* w, int64_t d) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) acc = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(w + j), absmask), acc);
  float absmax = hmax8_v3(acc);
  for (; j < d; ++j) {
    const float a = std::fabs(w[j]);
    absmax = absmax < a ? a : absmax;
  }
  return absmax;
}

// q8_code<false> of eight lanes: nearbyint of t in float is the double one's (an integer-valued
// result is exact in both), then NaN -> 0 and the clamp, as the scalar.
LEANEMB_TARGET_V3 inline __m256i q8_code8_rne_v3(__m256 t) {
  __m256 q = _mm256_round_ps(t, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
  q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));  // NaN -> +0
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvttps_epi32(q);
}

// q8_code<true> of eight lanes in 32-bit float and integer lanes, the same codes as the double
// arithmetic: with t clamped to [-127, 127] (a t outside gets the bound's code either way, since
// floor(t + u) moves by less than 1 and the code clamps there) and NaN sent to 0,
//   floor(t + k / 2^24) = floor((floor(t * 2^24) + k) / 2^24) = (floor(t * 2^24) + k) >> 24
// for the integer k = bits >> 8 (floor((x + k) / N) = floor((floor(x) + k) / N) for integers k, N).
// t * 2^24 is exact (a power-of-two scaling), its floor is an integer below 2^31 in magnitude, so
// the conversion is exact, and 127 * 2^24 + k <= 2^31 - 1: the sum never overflows.
LEANEMB_TARGET_V3 inline __m256i q8_code8_sr_v3(__m256 t, __m256i k) {
  t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));  // NaN -> +0 (code 0, as the scalar)
  t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  const __m256 f = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(0x1p24f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  return _mm256_srai_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(f), k), 24);
}

// q8_store<kSr> (row_access.h), eight columns at a time.
template <bool kSr>
LEANEMB_TARGET_V3 inline void q8_store_v3(uint8_t* __restrict row, const float* __restrict w, int64_t d, uint32_t key,
                                          uint32_t column0) {
  const float scale = q8_absmax_v3(w, d) / 127.0f;
  if (!(scale > 0.0f)) {
    std::memset(row, 0, static_cast<size_t>(d));
    store_f32(row + d, scale);
    return;
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i term = column_term8_v3(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(column0)), iota));
  const __m256i step = _mm256_set1_epi32(static_cast<int>(8u * kColumnGolden));
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    const __m256 t = _mm256_div_ps(_mm256_loadu_ps(w + j), vscale);
    __m256i c;
    if constexpr (kSr) {
      c = q8_code8_sr_v3(t, _mm256_srli_epi32(column_bits8_v3(key, term), 8));
      term = _mm256_add_epi32(term, step);
    } else {
      c = q8_code8_rne_v3(t);
    }
    const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(row + j), _mm_packs_epi16(c16, c16));
  }
  q8_store_codes<kSr>(row, w, j, d, scale, key, column0);
  store_f32(row + d, scale);
}

// load_row<DType::kQ8> (row_access.h), eight columns at a time (load8_v3).
LEANEMB_TARGET_V3 inline void load_row_q8_v3(float* __restrict out, const uint8_t* __restrict row, int64_t d) {
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) _mm256_storeu_ps(out + j, reinterpret_cast<__m256>(load8_v3<DType::kQ8>(row, j, d)));
  for (; j < d; ++j) out[j] = q8_load(row, j, d);
}

#endif  // LEANEMB_HAVE_V3

#ifdef LEANEMB_HAVE_V4

// q8_absmax_v3 in sixteen lanes (the lanes past d load as 0, which leaves the maximum as it is).
LEANEMB_TARGET_V4 inline float q8_absmax_v4(const float* w, int64_t d) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < d; j += 16)
    acc = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(lane_mask16(d - j), w + j)), acc);
  return _mm512_reduce_max_ps(acc);  // max is exact: any order of the lanes gives the same value
}

// q8_code8_rne_v3 / q8_code8_sr_v3 (above) in sixteen lanes.
LEANEMB_TARGET_V4 inline __m512i q8_code16_rne_v4(__m512 t) {
  __m512 q = _mm512_roundscale_ps(t, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
  q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);  // NaN -> +0
  q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  return _mm512_cvttps_epi32(q);
}
LEANEMB_TARGET_V4 inline __m512i q8_code16_sr_v4(__m512 t, __m512i k) {
  t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_ORD_Q), t);  // NaN -> +0
  t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  const __m512 f = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(0x1p24f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  return _mm512_srai_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(f), k), 24);
}

// q8_store<kSr> (row_access.h), sixteen columns at a time, the last vector masked.
template <bool kSr>
LEANEMB_TARGET_V4 inline void q8_store_v4(uint8_t* __restrict row, const float* __restrict w, int64_t d, uint32_t key,
                                          uint32_t column0) {
  const float scale = q8_absmax_v4(w, d) / 127.0f;
  if (!(scale > 0.0f)) {
    std::memset(row, 0, static_cast<size_t>(d));
    store_f32(row + d, scale);
    return;
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i term = column_term16_v4(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(column0)), iota));
  const __m512i step = _mm512_set1_epi32(static_cast<int>(16u * kColumnGolden));
  for (int64_t j = 0; j < d; j += 16) {
    const __mmask16 m = lane_mask16(d - j);
    const __m512 t = _mm512_div_ps(_mm512_maskz_loadu_ps(m, w + j), vscale);
    __m512i c;
    if constexpr (kSr) {
      c = q8_code16_sr_v4(t, _mm512_srli_epi32(column_bits16_v4(key, term), 8));
      term = _mm512_add_epi32(term, step);
    } else {
      c = q8_code16_rne_v4(t);
    }
    _mm512_mask_cvtepi32_storeu_epi8(row + j, m, c);
  }
  store_f32(row + d, scale);
}

// load_row<DType::kQ8> (row_access.h), sixteen columns at a time (load16).
LEANEMB_TARGET_V4 inline void load_row_q8_v4(float* __restrict out, const uint8_t* __restrict row, int64_t d) {
  const RowAffine af = row_affine16<DType::kQ8>(row, d);
  for (int64_t j = 0; j < d; j += 16) {
    const __mmask16 m = lane_mask16(d - j);
    _mm512_mask_storeu_ps(out + j, m, load16<DType::kQ8>(row, j, m, af));
  }
}

#endif  // LEANEMB_HAVE_V4

// q8_store<kSr> and load_row<DType::kQ8> of build I (isa.h): the 16-lane functions above in the
// x86-64-v4 build, the 8-lane ones in the v3 build, the scalar ones in the baseline build.
template <Isa I, bool kSr>
inline void q8_store_t(uint8_t* __restrict row, const float* __restrict w, int64_t d, uint32_t key, uint32_t column0) {
#ifdef LEANEMB_HAVE_V4
  if constexpr (I == Isa::kV4) return q8_store_v4<kSr>(row, w, d, key, column0);
#endif
#ifdef LEANEMB_HAVE_V3
  if constexpr (I != Isa::kBaseline) return q8_store_v3<kSr>(row, w, d, key, column0);
#endif
  q8_store<kSr>(row, w, d, key, column0);
}

template <Isa I>
inline void load_row_q8_t(float* __restrict out, const uint8_t* __restrict row, int64_t d) {
#ifdef LEANEMB_HAVE_V4
  if constexpr (I == Isa::kV4) return load_row_q8_v4(out, row, d);
#endif
#ifdef LEANEMB_HAVE_V3
  if constexpr (I != Isa::kBaseline) return load_row_q8_v3(out, row, d);
#endif
  load_row<DType::kQ8>(out, row, d);
}

}  // namespace leanemb::kernels
