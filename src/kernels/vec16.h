// Sixteen-lane fp32 helpers for the x86-64-v4 (AVX-512) builds of the kernels (see isa.h). Every
// function carries the v4 target attribute, so it may only be inlined into (or called from)
// v4 code, which the dispatch runs only on CPUs that have AVX-512 F/BW/CD/DQ/VL. Conversions
// compute exactly what the scalar functions in core/half.h compute, lane by lane, except that
// the fp16 -> fp32 conversion (VCVTPH2PS) returns signaling NaNs quieted.
//
// Tails: a vector may cover fewer than 16 columns; `m` has one bit per column that exists, and
// masked loads never touch the bytes of the columns left out (no read past the row).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/vec8.h"
#include "leanemb/dtype.h"

// LEANEMB_KERNELS_NO_V4 (CMake: LEANEMB_KERNEL_ISAS=host on a machine without AVX-512) leaves
// the x86-64-v4 builds out.
#if defined(LEANEMB_HAVE_V3) && !defined(LEANEMB_KERNELS_NO_V4)
#define LEANEMB_HAVE_V4 1
#define LEANEMB_TARGET_V4 __attribute__((target("arch=x86-64-v4")))

namespace leanemb::kernels {

// Mask of the first min(n, 16) lanes (n >= 0).
inline uint16_t lane_mask16(int64_t n) { return n >= 16 ? uint16_t{0xffff} : static_cast<uint16_t>((1u << n) - 1u); }

// Dequantization constants of one int8 row (value = code * scale + bias).
struct RowAffine {
  __m512 scale, bias;
};

template <DType T>
LEANEMB_TARGET_V4 inline RowAffine row_affine16(const uint8_t* row, int64_t d) {
  if constexpr (T == DType::kInt8Rowwise) {
    float scale, bias;
    std::memcpy(&scale, row + d, 4);
    std::memcpy(&bias, row + d + 4, 4);
    return RowAffine{_mm512_set1_ps(scale), _mm512_set1_ps(bias)};
  } else if constexpr (T == DType::kQ8) {  // code * scale
    float scale;
    std::memcpy(&scale, row + d, 4);
    return RowAffine{_mm512_set1_ps(scale), _mm512_setzero_ps()};
  } else {
    return RowAffine{_mm512_setzero_ps(), _mm512_setzero_ps()};
  }
}

// Elements [j, j + 16) of a row of dtype T as fp32; lanes outside `m` are 0.
template <DType T>
LEANEMB_TARGET_V4 inline __m512 load16(const uint8_t* row, int64_t j, __mmask16 m, const RowAffine& af) {
  if constexpr (T == DType::kF32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + j);
  } else if constexpr (T == DType::kBF16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * j);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (T == DType::kF16) {
    return _mm512_maskz_cvtph_ps(m, _mm256_maskz_loadu_epi16(m, row + 2 * j));
  } else if constexpr (T == DType::kFP8) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, row + j));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, fp8_decode_table(), 4);
  } else if constexpr (T == DType::kQ8) {
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, row + j)));
    return _mm512_maskz_mul_ps(m, f, af.scale);
  } else {
    const __m128i b = _mm_maskz_loadu_epi8(m, row + j);
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    // Two roundings (multiply, then add), as the reference: no FMA.
    return _mm512_maskz_mov_ps(m, _mm512_add_ps(_mm512_mul_ps(f, af.scale), af.bias));
  }
}

// Full 16-lane load (no mask).
template <DType T>
LEANEMB_TARGET_V4 inline __m512 load16(const uint8_t* row, int64_t j, const RowAffine& af) {
  if constexpr (T == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + j);
  } else if constexpr (T == DType::kBF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (T == DType::kF16) {
    // (The maskz form: GCC 12's plain _mm512_cvtph_ps warns about its undefined pass-through.)
    return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j)));
  } else if constexpr (T == DType::kFP8) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j)));
    return _mm512_i32gather_ps(idx, fp8_decode_table(), 4);
  } else if constexpr (T == DType::kQ8) {
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j))));
    return _mm512_mul_ps(f, af.scale);
  } else {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j));
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    return _mm512_add_ps(_mm512_mul_ps(f, af.scale), af.bias);
  }
}

// load_row<DType::kF16> (row_access.h), sixteen columns at a time (VCVTPH2PS; as load8_v3, a
// signaling NaN comes out quiet).
LEANEMB_TARGET_V4 inline void load_row_f16_v4(float* __restrict out, const uint8_t* __restrict row, int64_t d) {
  const RowAffine none{};
  for (int64_t j = 0; j < d; j += 16) {
    const __mmask16 m = lane_mask16(d - j);
    _mm512_mask_storeu_ps(out + j, m, load16<DType::kF16>(row, j, m, none));
  }
}

