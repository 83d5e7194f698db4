// 4-bit block-wise optimizer state (DType::kInt4Blockwise, state_dtype = "int4").
//
// A state array of `dim` values is stored as dim / 2 bytes of codes (element j in byte j / 2,
// the low nibble for even j) and one fp32 scale per block of kQuantBlockSize elements: the
// block's largest |value|. A code c in 0..15 stands for scale * book[c]:
//   unsigned (Adagrad sums, Adam v): book[c] = 2^((c - 15) / 2), a half-octave exponent map from
//       2^-7.5 (about 1/181) to 1 with no zero. A zero would make 1 / sqrt(v) blow up for an
//       element whose state is small next to its block's largest (Li et al., NeurIPS 2023, call
//       this the zero-point problem); values below the smallest code are stored as it, which
//       only shrinks those elements' steps.
//   signed (Adam m): book[c] = (c - 8) / 7 for c in 1..15 (-1 .. 1 in sevenths; code 0 unused).
// Every store rounds stochastically between the two codes around value / scale, with the
// probability that makes the stored value's expectation the value (unbiased), from 24 bits of the
// row's key and the element's column (state_sr_column) as the bf16 state does: an Adagrad sum
// keeps growing by increments far below its code spacing. A block whose scale is 0 is all zeros;
// a NaN element takes the top code.
//
// The loops are written so GCC vectorizes them in each ISA build; the reference kernels and the
// baseline build call these functions, the x86-64-v3 and v4 builds their explicit-vector versions
// in quant4_vec.h (the load, and the store of the non-negative book), which give the same floats
// and bytes (Quant4VecTest, and kernels_test's byte-for-byte update tests).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/rng.h"
#include "kernels/row_access.h"
#include "kernels/vec8.h"
#include "leanemb/optimizer.h"

