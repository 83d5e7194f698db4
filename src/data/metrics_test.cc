// Tests of roc_auc and mean_logloss against hand-computed cases and a brute-force pair count.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "data/metrics.h"

namespace leanemb::data {
namespace {

// Perfect, reversed and all-tied rankings give 1, 0 and 1/2.
TEST(DataRocAucTest, ExtremesAndTies) {
  const std::vector<float> y = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(roc_auc(y, std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f}).value(), 1.0);
  EXPECT_DOUBLE_EQ(roc_auc(y, std::vector<float>{0.9f, 0.8f, 0.2f, 0.1f}).value(), 0.0);
  EXPECT_DOUBLE_EQ(roc_auc(y, std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}).value(), 0.5);
}

// Positives {0.9, 0.4, 0.1}, negatives {0.4, 0.2}: pairs won 1 + 1 + 0.5 + 1 + 0 + 0 = 3.5 of 6.
TEST(DataRocAucTest, HandComputedCaseWithATie) {
  const std::vector<float> y = {1, 0, 1, 0, 1};
  const std::vector<float> s = {0.9f, 0.4f, 0.4f, 0.2f, 0.1f};
  EXPECT_DOUBLE_EQ(roc_auc(y, s).value(), 3.5 / 6.0);
}

// The sort-based AUC equals the O(n^2) pair count on random data with many ties.
TEST(DataRocAucTest, MatchesBruteForcePairCount) {
  std::mt19937 rng(5);
  std::vector<float> y(700), s(700);
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = static_cast<float>(rng() % 3 == 0);
    s[i] = static_cast<float>(rng() % 50) / 50.0f + 0.3f * y[i];
  }
  double won = 0, pairs = 0;
  for (size_t i = 0; i < y.size(); ++i)
    for (size_t j = 0; j < y.size(); ++j)
      if (y[i] == 1 && y[j] == 0) {
        pairs += 1;
        won += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
  EXPECT_NEAR(roc_auc(y, s).value(), won / pairs, 1e-12);
}

// One class only, mismatched lengths, a non-binary label or a NaN score are errors.
TEST(DataRocAucTest, UndefinedCasesAreErrors) {
  EXPECT_EQ(roc_auc(std::vector<float>{1, 1}, std::vector<float>{0.1f, 0.2f}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(roc_auc(std::vector<float>{1, 0}, std::vector<float>{0.1f}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(roc_auc(std::vector<float>{1, 0.5f}, std::vector<float>{0.1f, 0.2f}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(roc_auc(std::vector<float>{1, 0}, std::vector<float>{NAN, 0.2f}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(roc_auc({}, {}).status().code(), StatusCode::kInvalidArgument);
}

// -(ln 0.8 + ln 0.6) / 2, and soft labels weigh both terms.
TEST(DataLoglossTest, HandComputedCases) {
  EXPECT_NEAR(mean_logloss(std::vector<float>{1, 0}, std::vector<float>{0.8f, 0.4f}).value(),
              -(std::log(0.8) + std::log(0.6)) / 2, 1e-7);
  EXPECT_NEAR(mean_logloss(std::vector<float>{0.5f}, std::vector<float>{0.5f}).value(), std::log(2.0), 1e-9);
}

// Probabilities 0 and 1 are clipped to [eps, 1 - eps], so a confident mistake costs -ln(eps).
TEST(DataLoglossTest, ProbabilitiesAreClipped) {
  EXPECT_NEAR(mean_logloss(std::vector<float>{1}, std::vector<float>{0.0f}).value(), -std::log(1e-7), 1e-9);
  EXPECT_NEAR(mean_logloss(std::vector<float>{0}, std::vector<float>{1.0f}, 1e-3).value(), -std::log(1e-3), 1e-9);
  EXPECT_EQ(mean_logloss(std::vector<float>{1}, std::vector<float>{1.5f}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leanemb::data
