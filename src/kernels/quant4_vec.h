// The 4-bit state's load and store (quant4.h) for the x86-64-v3 and v4 builds of the update
// kernels, sixteen codes at a time:
//   * load: the book value of each code by two 8-entry permutes (VPERMPS) and a blend on the
//     code's bit 3, times the block's scale: the scalar quant4_load_block's floats exactly (the
//     same book values, kQuant4Unsigned.v[c] == quant4u_value(c) by Quant4Test, the same IEEE
//     product). The scalar loop interleaves each byte's two nibbles into two float streams, which
//     GCC vectorized with shuffles around every store.
//   * store (non-negative book): quant4u_code's operations lane by lane (the same IEEE products,
//     differences and comparison, explicit intrinsics: nothing to contract), the random bits by
//     column_bits8_v3 (vec8.h), and the codes packed to nibbles in registers (PACKUS, then PMADDUBSW
//     with 1 and 16) instead of through the scalar loop's int32 array. Adam's signed m, a block
//     with absmax 0 and the columns past the last 16 take the scalar code.
// The x86-64-v4 build runs sixteen-lane versions (quant4_load_block_v4, quant4_store_block_v4):
// the same operations lane by lane, the book lookup one 16-entry permute (VPERMPS on zmm), the
// codes narrowed by VPMOVDB before the same nibble packing. The baseline build runs the scalar code.
// Tested against the scalar functions, bit for bit and byte for byte, in every build the CPU runs
// (Quant4VecTest in quant4_test.cc).
#pragma once

#include <cstdint>

#include "kernels/isa.h"
#include "kernels/quant4.h"
#include "kernels/vec16.h"
#include "kernels/vec8.h"

namespace leanemb::kernels {

#ifdef LEANEMB_HAVE_V3

// Book values of eight codes (int32 lanes in 0..15): tables lo = book[0..8), hi = book[8..16).
LEANEMB_TARGET_V3 inline __m256 quant4_book8_v3(__m256 lo, __m256 hi, __m256i c) {
  const __m256 a = _mm256_permutevar8x32_ps(lo, c), b = _mm256_permutevar8x32_ps(hi, c);  // index: c's low 3 bits
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));           // bit 3 -> the sign bit
}

// quant4_load_block (quant4.h) of a block whose first element j0 is even.
LEANEMB_TARGET_V3 inline void quant4_load_block_v3(const uint8_t* __restrict codes, int64_t n, bool is_signed, float scale,
                                                   int64_t j0, float* __restrict out) {
  if (!(scale > 0.0f)) return quant4_load_block(codes, n, is_signed, scale, j0, out);
  const float* book = quant4_book(is_signed).v;
  const __m256 lo = _mm256_loadu_ps(book), hi = _mm256_loadu_ps(book + 8), vscale = _mm256_set1_ps(scale);
  const __m128i mask = _mm_set1_epi8(0x0f);
  const uint8_t* p = codes + j0 / 2;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + j / 2));  // 8 bytes: 16 codes
    // element 2i is byte i's low nibble, 2i + 1 its high one: interleave into element order
    const __m128i e = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    _mm256_storeu_ps(out + j, _mm256_mul_ps(quant4_book8_v3(lo, hi, _mm256_cvtepu8_epi32(e)), vscale));
    _mm256_storeu_ps(out + j + 8,
                     _mm256_mul_ps(quant4_book8_v3(lo, hi, _mm256_cvtepu8_epi32(_mm_srli_si128(e, 8))), vscale));
  }
  if (j < n) quant4_load_block(codes, n - j, is_signed, scale, j0 + j, out + j);
}

// quant4u_code (quant4.h) of eight lanes: a = value / scale, r = 24 random bits.
LEANEMB_TARGET_V3 inline __m256i quant4u_code8_v3(__m256 a, __m256i r) {
  const __m256i b = _mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7fffffff));
  const __m256i pow2 = _mm256_and_si256(b, _mm256_set1_epi32(0x7f800000));
  const __m256i hi = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffff)),
                                        _mm256_set1_epi32(static_cast<int>(kSqrt2Mantissa) - 1));  // -1: mantissa >= sqrt 2's
  const __m256 below =
      _mm256_castsi256_ps(_mm256_or_si256(pow2, _mm256_and_si256(hi, _mm256_set1_epi32(static_cast<int>(kSqrt2Mantissa)))));
  const __m256 gap = _mm256_mul_ps(_mm256_castsi256_ps(pow2), _mm256_blendv_ps(_mm256_set1_ps(kQuant4GapLo),
                                                                                _mm256_set1_ps(kQuant4GapHi),
                                                                                _mm256_castsi256_ps(hi)));
  const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(r), _mm256_set1_ps(0x1p-24f));
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(_mm256_mul_ps(u, gap), _mm256_sub_ps(a, below), _CMP_LT_OQ));
  // 2 * exponent field - 239 + hi + up (hi and up are -1 masks)
  __m256i c = _mm256_sub_epi32(_mm256_slli_epi32(_mm256_srli_epi32(b, 23), 1), _mm256_set1_epi32(239));
  c = _mm256_sub_epi32(_mm256_sub_epi32(c, hi), up);
  return _mm256_min_epi32(_mm256_max_epi32(c, _mm256_setzero_si256()), _mm256_set1_epi32(15));
}

