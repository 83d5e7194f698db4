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

#if defined(LEANEMB_HAVE_V3)
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
  } else {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j));
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    return _mm512_add_ps(_mm512_mul_ps(f, af.scale), af.bias);
  }
}

}  // namespace leanemb::kernels
#endif  // LEANEMB_HAVE_V3
