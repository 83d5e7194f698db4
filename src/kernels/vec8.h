// Eight-lane fp32 vectors (GCC vector extensions) for the register-blocked kernels. The same
// source compiles to AVX2 in the x86-64-v3 clone and to pairs of SSE ops in the baseline one.
// Conversions compute exactly what the scalar functions in core/half.h compute, lane by lane.
#pragma once

#include <cstdint>
#include <cstring>

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
    const v8u special = reinterpret_cast<v8u>(em >= 0x7c00u);  // all ones where Inf/NaN
    const v8u inf_nan = 0x7f800000u | ((em & 0x3ffu) << 13);
    return reinterpret_cast<v8f>(sign | (inf_nan & special) | (scaled & ~special));
  } else {
    v8b b;
    std::memcpy(&b, row + j, sizeof b);
    float scale, bias;
    std::memcpy(&scale, row + d, 4);
    std::memcpy(&bias, row + d + 4, 4);
    return __builtin_convertvector(b, v8f) * scale + bias;
  }
}

}  // namespace leanemb::kernels
