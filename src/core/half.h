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

// ---- masks -----------------------------------------------------------------------------------
// Masks: all ones when `cond`, else zero. Selecting with masks keeps loops branch-free, which
// is what lets GCC vectorize them.
inline uint32_t mask_if(bool cond) { return 0u - static_cast<uint32_t>(cond); }
inline uint32_t select_bits(uint32_t mask, uint32_t a, uint32_t b) { return (a & mask) | (b & ~mask); }

// ---- bf16 -----------------------------------------------------------------------------------
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// Branch-free (a NaN is selected, not branched to), so that loops over it vectorize.
inline uint16_t f32_to_bf16_rne(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(select_bits(mask_if((u & 0x7fffffffu) > 0x7f800000u), quiet_nan, rounded));
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
// Half -> float (zero, subnormals, Inf, NaN), the "magic multiply" form: shifting the half's
// exponent and mantissa into a float and scaling by 2^112 rebiases the exponent; subnormal
// halves become normal floats exactly.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = static_cast<uint32_t>(h & 0x7fffu);
  const uint32_t scaled = f32_bits(bits_f32(em << 13) * bits_f32(0x77800000u));  // * 2^112
  const uint32_t inf_nan = 0x7f800000u | (em & 0x3ffu) << 13;
  return bits_f32(sign | select_bits(mask_if(em >= 0x7c00u), inf_nan, scaled));
}

// Float -> half, round to nearest even; overflow gives Inf; NaN stays NaN (quiet).
inline uint16_t f32_to_f16_rne(float f) {
  uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  // Subnormal or zero result: adding 0.5 lets the FP adder round to nearest even at 2^-24.
  const uint32_t sub = f32_bits(bits_f32(u < 0x38800000u ? u : 0x38800000u) + 0.5f) - 0x3f000000u;
  // Normal result: rebias the exponent (-112 << 23) and round at mantissa bit 13.
  const uint32_t normal = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
  uint32_t out = select_bits(mask_if(u < 0x38800000u), sub, normal);
  out = select_bits(mask_if(u >= 0x477ff000u), 0x7c00u, out);                    // >= 65520: Inf
  out = select_bits(mask_if(u >= 0x7f800000u), u > 0x7f800000u ? 0x7e00u : 0x7c00u, out);
  return static_cast<uint16_t>(out | sign);
}

// Float -> half, round toward zero; finite values beyond the half range saturate to 65504.
inline uint16_t f32_to_f16_rtz(float f) {
  uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  // Subnormal grid 2^-24: truncate |x| * 2^24 (the clamp keeps the conversion in range).
  const uint32_t sub = static_cast<uint32_t>(bits_f32(u < 0x38800000u ? u : 0x38800000u) * 16777216.0f);
  const uint32_t normal = (u - 0x38000000u) >> 13;
  uint32_t out = select_bits(mask_if(u < 0x38800000u), sub, normal);
  out = select_bits(mask_if(u >= 0x477ff000u), 0x7bffu, out);
  out = select_bits(mask_if(u >= 0x7f800000u), u > 0x7f800000u ? 0x7e00u : 0x7c00u, out);
  return static_cast<uint16_t>(out | sign);
}

// Stochastic rounding to half: pick the upper neighbour with probability equal to the
// fractional distance from the truncated value. Unbiased for |x| <= 65504.
inline uint16_t f32_to_f16_sr(float f, uint32_t rand_bits) {
  const uint16_t lo = f32_to_f16_rtz(f);
  const float lo_f = f16_to_f32(lo);
  const float hi_f = f16_to_f32(static_cast<uint16_t>(lo + 1u));
  const float frac = (f - lo_f) / (hi_f - lo_f);  // in [0, 1) for finite |f| < 65504
  const float u01 = static_cast<float>(rand_bits >> 8) * (1.0f / 16777216.0f);
  // Inf, NaN and values saturated at the largest finite half keep the truncated value.
  const bool up = ((lo & 0x7fffu) < 0x7bffu) & (u01 < frac);
  return static_cast<uint16_t>(lo + static_cast<uint16_t>(up));
}

}  // namespace leanemb
