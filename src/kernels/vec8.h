// Eight-lane fp32 vectors (GCC vector extensions) for the register-blocked kernels. The same
// source compiles to AVX2 in the x86-64-v3 build and to pairs of SSE ops in the baseline one.
// Conversions compute exactly what the scalar functions in core/half.h compute, lane by lane.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() through, which -Wmaybe-uninitialized
// reports at every use; the state applies to the headers' own lines only.
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif

#include "core/fp8.h"
#include "core/half.h"
#include "core/rng.h"
#include "kernels/row_access.h"
#include "leanemb/dtype.h"

namespace leanemb::kernels {

typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint8_t v8b __attribute__((vector_size(8)));
typedef int8_t v8sb __attribute__((vector_size(8)));

inline v8f load8f(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8f(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// Elements [j, j + 8) of a row of dtype T as fp32 (int8 rows: dim d, then scale and bias).
template <DType T>
inline v8f load8(const uint8_t* row, int64_t j, int64_t d) {
  if constexpr (T == DType::kF32) {
    return load8f(reinterpret_cast<const float*>(row) + j);
  } else if constexpr (T == DType::kBF16) {
    v8h h;
    std::memcpy(&h, row + 2 * j, sizeof h);
    return reinterpret_cast<v8f>(__builtin_convertvector(h, v8u) << 16);
  } else if constexpr (T == DType::kF16) {
    v8h h;
    std::memcpy(&h, row + 2 * j, sizeof h);
    const v8u x = __builtin_convertvector(h, v8u);
    const v8u sign = (x & 0x8000u) << 16;
    const v8u em = x & 0x7fffu;
    const v8f two112 = v8f{} + 5.192296858534828e33f;  // 2^112: rebias the exponent
    const v8u scaled = reinterpret_cast<v8u>(reinterpret_cast<v8f>(em << 13) * two112);
    // em < 2^15, so a signed compare is exact; all ones where Inf/NaN.
    const v8u special = reinterpret_cast<v8u>(reinterpret_cast<v8i>(em) >= 0x7c00);
    const v8u inf_nan = 0x7f800000u | ((em & 0x3ffu) << 13);
    return reinterpret_cast<v8f>(sign | (inf_nan & special) | (scaled & ~special));
  } else if constexpr (T == DType::kFP8) {
    const float* t = fp8_decode_table();
    const uint8_t* b = row + j;
    return v8f{t[b[0]], t[b[1]], t[b[2]], t[b[3]], t[b[4]], t[b[5]], t[b[6]], t[b[7]]};
  } else if constexpr (T == DType::kQ8) {
    v8sb b;
    std::memcpy(&b, row + j, sizeof b);
    float scale;
    std::memcpy(&scale, row + d, 4);
    return __builtin_convertvector(__builtin_convertvector(b, v8i), v8f) * scale;
  } else {
    v8b b;
    std::memcpy(&b, row + j, sizeof b);
    float scale, bias;
    std::memcpy(&scale, row + d, 4);
    std::memcpy(&bias, row + d + 4, 4);
    // Widen to int32 first: GCC converts u8 -> i32 -> f32 with vector instructions, but
    // scalarizes a direct u8 -> f32 conversion.
    return __builtin_convertvector(__builtin_convertvector(b, v8i), v8f) * scale + bias;
  }
}

// Only in optimized builds: the v3 helpers return 256-bit vectors and rely on `flatten` to be
// inlined into their target("arch=x86-64-v3") callers. At -O0 GCC inlines nothing, and a call
// between code built for the baseline ISA and AVX2 code disagrees on how the vector is returned
// (the -Wpsabi note), which crashed table_test in a build without a build type.
// LEANEMB_KERNELS_NO_V3 (CMake: LEANEMB_KERNEL_ISAS=host on a machine without AVX2) leaves the
// x86-64-v3 and v4 builds out.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__) && \
    !defined(LEANEMB_KERNELS_NO_V3)
#define LEANEMB_HAVE_V3 1
#define LEANEMB_TARGET_V3 __attribute__((target("arch=x86-64-v3")))

// load8 with AVX2/F16C instructions (GCC's generic vector code widens fp16 and int8 lanes one
// element at a time). Results equal load8's, except that F16C quiets signaling NaNs.
template <DType T>
LEANEMB_TARGET_V3 inline v8f load8_v3(const uint8_t* row, int64_t j, int64_t d) {
  if constexpr (T == DType::kF32) {
    return reinterpret_cast<v8f>(_mm256_loadu_ps(reinterpret_cast<const float*>(row) + j));
  } else if constexpr (T == DType::kBF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j));
    return reinterpret_cast<v8f>(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (T == DType::kF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j));
    return reinterpret_cast<v8f>(_mm256_cvtph_ps(h));
  } else if constexpr (T == DType::kFP8) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + j)));
    return reinterpret_cast<v8f>(_mm256_i32gather_ps(fp8_decode_table(), idx, 4));
  } else if constexpr (T == DType::kQ8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + j));
    float scale;
    std::memcpy(&scale, row + d, 4);
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    return reinterpret_cast<v8f>(_mm256_mul_ps(f, _mm256_set1_ps(scale)));
  } else {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + j));
    float scale, bias;
    std::memcpy(&scale, row + d, 4);
    std::memcpy(&bias, row + d + 4, 4);
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    return reinterpret_cast<v8f>(_mm256_add_ps(_mm256_mul_ps(f, _mm256_set1_ps(scale)), _mm256_set1_ps(bias)));
  }
}

