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
// The loops are written so GCC vectorizes them in each ISA build; the reference kernels call the
// same functions, so every build stores the same codes (kernels_test checks it).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "kernels/row_access.h"
#include "leanemb/optimizer.h"

namespace leanemb::kernels {

inline constexpr int kQuant4Codes = 16;

struct Quant4Book {
  float v[kQuant4Codes];
};

inline constexpr Quant4Book make_quant4_book(bool is_signed) {
  Quant4Book b{};
  // 2^(-k/2) for k = 15 - c, exact in float for even k and the correctly rounded sqrt(0.5)
  // times a power of two for odd k (written out: constexpr has no sqrt).
  constexpr float kHalfOctave = 0.70710678118654752440f;
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

// The code of a = value / scale (a in [-1, 1], or [0, 1] unsigned) given 24 random bits r:
// lo = the largest code at or below a (the lowest useful code when a is below them all), and
// lo + 1 with probability (a - book[lo]) / (book[lo + 1] - book[lo]).
inline uint8_t quant4_code(float a, uint32_t r, const Quant4Book& b, int first) {
  a = a == a ? a : 1.0f;
  int lo = first;
  for (int c = first + 1; c < kQuant4Codes; ++c) lo += a >= b.v[c] ? 1 : 0;
  if (lo == kQuant4Codes - 1) return static_cast<uint8_t>(lo);
  const float below = b.v[lo], above = b.v[lo + 1];
  const float p = (a - below) / (above - below);  // < 0 below the first code: never rounds down
  const float u = static_cast<float>(r) * 0x1p-24f;
  return static_cast<uint8_t>(lo + (u < p ? 1 : 0));
}

// Quantizes x[0..n) (n <= kQuantBlockSize, j0 even) into the nibbles of elements j0 .. j0 + n of
// `codes` (the array's first byte) and returns the block's scale. column0: state_sr_column of
// element j0.
inline float quant4_store_block(const float* __restrict x, int64_t n, bool is_signed, uint8_t* __restrict codes,
                                int64_t j0, uint32_t key, uint32_t column0) {
  float absmax = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    absmax = absmax < a ? a : absmax;
  }
  uint8_t c[kQuantBlockSize];
  if (!(absmax > 0.0f)) {
    for (int64_t j = 0; j < n; ++j) c[j] = is_signed ? 8 : 0;
  } else {
    const Quant4Book& b = quant4_book(is_signed);
    const int first = is_signed ? 1 : 0;
    const float inv = 1.0f / absmax;
    for (int64_t j = 0; j < n; ++j)
      c[j] = quant4_code(x[j] * inv, column_bits(key, column0 + static_cast<uint32_t>(j)) >> 8, b, first);
  }
  uint8_t* p = codes + j0 / 2;
  for (int64_t j = 0; j + 1 < n; j += 2) p[j / 2] = static_cast<uint8_t>(c[j] | (c[j + 1] << 4));
  if (n % 2) p[n / 2] = c[n - 1];  // the unused high nibble of an odd array's last byte is 0
  return absmax;
}

inline void quant4_load_block(const uint8_t* __restrict codes, int64_t n, bool is_signed, float scale, int64_t j0,
                              float* __restrict out) {
  const Quant4Book& b = quant4_book(is_signed);
  const uint8_t* p = codes + j0 / 2;
  if (!(scale > 0.0f)) {
    for (int64_t j = 0; j < n; ++j) out[j] = 0.0f;
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const int c = (p[j / 2] >> ((j % 2) * 4)) & 0xf;
    out[j] = b.v[c] * scale;
  }
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
