// Eight-lane fp32 vectors (GCC vector extensions) for the register-blocked kernels. The same
// source compiles to AVX2 in the x86-64-v3 clone and to pairs of SSE ops in the baseline one.
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

#include "leanemb/dtype.h"

namespace leanemb::kernels {

typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint8_t v8b __attribute__((vector_size(8)));

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
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
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
  } else {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + j));
    float scale, bias;
    std::memcpy(&scale, row + d, 4);
    std::memcpy(&bias, row + d + 4, 4);
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    return reinterpret_cast<v8f>(_mm256_add_ps(_mm256_mul_ps(f, _mm256_set1_ps(scale)), _mm256_set1_ps(bias)));
  }
}

// True when the CPU runs x86-64-v3 code (AVX2, FMA, F16C, BMI2).
inline bool cpu_has_v3() {
  static const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  return v3;
}
#endif

}  // namespace leanemb::kernels