// column_bits(key, col) (core/rng.h) of eight columns, from their term column_term(col)
// (column_term8_v3): a loop over consecutive columns adds 8 * kColumnGolden to the term
// per block instead of multiplying again (the same value mod 2^32).
LEANEMB_TARGET_V3 inline __m256i column_term8_v3(__m256i col) {
  return _mm256_add_epi32(_mm256_mullo_epi32(col, _mm256_set1_epi32(static_cast<int>(kColumnGolden))),
                          _mm256_set1_epi32(static_cast<int>(kColumnOffset)));
}
LEANEMB_TARGET_V3 inline __m256i column_bits8_v3(uint32_t key, __m256i term) {
  __m256i h = _mm256_xor_si256(term, _mm256_set1_epi32(static_cast<int>(key)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85ebca6bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xc2b2ae35u)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

// The stochastic rounding's decision u01 < frac (f32_to_f16_sr, core/half.h) in integers, for a
// value f with 2^-14 <= |f| < 65504 (a normal half after truncation). There the truncation drops
// exactly the low 13 bits c of f's mantissa, and the neighbours' gap is 2^13 units of them, so frac
// = c / 2^13 exactly (the scalar's subtraction and division are exact); u01 = a / 2^24 with a =
// bits >> 8, also exact. a / 2^24 < c / 2^13 <=> a < c * 2^11 <=> (a >> 11) < c, since c * 2^11 has
// no low bits: the decision is (bits >> 19) < (bits of f & 0x1fff). Zero gives c = 0 (never up), as
// the scalar. Values of the fp16 subnormal range (0 < |f| < 2^-14) have a different grid; the
// vector stores take the scalar's float arithmetic for a block that holds one. The other lanes
// (Inf, NaN, |f| >= 65504) keep the truncated value whatever the decision.

// f32_to_f16_sr (core/half.h) of eight values with random bits `bits`, as eight halves in the
// low 16 bits of 32-bit lanes. Each step gives the scalar's result: the truncation
// f32_to_f16_rtz is VCVTPS2PH with round-toward-zero (F16C; the same halves for every finite
// input and for infinities, and a NaN set to the scalar's quiet 0x7e00 with its sign, where the
// instruction would keep payload bits); the decision is the integer one above unless a value is in
// the fp16 subnormal range, and then the scalar's: the neighbours' values (VCVTPH2PS is exact;
// it quiets signaling NaNs, which only arise where the truncated half is Inf/NaN or 65504, whose
// result the scalar keeps regardless), the fraction by the same IEEE division, and the
// comparison with the same 24-bit uniform. Checked over every float bit pattern by
// StoreRowSrTest.DISABLED_ExhaustiveFastF16StoreOverEveryFloat.
LEANEMB_TARGET_V3 inline __m256i f32_to_f16_sr8_v3(__m256 f, __m256i bits) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
  const __m128i sign16 = _mm_packus_epi32(_mm256_castsi256_si128(sign), _mm256_extracti128_si256(sign, 1));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
  const __m128i lo16 = _mm_blendv_epi8(_mm256_cvtps_ph(f, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC),
                                       _mm_or_si128(sign16, _mm_set1_epi16(0x7e00)), nan16);
  const __m256i lo = _mm256_cvtepu16_epi32(lo16);
  // 0 < |f| < 2^-14 (a signed comparison: the magnitudes are below 2^31).
  const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i small = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x38800000), mag),
                                         _mm256_cmpgt_epi32(mag, _mm256_setzero_si256()));
  __m256i below;
  if (_mm256_testz_si256(small, small)) {
    below = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x1fff)), _mm256_srli_epi32(bits, 19));
  } else {
    const __m128i hi16 = _mm_add_epi16(lo16, _mm_set1_epi16(1));
    const __m256 lo_f = _mm256_cvtph_ps(lo16), hi_f = _mm256_cvtph_ps(hi16);
    const __m256 frac = _mm256_div_ps(_mm256_sub_ps(f, lo_f), _mm256_sub_ps(hi_f, lo_f));
    const __m256 u01 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bits, 8)), _mm256_set1_ps(1.0f / 16777216.0f));
    below = _mm256_castps_si256(_mm256_cmp_ps(u01, frac, _CMP_LT_OQ));
  }
  const __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7bff), _mm256_and_si256(lo, _mm256_set1_epi32(0x7fff)));
  return _mm256_sub_epi32(lo, _mm256_and_si256(finite, below));  // -1 where the value rounds up
}

// load_row<DType::kF16> (row_access.h), eight columns at a time (load8_v3).
LEANEMB_TARGET_V3 inline void load_row_f16_v3(float* __restrict out, const uint8_t* __restrict row, int64_t d) {
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) _mm256_storeu_ps(out + j, reinterpret_cast<__m256>(load8_v3<DType::kF16>(row, j, d)));
  load_row<DType::kF16>(out + j, row + 2 * j, d - j);
}

// store_row_sr<DType::kF16> (row_access.h), eight columns at a time.
LEANEMB_TARGET_V3 inline void store_row_sr_f16_v3(uint8_t* __restrict row, const float* __restrict w, int64_t d,
                                                  uint32_t key, uint32_t column0) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i term = column_term8_v3(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(column0)), iota));
  const __m256i step = _mm256_set1_epi32(static_cast<int>(8u * kColumnGolden));
  int64_t j = 0;
  for (; j + 8 <= d; j += 8, term = _mm256_add_epi32(term, step)) {
    const __m256i h = f32_to_f16_sr8_v3(_mm256_loadu_ps(w + j), column_bits8_v3(key, term));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 2 * j),
                     _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
  }
  store_row_sr<DType::kF16>(row + 2 * j, w + j, d - j, key, column0 + static_cast<uint32_t>(j));
}

// True when the CPU runs x86-64-v3 code (AVX2, FMA, F16C, BMI2).
inline bool cpu_has_v3() {
  static const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  return v3;
}
#endif

}  // namespace leanemb::kernels