// quant4_store_block (quant4.h) in the v3 build.
LEANEMB_TARGET_V3 inline float quant4_store_block_v3(const float* __restrict x, int64_t n, bool is_signed,
                                                     uint8_t* __restrict codes, int64_t j0, uint32_t key,
                                                     uint32_t column0) {
  const float absmax = quant4_absmax(x, n);
  if (is_signed || !(absmax > 0.0f)) {
    quant4_store_codes(x, n, is_signed, absmax, codes, j0, key, column0);
    return absmax;
  }
  const __m256 inv = _mm256_set1_ps(1.0f / absmax);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i term = column_term8_v3(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(column0)), iota));
  const __m256i step = _mm256_set1_epi32(static_cast<int>(8u * kColumnGolden));
  uint8_t* p = codes + j0 / 2;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i c0 = quant4u_code8_v3(_mm256_mul_ps(_mm256_loadu_ps(x + j), inv),
                                        _mm256_srli_epi32(column_bits8_v3(key, term), 8));
    term = _mm256_add_epi32(term, step);
    const __m256i c1 = quant4u_code8_v3(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), inv),
                                        _mm256_srli_epi32(column_bits8_v3(key, term), 8));
    term = _mm256_add_epi32(term, step);
    // 16 codes -> 16 bytes in element order -> byte i = code 2i + 16 * code 2i + 1
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(c0, c1), 0xd8);
    const __m128i e = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    const __m128i pairs = _mm_maddubs_epi16(e, _mm_set1_epi16(0x1001));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p + j / 2), _mm_packus_epi16(pairs, pairs));
  }
  if (j < n)
    quant4_store_codes(x + j, n - j, false, absmax, codes, j0 + j, key, column0 + static_cast<uint32_t>(j));
  return absmax;
}

#endif  // LEANEMB_HAVE_V3

#ifdef LEANEMB_HAVE_V4

// quant4_load_block (quant4.h) of a block whose first element j0 is even, sixteen codes a step.
LEANEMB_TARGET_V4 inline void quant4_load_block_v4(const uint8_t* __restrict codes, int64_t n, bool is_signed, float scale,
                                                   int64_t j0, float* __restrict out) {
  if (!(scale > 0.0f)) return quant4_load_block(codes, n, is_signed, scale, j0, out);
  const __m512 book = _mm512_loadu_ps(quant4_book(is_signed).v), vscale = _mm512_set1_ps(scale);
  const __m128i mask = _mm_set1_epi8(0x0f);
  const uint8_t* p = codes + j0 / 2;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + j / 2));  // 8 bytes: 16 codes
    const __m128i e = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e), book), vscale));
  }
  if (j < n) quant4_load_block(codes, n - j, is_signed, scale, j0 + j, out + j);
}

// quant4u_code8_v3 (above) in sixteen lanes.
LEANEMB_TARGET_V4 inline __m512i quant4u_code16_v4(__m512 a, __m512i r) {
  const __m512i b = _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff));
  const __m512i pow2 = _mm512_and_si512(b, _mm512_set1_epi32(0x7f800000));
  const __mmask16 hi = _mm512_cmpge_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffff)),
                                               _mm512_set1_epi32(static_cast<int>(kSqrt2Mantissa)));
  const __m512 below = _mm512_castsi512_ps(_mm512_mask_or_epi32(pow2, hi, pow2, _mm512_set1_epi32(static_cast<int>(kSqrt2Mantissa))));
  const __m512 gap = _mm512_mul_ps(_mm512_castsi512_ps(pow2),
                                   _mm512_mask_blend_ps(hi, _mm512_set1_ps(kQuant4GapLo), _mm512_set1_ps(kQuant4GapHi)));
  const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(r), _mm512_set1_ps(0x1p-24f));
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_mul_ps(u, gap), _mm512_sub_ps(a, below), _CMP_LT_OQ);
  // 2 * exponent field - 239 + hi + up
  __m512i c = _mm512_sub_epi32(_mm512_slli_epi32(_mm512_srli_epi32(b, 23), 1), _mm512_set1_epi32(239));
  const __m512i one = _mm512_set1_epi32(1);
  c = _mm512_mask_add_epi32(c, hi, c, one);
  c = _mm512_mask_add_epi32(c, up, c, one);
  return _mm512_min_epi32(_mm512_max_epi32(c, _mm512_setzero_si512()), _mm512_set1_epi32(15));
}

