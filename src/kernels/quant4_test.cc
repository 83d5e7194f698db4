// 4-bit block-wise optimizer state (quant4.h): the code books against their definition, the
// packing (two codes per byte, fp32 scale per 64 elements), stochastic rounding onto one of the
// two codes around a value and unbiased over keys, values below the unsigned book's smallest code,
// zero blocks and NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/isa_testing.h"
#include "kernels/kernels.h"
#include "kernels/quant4.h"

namespace leanemb::kernels {
namespace {

std::vector<float> random_values(int64_t n, bool is_signed, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(is_signed ? -1.0f : 0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = 0.03f * u(rng) * u(rng);  // many small values next to large ones
  return x;
}

struct Stored {
  std::vector<uint8_t> codes, scales;
  std::vector<float> back;
};

Stored store_and_load(const std::vector<float>& x, bool is_signed, uint32_t key) {
  const auto d = static_cast<int64_t>(x.size());
  const int64_t blocks = (d + kQuantBlockSize - 1) / kQuantBlockSize;
  Stored s{std::vector<uint8_t>(static_cast<size_t>(d + 1) / 2, 0xee), std::vector<uint8_t>(4 * blocks),
           std::vector<float>(x.size())};
  quant4_store_array(x.data(), d, is_signed, s.codes.data(), s.scales.data(), key, 7);
  quant4_load_array(s.codes.data(), s.scales.data(), d, is_signed, s.back.data());
  return s;
}

TEST(Quant4Test, CodeBooksAreHalfOctavesWithoutZeroAndSevenths) {
  for (int c = 0; c < kQuant4Codes; ++c) {
    EXPECT_EQ(kQuant4Unsigned.v[c], static_cast<float>(std::pow(2.0, (c - 15) / 2.0))) << c;
    if (c > 0) {
      EXPECT_EQ(kQuant4Signed.v[c], static_cast<float>((c - 8) / 7.0)) << c;
      EXPECT_LT(kQuant4Unsigned.v[c - 1], kQuant4Unsigned.v[c]);
    }
  }
  EXPECT_GT(kQuant4Unsigned.v[0], 0.0f);
  EXPECT_EQ(kQuant4Signed.v[8], 0.0f);
}

// The unsigned code's exponent-and-mantissa rule finds the book neighbours a brute-force search
// finds, for floats all over [2^-10, 1]: with u = 0 (r = 0) every a above book[lo] rounds up.
TEST(Quant4Test, UnsignedCodeFindsTheBookNeighboursOfEveryFloat) {
  for (int c = 0; c < kQuant4Codes; ++c) EXPECT_EQ(quant4u_value(c), kQuant4Unsigned.v[c]) << c;
  int64_t checked = 0;
  for (uint32_t bits = f32_bits(0x1p-10f); bits <= f32_bits(1.0f); bits += 61) {
    const float a = bits_f32(bits);
    int lo = 0;
    for (int c = 0; c < kQuant4Codes; ++c)
      if (kQuant4Unsigned.v[c] <= a) lo = c;
    const int want = lo < 15 && a > kQuant4Unsigned.v[lo] ? lo + 1 : lo;
    ASSERT_EQ(quant4u_code(a, 0), want) << a;
    const int32_t any = quant4u_code(a, 0x9e3779u);
    ASSERT_TRUE(any == lo || any == want) << a;
    // The rounding rule itself, from the book: up when u * (book[lo + 1] - book[lo]) < a - book[lo].
    for (uint32_t r : {1u, 0x400000u, 0x800000u, 0xabcdefu, 0xffffffu}) {
      const float u = static_cast<float>(r) * 0x1p-24f;
      const bool up = lo < 15 && u * (kQuant4Unsigned.v[lo + 1] - kQuant4Unsigned.v[lo]) < a - kQuant4Unsigned.v[lo];
      ASSERT_EQ(quant4u_code(a, r), lo + (up ? 1 : 0)) << a << " r " << r;
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
  EXPECT_EQ(quant4u_code(1.0f, 0), 15);
  EXPECT_EQ(quant4u_code(NAN, 0), 15);
  EXPECT_EQ(quant4u_code(0.0f, 0), 0);
  EXPECT_EQ(quant4u_code(-0.0f, 0), 0);
  EXPECT_EQ(quant4u_code(INFINITY, 0), 15);
  EXPECT_EQ(quant4u_code(1.0000001f, 0), 15);
  EXPECT_EQ(quant4u_code(0x1p-140f, 0xffffffu), 0);  // subnormal
}

// Every loaded value is one of the two book values around x / scale (times the scale), the
// block's largest |x| loads back exactly, and the scale is that largest |x|; dims with a partial
// block and an odd length.
TEST(Quant4Test, StoreLoadsBackOneOfTheTwoCodesAroundEachValue) {
  for (bool is_signed : {false, true}) {
    const Quant4Book& b = quant4_book(is_signed);
    for (int64_t d : {1, 13, 64, 130}) {
      const std::vector<float> x = random_values(d, is_signed, 11 + static_cast<uint64_t>(d));
      const Stored s = store_and_load(x, is_signed, 12345);
      for (int64_t j = 0; j < d; ++j) {
        const int64_t blk = j / kQuantBlockSize;
        float scale = 0.0f;
        for (int64_t i = blk * kQuantBlockSize; i < std::min(d, (blk + 1) * kQuantBlockSize); ++i)
          scale = std::max(scale, std::fabs(x[i]));
        ASSERT_EQ(load_f32(s.scales.data() + 4 * blk), scale);
        if (std::fabs(x[j]) == scale) {
          EXPECT_EQ(s.back[j], x[j]) << "d " << d << " j " << j;
          continue;
        }
        const float a = x[j] / scale;
        float below = -2.0f, above = 2.0f;
        for (int c = is_signed ? 1 : 0; c < kQuant4Codes; ++c) {
          if (b.v[c] <= a) below = std::max(below, b.v[c]);
          if (b.v[c] >= a) above = std::min(above, b.v[c]);
        }
        if (below == -2.0f) below = above;  // under the unsigned book's smallest code: that code
        EXPECT_TRUE(s.back[j] == below * scale || s.back[j] == above * scale)
            << "d " << d << " j " << j << " a " << a << " got " << s.back[j] / scale << " between " << below << " and "
            << above;
      }
      if (d % 2) {
        EXPECT_EQ(s.codes.back() >> 4, 0) << "the unused nibble of an odd array";
      }
    }
  }
}

// Over many keys the loaded value's mean is the value (stochastic rounding is unbiased); a value
// under the unsigned book's smallest code always loads as that code.
TEST(Quant4Test, StochasticRoundingIsUnbiasedOverKeys) {
  constexpr int kKeys = 20000;
  for (bool is_signed : {false, true}) {
    const std::vector<float> x = is_signed ? std::vector<float>{1.0f, -0.5f, 0.33f, -0.07f, 0.01f, 0.0f}
                                           : std::vector<float>{1.0f, 0.5f, 0.33f, 0.07f, 0.01f, 0.001f};
    std::vector<double> sum(x.size(), 0.0);
    for (int k = 0; k < kKeys; ++k) {
      const Stored s = store_and_load(x, is_signed, static_cast<uint32_t>(k) * 2654435761u);
      for (size_t j = 0; j < x.size(); ++j) sum[j] += s.back[j];
    }
    for (size_t j = 0; j < x.size(); ++j) {
      const double mean = sum[j] / kKeys;
      if (!is_signed && x[j] < kQuant4Unsigned.v[0]) {
        EXPECT_EQ(mean, static_cast<double>(kQuant4Unsigned.v[0])) << j;
        continue;
      }
      // Each draw is within one code spacing (at most 0.3 here) of x: sd <= 0.15.
      EXPECT_NEAR(mean, x[j], 5.0 * 0.15 / std::sqrt(static_cast<double>(kKeys))) << (is_signed ? "signed " : "") << j;
    }
  }
}

// A zero block stores scale 0 and loads zeros; a NaN element takes the top code; different keys
// give different codes (the rounding reads the key).
TEST(Quant4Test, ZeroBlocksNaNAndKeys) {
  for (bool is_signed : {false, true}) {
    const Stored z = store_and_load(std::vector<float>(70, 0.0f), is_signed, 1);
    for (float v : z.back) EXPECT_EQ(v, 0.0f);
    EXPECT_EQ(load_f32(z.scales.data()), 0.0f);
  }
  const Stored n = store_and_load({0.5f, NAN, 0.25f}, false, 3);
  EXPECT_EQ(n.back[1], 0.5f);
  const std::vector<float> x = random_values(64, false, 5);
  EXPECT_NE(store_and_load(x, false, 1).codes, store_and_load(x, false, 2).codes);
}

// Each stored nibble is the element's own code: quant4u_code / quant4s_code of x / scale with the
// element's column_bits(key, column) >> 8 (the block loop steps the column term by adding, not by
// column_bits' multiply), over blocks, partial blocks and column offsets that wrap 2^32.
TEST(Quant4Test, StoredCodesAreEachElementsCodeWithItsColumnBits) {
  for (bool is_signed : {false, true}) {
    for (int64_t d : {1, 9, 64, 100, 130}) {
      for (uint32_t column0 : {0u, 7u, 123456u, 0xfffffff0u}) {
        const std::vector<float> x = random_values(d, is_signed, 3 + static_cast<uint64_t>(d));
        const int64_t blocks = (d + kQuantBlockSize - 1) / kQuantBlockSize;
        std::vector<uint8_t> codes(static_cast<size_t>(d + 1) / 2), scales(4 * static_cast<size_t>(blocks));
        const uint32_t key = 0x5eed1234u + column0;
        quant4_store_array(x.data(), d, is_signed, codes.data(), scales.data(), key, column0);
        for (int64_t j = 0; j < d; ++j) {
          const float scale = load_f32(scales.data() + 4 * (j / kQuantBlockSize));
          const float a = x[static_cast<size_t>(j)] * (1.0f / scale);
          const uint32_t r = column_bits(key, column0 + static_cast<uint32_t>(j)) >> 8;
          const int32_t want = is_signed ? quant4s_code(a, r) : quant4u_code(a, r);
          ASSERT_EQ((codes[static_cast<size_t>(j / 2)] >> ((j % 2) * 4)) & 0xf, want)
              << "signed " << is_signed << " d " << d << " column0 " << column0 << " j " << j;
        }
      }
    }
  }
}

// The fast store (quant4_vec.h) against the scalar quant4_store_array, byte for byte (codes and
// scales), in every build the CPU runs: both books, dims with partial vectors, partial blocks and
// odd lengths, values of every magnitude with zeros, NaN and Inf among them, all-zero blocks, and
// many keys and first columns (those near 2^32 wrap).
TEST(Quant4VecTest, FastStoreMatchesScalarByteForByte) {
  std::mt19937_64 rng(44);
  std::uniform_real_distribution<float> e(-60.0f, 10.0f), u(0.0f, 1.0f);
  for_each_isa([&] {
    int64_t arrays = 0;
    for (bool is_signed : {false, true}) {
      for (int64_t d : {1, 2, 15, 16, 17, 31, 33, 64, 65, 80, 100, 128, 130, 1000}) {
        for (int trial = 0; trial < 12; ++trial) {
          std::vector<float> x(static_cast<size_t>(d));
          for (auto& v : x) {
            v = std::exp2(e(rng)) * (is_signed && rng() % 2 ? -1.0f : 1.0f);
            if (trial % 4 == 1 && rng() % 8 == 0) v = 0.0f;
            if (trial % 4 == 2 && rng() % 16 == 0) v = (rng() % 2) ? NAN : INFINITY;
          }
          if (trial % 4 == 3) std::fill(x.begin(), x.begin() + std::min<int64_t>(d, 64), 0.0f);  // a zero block
          const int64_t blocks = (d + kQuantBlockSize - 1) / kQuantBlockSize;
          const uint32_t key = static_cast<uint32_t>(rng()), column0 = trial % 3 ? static_cast<uint32_t>(rng()) : 0xfffffff8u;
          std::vector<uint8_t> wc(static_cast<size_t>(d + 1) / 2, 0xee), gc = wc, ws(4 * static_cast<size_t>(blocks), 0xee),
              gs = ws;
          quant4_store_array(x.data(), d, is_signed, wc.data(), ws.data(), key, column0);
          quant4_store_fast(x.data(), d, is_signed, gc.data(), gs.data(), key, column0);
          ASSERT_EQ(gc, wc) << "signed " << is_signed << " d " << d << " trial " << trial;
          ASSERT_EQ(gs, ws) << "signed " << is_signed << " d " << d << " trial " << trial;
          ++arrays;
        }
      }
    }
    EXPECT_EQ(arrays, 2 * 14 * 12);
  });
}

// The fast load (quant4_vec.h) against the scalar quant4_load_array, bit for bit, in every build
// the CPU runs: random codes (every nibble value) for both books, dims with partial vectors,
// partial blocks and odd lengths, scales ordinary, subnormal, 0, Inf and NaN.
TEST(Quant4VecTest, FastLoadMatchesScalarBitForBit) {
  std::mt19937_64 rng(4);
  const float scales[] = {1.0f, 0.37f, 3e-40f, 0.0f, INFINITY, NAN, 1e30f};
  for_each_isa([&] {
    int64_t arrays = 0;
    for (bool is_signed : {false, true}) {
      for (int64_t d : {1, 2, 15, 16, 17, 31, 33, 64, 65, 80, 100, 128, 130, 1000}) {
        const int64_t blocks = (d + kQuantBlockSize - 1) / kQuantBlockSize;
        std::vector<uint8_t> codes(static_cast<size_t>(d + 1) / 2), sc(4 * static_cast<size_t>(blocks));
        for (auto& c : codes) c = static_cast<uint8_t>(rng());
        for (int64_t b = 0; b < blocks; ++b) store_f32(sc.data() + 4 * b, scales[rng() % 7]);
        std::vector<float> want(static_cast<size_t>(d)), got(static_cast<size_t>(d), -7.0f);
        quant4_load_array(codes.data(), sc.data(), d, is_signed, want.data());
        quant4_load_fast(codes.data(), sc.data(), d, is_signed, got.data());
        for (int64_t j = 0; j < d; ++j)
          ASSERT_EQ(f32_bits(got[static_cast<size_t>(j)]), f32_bits(want[static_cast<size_t>(j)]))
              << "signed " << is_signed << " d " << d << " j " << j;
        ++arrays;
      }
    }
    EXPECT_EQ(arrays, 28);
  });
}

}  // namespace
}  // namespace leanemb::kernels
