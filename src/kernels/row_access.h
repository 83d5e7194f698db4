// Element access to fat rows, shared by the reference and fast kernels (inline, so each kernel
// family compiles it for its own ISA). See include/leanemb/optimizer.h for the layout.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp8.h"
#include "core/half.h"
#include "core/rng.h"
#include "leanemb/optimizer.h"

namespace leanemb::kernels {

// Bytes of one element of a row of dtype T (int8 rows: the codes; scale and bias follow).
template <DType T>
inline constexpr size_t kElemBytes = T == DType::kF32 ? 4 : (T == DType::kInt8Rowwise || T == DType::kFP8 || T == DType::kQ8 ? 1 : 2);

inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline void store_f32(uint8_t* p, float f) { std::memcpy(p, &f, 4); }
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// One prefetch instruction. On x86 it is an asm volatile statement: GCC treats
// __builtin_prefetch as free of side effects and deletes loops that contain nothing else (it
// removed every prefetch of the lookup once they moved into a helper loop), which an asm
// statement forbids. kWrite and kLocality are __builtin_prefetch's second and third
// arguments; a write prefetch is a plain T0 prefetch on x86 (PREFETCHW is not in x86-64-v3).
template <int kWrite, int kLocality>
inline void prefetch_line(const void* p) {
#if defined(__x86_64__) && defined(__GNUC__)
  const char* c = static_cast<const char*>(p);
  if constexpr (kWrite != 0 || kLocality == 3) asm volatile("prefetcht0 %0" : : "m"(*c));
  else if constexpr (kLocality == 2) asm volatile("prefetcht1 %0" : : "m"(*c));
  else if constexpr (kLocality == 1) asm volatile("prefetcht2 %0" : : "m"(*c));
  else asm volatile("prefetchnta %0" : : "m"(*c));
#else
  __builtin_prefetch(p, kWrite, kLocality);
#endif
}

// Prefetches every cache line that [p, p + bytes) touches. Fat rows are 8-byte aligned, not
// line aligned (a 520-byte stride puts most rows across one more line than their size), so
// stepping p + 64k over `bytes` would leave the last line of most rows to a demand miss.
template <int kWrite, int kLocality>
inline void prefetch_span(const void* p, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = begin & ~uintptr_t{63}; line < begin + bytes; line += 64)
    prefetch_line<kWrite, kLocality>(reinterpret_cast<const void*>(line));
}

// Prefetches the n cache lines from the line holding p on. The loop is unrolled up to kMaxLines
// with one well-predicted compare per line (n is the same for every row of a table: see
// row_lines); lines beyond kMaxLines take a plain loop. Measured on Zen 4: a loop whose trip
// count is computed per row (prefetch_span), or a jump into an unrolled sequence, made the
// pooled lookup 20-50% slower than straight-line prefetches.
template <int kWrite, int kLocality, int kMaxLines = 16>
inline void prefetch_lines(const void* p, int n) {
  const uint8_t* line = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63});
#pragma GCC unroll 16
  for (int l = 0; l < kMaxLines; ++l)
    if (l < n) prefetch_line<kWrite, kLocality>(line + 64 * l);
  for (int l = kMaxLines; l < n; ++l) prefetch_line<kWrite, kLocality>(line + 64 * l);
}

// The most cache lines that `bytes` bytes at the start of a row can touch, for rows `stride`
// bytes apart from `base`: exact when every row starts on a line, else one more.
inline int row_lines(const void* base, size_t stride, size_t bytes) {
  const bool aligned = stride % 64 == 0 && reinterpret_cast<uintptr_t>(base) % 64 == 0;
  return static_cast<int>((bytes + 63) / 64 + (aligned ? 0 : 1));
}

// Column index used in the stochastic-rounding key for per-element state k (weights use j).
inline uint32_t state_sr_column(int64_t dim, int k, int64_t j) {
  return static_cast<uint32_t>((k + 1) * dim + j);
}

// Adam step size lr * sqrt(1 - b2^t) / (1 - b1^t), computed in double as torch does in Python.
inline float adam_step_size(const OptimizerOptions& o, int64_t t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(t));
  return static_cast<float>(static_cast<double>(o.learning_rate) * std::sqrt(bc2) / bc1);
}
// 1 - beta as torch computes it (double, then the fp32 op casts the scalar).
inline float one_minus(float beta) { return static_cast<float>(1.0 - static_cast<double>(beta)); }

}  // namespace leanemb::kernels

