// Vectorized q8 row store and load (DType::kQ8, row_access.h) for the x86-64-v3 and v4 builds of
// the update kernels. Each gives q8_store<kSr> / load_row<kQ8>'s bytes and floats exactly:
//
//   * absmax: lane-wise max of |w| (MAXPS returns its second operand, the running max, when w is
//     NaN, as the scalar's `absmax < a ? a : absmax` keeps it), then across lanes; max is exact,
//     so the order does not matter. scale = absmax / 127 is the scalar's single division.
//   * codes: the scalar's operations, lane by lane, four lanes to a 256-bit double vector:
//     t = w / scale (VDIVPS, IEEE like DIVSS, never a reciprocal), widened to double (exact),
//     u = (bits >> 8) * 2^-24 (exact: bits >> 8 < 2^24), t + u (the same IEEE double addition),
//     floor (VROUNDPD toward -Inf) or, without stochastic rounding, nearbyint (VROUNDPD in the
//     current rounding mode, as std::nearbyint), NaN -> 0, the clamp to [-127, 127] (MAXPD /
//     MINPD on non-NaN values select as the scalar's ternaries), and truncation to int (exact on
//     these integers). The random bits are column_bits8_v3 (vec8.h), column_bits' arithmetic.
//   * columns past the last full vector of 8: the scalar q8_store_codes with the same scale.
//   * load: int8 -> fp32 (exact) times the scale, one IEEE product per element as q8_load.
//
// The x86-64-v4 build runs these 8-lane functions too (its ISA includes AVX2); a 16-lane version
// was not written, for want of an AVX-512 machine to measure and test it on. The baseline build
// runs the scalar code. Tested against the scalar store, byte for byte, in every build the CPU
// runs (Q8VecTest in q8_vec_test.cc).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/isa.h"
#include "kernels/quant8_vec.h"  // hmax8_v3
#include "kernels/row_access.h"
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

// q8_code<kSr> of four lanes: t (double), the random bits' top 24 bits `a` (kSr only).
template <bool kSr>
LEANEMB_TARGET_V3 inline __m128i q8_code4_v3(__m128 t_f, __m128i a) {
  const __m256d t = _mm256_cvtps_pd(t_f);
  __m256d q;
  if constexpr (kSr) {
    const __m256d u = _mm256_mul_pd(_mm256_cvtepi32_pd(a), _mm256_set1_pd(0x1p-24));
    q = _mm256_round_pd(_mm256_add_pd(t, u), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  } else {
    (void)a;
    q = _mm256_round_pd(t, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
  }
  q = _mm256_and_pd(q, _mm256_cmp_pd(q, q, _CMP_ORD_Q));  // NaN -> +0
  q = _mm256_min_pd(_mm256_max_pd(q, _mm256_set1_pd(-127.0)), _mm256_set1_pd(127.0));
  return _mm256_cvttpd_epi32(q);
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
  const __m256i step = _mm256_set1_epi32(static_cast<int>(8u * 0x9e3779b9u));
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    const __m256 t = _mm256_div_ps(_mm256_loadu_ps(w + j), vscale);
    __m256i a = _mm256_setzero_si256();
    if constexpr (kSr) {
      a = _mm256_srli_epi32(column_bits8_v3(key, term), 8);
      term = _mm256_add_epi32(term, step);
    }
    const __m128i lo = q8_code4_v3<kSr>(_mm256_castps256_ps128(t), _mm256_castsi256_si128(a));
    const __m128i hi = q8_code4_v3<kSr>(_mm256_extractf128_ps(t, 1), _mm256_extracti128_si256(a, 1));
    const __m128i c16 = _mm_packs_epi32(lo, hi);
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

// q8_store<kSr> and load_row<DType::kQ8> of build I (isa.h): the 8-lane functions above in the
// x86-64-v3 and v4 builds, the scalar ones in the baseline build.
template <Isa I, bool kSr>
inline void q8_store_t(uint8_t* __restrict row, const float* __restrict w, int64_t d, uint32_t key, uint32_t column0) {
#ifdef LEANEMB_HAVE_V3
  if constexpr (I != Isa::kBaseline) return q8_store_v3<kSr>(row, w, d, key, column0);
#endif
  q8_store<kSr>(row, w, d, key, column0);
}

template <Isa I>
inline void load_row_q8_t(float* __restrict out, const uint8_t* __restrict row, int64_t d) {
#ifdef LEANEMB_HAVE_V3
  if constexpr (I != Isa::kBaseline) return load_row_q8_v3(out, row, d);
#endif
  load_row<DType::kQ8>(out, row, d);
}

}  // namespace leanemb::kernels
