// Tests of the 8-bit block quantization (the code books, the scalar quantizer, the vectorized
// quantizer and dequantizer against the scalar reference, bit for bit) and of the fp16 stochastic
// rounding store (the fast ISA builds against the scalar one). The lookups and fused updates are
// kernels_test.cc's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/isa.h"
#include "kernels/isa_testing.h"
#include "kernels/kernels.h"
#include "kernels/row_access.h"

namespace leanemb::kernels {
namespace {

// ---- 8-bit block-wise state ----------------------------------------------------------------------

// Magnitudes of a code book in code order (signed: the first 128 codes).
std::vector<float> book_magnitudes(bool is_signed) {
  const float* cb = quant_codebook(is_signed);
  return std::vector<float>(cb, cb + (is_signed ? 128 : 256));
}

// The code books are sorted magnitudes from 0 to 1 (signed: negated copies in codes 128..255),
// with the documented decade structure (unsigned starts at 1e-7, signed at 1e-6).
TEST(Quant8Test, CodebooksAreSortedFromZeroToOneWithMirroredNegatives) {
  for (bool is_signed : {false, true}) {
    const std::vector<float> m = book_magnitudes(is_signed);
    EXPECT_EQ(m.front(), 0.0f);
    EXPECT_EQ(m.back(), 1.0f);
    EXPECT_TRUE(std::is_sorted(m.begin(), m.end()));
    EXPECT_EQ(std::adjacent_find(m.begin(), m.end()), m.end()) << "duplicate code";
    EXPECT_NEAR(m[1], is_signed ? 1e-6f : 1e-7f, 1e-12f);
  }
  const float* cb = quant_codebook(true);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(cb[128 + i], -cb[i]) << i;
}

// Quantizing picks, for every element, the code nearest to |x| / absmax (ties to the smaller
// magnitude) with the right sign, the absmax element is exact, and the error is at most half the
// widest code gap times absmax.
void expect_nearest_codes(const std::vector<float>& x, bool is_signed) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> codes(n);
  std::vector<float> back(n);
  const float scale = quantize_block(x.data(), n, is_signed, codes.data());
  float absmax = 0.0f;
  for (float v : x) absmax = std::max(absmax, std::fabs(v));
  ASSERT_EQ(scale, absmax);
  dequantize_block(codes.data(), n, is_signed, scale, back.data());
  const std::vector<float> m = book_magnitudes(is_signed);
  float max_gap = 0.0f;
  for (size_t i = 1; i < m.size(); ++i) max_gap = std::max(max_gap, m[i] - m[i - 1]);
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::min(std::fabs(x[i]) * (1.0f / absmax), 1.0f);
    size_t best = 0;
    for (size_t c = 1; c < m.size(); ++c)
      if (std::fabs(a - m[c]) < std::fabs(a - m[best])) best = c;
    const size_t got = is_signed ? (codes[i] & 0x7fu) : codes[i];
    ASSERT_EQ(got, best) << "element " << i << " = " << x[i] << " (a = " << a << ")";
    if (is_signed && got != 0) {
      ASSERT_EQ((codes[i] & 0x80u) != 0, x[i] < 0.0f) << "sign of element " << i;
    }
    ASSERT_LE(std::fabs(back[i] - x[i]), 0.5f * max_gap * absmax * 1.0001f) << "element " << i;
    if (std::fabs(x[i]) == absmax) {
      ASSERT_EQ(back[i], x[i]) << "absmax element " << i;
    }
  }
}

// Random blocks (uniform, and log-uniform over 9 decades), midpoints between neighbouring codes
// and partial blocks are quantized to the nearest code for both code books.
TEST(Quant8Test, QuantizeChoosesNearestCodeWithinHalfTheWidestGap) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), e(-9.0f, 0.0f);
  for (bool is_signed : {false, true}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> x(trial % 3 == 0 ? 17 : kQuantBlockSize);
      for (auto& v : x) {
        v = trial % 2 ? u(rng) * 3.0f : std::pow(10.0f, e(rng));
        if (!is_signed) v = std::fabs(v);
      }
      expect_nearest_codes(x, is_signed);
    }
    const std::vector<float> m = book_magnitudes(is_signed);
    std::vector<float> mids = {1.0f};
    for (size_t i = 0; i + 1 < m.size(); ++i) mids.push_back(0.5f * (m[i] + m[i + 1]));
    for (size_t i = 0; i < mids.size(); i += kQuantBlockSize - 1) {
      std::vector<float> block = {1.0f};
      for (size_t k = i; k < std::min(mids.size(), i + kQuantBlockSize - 1); ++k)
        block.push_back(is_signed && k % 2 ? -mids[k] : mids[k]);
      expect_nearest_codes(block, is_signed);
    }
  }
}

