// Vectorized 8-bit block-wise quantization of optimizer state (see quant8.cc for the code books
// and the scalar reference, quantize_block / dequantize_block). Each function here gives the
// reference's bits exactly:
//
//   * absmax: lane-wise max of |x| (MAXPS returns its second operand, the running max, when x is
//     NaN, as std::max(absmax, NaN) does), then across lanes; max is exact, so the order of the
//     lanes does not matter.
//   * codes: the reference picks the code nearest to a = |x| * (1 / absmax) (ties to the smaller
//     magnitude, decided by its float comparison). The code books are linear within a decade, so
//     with the region r of a (x86-64-v3: compares against the decades' first codes; v4: a table
//     by binade and one compare) the nearest code is round(t), t = base[r] + (a - lo[r]) *
//     inv_step[r] (computed as one FMA, a * inv_step[r] + off[r]). Where t is within 1/2 - kQuantNearBand
//     of an integer the rounding errors of the code values, of t and of the reference's
//     comparison (all below 1e-4 in units of t) cannot change the answer; lanes nearer a
//     half-integer (about 0.2% of them) are recomputed with the scalar rule (quant8_code).
//     Exhaustive and threshold tests in kernels_test.cc check every build against the reference.
//     A block whose 1 / absmax overflows (absmax below 2^-128) goes to the reference whole.
//   * dequantize: the code book itself (256 floats) in sixteen 16-lane registers, looked up with
//     two-table permutes (x86-64-v4), or an AVX2 gather from the 1 KiB code book (x86-64-v3),
//     times the scale, as the reference.
//
// The baseline build uses the scalar reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "kernels/vec16.h"
#include "kernels/vec8.h"

namespace leanemb::kernels {

// A code book as linear regions (quant8.cc): region r (r < count) holds the values a with
// bound[r] < a <= bound[r + 1] (bound[0] < 0; entries from count on are padding), whose nearest
// code is about round(a * inv_step[r] + off[r]) = base[r] + round((a - lo[r]) * inv_step[r]).
// By binade: a in [2^(i - 27), 2^(i - 26)) (i = 0 also below) is in region
// binade_region[i] + (a > binade_bound[i]) (each binade holds at most one bound).
struct Quant8Regions {
  int count = 0;
  float bound[16] = {};
  float lo[16] = {};
  float inv_step[16] = {};
  float off[16] = {};
  int32_t base[16] = {};
  int32_t binade_region[32] = {};
  float binade_bound[32] = {};
};
inline constexpr int kQuant8BinadeBias = 127 - 27;  // binade index = (fp32 exponent field) - this
const Quant8Regions& quant8_regions(bool is_signed);

// a = |x| / absmax as the reference computes it, in [0, 1]: |x| * inv clamped to 1 (a NaN
// product, from x = NaN or x = +-Inf with inv = 0, counts as 1), and 0 for x = 0 (whose product
// is NaN when 1 / absmax overflowed to Inf).
inline float quant_input(float x, float inv) {
  float a = std::fabs(x) * inv;
  a = a < 1.0f ? a : 1.0f;
  return x == 0.0f ? 0.0f : a;
}

// Lanes whose t is farther than 1/2 - kQuantNearBand from the nearest integer take the fast path.
inline constexpr float kQuantNearBand = 1.0f / 1024.0f;

#ifdef LEANEMB_HAVE_V3

LEANEMB_TARGET_V3 inline float hmax8_v3(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

template <bool kSigned>
LEANEMB_TARGET_V3 inline float quantize_block_v3(const float* x, int64_t n, uint8_t* codes) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) acc = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), acc);
  float absmax = hmax8_v3(acc);
  for (; j < n; ++j) absmax = std::max(absmax, std::fabs(x[j]));
  if (absmax == 0.0f) {
    std::memset(codes, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float inv = 1.0f / absmax;
  if (!(inv <= 3.4e38f)) return quantize_block(x, n, kSigned, codes);  // 1 / absmax overflowed
  const Quant8Regions& q = quant8_regions(kSigned);
  constexpr int kRegions = kSigned ? 7 : 8;
  const __m256 istep = _mm256_loadu_ps(q.inv_step), off = _mm256_loadu_ps(q.off);
  const __m256 vinv = _mm256_set1_ps(inv), one = _mm256_set1_ps(1.0f);
  const __m256 band = _mm256_set1_ps(0.5f - kQuantNearBand);
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 xv = _mm256_loadu_ps(x + j);
    // a < 1 ? a : 1 (NaN -> 1); x = 0 gives 0 as inv is finite.
    const __m256 a = _mm256_min_ps(_mm256_mul_ps(_mm256_and_ps(xv, absmask), vinv), one);
    __m256i r = _mm256_setzero_si256();
    for (int k = 1; k < kRegions; ++k)
      r = _mm256_sub_epi32(r, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(q.bound[k]), _CMP_GT_OQ)));
    // t = base + (a - lo) * inv_step up to rounding (FMA is fine here: t only picks the code).
    const __m256 t = _mm256_fmadd_ps(a, _mm256_permutevar8x32_ps(istep, r), _mm256_permutevar8x32_ps(off, r));
    const __m256 rt = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const int near = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(t, rt), absmask), band, _CMP_GT_OQ));
    __m256i code = _mm256_cvttps_epi32(rt);
    if constexpr (kSigned) {
      const __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_LT_OQ));
      const __m256i nonzero = _mm256_xor_si256(_mm256_cmpeq_epi32(code, _mm256_setzero_si256()), _mm256_set1_epi32(-1));
      code = _mm256_or_si256(code, _mm256_and_si256(_mm256_and_si256(neg, nonzero), _mm256_set1_epi32(0x80)));
    }
    const __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + j), _mm_packus_epi16(w16, w16));
    for (unsigned bit = static_cast<unsigned>(near); bit != 0; bit &= bit - 1) {
      const int64_t i = j + __builtin_ctz(bit);
      codes[i] = quant8_code(x[i], inv, kSigned);
    }
  }
  for (; j < n; ++j) codes[j] = quant8_code(x[j], inv, kSigned);
  return absmax;
}

