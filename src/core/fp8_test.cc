// fp8 rows' conversions (core/fp8.h): the decode table against the format's definition, round to
// nearest against an independent search over all codes, and stochastic rounding's two outcomes
// and their frequencies.
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/rng.h"

namespace leanemb {
namespace {

// The value of a code from the format's definition (sign, exponent bias 12, 3 mantissa bits),
// written with ldexp instead of the table's bit arithmetic.
double definition(int c) {
  const int sign = c & 0x80 ? -1 : 1;
  const int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m, -14);
  return sign * std::ldexp(8 + m, e - kFp8ExponentBias - 3);
}

// The finite codes' values in increasing order of magnitude (non-negative codes 0 .. 0x7e).
std::vector<double> magnitudes() {
  std::vector<double> v;
  for (int c = 0; c <= kFp8MaxCode; ++c) v.push_back(definition(c));
  return v;
}

TEST(Fp8Test, DecodeTableMatchesTheDefinitionForEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const double want = definition(c);
    const float got = fp8_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;
    }
  }
  EXPECT_EQ(fp8_to_f32(kFp8MaxCode), kFp8Max);
  EXPECT_EQ(fp8_to_f32(0x08), std::ldexp(1.0f, -11));  // smallest normal
  EXPECT_EQ(fp8_to_f32(0x01), std::ldexp(1.0f, -14));  // smallest subnormal
  // Magnitudes increase with the code, so codes compare as their values do.
  const std::vector<double> m = magnitudes();
  for (size_t i = 1; i < m.size(); ++i) EXPECT_LT(m[i - 1], m[i]) << i;
}

// Round to nearest (ties away from zero) gives the nearest code found by searching all codes,
// for random floats over the whole range, every code, and the midpoints between neighbours.
TEST(Fp8Test, RoundToNearestPicksTheNearestCode) {
  const std::vector<double> m = magnitudes();
  auto nearest = [&](double x) {
    const double a = std::fabs(x);
    if (a >= kFp8Max) return static_cast<int>(kFp8MaxCode);
    int best = 0;
    for (int c = 1; c < static_cast<int>(m.size()); ++c)
      if (std::fabs(m[c] - a) <= std::fabs(m[best] - a)) best = c;  // a tie takes the larger
    return best;
  };
  std::vector<float> xs;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> e(-20.0f, 5.0f), u(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::ldexp(u(rng), static_cast<int>(e(rng))) * (i % 2 ? -1.0f : 1.0f));
  for (size_t c = 0; c + 1 < m.size(); ++c) {
    xs.push_back(static_cast<float>(m[c]));
    xs.push_back(static_cast<float>((m[c] + m[c + 1]) / 2));  // a tie: exact in fp32
  }
  xs.push_back(1e-30f);
  xs.push_back(100.0f);
  for (float x : xs) {
    const uint8_t c = f32_to_fp8_rn(x);
    EXPECT_EQ(c & 0x7f, nearest(x)) << x;
    EXPECT_EQ((c & 0x80) != 0, std::signbit(x)) << x;
  }
  EXPECT_EQ(f32_to_fp8_rn(std::numeric_limits<float>::infinity()), kFp8MaxCode);
  EXPECT_EQ(f32_to_fp8_rn(-std::numeric_limits<float>::infinity()), 0x80 | kFp8MaxCode);
  EXPECT_EQ(f32_to_fp8_rn(std::numeric_limits<float>::quiet_NaN()), kFp8NanCode);
  EXPECT_EQ(f32_to_fp8_rn(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_rn(1e-40f), 0);  // an fp32 subnormal
}

// Stochastic rounding lands on one of the two neighbouring codes, and on the upper one with
// probability (x - lo) / (hi - lo): checked over many draws, to 5 standard deviations.
TEST(Fp8Test, StochasticRoundingIsUnbiasedBetweenTheNeighbours) {
  const std::vector<double> m = magnitudes();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> e(-16.0f, 4.0f), u(1.0f, 2.0f);
  for (int trial = 0; trial < 300; ++trial) {
    float x = std::ldexp(u(rng), static_cast<int>(e(rng)));
    if (x >= kFp8Max) x = 13.7f;
    if (trial % 3 == 0) x = -x;
    const double a = std::fabs(x);
    size_t hi = 0;
    while (m[hi] < a) ++hi;
    const size_t lo = m[hi] == a ? hi : hi - 1;
    const double p_up = lo == hi ? 0.0 : (a - m[lo]) / (m[hi] - m[lo]);
    const int n = 4000;
    int up = 0;
    for (int i = 0; i < n; ++i) {
      const uint8_t c = f32_to_fp8_sr(x, column_bits(static_cast<uint32_t>(trial), static_cast<uint32_t>(i)));
      ASSERT_EQ((c & 0x80) != 0, x < 0) << x;
      const size_t got = c & 0x7f;
      ASSERT_TRUE(got == lo || got == hi) << x << " gave code " << got << ", neighbours " << lo << " and " << hi;
      up += got == hi && hi != lo;
    }
    const double sd = std::sqrt(n * p_up * (1 - p_up));
    EXPECT_NEAR(up, n * p_up, 5 * sd + 1) << x;
  }
  // Beyond the largest finite value: saturates; NaN stays NaN whatever the draw.
  for (uint32_t r : {0u, 0xfffffu, 0xffffffffu}) {
    EXPECT_EQ(f32_to_fp8_sr(20.0f, r), kFp8MaxCode);
    EXPECT_EQ(f32_to_fp8_sr(14.0f, r), kFp8MaxCode);
    EXPECT_EQ(f32_to_fp8_sr(std::numeric_limits<float>::quiet_NaN(), r), kFp8NanCode);
    EXPECT_EQ(f32_to_fp8_sr(0.0f, r), 0);
  }
}

}  // namespace
}  // namespace leanemb
