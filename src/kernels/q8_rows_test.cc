// q8 rows (DType::kQ8): `dim` signed int8 codes and one fp32 scale (absmax / 127); value = code *
// scale. Checks the layout, the
// round-to-nearest store (within half a step, the largest element exact up to the scale's
// rounding), the stochastic-rounding store (within one step, unbiased over keys), and a zero row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/row_access.h"
#include "leanemb/optimizer.h"

namespace leanemb::kernels {
namespace {

std::vector<float> random_row(int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.3f, 0.2f);
  std::vector<float> w(static_cast<size_t>(d));
  for (auto& x : w) x = u(rng);
  return w;
}

float absmax_of(const std::vector<float>& w) {
  float a = 0.0f;
  for (float x : w) a = std::max(a, std::fabs(x));
  return a;
}

TEST(Q8RowsTest, LayoutIsCodesThenScaleWithFourByteStrides) {
  OptimizerOptions adagrad8;
  adagrad8.kind = OptimizerKind::kAdagrad;
  adagrad8.state_dtype = DType::kInt8Blockwise;
  auto l16 = make_row_layout(16, DType::kQ8, adagrad8);
  auto l64 = make_row_layout(64, DType::kQ8, adagrad8);
  ASSERT_TRUE(l16.ok());
  ASSERT_TRUE(l64.ok());
  EXPECT_EQ(l16->weight_bytes, 20u);
  EXPECT_EQ(l16->stride_bytes, 40u);  // 16 + 4, then 16 codes + 1 block scale: row-wise Adagrad's bytes
  EXPECT_EQ(l64->weight_bytes, 68u);
  EXPECT_EQ(l64->stride_bytes, 136u);
}

TEST(Q8RowsTest, RoundToNearestStoreLoadsBackWithinHalfAStep) {
  for (int64_t d : {1, 7, 16, 37, 64}) {
    auto l = make_row_layout(d, DType::kQ8, OptimizerOptions{});
    ASSERT_TRUE(l.ok());
    const std::vector<float> w = random_row(d, 11 + static_cast<uint64_t>(d));
    std::vector<uint8_t> row(l->stride_bytes);
    std::vector<float> back(static_cast<size_t>(d));
    ref_store_weights_rne(*l, row.data(), w.data());
    ref_load_weights(*l, row.data(), back.data());
    const float scale = load_f32(row.data() + d);
    EXPECT_EQ(scale, absmax_of(w) / 127.0f) << d;
    for (int64_t j = 0; j < d; ++j) {
      EXPECT_LE(std::fabs(back[j] - w[j]), 0.5f * scale * 1.0001f) << d << " " << j;
      const int code = static_cast<int8_t>(row[j]);
      EXPECT_EQ(back[j], static_cast<float>(code) * scale);
      EXPECT_LE(std::abs(code), 127);
    }
  }
}

TEST(Q8RowsTest, StochasticStoreIsWithinAStepAndUnbiased) {
  constexpr int64_t d = 16;
  constexpr int kKeys = 20000;
  const std::vector<float> w = random_row(d, 5);
  const float scale = absmax_of(w) / 127.0f;
  std::vector<uint8_t> row(d + 4);
  std::vector<float> back(d);
  std::vector<double> sum(d, 0.0);
  for (int k = 0; k < kKeys; ++k) {
    store_row_sr<DType::kQ8>(row.data(), w.data(), d, static_cast<uint32_t>(k) * 2654435761u, 0);
    load_row<DType::kQ8>(back.data(), row.data(), d);
    ASSERT_EQ(load_f32(row.data() + d), scale);
    for (int64_t j = 0; j < d; ++j) {
      ASSERT_LT(std::fabs(back[j] - w[j]), scale * 1.0001f) << j;
      sum[j] += back[j];
    }
  }
  // Each draw's error has sd <= scale / 2: the mean's error is below 5 sd of the mean.
  const double tol = 5.0 * 0.5 * scale / std::sqrt(static_cast<double>(kKeys));
  for (int64_t j = 0; j < d; ++j) EXPECT_NEAR(sum[j] / kKeys, w[j], tol) << j;
}

TEST(Q8RowsTest, ZeroRowStoresZeroScaleAndCodes) {
  constexpr int64_t d = 8;
  const std::vector<float> w(d, 0.0f);
  std::vector<uint8_t> row(d + 4, 0xaa);
  std::vector<float> back(d, 1.0f);
  store_row_sr<DType::kQ8>(row.data(), w.data(), d, 123u, 0);
  load_row<DType::kQ8>(back.data(), row.data(), d);
  EXPECT_EQ(load_f32(row.data() + d), 0.0f);
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_EQ(row[j], 0u);
    EXPECT_EQ(back[j], 0.0f);
  }
}

}  // namespace
}  // namespace leanemb::kernels