namespace leanemb::kernels {

// q8 rows (DType::kQ8): `d` signed int8 codes, then one fp32 scale at row + d; value = code *
// scale. A store takes the whole row (the scale depends on it): scale = absmax / 127 (0 for an
// all-zero row), codes clamp(q, -127, 127) with q = floor(t + u) (stochastic rounding, u from the
// element's column_bits >> 8 times 2^-24) or nearbyint(t) (round to nearest even), t = w / scale.
// t + u is computed in double, where it is exact for |t| >= 2^-30 (t's 24 significant bits and
// u's bits 2^-1 .. 2^-24 span at most 53 bits); for smaller |t| the rounded sum stays inside
// (0, 1) when u > 0 and is t when u = 0, so floor gives the exact sum's floor in every case and
// every build gives the same codes; a NaN element stores code 0.
inline float q8_load(const uint8_t* row, int64_t j, int64_t d) {
  return static_cast<float>(static_cast<int8_t>(row[j])) * load_f32(row + d);
}

// The code of one element, t = w / scale, with the element's random bits (unused when !kSr);
// the vector stores (q8_vec.h) take it for the columns past their last full vector.
// The selections are ternaries on values, not std::max / std::clamp (which return references
// and keep GCC 12 from vectorizing; the same selections: a NaN element leaves the maximum as it is).
template <bool kSr>
inline uint8_t q8_code(float t_f, uint32_t bits) {
  const double t = static_cast<double>(t_f);
  double q;
  if constexpr (kSr) {
    q = std::floor(t + static_cast<double>(bits >> 8) * 0x1p-24);
  } else {
    (void)bits;
    q = std::nearbyint(t);
  }
  q = q == q ? q : 0.0;
  q = q < -127.0 ? -127.0 : (127.0 < q ? 127.0 : q);
  return static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(q)));
}

// Columns [j0, d) of a row whose scale is `scale` (> 0).
template <bool kSr>
inline void q8_store_codes(uint8_t* __restrict row, const float* __restrict w, int64_t j0, int64_t d, float scale,
                           uint32_t key, uint32_t column0) {
  for (int64_t j = j0; j < d; ++j)
    row[j] = q8_code<kSr>(w[j] / scale, kSr ? column_bits(key, column0 + static_cast<uint32_t>(j)) : 0u);
}

template <bool kSr>
inline void q8_store(uint8_t* __restrict row, const float* __restrict w, int64_t d, uint32_t key, uint32_t column0) {
  float absmax = 0.0f;
  for (int64_t j = 0; j < d; ++j) {
    const float a = std::fabs(w[j]);
    absmax = absmax < a ? a : absmax;
  }
  const float scale = absmax / 127.0f;
  if (!(scale > 0.0f)) {
    for (int64_t j = 0; j < d; ++j) row[j] = 0;
  } else {
    q8_store_codes<kSr>(row, w, 0, d, scale, key, column0);
  }
  store_f32(row + d, scale);
}

// Whole-row conversions, written as plain loops so the compiler vectorizes them.
template <DType T>
inline void load_row(float* __restrict out, const uint8_t* __restrict row, int64_t d) {
  if constexpr (T == DType::kF32) {
    std::memcpy(out, row, static_cast<size_t>(d) * 4);
  } else if constexpr (T == DType::kF16) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
    for (int64_t j = 0; j < d; ++j) out[j] = f16_to_f32(r[j]);
  } else if constexpr (T == DType::kBF16) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
    for (int64_t j = 0; j < d; ++j) out[j] = bf16_to_f32(r[j]);
  } else if constexpr (T == DType::kFP8) {
    for (int64_t j = 0; j < d; ++j) out[j] = fp8_to_f32(row[j]);
  } else if constexpr (T == DType::kQ8) {
    for (int64_t j = 0; j < d; ++j) out[j] = q8_load(row, j, d);
  } else {
    const float scale = load_f32(row + d), bias = load_f32(row + d + 4);
    for (int64_t j = 0; j < d; ++j) out[j] = static_cast<float>(row[j]) * scale + bias;
  }
}

// Stores fp32 values with stochastic rounding keyed by (key, column0 + j); fp32 is exact.
template <DType T>
inline void store_row_sr(uint8_t* __restrict row, const float* __restrict w, int64_t d, uint32_t key, uint32_t column0) {
  if constexpr (T == DType::kF32) {
    std::memcpy(row, w, static_cast<size_t>(d) * 4);
  } else if constexpr (T == DType::kF16) {
    uint16_t* r = reinterpret_cast<uint16_t*>(row);
    for (int64_t j = 0; j < d; ++j) r[j] = f32_to_f16_sr(w[j], column_bits(key, column0 + static_cast<uint32_t>(j)));
  } else if constexpr (T == DType::kBF16) {
    uint16_t* r = reinterpret_cast<uint16_t*>(row);
    for (int64_t j = 0; j < d; ++j) r[j] = f32_to_bf16_sr(w[j], column_bits(key, column0 + static_cast<uint32_t>(j)));
  } else if constexpr (T == DType::kFP8) {
    for (int64_t j = 0; j < d; ++j) row[j] = f32_to_fp8_sr(w[j], column_bits(key, column0 + static_cast<uint32_t>(j)));
  } else if constexpr (T == DType::kQ8) {
    q8_store<true>(row, w, d, key, column0);
  }
}

}  // namespace leanemb::kernels