LEANEMB_TARGET_V3 inline void dequantize_block_v3(const uint8_t* codes, int64_t n, bool is_signed, float scale,
                                                  float* out) {
  const float* cb = quant_codebook(is_signed);
  const __m256 s = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j)));
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_i32gather_ps(cb, idx, 4), s));
  }
  for (; j < n; ++j) out[j] = cb[codes[j]] * scale;
}

#endif  // LEANEMB_HAVE_V3

#ifdef LEANEMB_HAVE_V4

template <bool kSigned>
LEANEMB_TARGET_V4 inline float quantize_block_v4(const float* x, int64_t n, uint8_t* codes) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 acc = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) acc = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + j), absmask), acc);
  if (j < n) acc = _mm512_max_ps(_mm512_and_ps(_mm512_maskz_loadu_ps(lane_mask16(n - j), x + j), absmask), acc);
  const float absmax =
      hmax8_v3(_mm256_max_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
  if (absmax == 0.0f) {
    std::memset(codes, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float inv = 1.0f / absmax;
  if (!(inv <= 3.4e38f)) return quantize_block(x, n, kSigned, codes);  // 1 / absmax overflowed
  const Quant8Regions& q = quant8_regions(kSigned);
  const __m512 istep = _mm512_loadu_ps(q.inv_step), off = _mm512_loadu_ps(q.off);
  const __m512i region_lo = _mm512_loadu_si512(q.binade_region), region_hi = _mm512_loadu_si512(q.binade_region + 16);
  const __m512 bound_lo = _mm512_loadu_ps(q.binade_bound), bound_hi = _mm512_loadu_ps(q.binade_bound + 16);
  const __m512 vinv = _mm512_set1_ps(inv), one = _mm512_set1_ps(1.0f);
  const __m512 band = _mm512_set1_ps(0.5f - kQuantNearBand);
  const __m512i one_i = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(kQuant8BinadeBias);
  for (j = 0; j < n; j += 16) {
    const __mmask16 m = lane_mask16(n - j);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + j);
    // a < 1 ? a : 1 (NaN -> 1); x = 0 gives 0 as inv is finite.
    const __m512 a = _mm512_min_ps(_mm512_mul_ps(_mm512_and_ps(xv, absmask), vinv), one);
    // Region: the binade's first region, plus one above the bound inside the binade.
    const __m512i binade = _mm512_max_epi32(_mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23), bias),
                                            _mm512_setzero_si512());
    __m512i r = _mm512_permutex2var_epi32(region_lo, binade, region_hi);
    r = _mm512_mask_add_epi32(r, _mm512_cmp_ps_mask(a, _mm512_permutex2var_ps(bound_lo, binade, bound_hi), _CMP_GT_OQ),
                              r, one_i);
    // t = base + (a - lo) * inv_step up to rounding (FMA is fine here: t only picks the code).
    const __m512 t = _mm512_fmadd_ps(a, _mm512_permutexvar_ps(r, istep), _mm512_permutexvar_ps(r, off));
    __m512i code = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // t - round(t)
    const __mmask16 near = _mm512_mask_cmp_ps_mask(m, _mm512_and_ps(frac, absmask), band, _CMP_GT_OQ);
    if constexpr (kSigned) {
      const __mmask16 neg = _mm512_cmp_ps_mask(xv, _mm512_setzero_ps(), _CMP_LT_OQ) & _mm512_test_epi32_mask(code, code);
      code = _mm512_mask_or_epi32(code, neg, code, _mm512_set1_epi32(0x80));
    }
    _mm512_mask_cvtepi32_storeu_epi8(codes + j, m, code);
    for (unsigned bit = near; bit != 0; bit &= bit - 1) {
      const int64_t i = j + __builtin_ctz(bit);
      codes[i] = quant8_code(x[i], inv, kSigned);
    }
  }
  return absmax;
}