// An all-zero block has scale 0 and code 0 everywhere and dequantizes to zeros; a block holding
// -0 and tiny values next to one large one keeps zero at code 0.
TEST(Quant8Test, ZeroBlockQuantizesToZeroScaleAndZeroCodes) {
  for (bool is_signed : {false, true}) {
    std::vector<float> x(kQuantBlockSize, 0.0f), back(kQuantBlockSize, 7.0f);
    std::vector<uint8_t> codes(kQuantBlockSize, 0xab);
    EXPECT_EQ(quantize_block(x.data(), kQuantBlockSize, is_signed, codes.data()), 0.0f);
    EXPECT_TRUE(std::all_of(codes.begin(), codes.end(), [](uint8_t c) { return c == 0; }));
    dequantize_block(codes.data(), kQuantBlockSize, is_signed, 0.0f, back.data());
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](float v) { return v == 0.0f; }));
    std::vector<float> y = {-0.0f, 0.0f, 1e-12f, 1000.0f};
    if (!is_signed) y[0] = 0.0f;
    EXPECT_EQ(quantize_block(y.data(), 4, is_signed, codes.data()), 1000.0f);
    EXPECT_EQ(codes[0], 0);
    EXPECT_EQ(codes[1], 0);
    EXPECT_EQ(codes[2], 0);
  }
}

// ---- vectorized 8-bit state and fp16 stochastic rounding against the scalar references -----------

float f32_from_bits(uint32_t u) { return bits_f32(u); }

// quantize_block_fast / dequantize_block_fast give the reference's codes, scales and values for
// block x, in every build this CPU runs.
void expect_fast_quant_matches(const std::vector<float>& x, bool is_signed, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> want(n), got(n, 0xcd);
  const float want_scale = quantize_block(x.data(), n, is_signed, want.data());
  const float got_scale = quantize_block_fast(x.data(), n, is_signed, got.data());
  ASSERT_EQ(f32_bits(got_scale), f32_bits(want_scale)) << what << ": scale";
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], want[i]) << what << ": element " << i << " = " << x[i] << " (bits " << std::hex
                               << f32_bits(x[i]) << std::dec << "), scale " << want_scale;
  std::vector<float> back_want(n), back_got(n, -7.0f);
  dequantize_block(want.data(), n, is_signed, want_scale, back_want.data());
  dequantize_block_fast(want.data(), n, is_signed, want_scale, back_got.data());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(f32_bits(back_got[i]), f32_bits(back_want[i])) << what << ": dequantized element " << i;
}

