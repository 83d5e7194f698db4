// fp8 rows (DType::kFP8, "fp8"): 8-bit floats with OCP FP8's E4M3 layout (sign, 4 exponent
// bits, 3 mantissa bits; no infinities; S.1111.111 is NaN) and an exponent bias of 12 instead
// of OCP's 7, so that a code's value is OCP E4M3's times 2^-5. The range suits embedding rows:
//
//   largest finite   0x7e = 1.75 * 2^3  = 14
//   smallest normal  0x08 = 2^-11       ~ 4.9e-4   (relative step 2^-3 .. 2^-4 above it)
//   subnormals       0x01..0x07 = m * 2^-14, a fixed step of ~6.1e-5 below 2^-11
//
// Conversions from fp32 are integer-only and take 32 random bits per element:
//   f32_to_fp8_sr   stochastic rounding, unbiased (E[decode(sr(x))] = x) for |x| <= 14 up to the
//                   subnormal range, where the fraction below 2^-34 is dropped first (a bias below
//                   2^-34 per element); finite values beyond 14 saturate to +-14 (as Inf);
//                   NaN stays NaN (0x7f with its sign).
//   f32_to_fp8_rn   round to nearest, ties away from zero (the same code, the half as the draw).
// Decoding is a 256-entry table (fp8_to_f32), exact, and the same in every ISA build.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "core/half.h"

namespace leanemb {

inline constexpr int kFp8ExponentBias = 12;
inline constexpr float kFp8Max = 14.0f;
inline constexpr uint8_t kFp8MaxCode = 0x7e;
inline constexpr uint8_t kFp8NanCode = 0x7f;

namespace fp8_detail {

// fp32 bits of code c (see the table above).
constexpr uint32_t decode_bits(uint32_t c) {
  const uint32_t sign = (c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15u && m == 7u) return sign | 0x7fc00000u;
  if (e != 0u) return sign | ((e - kFp8ExponentBias + 127u) << 23) | (m << 20);
  if (m == 0u) return sign;
  // m * 2^-14 = 1.f * 2^(p - 14) with p the index of m's leading bit.
  const uint32_t p = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);
  return sign | ((p + 127u - 14u) << 23) | ((m - (1u << p)) << (23u - p));
}

constexpr std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = std::bit_cast<float>(decode_bits(c));
  return t;
}

// The value of every code, indexed by the code.
inline constexpr std::array<float, 256> kDecode = make_table();

}  // namespace fp8_detail

// The decode table: what fp8_to_f32 reads, and the vector gathers of the fast kernels.
inline const float* fp8_decode_table() { return fp8_detail::kDecode.data(); }

inline float fp8_to_f32(uint8_t c) { return fp8_detail::kDecode[c]; }

// Stochastic rounding with the low 20 bits of rand_bits (see the top of this file).
inline uint8_t f32_to_fp8_sr(float f, uint32_t rand_bits) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t r = rand_bits & 0xfffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | kFp8NanCode);
  uint32_t code;
  if (a >= ((127u - 11u) << 23)) {
    // Normal range: add the draw below the 3 kept mantissa bits and truncate (a carry moves to
    // the next binade, as for bf16).
    const uint32_t b = a + r;
    const uint32_t e = (b >> 23) - 127u + kFp8ExponentBias;  // >= 1 here
    code = e > 15u ? kFp8MaxCode : ((e << 3) | ((b >> 20) & 7u));
    if (code > kFp8MaxCode) code = kFp8MaxCode;
  } else {
    // Below 2^-11: a fixed step of 2^-14. fx = |x| / 2^-14 with 20 fraction bits.
    const uint32_t fe = a >> 23;  // 0 .. 115
    const uint32_t mant = (a & 0x7fffffu) | (fe != 0u ? 0x800000u : 0u);
    const uint32_t shift = 116u - (fe != 0u ? fe : 1u);  // >= 1
    const uint32_t fx = shift < 32u ? mant >> shift : 0u;
    code = (fx + r) >> 20;  // 0 .. 8 (8 is 2^-11, the smallest normal's code)
  }
  return static_cast<uint8_t>(sign | code);
}

inline uint8_t f32_to_fp8_rn(float f) { return f32_to_fp8_sr(f, 0x80000u); }

}  // namespace leanemb