// column_term8_v3 / column_bits8_v3 (vec8.h), sixteen columns.
LEANEMB_TARGET_V4 inline __m512i column_term16_v4(__m512i col) {
  return _mm512_add_epi32(_mm512_mullo_epi32(col, _mm512_set1_epi32(static_cast<int>(kColumnGolden))),
                          _mm512_set1_epi32(static_cast<int>(kColumnOffset)));
}
LEANEMB_TARGET_V4 inline __m512i column_bits16_v4(uint32_t key, __m512i term) {
  __m512i h = _mm512_xor_si512(term, _mm512_set1_epi32(static_cast<int>(key)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x85ebca6bu)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0xc2b2ae35u)));
  return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}

// store_row_sr<DType::kF16> (row_access.h), sixteen columns at a time; each step gives the scalar's
// result (see f32_to_f16_sr8_v3 in vec8.h). The truncation f32_to_f16_rtz is VCVTPS2PH with round-
// toward-zero (AVX-512F): the same halves for every finite input (the 2^-24 grid below 2^-14, 65504
// for finite values beyond it) and for infinities; a NaN becomes the scalar's quiet 0x7e00 with its
// sign (the instruction would keep payload bits). The comparison of the draw with the fraction is
// integer where it can be (explained above f32_to_f16_sr8_v3 in vec8.h), and the scalar's float
// arithmetic in a sixteen-column block holding a value of the fp16 subnormal range. Checked over
// every float bit pattern by StoreRowSrTest.DISABLED_ExhaustiveFastF16StoreOverEveryFloat.
LEANEMB_TARGET_V4 inline void store_row_sr_f16_v4(uint8_t* __restrict row, const float* __restrict w, int64_t d,
                                                  uint32_t key, uint32_t column0) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m256i one16 = _mm256_set1_epi16(1);
  __m512i col_term = column_term16_v4(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(column0)), iota));
  const __m512i col_step = _mm512_set1_epi32(static_cast<int>(16u * kColumnGolden));
  for (int64_t j = 0; j < d; j += 16) {
    const __mmask16 m = lane_mask16(d - j);
    const __m512 f = _mm512_maskz_loadu_ps(m, w + j);
    const __m512i u = _mm512_castps_si512(f);
    // f32_to_f16_rtz (before the NaN fix below)
    __m256i lo = _mm512_cvtps_ph(f, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512i h = column_bits16_v4(key, col_term);
    col_term = _mm512_add_epi32(col_term, col_step);
    // The integer decision, right for lanes with 2^-14 <= |f| < 65504 and for zeros.
    const __mmask16 below_int =
        _mm512_cmplt_epu32_mask(_mm512_srli_epi32(h, 19), _mm512_and_si512(u, _mm512_set1_epi32(0x1fff)));
    const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    // Lanes that are zero or in [2^-14, 65504): no NaN to fix, no saturation, the integer decision.
    const __mmask16 plain = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(0x38800000)),
                                                    _mm512_set1_epi32(0x477fe000 - 0x38800000)) |
                            _mm512_cmpeq_epi32_mask(mag, _mm512_setzero_si512());
    __mmask16 up;
    if ((m & ~plain) == 0) {
      up = below_int;
    } else {
      // NaNs become 0x7e00 with their sign.
      const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
      const __m256i sign = _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
      lo = _mm256_mask_blend_epi16(nan, lo, _mm256_or_si256(_mm256_and_si256(sign, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                                            _mm256_set1_epi16(0x7e00)));
      // Lanes with 0 < |f| < 2^-14 (fp16 subnormals): the fraction is not the low 13 mantissa bits.
      const __mmask16 small =
          _mm512_mask_cmplt_epu32_mask(m, _mm512_sub_epi32(mag, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x387fffff));
      __mmask16 below = below_int;
      if (small != 0) {  // the scalar's arithmetic: the neighbours, the fraction and the uniform
        const __m512 lo_f = _mm512_cvtph_ps(lo);
        const __m512 hi_f = _mm512_cvtph_ps(_mm256_add_epi16(lo, one16));
        const __m512 frac = _mm512_div_ps(_mm512_sub_ps(f, lo_f), _mm512_sub_ps(hi_f, lo_f));
        const __m512 u01 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(1.0f / 16777216.0f));
        below = _mm512_cmp_ps_mask(u01, frac, _CMP_LT_OQ);
      }
      // Inf, NaN and the largest finite half keep the truncated value.
      up = _mm256_cmplt_epu16_mask(_mm256_and_si256(lo, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7bff)) & below;
    }
    _mm256_mask_storeu_epi16(row + 2 * j, m, _mm256_mask_add_epi16(lo, up, lo, one16));
  }
}

}  // namespace leanemb::kernels
#endif  // LEANEMB_HAVE_V3
