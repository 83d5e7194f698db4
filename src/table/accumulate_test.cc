// Gradient accumulation over micro-batches (EmbeddingTables::begin_accumulation, accumulate,
// apply_accumulated): bit-identical to one backward_update over the whole batch, its buffer
// counted as gradients, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "leanemb/memory_system.h"
#include "leanemb/tables.h"
#include "table/owned_batch_testing.h"
#include "table/step_sizes.h"
#include "table/two_tables_testing.h"

namespace leanemb {
namespace {

using testing_util::OwnedBatch;

using Kind = testing_util::StackKind;
constexpr const auto& kRows = testing_util::kTwoTableRows;
constexpr const auto& kDims = testing_util::kTwoTableDims;
const char* kind_name(Kind k) { return testing_util::stack_kind_name(k); }

constexpr int64_t kBags = 10;  // 3 micro-batches: 3, 3, 4 bags

struct AccCase {
  Kind kind = Kind::kResident;
  OptimizerKind opt = OptimizerKind::kAdam;
  PoolingMode pooling = PoolingMode::kSum;
  bool shared = false;  // one table looked up by both features
};

// Two features of `pooling`; each its own table (or both table 0 when shared); a row cache of
// 80% of the rows (it evicts between steps). The first feature of a pooled setup carries per-id
// weights.
testing_util::TwoTables two_tables(const AccCase& s) { return {s.kind, s.opt, s.pooling, s.pooling, s.shared, 0.8, 3}; }

std::unique_ptr<EmbeddingTables> make_tables(const AccCase& s, std::unique_ptr<MemorySystem>* mem) {
  return testing_util::make_two_tables(two_tables(s), mem);
}

// Step `step`'s batch: bags of 0-4 ids (repeats within and across bags and micro-batches).
OwnedBatch batch_for(int step, const AccCase& s) {
  return testing_util::two_tables_batch(two_tables(s), 100 + static_cast<uint64_t>(step), kBags, 5);
}

std::vector<float> normal(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// The whole batch's gradients: pooled [B, pooled_dim], then per sequence feature [nnz, dim].
struct Grads {
  std::vector<float> pooled;
  std::vector<std::vector<float>> seq;
};
Grads grads_for(const EmbeddingTables& t, const OwnedBatch& b, const AccCase& s, int step) {
  Grads g;
  g.pooled = normal(static_cast<size_t>(b.B * t.pooled_dim()), 700 + static_cast<uint64_t>(step));
  if (s.pooling == PoolingMode::kNone)
    for (int f = 0; f < 2; ++f)
      g.seq.push_back(normal(b.ids[f].size() * static_cast<size_t>(t.options().tables[t.options().features[f].table].dim),
                             800 + 10 * static_cast<uint64_t>(step) + static_cast<uint64_t>(f)));
  return g;
}

Status forward_all(EmbeddingTables& t, const OwnedBatch& b) {
  std::vector<float> pooled(static_cast<size_t>(b.B * t.pooled_dim()));
  std::vector<std::vector<float>> seq;
  std::vector<std::span<float>> out;
  for (size_t f = 0; f < b.ids.size() && t.options().features[f].pooling == PoolingMode::kNone; ++f)
    seq.emplace_back(b.ids[f].size() * static_cast<size_t>(t.options().tables[t.options().features[f].table].dim));
  for (auto& v : seq) out.emplace_back(v);
  return t.forward(b.view(), pooled, out);
}

// One step as `micro` micro-batches of bags [B*i/k, B*(i+1)/k): begin, accumulate each, apply.
Result<UpdateReport> accumulated_step(EmbeddingTables& t, const OwnedBatch& b, const Grads& g, int micro,
                                      const UpdateOptions& u = {}) {
  LEANEMB_RETURN_IF_ERROR(t.begin_accumulation(b.view(), u));
  const int64_t pd = t.pooled_dim();
  for (int i = 0; i < micro; ++i) {
    const int64_t b0 = b.B * i / micro, b1 = b.B * (i + 1) / micro;
    std::vector<std::span<const float>> seq;
    for (size_t f = 0; f < g.seq.size(); ++f) {
      const auto dim = static_cast<size_t>(t.options().tables[t.options().features[f].table].dim);
      const auto lo = static_cast<size_t>(b.offsets[f][static_cast<size_t>(b0)]), hi = static_cast<size_t>(b.offsets[f][static_cast<size_t>(b1)]);
      seq.emplace_back(g.seq[f].data() + lo * dim, (hi - lo) * dim);
    }
    LEANEMB_RETURN_IF_ERROR(t.accumulate(b0, b1, std::span<const float>(g.pooled.data() + b0 * pd, static_cast<size_t>((b1 - b0) * pd)), seq));
  }
  return t.apply_accumulated();
}

// Fat rows (weights and optimizer state bytes) of every id the steps can use, by id.
std::vector<uint8_t> rows_by_id(EmbeddingTables& t, const AccCase& s) {
  std::vector<uint8_t> out;
  for (int tb = 0; tb < (s.shared ? 1 : 2); ++tb) {
    const size_t stride = t.layout(tb).stride_bytes;
    for (int64_t id = 0; id < kRows[tb] / 2; ++id) {
      int64_t row = id;
      if (s.kind == Kind::kDynamic || s.kind == Kind::kDynamicFiltered) row = t.dynamic_row(tb, id).value();
      const size_t at = out.size();
      out.resize(at + stride, 0xEE);  // an id without a row: a fixed pattern on both sides
      if (row >= 0) {
        EXPECT_TRUE(t.read_raw_rows(tb, row, 1, std::span<uint8_t>(out).subspan(at, stride)).ok());
      }
    }
  }
  return out;
}

using Param = std::tuple<Kind, OptimizerKind, PoolingMode, int>;
class AccumulateBitIdentityTest : public ::testing::TestWithParam<Param> {};

// Four steps as micro-batches give the one-shot backward_update's rows, state and reports bit for bit.
TEST_P(AccumulateBitIdentityTest, MicroBatchesEqualOneBackwardUpdate) {
  const auto [kind, opt, pooling, micro] = GetParam();
  const AccCase s{kind, opt, pooling, false};
  std::unique_ptr<MemorySystem> m1, m2;
  auto ref = make_tables(s, &m1), got = make_tables(s, &m2);
  ASSERT_TRUE(ref && got);
  for (int step = 0; step < 4; ++step) {
    const OwnedBatch b = batch_for(step, s);
    const Grads g = grads_for(*ref, b, s, step);
    ASSERT_TRUE(forward_all(*ref, b).ok());
    ASSERT_TRUE(forward_all(*got, b).ok());
    std::vector<std::span<const float>> seq(g.seq.begin(), g.seq.end());
    auto r1 = ref->backward_update(b.view(), g.pooled, seq);
    auto r2 = accumulated_step(*got, b, g, micro);
    ASSERT_TRUE(r1.ok()) << r1.status().to_string();
    ASSERT_TRUE(r2.ok()) << r2.status().to_string();
    EXPECT_EQ(r1.value().unique_rows, r2.value().unique_rows);
    EXPECT_EQ(r1.value().lookups, r2.value().lookups);
    EXPECT_FALSE(r2.value().skipped_nonfinite);
  }
  EXPECT_EQ(ref->step(), got->step());
  if (kind == Kind::kDynamicFiltered) {
    EXPECT_GT(got->dynamic_stats(0).value().rejected_min_count, 0) << "no id was dropped: the compaction went untested";
  }
  const std::vector<uint8_t> a = rows_by_id(*ref, s), b = rows_by_id(*got, s);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << "rows or optimizer state differ";
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [kind, opt, pooling, micro] = info.param;
  return std::string(kind_name(kind)) + "_" + std::string(optimizer_name(opt)) + "_" + std::string(pooling_name(pooling)) + "_" +
         std::to_string(micro) + "micro";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, AccumulateBitIdentityTest,
                         ::testing::Combine(::testing::Values(Kind::kResident, Kind::kCached),
                                            ::testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdagrad,
                                                              OptimizerKind::kRowwiseAdagrad, OptimizerKind::kAdam),
                                            ::testing::Values(PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone),
                                            ::testing::Values(1, 2, 3)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Residencies, AccumulateBitIdentityTest,
                         ::testing::Combine(::testing::Values(Kind::kStateOnHost, Kind::kDynamic, Kind::kDynamicFiltered),
                                            ::testing::Values(OptimizerKind::kAdam),
                                            ::testing::Values(PoolingMode::kMean, PoolingMode::kNone), ::testing::Values(3)),
                         param_name);

// A table shared by two features sums bag-major: equal with one micro-batch, within rounding with three.
TEST(AccumulateTest, ASharedTableIsExactWithOneMicroBatchAndCloseWithThree) {
  for (int micro : {1, 3}) {
    const AccCase s{Kind::kResident, OptimizerKind::kSgd, PoolingMode::kSum, true};
    std::unique_ptr<MemorySystem> m1, m2;
    auto ref = make_tables(s, &m1), got = make_tables(s, &m2);
    const OwnedBatch b = batch_for(0, s);
    const Grads g = grads_for(*ref, b, s, 0);
    ASSERT_TRUE(ref->backward_update(b.view(), g.pooled).ok());
    ASSERT_TRUE(accumulated_step(*got, b, g, micro).ok());
    std::vector<float> wa(static_cast<size_t>(kRows[0] * kDims[0])), wb(wa.size());
    ASSERT_TRUE(ref->read_rows(0, 0, kRows[0], wa).ok());
    ASSERT_TRUE(got->read_rows(0, 0, kRows[0], wb).ok());
    if (micro == 1) {
      EXPECT_EQ(0, std::memcmp(wa.data(), wb.data(), wa.size() * 4));
    }
    for (size_t i = 0; i < wa.size(); ++i) ASSERT_NEAR(wa[i], wb[i], 1e-6f) << i;
  }
}

// An Inf in the second micro-batch skips the whole step: no row, state or step counter changes.
TEST(AccumulateTest, ANonFiniteMicroBatchSkipsTheStep) {
  const AccCase s{Kind::kCached, OptimizerKind::kAdam, PoolingMode::kSum, false};
  std::unique_ptr<MemorySystem> m;
  auto t = make_tables(s, &m);
  const OwnedBatch b = batch_for(0, s);
  Grads g = grads_for(*t, b, s, 0);
  int64_t bag = 5;  // in micro-batch 2 of 2, with ids of f0
  while (b.offsets[0][static_cast<size_t>(bag + 1)] == b.offsets[0][static_cast<size_t>(bag)]) ++bag;
  ASSERT_LT(bag, kBags);
  const auto at = static_cast<size_t>(bag * t->pooled_dim());
  g.pooled[at] = std::numeric_limits<float>::infinity();
  const std::vector<uint8_t> before = rows_by_id(*t, s);
  ASSERT_TRUE(forward_all(*t, b).ok());
  auto r = accumulated_step(*t, b, g, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r.value().skipped_nonfinite);
  EXPECT_EQ(t->step(), 0);
  EXPECT_EQ(before, rows_by_id(*t, s));
  // A huge finite sum is skipped as backward_update skips it.
  g.pooled[at] = 1e20f;
  ASSERT_TRUE(forward_all(*t, b).ok());
  r = accumulated_step(*t, b, g, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().skipped_huge_grad);
  EXPECT_EQ(before, rows_by_id(*t, s));
}

// Calls out of order fail with a clear error and leave the accumulation usable.
TEST(AccumulateTest, CallsOutOfOrderFailAndChangeNothing) {
  const AccCase s{Kind::kCached, OptimizerKind::kAdagrad, PoolingMode::kSum, false};
  std::unique_ptr<MemorySystem> m;
  auto t = make_tables(s, &m);
  const OwnedBatch b = batch_for(1, s);
  const Grads g = grads_for(*t, b, s, 1);
  const int64_t pd = t->pooled_dim();
  EXPECT_EQ(t->accumulate(0, 1, std::span<const float>(g.pooled.data(), static_cast<size_t>(pd))).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(forward_all(*t, b).ok());
  ASSERT_TRUE(t->begin_accumulation(b.view()).ok());
  EXPECT_EQ(t->begin_accumulation(b.view()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t->accumulate(2, 4, std::span<const float>(g.pooled.data(), static_cast<size_t>(2 * pd))).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->accumulate(0, 2, std::span<const float>(g.pooled.data(), static_cast<size_t>(pd))).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->backward_update(b.view(), g.pooled).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(forward_all(*t, b).code(), StatusCode::kFailedPrecondition);  // a cache's pins are the step's
  ASSERT_TRUE(t->accumulate(0, 5, std::span<const float>(g.pooled.data(), static_cast<size_t>(5 * pd))).ok());
  EXPECT_EQ(t->apply_accumulated().status().code(), StatusCode::kFailedPrecondition);  // bags 5..9 missing
  ASSERT_TRUE(t->accumulate(5, kBags, std::span<const float>(g.pooled.data() + 5 * pd, static_cast<size_t>(5 * pd))).ok());
  const std::vector<uint8_t> before = rows_by_id(*t, s);
  t->discard_accumulation();
  EXPECT_EQ(before, rows_by_id(*t, s));
  EXPECT_EQ(t->step(), 0);
  ASSERT_TRUE(forward_all(*t, b).ok());
  auto r = accumulated_step(*t, b, g, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(t->step(), 1);
}

// The sums over the step's distinct rows are allocated as gradients (and their rows as workspace)
// in the gradients tier, sized by the distinct rows, not by the batch's gradient.
TEST(AccumulateTest, TheRowSumsAreCountedAsGradientsOfTheDistinctRows) {
  const AccCase s{Kind::kResident, OptimizerKind::kSgd, PoolingMode::kNone, false};
  std::unique_ptr<MemorySystem> m;
  auto t = make_tables(s, &m);
  const OwnedBatch b = batch_for(2, s);
  const size_t before = m->stats()[0][Category::kGradients].current_bytes;
  ASSERT_TRUE(t->begin_accumulation(b.view()).ok());
  size_t want = 0;
  for (int f = 0; f < 2; ++f) {
    std::vector<int64_t> ids = b.ids[f];
    std::sort(ids.begin(), ids.end());
    const auto u = static_cast<int64_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
    const int64_t most = std::min<int64_t>(static_cast<int64_t>(b.ids[f].size()), kRows[f]);
    want += step_buffer_alloc_bytes(accumulation_bytes(u, kDims[f]).sums, accumulation_bytes(most, kDims[f]).sums);
  }
  EXPECT_EQ(m->stats()[0][Category::kGradients].current_bytes - before, want);
  t->discard_accumulation();
  t->release_step_buffers();
  EXPECT_EQ(m->stats()[0][Category::kGradients].current_bytes, before);
}

}  // namespace
}  // namespace leanemb