// Random blocks of every length 1..kQuantBlockSize with uniform, log-uniform (12 decades, so
// that many elements fall below the smallest code), tiny and subnormal values, zeros of both
// signs, exact absmax duplicates and negative values (the unsigned book sees |x| of them).
TEST(Quant8FastTest, QuantizeAndDequantizeMatchReferenceOnRandomBlocks) {
  std::mt19937_64 rng(91);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), e(-12.0f, 2.0f);
  for_each_isa([&] {
    for (bool is_signed : {false, true}) {
      for (int trial = 0; trial < 1500; ++trial) {
        const int64_t n = trial < 640 ? 1 + trial % kQuantBlockSize : (trial % 4 == 0 ? 1 + trial % 63 : kQuantBlockSize);
        std::vector<float> x(static_cast<size_t>(n));
        const int kind = trial % 7;
        for (auto& v : x) {
          switch (kind) {
            case 0: v = u(rng) * 3.0f; break;
            case 1: v = std::copysign(std::pow(10.0f, e(rng)), u(rng)); break;
            case 2: v = u(rng) * 1e-39f; break;  // subnormal absmax below 2^-128: 1 / absmax = Inf
            case 3: v = f32_from_bits(static_cast<uint32_t>(rng()) & 0x807fffffu); break;  // subnormals, +-0
            case 4: v = (rng() % 3 == 0) ? 0.0f : u(rng); break;
            case 5: v = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.25f; break;  // repeated values, ties of absmax
            default: v = std::copysign(std::pow(10.0f, e(rng) * 0.3f), u(rng)) * 1e-30f; break;
          }
          if (rng() % 11 == 0) v = (rng() % 2) ? -0.0f : 0.0f;
        }
        expect_fast_quant_matches(x, is_signed, "trial " + std::to_string(trial) + (is_signed ? " signed" : " unsigned"));
        if (::testing::Test::HasFatalFailure()) return;
      }
      // All zeros (scale 0), a single subnormal among zeros, Inf, NaN.
      const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
      for (const std::vector<float>& x : std::vector<std::vector<float>>{
               std::vector<float>(kQuantBlockSize, 0.0f), std::vector<float>(13, -0.0f),
               {0.0f, 1e-45f, 0.0f, -0.0f, 1e-45f, 0.0f, 0.0f, 0.0f, 0.0f, -1e-45f},
               {0.0f, 2.0f, inf, -3.0f, 0.0f, -inf, 5.0f, 1e-3f, 0.0f},
               {nan, 0.5f, -0.25f, 0.0f, nan, 1.0f, -1.0f, 3e-7f, 0.0f, 0.125f, 0.7f, -nan, 0.0f, 1e-7f, 2e-7f, 6e-7f, 0.9f}}) {
        expect_fast_quant_matches(x, is_signed, "special block");
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  });
}

// The smallest a in [0, 1] whose reference code (scale 1) is at least `code`, by bisection over
// the ordered bit patterns (the code is non-decreasing in a).
uint32_t first_bits_with_code(int code, bool is_signed) {
  uint32_t lo = 0, hi = f32_bits(1.0f);
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (quant8_code(f32_from_bits(mid), 1.0f, is_signed) >= code)  // a >= 0: no sign bit
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// Blocks [1, a_1 .. a_63] (scale 1, so a = |x|) quantize like the reference for every float
// within 40 ulps of each decision boundary between neighbouring codes (both signs for the
// signed book), for every 8191st float in [0, 1], and for every bucket start of the reference's
// look-up table (bits with the low 15 bits clear).
TEST(Quant8FastTest, CodesMatchReferenceAtEveryDecisionBoundary) {
  for (bool is_signed : {false, true}) {
    std::vector<float> values;
    const int last = is_signed ? 127 : 255;
    for (int c = 1; c <= last; ++c) {
      const uint32_t b = first_bits_with_code(c, is_signed);
      ASSERT_EQ(static_cast<int>(quant8_code(f32_from_bits(b), 1.0f, is_signed)), c) << "codes are consecutive";
      for (int64_t k = -40; k <= 40; ++k) {
        const int64_t bits = static_cast<int64_t>(b) + k;
        if (bits >= 0 && bits <= static_cast<int64_t>(f32_bits(1.0f))) values.push_back(f32_from_bits(static_cast<uint32_t>(bits)));
      }
    }
    for (uint32_t bits = 0; bits <= f32_bits(1.0f); bits += 8191) values.push_back(f32_from_bits(bits));
    for (uint32_t bits = 0; bits <= f32_bits(1.0f); bits += 1u << 15) values.push_back(f32_from_bits(bits));
    for_each_isa([&] {
      for (size_t i = 0; i < values.size(); i += kQuantBlockSize - 1) {
        std::vector<float> block = {1.0f};
        for (size_t k = i; k < std::min(values.size(), i + kQuantBlockSize - 1); ++k)
          block.push_back(is_signed && k % 2 ? -values[k] : values[k]);
        expect_fast_quant_matches(block, is_signed, is_signed ? "signed boundaries" : "unsigned boundaries");
        if (::testing::Test::HasFatalFailure()) return;
      }
    });
  }
}

// Every float a in [0, 1] (about 1.07e9 values per book, about a minute): run by hand with
// --gtest_also_run_disabled_tests --gtest_filter='*Exhaustive*' after changing the quantizer.
TEST(Quant8FastTest, DISABLED_ExhaustiveOverEveryFloatInZeroOne) {
  for (bool is_signed : {false, true}) {
    for_each_isa([&] {
      std::vector<float> block(kQuantBlockSize);
      std::vector<uint8_t> want(kQuantBlockSize), got(kQuantBlockSize);
      const uint32_t top = f32_bits(1.0f);
      int64_t mismatches = 0;
      for (uint64_t start = 0; start <= top; start += kQuantBlockSize - 1) {
        block[0] = 1.0f;
        for (int64_t k = 1; k < kQuantBlockSize; ++k) {
          const uint64_t bits = std::min<uint64_t>(start + static_cast<uint64_t>(k) - 1, top);
          block[k] = f32_from_bits(static_cast<uint32_t>(bits)) * ((is_signed && k % 2) ? -1.0f : 1.0f);
        }
        quantize_block(block.data(), kQuantBlockSize, is_signed, want.data());
        quantize_block_fast(block.data(), kQuantBlockSize, is_signed, got.data());
        if (want != got && ++mismatches <= 5) ADD_FAILURE() << "block from bits " << start;
      }
      EXPECT_EQ(mismatches, 0);
    });
  }
}

// Every float bit pattern (2^32 values in rows of 64, a key per row) through the fast fp16 store
// and the scalar one (about a minute per build): run by hand with
// --gtest_also_run_disabled_tests --gtest_filter='*Exhaustive*' after changing the rounding.
TEST(StoreRowSrTest, DISABLED_ExhaustiveFastF16StoreOverEveryFloat) {
  for_each_isa([&] {
    constexpr int64_t kRow = 64;
    std::vector<float> w(kRow);
    std::vector<uint16_t> want(kRow), got(kRow);
    int64_t mismatches = 0;
    for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kRow) {
      for (int64_t k = 0; k < kRow; ++k) w[static_cast<size_t>(k)] = f32_from_bits(static_cast<uint32_t>(start + static_cast<uint64_t>(k)));
      const uint32_t key = static_cast<uint32_t>(start >> 6) * 2654435761u;
      store_row_sr<DType::kF16>(reinterpret_cast<uint8_t*>(want.data()), w.data(), kRow, key, 7);
      store_row_sr_f16_fast(reinterpret_cast<uint8_t*>(got.data()), w.data(), kRow, key, 7);
      if (want != got && ++mismatches <= 5) ADD_FAILURE() << "row from bits " << start;
    }
    EXPECT_EQ(mismatches, 0);
  });
}

// The fast fp16 store with stochastic rounding equals store_row_sr<kF16> bit for bit for every
// row length 1..70 (vector bodies and tails), with ordinary values, exact halves, values
// between neighbouring halves, fp16 subnormals and fp32 subnormals, values at and beyond 65504,
// +-Inf, NaN and +-0. In half of the trials no value is in the fp16 subnormal range (0 < |v| <
// 2^-14), so that every vector block takes its integer decision; in the others every block of
// eight holds one, so that it takes the scalar's float arithmetic.
TEST(StoreRowSrTest, FastF16StoreMatchesScalarBitForBit) {
  std::mt19937_64 rng(33);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f), e(-30.0f, 17.0f);
  for_each_isa([&] {
    for (int64_t d = 1; d <= 70; ++d) {
      for (int trial = 0; trial < 24; ++trial) {
        std::vector<float> w(static_cast<size_t>(d));
        for (int64_t j = 0; j < d; ++j) {
          float v;
          switch ((j + trial) % 8) {
            case 0: v = u(rng); break;
            case 1: v = std::copysign(std::exp2(e(rng)), u(rng)); break;
            case 2: v = f16_to_f32(static_cast<uint16_t>(rng())); break;  // exact halves, Inf, NaN
            case 3: {
              const uint16_t h = static_cast<uint16_t>(rng() & 0x7bfe);
              v = 0.5f * (f16_to_f32(h) + f16_to_f32(static_cast<uint16_t>(h + 1)));  // midpoint
              break;
            }
            case 4: v = f32_from_bits(static_cast<uint32_t>(rng()) & 0x807fffffu); break;  // fp32 subnormal
            case 5: v = std::copysign(65504.0f + static_cast<float>(rng() % 64) * 1.0f, u(rng)); break;
            case 6: {
              const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                                        65520.0f, 1e30f, 6e-8f, -3e-5f, 2.9802322e-8f};
              v = specials[rng() % 10];
              break;
            }
            default: v = u(rng) * 1e-5f; break;  // fp16 subnormal range
          }
          while (trial >= 12 && std::fabs(v) > 0.0f && std::fabs(v) < 0x1p-14f) v = u(rng);
          w[j] = v;
        }
        const uint32_t key = static_cast<uint32_t>(rng()), column0 = static_cast<uint32_t>(rng() % 1000);
        std::vector<uint16_t> want(static_cast<size_t>(d) + 1, 0xabcd), got(static_cast<size_t>(d) + 1, 0xabcd);
        store_row_sr<DType::kF16>(reinterpret_cast<uint8_t*>(want.data()), w.data(), d, key, column0);
        store_row_sr_f16_fast(reinterpret_cast<uint8_t*>(got.data()), w.data(), d, key, column0);
        ASSERT_EQ(got, want) << "d " << d << " trial " << trial;  // includes the guard element past the row
      }
    }
  });
}

}  // namespace
}  // namespace leanemb::kernels