namespace leanemb::kernels {

inline constexpr int kQuant4Codes = 16;

// float(sqrt 2), the one spelling of the unsigned book's half octave: the book's odd steps
// (float(sqrt 1/2) = float(sqrt 2) / 2 times a power of two, exactly), its bits (kSqrt2Mantissa)
// and the gaps between its codes (kQuant4GapLo / Hi) all come from it.
inline constexpr float kQuant4Sqrt2 = 1.41421356237309504880f;

struct Quant4Book {
  float v[kQuant4Codes];
};

inline constexpr Quant4Book make_quant4_book(bool is_signed) {
  Quant4Book b{};
  // 2^(-k/2) for k = 15 - c, exact in float for even k and the correctly rounded sqrt(0.5)
  // times a power of two for odd k (constexpr has no sqrt; halving float(sqrt 2) is exact).
  constexpr float kHalfOctave = 0.5f * kQuant4Sqrt2;
  for (int c = 0; c < kQuant4Codes; ++c) {
    if (is_signed) {
      b.v[c] = c == 0 ? -1.0f : static_cast<float>(c - 8) / 7.0f;
    } else {
      const int k = 15 - c;
      float p = 1.0f;
      for (int i = 0; i < k / 2; ++i) p *= 0.5f;
      b.v[c] = (k % 2) ? p * kHalfOctave : p;
    }
  }
  return b;
}

inline constexpr Quant4Book kQuant4Unsigned = make_quant4_book(false);
inline constexpr Quant4Book kQuant4Signed = make_quant4_book(true);

inline const Quant4Book& quant4_book(bool is_signed) { return is_signed ? kQuant4Signed : kQuant4Unsigned; }

// float(sqrt(2))'s mantissa bits (0x3fb504f3): the even codes below 15 of the unsigned book are 2^e
// times it.
inline constexpr uint32_t kSqrt2Mantissa = std::bit_cast<uint32_t>(kQuant4Sqrt2) & 0x7fffffu;
static_assert(kSqrt2Mantissa == 0x3504f3u);

// The unsigned book's value of code c in 0..15, from its bits: 2^e (times float(sqrt 2) when
// c - 15 is odd) with e = floor((c - 15) / 2). Exactly book[c]: scaling float(sqrt(1/2)) by powers of two is exact.
inline float quant4u_value(int32_t c) {
  const int32_t k = c - 15;
  return bits_f32((static_cast<uint32_t>((k >> 1) + 127) << 23) | ((0u - static_cast<uint32_t>(k & 1)) & kSqrt2Mantissa));
}

// The gaps between consecutive unsigned codes, over the smaller code's power of two: 2^e (sqrt 2 - 1)
// above 2^e and 2^e (2 - sqrt 2) above 2^e sqrt 2, with float(sqrt 2) as in the book. Both are exact
// floats (Sterbenz), and so is 2^e times either: each is the book's above - below exactly.
inline constexpr float kQuant4GapLo = kQuant4Sqrt2 - 1.0f, kQuant4GapHi = 2.0f - kQuant4Sqrt2;

// The unsigned code of a = value / scale (in [0, 1]; by magnitude; a NaN takes the top code) given
// 24 random bits r. Whenever book[0] <= a < 1, a = 2^e m with m in [1, 2) lies between
// below = 2^e (m < sqrt 2) or 2^e sqrt 2 (m >= sqrt 2), the code lo = 15 + 2 e (+ 1), and the next
// code above, below + gap; it rounds up with probability (a - below) / gap, decided as
// u * gap < a - below for u = r / 2^24 (a multiply, not a division). Every term comes from a's bits:
// the exponent field, and whether the mantissa field reaches sqrt 2's. Outside that range the code
// clamps: a below book[0] (and 0, subnormals) gives code 0, never rounded down further; a >= 1, Inf
// and NaN give 15 (their exponent field puts lo at 15 or above).
// Integer and float lanes and selects only, no branches: GCC vectorizes the loops that call it.
inline int32_t quant4u_code(float a, uint32_t r) {
  const uint32_t b = f32_bits(a) & 0x7fffffffu;
  const uint32_t pow2 = b & 0x7f800000u;
  const int32_t hi = static_cast<int32_t>((b & 0x7fffffu) >= kSqrt2Mantissa);
  const float below = bits_f32(pow2 | (static_cast<uint32_t>(-hi) & kSqrt2Mantissa));
  const float gap = bits_f32(pow2) * (hi ? kQuant4GapHi : kQuant4GapLo);
  const float u = static_cast<float>(r) * 0x1p-24f;
  int32_t c = 2 * static_cast<int32_t>(b >> 23) - 239 + hi + static_cast<int32_t>(u * gap < a - below);
  c = c < 0 ? 0 : c;
  return c > 15 ? 15 : c;
}

// The signed code (a in [-1, 1]): the same rule over the sevenths of the signed book (a NaN takes
// the top code), branch-free as above.
inline int32_t quant4s_code(float a, uint32_t r) {
  const Quant4Book& b = kQuant4Signed;
  int32_t lo = 1;
  for (int c = 2; c < kQuant4Codes; ++c) lo += static_cast<int32_t>(a >= b.v[c]);
  const int32_t nan = static_cast<int32_t>((f32_bits(a) & 0x7fffffffu) > 0x7f800000u);
  lo += nan * (15 - lo);
  const int32_t top = static_cast<int32_t>(lo == 15);
  // book[c] = (c - 8) / 7 in float, as make_quant4_book computes it (no table: no gathers).
  const float below = static_cast<float>(lo - 8) / 7.0f, above = static_cast<float>(lo - 7 - top) / 7.0f;
  const float u = static_cast<float>(r) * 0x1p-24f;
  return lo + (static_cast<int32_t>(u * (above - below) < a - below) & (1 - top));
}

// The largest |x[j]| of a block (a NaN element is passed over; 0 for none), 8 lanes in a vector
// register: max is exact, so the lanes give the serial loop's value. A serial loop kept the
// maximum on the stack inside the fused update (a store-forwarding round trip per element: 40% of
// the q8 + int4 step).
inline float quant4_absmax(const float* __restrict x, int64_t n) {
  v8f acc = v8f{};
  int64_t j8 = 0;
  for (; j8 + 8 <= n; j8 += 8) {
    const v8f a = load8f(x + j8), na = -a;
    const v8f b = a > na ? a : na;  // |a|; NaN stays NaN and fails the next comparison
    acc = b > acc ? b : acc;
  }
  float lanes[8];
  store8f(lanes, acc);
  float absmax = 0.0f;
  for (float v : lanes) absmax = absmax < v ? v : absmax;
  for (int64_t j = j8; j < n; ++j) {
    const float a = std::fabs(x[j]);
    absmax = absmax < a ? a : absmax;
  }
  return absmax;
}

// The codes of x[0..n) (n <= kQuantBlockSize, j0 even) given the block's absmax, into the nibbles
// of elements j0 .. j0 + n of `codes` (the array's first byte). column0: state_sr_column of
// element j0.
inline void quant4_store_codes(const float* __restrict x, int64_t n, bool is_signed, float absmax,
                               uint8_t* __restrict codes, int64_t j0, uint32_t key, uint32_t column0) {
  int32_t c[kQuantBlockSize];
  const int32_t n32 = static_cast<int32_t>(n);  // 32-bit lanes for the column counter (n <= 64)
  if (!(absmax > 0.0f)) {
    for (int32_t j = 0; j < n32; ++j) c[j] = is_signed ? 8 : 0;
  } else if (is_signed) {
    const float inv = 1.0f / absmax;
    for (int32_t j = 0; j < n32; ++j)
      c[j] = quant4s_code(x[j] * inv, column_bits(key, column0 + static_cast<uint32_t>(j)) >> 8);
  } else {
    // column_bits(key, column0 + j) with its column term as an induction variable (one add per
    // element instead of a multiply): (column0 + j) * G + C = term0 + j * G modulo 2^32.
    const float inv = 1.0f / absmax;
    uint32_t term = column_term(column0);
    for (int32_t j = 0; j < n32; ++j, term += kColumnGolden) c[j] = quant4u_code(x[j] * inv, fmix32(key ^ term) >> 8);
  }
  uint8_t* p = codes + j0 / 2;
  for (int64_t i = 0; i < n / 2; ++i) p[i] = static_cast<uint8_t>(c[2 * i] | (c[2 * i + 1] << 4));
  if (n % 2) p[n / 2] = static_cast<uint8_t>(c[n - 1]);  // the unused high nibble of an odd array's last byte is 0
}

// Quantizes a block x[0..n) (n <= kQuantBlockSize, j0 even) into the nibbles of elements j0 ..
// j0 + n of `codes` and returns the block's scale (its absmax).
inline float quant4_store_block(const float* __restrict x, int64_t n, bool is_signed, uint8_t* __restrict codes,
                                int64_t j0, uint32_t key, uint32_t column0) {
  const float absmax = quant4_absmax(x, n);
  quant4_store_codes(x, n, is_signed, absmax, codes, j0, key, column0);
  return absmax;
}

inline void quant4_load_block(const uint8_t* __restrict codes, int64_t n, bool is_signed, float scale, int64_t j0,
                              float* __restrict out) {
  const uint8_t* p = codes + j0 / 2;
  if (!(scale > 0.0f)) {
    for (int64_t j = 0; j < n; ++j) out[j] = 0.0f;
    return;
  }
  if (is_signed) {
    for (int64_t j = 0; j < n; ++j) out[j] = kQuant4Signed.v[(p[j / 2] >> ((j % 2) * 4)) & 0xf] * scale;
    return;
  }
  for (int64_t i = 0; i < n / 2; ++i) {
    out[2 * i] = quant4u_value(p[i] & 0xf) * scale;
    out[2 * i + 1] = quant4u_value(p[i] >> 4) * scale;
  }
  if (n % 2) out[n - 1] = quant4u_value(p[n / 2] & 0xf) * scale;
}

// Whole state arrays: blocks of kQuantBlockSize with their fp32 scales at `scales`.
inline void quant4_store_array(const float* __restrict x, int64_t d, bool is_signed, uint8_t* codes, uint8_t* scales,
                               uint32_t key, uint32_t column0) {
  for (int64_t j0 = 0; j0 < d; j0 += kQuantBlockSize) {
    const int64_t n = d - j0 < kQuantBlockSize ? d - j0 : kQuantBlockSize;
    store_f32(scales + 4 * (j0 / kQuantBlockSize),
              quant4_store_block(x + j0, n, is_signed, codes, j0, key, column0 + static_cast<uint32_t>(j0)));
  }
}

inline void quant4_load_array(const uint8_t* codes, const uint8_t* scales, int64_t d, bool is_signed,
                              float* __restrict out) {
  for (int64_t j0 = 0; j0 < d; j0 += kQuantBlockSize) {
    const int64_t n = d - j0 < kQuantBlockSize ? d - j0 : kQuantBlockSize;
    quant4_load_block(codes, n, is_signed, load_f32(scales + 4 * (j0 / kQuantBlockSize)), j0, out + j0);
  }
}

}  // namespace leanemb::kernels