// quant4_store_block (quant4.h) in the v4 build.
LEANEMB_TARGET_V4 inline float quant4_store_block_v4(const float* __restrict x, int64_t n, bool is_signed,
                                                     uint8_t* __restrict codes, int64_t j0, uint32_t key,
                                                     uint32_t column0) {
  const float absmax = quant4_absmax(x, n);
  if (is_signed || !(absmax > 0.0f)) {
    quant4_store_codes(x, n, is_signed, absmax, codes, j0, key, column0);
    return absmax;
  }
  const __m512 inv = _mm512_set1_ps(1.0f / absmax);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i term = column_term16_v4(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(column0)), iota));
  const __m512i step = _mm512_set1_epi32(static_cast<int>(16u * kColumnGolden));
  uint8_t* p = codes + j0 / 2;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512i c = quant4u_code16_v4(_mm512_mul_ps(_mm512_loadu_ps(x + j), inv),
                                        _mm512_srli_epi32(column_bits16_v4(key, term), 8));
    term = _mm512_add_epi32(term, step);
    // 16 codes -> 16 bytes in element order -> byte i = code 2i + 16 * code 2i + 1
    const __m128i pairs = _mm_maddubs_epi16(_mm512_cvtepi32_epi8(c), _mm_set1_epi16(0x1001));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p + j / 2), _mm_packus_epi16(pairs, pairs));
  }
  if (j < n)
    quant4_store_codes(x + j, n - j, false, absmax, codes, j0 + j, key, column0 + static_cast<uint32_t>(j));
  return absmax;
}

#endif  // LEANEMB_HAVE_V4

// quant4_store_array (quant4.h) in build I (isa.h).
template <Isa I>
inline void quant4_store_array_t(const float* __restrict x, int64_t d, bool is_signed, uint8_t* codes, uint8_t* scales,
                                 uint32_t key, uint32_t column0) {
#ifdef LEANEMB_HAVE_V3
  if constexpr (I != Isa::kBaseline) {
    for (int64_t j0 = 0; j0 < d; j0 += kQuantBlockSize) {
      const int64_t n = d - j0 < kQuantBlockSize ? d - j0 : kQuantBlockSize;
      const uint32_t col = column0 + static_cast<uint32_t>(j0);
#ifdef LEANEMB_HAVE_V4
      if constexpr (I == Isa::kV4) {
        store_f32(scales + 4 * (j0 / kQuantBlockSize), quant4_store_block_v4(x + j0, n, is_signed, codes, j0, key, col));
        continue;
      }
#endif
      store_f32(scales + 4 * (j0 / kQuantBlockSize), quant4_store_block_v3(x + j0, n, is_signed, codes, j0, key, col));
    }
    return;
  }
#endif
  quant4_store_array(x, d, is_signed, codes, scales, key, column0);
}

// quant4_load_array (quant4.h) in build I (isa.h).
template <Isa I>
inline void quant4_load_array_t(const uint8_t* codes, const uint8_t* scales, int64_t d, bool is_signed,
                                float* __restrict out) {
#ifdef LEANEMB_HAVE_V3
  if constexpr (I != Isa::kBaseline) {
    for (int64_t j0 = 0; j0 < d; j0 += kQuantBlockSize) {
      const int64_t n = d - j0 < kQuantBlockSize ? d - j0 : kQuantBlockSize;
      const float scale = load_f32(scales + 4 * (j0 / kQuantBlockSize));
#ifdef LEANEMB_HAVE_V4
      if constexpr (I == Isa::kV4) {
        quant4_load_block_v4(codes, n, is_signed, scale, j0, out + j0);
        continue;
      }
#endif
      quant4_load_block_v3(codes, n, is_signed, scale, j0, out + j0);
    }
    return;
  }
#endif
  quant4_load_array(codes, scales, d, is_signed, out);
}

}  // namespace leanemb::kernels