// The code book in registers (see dequantize_block_v4).
struct CodebookV4 {
  __m512 tab[16];
};
LEANEMB_TARGET_V4 inline CodebookV4 load_codebook_v4(bool is_signed) {
  const float* cb = quant_codebook(is_signed);
  CodebookV4 c;
  for (int i = 0; i < 16; ++i) c.tab[i] = _mm512_loadu_ps(cb + 16 * i);
  return c;
}

// Signed book: codes 128 + i are -(code i) (code 128 is -0), so the magnitudes (registers 0-7)
// and bit 7 as the sign.
template <bool kSigned>
LEANEMB_TARGET_V4 inline void dequantize_block_v4(const CodebookV4& cb, const uint8_t* codes, int64_t n, float scale,
                                                  float* out) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i b5 = _mm512_set1_epi32(32), b6 = _mm512_set1_epi32(64);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lane_mask16(n - j);
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, codes + j));
    // Codes 32c .. 32c + 31 from registers 2c and 2c + 1 (index bits 0-4), then bits 5, 6 (, 7).
    constexpr int kTables = kSigned ? 4 : 8;
    __m512 p[kTables];
    for (int c = 0; c < kTables; ++c) p[c] = _mm512_permutex2var_ps(cb.tab[2 * c], idx, cb.tab[2 * c + 1]);
    const __mmask16 m5 = _mm512_test_epi32_mask(idx, b5), m6 = _mm512_test_epi32_mask(idx, b6);
    const __m512 q0 = _mm512_mask_blend_ps(m5, p[0], p[1]), q1 = _mm512_mask_blend_ps(m5, p[2], p[3]);
    __m512 v = _mm512_mask_blend_ps(m6, q0, q1);
    if constexpr (kSigned) {
      v = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_slli_epi32(_mm512_srli_epi32(idx, 7), 31)));  // bit 7 -> sign
    } else {
      const __m512 q2 = _mm512_mask_blend_ps(m5, p[4], p[5]), q3 = _mm512_mask_blend_ps(m5, p[6], p[7]);
      v = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(128)), v, _mm512_mask_blend_ps(m6, q2, q3));
    }
    _mm512_mask_storeu_ps(out + j, m, _mm512_mul_ps(v, s));
  }
}

#endif  // LEANEMB_HAVE_V4

// The block quantizer and dequantizer of build I (isa.h); the baseline build is the reference.
template <Isa I>
inline float quantize_block_t(const float* x, int64_t n, bool is_signed, uint8_t* codes) {
#ifdef LEANEMB_HAVE_V4
  if constexpr (I == Isa::kV4)
    return is_signed ? quantize_block_v4<true>(x, n, codes) : quantize_block_v4<false>(x, n, codes);
#endif
#ifdef LEANEMB_HAVE_V3
  if constexpr (I == Isa::kV3)
    return is_signed ? quantize_block_v3<true>(x, n, codes) : quantize_block_v3<false>(x, n, codes);
#endif
  return quantize_block(x, n, is_signed, codes);
}

template <Isa I>
inline void dequantize_block_t(const uint8_t* codes, int64_t n, bool is_signed, float scale, float* out) {
#ifdef LEANEMB_HAVE_V4
  if constexpr (I == Isa::kV4) {
    if (is_signed) return dequantize_block_v4<true>(load_codebook_v4(true), codes, n, scale, out);
    return dequantize_block_v4<false>(load_codebook_v4(false), codes, n, scale, out);
  }
#endif
#ifdef LEANEMB_HAVE_V3
  if constexpr (I == Isa::kV3) return dequantize_block_v3(codes, n, is_signed, scale, out);
#endif
  dequantize_block(codes, n, is_signed, scale, out);
}

// One state array of a fat row: blocks of kQuantBlockSize codes with one fp32 scale each
// (scales: 4-byte aligned or not), dim d.
template <Isa I>
inline void dequantize_row_t(const uint8_t* codes, const uint8_t* scales, int64_t d, bool is_signed, float* out) {
  const int64_t blocks = (d + kQuantBlockSize - 1) / kQuantBlockSize;
#ifdef LEANEMB_HAVE_V4
  if constexpr (I == Isa::kV4) {
    const CodebookV4 cb = load_codebook_v4(is_signed);  // once per row: `out` may alias the code book
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = b * kQuantBlockSize;
      float scale;
      std::memcpy(&scale, scales + 4 * b, 4);
      if (is_signed) dequantize_block_v4<true>(cb, codes + j0, std::min(kQuantBlockSize, d - j0), scale, out + j0);
      else dequantize_block_v4<false>(cb, codes + j0, std::min(kQuantBlockSize, d - j0), scale, out + j0);
    }
    return;
  }
#endif
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kQuantBlockSize;
    float scale;
    std::memcpy(&scale, scales + 4 * b, 4);
    dequantize_block_t<I>(codes + j0, std::min(kQuantBlockSize, d - j0), is_signed, scale, out + j0);
  }
}

}  // namespace leanemb::kernels
