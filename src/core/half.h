// fp16 / bf16 <-> fp32 conversions and stochastic rounding, as inline scalar functions written
// so that GCC auto-vectorizes loops over them (integer ops only, no branches in the hot forms).
//
// Conventions: round-to-nearest-even (RNE) is the deterministic rounding; stochastic rounding
// (SR) takes 32 random bits per element. SR is unbiased: E[sr(x)] = x for finite x inside the
// range of the target type. NaN stays NaN; +-Inf stays +-Inf. For fp16, SR of a finite value
// beyond the largest finite half (65504) saturates to +-65504 (documented in docs/numerics.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace leanemb {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- bf16 -----------------------------------------------------------------------------------
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16_rne(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

// Stochastic rounding: add 16 random bits below the kept mantissa and truncate.
inline uint16_t f32_to_bf16_sr(float f, uint32_t rand_bits) {
  uint32_t u = f32_bits(f);
  const bool special = (u & 0x7f800000u) == 0x7f800000u;  // Inf or NaN: no dithering
  uint32_t add = special ? 0u : (rand_bits & 0xffffu);
  uint32_t r = (u + add) >> 16;
  if (special && (u & 0x007fffffu)) r |= 0x40u;  // keep NaN a NaN after truncation
  return static_cast<uint16_t>(r);
}

// ---- fp16 -----------------------------------------------------------------------------------
// Branch-free half -> float (handles zero, subnormals, Inf, NaN), from the "magic multiply" form.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = static_cast<uint32_t>(h & 0x7fffu);
  // Normal and subnormal: shift into place and rescale by 2^112 (exponent bias difference).
  float mag = bits_f32(em << 13) * bits_f32(0x77800000u);  // 2^112
  uint32_t mag_bits = f32_bits(mag);
  // Inf/NaN: exponent all ones.
  mag_bits = (em >= 0x7c00u) ? (0x7f800000u | (em & 0x3ffu) << 13) : mag_bits;
  return bits_f32(sign | mag_bits);
}

// float -> half, round to nearest even, overflow to Inf, NaN kept.
inline uint16_t f32_to_f16_rne(float f) {
  uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  uint16_t out;
  if (u >= 0x7f800000u) {
    out = static_cast<uint16_t>(u > 0x7f800000u ? 0x7e00u : 0x7c00u);
  } else if (u >= 0x477ff000u) {  // >= 65520 rounds to Inf
    out = 0x7c00u;
  } else if (u < 0x38800000u) {   // below the smallest normal half: subnormal or zero
    // Add 0.5 so that the FP adder rounds to nearest even at the subnormal grid (2^-24).
    float v = bits_f32(u) + 0.5f;
    out = static_cast<uint16_t>(f32_bits(v) - 0x3f000000u);
  } else {
    uint32_t mant_odd = (u >> 13) & 1u;
    u += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
    out = static_cast<uint16_t>(u >> 13);
  }
  return static_cast<uint16_t>(out | sign);
}

// float -> half, round toward zero; finite values beyond the half range saturate to 65504.
inline uint16_t f32_to_f16_rtz(float f) {
  uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  uint16_t out;
  if (u >= 0x7f800000u) {
    out = static_cast<uint16_t>(u > 0x7f800000u ? 0x7e00u : 0x7c00u);
  } else if (u >= 0x477ff000u) {
    out = 0x7bffu;
  } else if (u < 0x38800000u) {
    // Subnormal grid 2^-24: truncate |x| * 2^24.
    out = static_cast<uint16_t>(static_cast<uint32_t>(bits_f32(u) * 16777216.0f));
  } else {
    out = static_cast<uint16_t>((u - 0x38000000u) >> 13);
  }
  return static_cast<uint16_t>(out | sign);
}

// Stochastic rounding to half: pick the upper neighbour with probability equal to the
// fractional distance from the truncated value. Unbiased for |x| <= 65504.
inline uint16_t f32_to_f16_sr(float f, uint32_t rand_bits) {
  const uint16_t lo = f32_to_f16_rtz(f);
  const uint16_t mag = lo & 0x7fffu;
  if (mag >= 0x7bffu) return lo;  // Inf, NaN, or saturated at the largest finite half
  const float lo_f = f16_to_f32(lo);
  const float hi_f = f16_to_f32(static_cast<uint16_t>(lo + 1u));
  const float frac = (f - lo_f) / (hi_f - lo_f);  // in [0, 1)
  const float u01 = static_cast<float>(rand_bits >> 8) * (1.0f / 16777216.0f);
  return (u01 < frac) ? static_cast<uint16_t>(lo + 1u) : lo;
}

}  // namespace leanemb
