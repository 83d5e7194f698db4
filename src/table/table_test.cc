// Tests of EmbeddingCollection: bad input (bad_ids_matrix, kSkip), gradients by finite
// differences, thread-count determinism, non-finite gradients, allocation failures at every
// allocation of a step (alloc_failure_sweep), gradient memory, sequence and shared-table
// features, frozen and int8 tables, table save/load and initializers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "table/owned_batch_testing.h"
#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "leanemb/memory_system.h"

#include "table/table_testing.h"

namespace leanemb {
namespace {

using namespace table_testing;  // NOLINT: test helpers

// ---- bad input ---------------------------------------------------------------------------------------

struct BadCase {
  const char* name;
  std::function<void(OwnedBatch&)> mutate;
  StatusCode code;
  std::vector<std::string> message_parts;
};

std::vector<BadCase> bad_cases() {
  const int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  using C = StatusCode;
  return {
      {"id < 0", [](OwnedBatch& b) { b.ids[0][3] = -1; }, C::kOutOfRange, {"feature 'f0'", "bag 2", "position 3", "id -1"}},
      {"id >= rows", [](OwnedBatch& b) { b.ids[2][2] = 20; }, C::kOutOfRange,
       {"feature 'f2'", "table 't1'", "bag 2", "position 2", "id 20", "[0, 20)"}},
      {"INT64 min", [=](OwnedBatch& b) { b.ids[1][0] = kMin; }, C::kOutOfRange,
       {"feature 'f1'", "bag 0", "position 0", std::to_string(kMin)}},
      {"INT64 max", [=](OwnedBatch& b) { b.ids[0][6] = kMax; }, C::kOutOfRange,
       {"feature 'f0'", "bag 3", "position 6", std::to_string(kMax)}},
      {"offsets[0] != 0", [](OwnedBatch& b) { b.offsets[1][0] = 1; }, C::kInvalidArgument, {"feature 'f1'", "offsets[0] = 1"}},
      {"non-monotone offsets", [](OwnedBatch& b) { b.offsets[0] = {0, 2, 1, 5, 7}; }, C::kInvalidArgument,
       {"feature 'f0'", "not monotone at bag 1"}},
      {"negative offset", [](OwnedBatch& b) { b.offsets[2] = {0, -1, 2, 3, 4}; }, C::kInvalidArgument,
       {"feature 'f2'", "not monotone at bag 0"}},
      {"intermediate offset beyond nnz", [](OwnedBatch& b) { b.offsets[0] = {0, 2, 9, 9, 7}; }, C::kInvalidArgument,
       {"feature 'f0'", "offsets[2] = 9", "beyond the 7 ids"}},
      {"last offset != nnz", [](OwnedBatch& b) { b.offsets[0] = {0, 2, 2, 5, 6}; }, C::kInvalidArgument,
       {"feature 'f0'", "last offset 6", "7"}},
      {"offsets length != B + 1", [](OwnedBatch& b) { b.offsets[2].pop_back(); }, C::kInvalidArgument,
       {"feature 'f2'", "offsets has 4 entries", "5"}},
      {"weight count mismatch", [](OwnedBatch& b) { b.weights[1].pop_back(); }, C::kInvalidArgument,
       {"feature 'f1'", "4 per-id weights for 5 ids"}},
      {"NaN weight", [=](OwnedBatch& b) { b.weights[1][2] = kNaN; }, C::kInvalidArgument,
       {"feature 'f1'", "bag 1", "position 2", "not finite"}},
      {"Inf weight", [=](OwnedBatch& b) { b.weights[1][4] = -kInf; }, C::kInvalidArgument,
       {"feature 'f1'", "bag 3", "position 4", "not finite"}},
      {"wrong feature count", [](OwnedBatch& b) { b.ids.pop_back(), b.offsets.pop_back(), b.weights.pop_back(); },
       C::kInvalidArgument, {"batch has 2 features", "3"}},
      {"negative batch size", [](OwnedBatch& b) { b.B = -1; }, C::kInvalidArgument, {"batch_size -1"}},
  };
}

// bad_ids_matrix: every malformed batch is rejected by validate, forward and backward_update
// with a message naming feature / bag / position; no row, state, output or step changes; then
// the next valid batch trains.
TEST(BadInputTest, BadIdsMatrixRejectsEachCaseAndChangesNothing) {
  auto c = must_create(standard_options(OptimizerKind::kAdam));
  const auto before = snapshot(*c);
  for (const BadCase& bc : bad_cases()) {
    SCOPED_TRACE(bc.name);
    OwnedBatch b = standard_batch();
    bc.mutate(b);
    const SparseBatch batch = b.view();
    std::vector<float> out(pooled_size(*c, standard_batch()), -7.0f);
    const std::vector<float> G = random_floats(out.size(), 1);
    const Status statuses[] = {c->validate(batch), c->forward(batch, out), c->backward_update(batch, G).status()};
    for (const Status& s : statuses) {
      ASSERT_EQ(s.code(), bc.code) << s.to_string();
      for (const std::string& part : bc.message_parts) EXPECT_TRUE(contains(s.message(), part)) << s.message();
    }
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == -7.0f; })) << "forward wrote output";
    ASSERT_TRUE(same_bytes(snapshot(*c), before)) << "rows or state changed";
    ASSERT_EQ(c->step(), 0);
  }
  const OwnedBatch good = standard_batch();
  ASSERT_TRUE(c->validate(good.view()).ok());
  const UpdateReport r = train_step(*c, good, random_floats(pooled_size(*c, good), 2));
  EXPECT_EQ(c->step(), 1);
  EXPECT_EQ(r.unique_rows, 10 + 3);  // t0: 0 1 2 3 4 5 7 10 11 29; t1: 0 7 19
  EXPECT_FALSE(same_bytes(snapshot(*c), before));
}

// Output and gradient buffers of the wrong size, and a non-finite grad_multiplier, are
// InvalidArgument and change nothing.
TEST(BadInputTest, WrongBufferSizesAndBadMultiplierAreRejected) {
  auto c = must_create(standard_options());
  const auto before = snapshot(*c);
  const OwnedBatch b = standard_batch();
  std::vector<float> short_out(pooled_size(*c, b) - 1);
  EXPECT_EQ(c->forward(b.view(), short_out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->backward_update(b.view(), short_out).status().code(), StatusCode::kInvalidArgument);
  UpdateOptions u;
  u.grad_multiplier = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> G = random_floats(pooled_size(*c, b), 3);
  EXPECT_EQ(c->backward_update(b.view(), G, {}, u).status().code(), StatusCode::kInvalidArgument);
  std::vector<float> seq(10);
  const std::span<float> extra[] = {seq};
  std::vector<float> out(pooled_size(*c, b));
  EXPECT_EQ(c->forward(b.view(), out, extra).code(), StatusCode::kInvalidArgument);  // no sequence features
  EXPECT_TRUE(same_bytes(snapshot(*c), before));
  EXPECT_EQ(c->step(), 0);
}

// A feature that names an unknown table, and other invalid collections, fail create.
TEST(BadInputTest, CreateRejectsUnknownTablesAndBadTables) {
  CollectionOptions o = standard_options();
  o.features.push_back({"fx", 2, PoolingMode::kSum});
  auto r = EmbeddingCollection::create(o);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), "feature 'fx' (index 3)")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "unknown table 2")) << r.status().message();
  o.features.back().table = -1;
  EXPECT_EQ(EmbeddingCollection::create(o).status().code(), StatusCode::kInvalidArgument);
  for (auto mutate : std::vector<std::function<void(CollectionOptions&)>>{
           [](CollectionOptions& x) { x.tables[1].num_rows = 0; }, [](CollectionOptions& x) { x.tables[0].dim = 0; },
           [](CollectionOptions& x) { x.tables[0].optimizer.learning_rate = -1.0f; },
           [](CollectionOptions& x) { x.features.clear(); }, [](CollectionOptions& x) { x.tables.clear(); }}) {
    CollectionOptions bad = standard_options();
    mutate(bad);
    EXPECT_EQ(EmbeddingCollection::create(bad).status().code(), StatusCode::kInvalidArgument);
  }
}

// The standard batch with bad ids mixed in (four of them; f1's bag 3 loses all its ids).
OwnedBatch batch_with_bad_ids() {
  OwnedBatch b = standard_batch();
  b.ids[0] = {1, -5, 2, 2, 5, 29, 30, 0, 7};
  b.offsets[0] = {0, 3, 3, 7, 9};
  b.ids[1] = {3, 3, std::numeric_limits<int64_t>::max(), 4, 10, std::numeric_limits<int64_t>::min()};
  b.offsets[1] = {0, 1, 4, 5, 6};
  b.weights[1] = {0.5f, 1.0f, 9.0f, 1.5f, 2.0f, 9.0f};
  return b;
}

// batch_with_bad_ids() with its bad ids removed by hand.
OwnedBatch filtered_batch() {
  OwnedBatch b = standard_batch();
  b.ids[1] = {3, 3, 4, 10};
  b.offsets[1] = {0, 1, 3, 4, 4};
  b.weights[1] = {0.5f, 1.0f, 1.5f, 2.0f};
  return b;
}

// BoundsCheckMode::kSkip drops and counts bad ids (with a warning) and then computes and trains
// exactly as kError does on the batch with those ids removed.
TEST(BoundsCheckSkipTest, DropsAndCountsBadIdsAndEqualsTrainingOnFilteredBatch) {
  CollectionOptions skip_opts = standard_options(OptimizerKind::kAdam);
  skip_opts.bounds_check = BoundsCheckMode::kSkip;
  auto skip = must_create(skip_opts);
  auto ref = must_create(standard_options(OptimizerKind::kAdam));
  const OwnedBatch bad = batch_with_bad_ids(), good = filtered_batch();
  for (int step = 0; step < 3; ++step) {
    std::vector<float> out_skip(pooled_size(*skip, bad)), out_ref(out_skip.size());
    testing::internal::CaptureStderr();
    const Status s = skip->forward(bad.view(), out_skip);
    const std::string warning = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(step > 0 || contains(warning, "dropped 4 out-of-range ids")) << warning;
    ASSERT_TRUE(ref->forward(good.view(), out_ref).ok());
    ASSERT_EQ(out_skip, out_ref) << "step " << step;
    const std::vector<float> G = random_floats(out_ref.size(), 10 + step);
    const UpdateReport rs = train_step(*skip, bad, G), rr = train_step(*ref, good, G);
    EXPECT_EQ(rs.unique_rows, rr.unique_rows);
    EXPECT_EQ(rs.lookups, rr.lookups);
    ASSERT_TRUE(same_bytes(snapshot(*skip), snapshot(*ref))) << "step " << step;
    EXPECT_EQ(skip->num_skipped_ids(), 4u * static_cast<uint64_t>(step + 1));
  }
  EXPECT_EQ(skip->step(), 3);
  OwnedBatch shape_error = bad;
  shape_error.offsets[0][0] = 1;  // kSkip does not excuse malformed offsets
  EXPECT_EQ(skip->validate(shape_error.view()).code(), StatusCode::kInvalidArgument);
}

// ---- gradients ------------------------------------------------------------------------------------

double loss_of(EmbeddingCollection& c, const OwnedBatch& b, const std::vector<float>& G) {
  std::vector<float> out(G.size());
  EXPECT_TRUE(c.forward(b.view(), out).ok());
  double loss = 0;
  for (size_t i = 0; i < out.size(); ++i) loss += static_cast<double>(out[i]) * G[i];
  return loss;
}

// The gradient applied by backward_update (read off an SGD step with lr = 1 on fp32 rows) equals
// central differences of loss = sum(out * G) through forward, for sum, weighted mean and sum
// pooling, two features sharing a table, duplicate ids, and an untouched row (gradient 0).
TEST(GradientTest, UpdateGradientMatchesFiniteDifferences) {
  CollectionOptions o = standard_options(OptimizerKind::kSgd);
  for (auto& t : o.tables) t.optimizer.learning_rate = 1.0f;
  o.num_threads = 1;  // ~1000 forwards; one thread avoids OpenMP barrier costs on a loaded machine
  auto c = must_create(o);
  const OwnedBatch b = standard_batch();
  const std::vector<float> G = random_floats(pooled_size(*c, b), 4);
  const float h = 0.05f;
  std::vector<std::vector<double>> fd(2);
  for (int t = 0; t < 2; ++t) {
    const int64_t dim = o.tables[t].dim;
    for (int64_t r = 0; r < o.tables[t].num_rows; ++r) {
      std::vector<float> row(dim);
      ASSERT_TRUE(c->read_rows(t, r, 1, row).ok());
      for (int64_t j = 0; j < dim; ++j) {
        std::vector<float> p = row;
        p[j] = row[j] + h;
        ASSERT_TRUE(c->write_rows(t, r, 1, p).ok());
        const double up = loss_of(*c, b, G);
        p[j] = row[j] - h;
        ASSERT_TRUE(c->write_rows(t, r, 1, p).ok());
        const double down = loss_of(*c, b, G);
        fd[t].push_back((up - down) / (2.0 * (static_cast<double>(row[j] + h) - row[j])));
      }
      ASSERT_TRUE(c->write_rows(t, r, 1, row).ok());
    }
  }
  const std::vector<float> w0 = rows_of(*c, 0), w1 = rows_of(*c, 1);
  train_step(*c, b, G);
  const std::vector<float> v0 = rows_of(*c, 0), v1 = rows_of(*c, 1);
  int nonzero = 0;
  for (int t = 0; t < 2; ++t) {
    const auto& before = t == 0 ? w0 : w1;
    const auto& after = t == 0 ? v0 : v1;
    for (size_t i = 0; i < before.size(); ++i) {
      const double g = static_cast<double>(before[i]) - after[i];
      ASSERT_NEAR(g, fd[t][i], 1e-3 * (1 + std::fabs(fd[t][i]))) << "table " << t << " element " << i;
      nonzero += fd[t][i] != 0.0;
    }
  }
  EXPECT_GT(nonzero, 100);
  EXPECT_EQ(w0[13 * 20], v0[13 * 20]);  // row 20 of t0 is in no bag
}

// ---- determinism -------------------------------------------------------------------------------------

struct DeterminismParam {
  OptimizerKind kind;
  DType dtype;
};

class ThreadDeterminismTest : public ::testing::TestWithParam<DeterminismParam> {};

// 1, 2 and 3 threads and the reference kernels give bit-identical outputs, rows and state over
// several steps, for every state dtype (stochastic rounding included).
TEST_P(ThreadDeterminismTest, ResultsAreBitIdenticalForAnyThreadCount) {
  const DeterminismParam p = GetParam();
  for (DType st : {DType::kF32, DType::kBF16, DType::kInt8Blockwise, DType::kInt4Blockwise}) {
    SCOPED_TRACE(std::string("state ") + std::string(dtype_name(st)));
    std::vector<std::unique_ptr<EmbeddingCollection>> cs;
    for (int variant = 0; variant < 4; ++variant) {
      CollectionOptions o = standard_options(p.kind, p.dtype, st);
      o.tables[0].optimizer.weight_decay = 0.01f;
      o.num_threads = variant == 3 ? 2 : variant + 1;
      o.use_reference_kernels = variant == 3;
      cs.push_back(must_create(o));
    }
    for (int step = 0; step < 4; ++step) {
      const OwnedBatch b = random_batch(cs[0]->options(), 32, 100 + step);
      const std::vector<float> G = random_floats(pooled_size(*cs[0], b), 200 + step);
      std::vector<std::vector<float>> outs;
      for (auto& c : cs) {
        outs.emplace_back(G.size());
        ASSERT_TRUE(c->forward(b.view(), outs.back()).ok());
        train_step(*c, b, G);
      }
      for (size_t v = 1; v < cs.size(); ++v) {
        ASSERT_EQ(outs[v], outs[0]) << "forward, variant " << v << " step " << step;
        ASSERT_TRUE(same_bytes(snapshot(*cs[v]), snapshot(*cs[0]))) << "rows, variant " << v << " step " << step;
      }
    }
  }
}

std::vector<DeterminismParam> all_determinism_params() {
  std::vector<DeterminismParam> v;
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                          OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam, OptimizerKind::kSm3})
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8, DType::kQ8}) v.push_back({k, d});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, ThreadDeterminismTest, ::testing::ValuesIn(all_determinism_params()),
                         [](const ::testing::TestParamInfo<DeterminismParam>& i) {
                           return std::string(optimizer_name(i.param.kind)) + "_" + std::string(dtype_name(i.param.dtype));
                         });

// ---- non-finite gradients ---------------------------------------------------------------------------

// Inf or NaN in grad_pooled, or a finite gradient whose per-row sum or multiplier overflows,
// skips the step: reported, no row or state change, step unchanged; a clean step then trains.
TEST(NonFiniteGradientTest, SkipsTheWholeStepAndChangesNothing) {
  auto c = must_create(standard_options(OptimizerKind::kAdam));
  const OwnedBatch b = standard_batch();
  const auto before = snapshot(*c);
  const std::vector<float> clean = random_floats(pooled_size(*c, b), 6);
  const int64_t pd = c->pooled_dim();
  struct Case {
    const char* name;
    std::function<void(std::vector<float>&, UpdateOptions&)> mutate;
  };
  const Case cases[] = {
      {"inf", [](std::vector<float>& g, UpdateOptions&) { g[5] = std::numeric_limits<float>::infinity(); }},
      {"nan", [&](std::vector<float>& g, UpdateOptions&) { g[3 * pd + 30] = std::nanf(""); }},
      {"nan in an empty bag", [&](std::vector<float>& g, UpdateOptions&) { g[1 * pd + 2] = std::nanf(""); }},
      {"sum overflows",  // row 2 of t0 is in bags 0 and 2 of f0
       [&](std::vector<float>& g, UpdateOptions&) { g[0 * pd + 4] = g[2 * pd + 4] = 3e38f; }},
      {"multiplier overflows", [](std::vector<float>& g, UpdateOptions& u) {
         for (auto& x : g) x = 1e20f;
         u.grad_multiplier = 1e20f;
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    std::vector<float> G = clean;
    UpdateOptions u;
    k.mutate(G, u);
    auto r = c->backward_update(b.view(), G, {}, u);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->skipped_nonfinite);
    EXPECT_EQ(r->unique_rows, 0);
    ASSERT_TRUE(same_bytes(snapshot(*c), before));
    ASSERT_EQ(c->step(), 0);
  }
  const UpdateReport r = train_step(*c, b, clean);
  EXPECT_FALSE(r.skipped_nonfinite);
  EXPECT_EQ(c->step(), 1);
}

// ---- allocation failures -----------------------------------------------------------------------------

uint64_t total_allocs(const MemoryStats& s) {
  uint64_t n = 0;
  for (const auto& c : s.by_category) n += c.num_allocs;
  return n;
}

// Fails allocation k of one training step, for every k, once and always: each attempt returns a
// clean ResourceExhausted (request, budget, bytes in use), leaks nothing, changes no row or step;
// the retry succeeds and trains exactly like a twin that never failed.
void sweep_step(BoundsCheckMode mode, const OwnedBatch& b) {
  CollectionOptions o = standard_options(OptimizerKind::kAdam);
  o.bounds_check = mode;
  TrackingAllocator alloc, twin_alloc;
  auto c = must_create(o, &alloc);
  auto twin = must_create(o, &twin_alloc);
  const std::vector<float> G = random_floats(pooled_size(*c, b), 8);
  testing::internal::CaptureStderr();  // kSkip warns about dropped ids
  const uint64_t a0 = total_allocs(twin_alloc.memory_stats());
  train_step(*twin, b, G);
  const int64_t allocs_per_step = static_cast<int64_t>(total_allocs(twin_alloc.memory_stats()) - a0);
  ASSERT_GE(allocs_per_step, 6);
  for (int64_t k = 0; k < allocs_per_step; ++k) {
    for (bool always : {false, true}) {
      SCOPED_TRACE("allocation " + std::to_string(k) + (always ? " always" : " once"));
      // Step buffers are kept between steps; release them so that every allocation recurs.
      c->release_step_buffers();
      const auto before = snapshot(*c);
      const size_t bytes_before = alloc.memory_stats().current_bytes;
      alloc.inject_failure(k, always);
      auto r = c->backward_update(b.view(), G);
      ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
      for (const char* part : {"requested", "budget", "in use", "weights", "injected"})
        EXPECT_TRUE(contains(r.status().message(), part)) << r.status().message();
      c->release_step_buffers();
      EXPECT_EQ(alloc.memory_stats().current_bytes, bytes_before) << "leaked";
      ASSERT_TRUE(same_bytes(snapshot(*c), before));
      ASSERT_EQ(c->step(), 0);
    }
  }
  alloc.inject_failure(-1);
  train_step(*c, b, G);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(c->step(), 1);
  EXPECT_TRUE(same_bytes(snapshot(*c), snapshot(*twin)));
}

// alloc_failure_sweep over a clean batch (kError) and over a batch whose bad ids kSkip filters
// (which allocates the filtered copies too).
TEST(AllocFailureTest, AllocFailureSweepEveryAllocationOfAStepFailsCleanly) {
  {
    SCOPED_TRACE("kError");
    sweep_step(BoundsCheckMode::kError, standard_batch());
  }
  {
    SCOPED_TRACE("kSkip");
    sweep_step(BoundsCheckMode::kSkip, batch_with_bad_ids());
  }
}

// A forward whose kSkip filtering cannot allocate fails cleanly and writes no output.
TEST(AllocFailureTest, ForwardAllocationFailureWritesNothing) {
  CollectionOptions o = standard_options();
  o.bounds_check = BoundsCheckMode::kSkip;
  TrackingAllocator alloc;
  auto c = must_create(o, &alloc);
  const OwnedBatch b = batch_with_bad_ids();
  std::vector<float> out(pooled_size(*c, b), -3.0f);
  alloc.inject_failure(0, /*always=*/true);
  EXPECT_EQ(c->forward(b.view(), out).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == -3.0f; }));
  EXPECT_EQ(c->num_skipped_ids(), 0u);
  alloc.inject_failure(-1);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(c->forward(b.view(), out).ok());
  testing::internal::GetCapturedStderr();
}

// A table larger than the budget fails create with ResourceExhausted naming the table.
TEST(AllocFailureTest, CreateOverBudgetNamesTheTable) {
  TrackingAllocator alloc({Tier::kHost, 2048});  // t0 needs 30 x 104 B
  auto r = EmbeddingCollection::create(standard_options(), &alloc);
  ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(r.status().message(), "table 't0'")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "budget 2.00 KiB")) << r.status().message();
  EXPECT_EQ(alloc.memory_stats().current_bytes, 0u);
}

// ---- memory -------------------------------------------------------------------------------------------

// No full-table gradient: a step on a 100k-row table allocates at most unique_rows x dim x 4
// bytes of gradients (and far less than the table in any category but weights and state).
TEST(GradientMemoryTest, NoFullTableGradientIsEverAllocated) {
  CollectionOptions o;
  o.tables = {table("big", 100000, 16, OptimizerKind::kAdagrad)};
  o.features = {{"f", 0, PoolingMode::kSum}};
  o.num_threads = 2;
  TrackingAllocator alloc;
  auto c = must_create(o, &alloc);
  OwnedBatch b;
  b.B = 64;
  b.offsets.push_back({0});
  b.ids.push_back({});
  b.weights.push_back({});
  for (int64_t bag = 0; bag < b.B; ++bag) {
    for (int64_t i = 0; i < 3; ++i) b.ids[0].push_back((bag * 7919 + i * 104729) % 100000);
    b.offsets[0].push_back(static_cast<int64_t>(b.ids[0].size()));
  }
  alloc.reset_peaks();
  const UpdateReport r = train_step(*c, b, random_floats(pooled_size(*c, b), 9));
  const MemoryStats s = alloc.memory_stats();
  ASSERT_GT(r.unique_rows, 100);
  EXPECT_GT(s[Category::kGradients].peak_bytes, 0u);
  EXPECT_LE(s[Category::kGradients].peak_bytes, static_cast<size_t>(r.unique_rows) * 16 * 4);
  EXPECT_LT(s[Category::kWorkspace].peak_bytes, 100000u * 16 * 4 / 100);
  // The step's buffers are held for the next step until released.
  c->release_step_buffers();
  const MemoryStats after = alloc.memory_stats();
  EXPECT_EQ(after[Category::kGradients].current_bytes, 0u);
  EXPECT_EQ(after[Category::kWorkspace].current_bytes, 0u);
}

// The fused backward (reduce and update row by row) and the two-pass one (reduce all, check,
// update) give bit-identical tables for every optimizer and weight dtype.
TEST(FusedBackwardTest, FusedAndTwoPassBackwardAreBitIdentical) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                             OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam, OptimizerKind::kSm3}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      CollectionOptions o = standard_options(kind);
      for (auto& t : o.tables) t.dtype = dt;
      o.num_threads = 2;
      TrackingAllocator a1, a2;
      auto fused = must_create(o, &a1);
      auto two_pass = must_create(o, &a2);
      const OwnedBatch b = standard_batch();
      UpdateOptions no_fuse;
      no_fuse.fuse_when_safe = false;
      for (int step = 0; step < 3; ++step) {
        const std::vector<float> G = random_floats(pooled_size(*fused, b), 40 + step);
        ASSERT_TRUE(fused->backward_update(b.view(), G).ok());
        ASSERT_TRUE(two_pass->backward_update(b.view(), G, {}, no_fuse).ok());
      }
      EXPECT_TRUE(same_bytes(snapshot(*fused), snapshot(*two_pass))) << optimizer_name(kind) << " " << dtype_name(dt);
    }
  }
}

// Finite gradients whose per-row sum overflows to Inf are caught before any row changes: the
// step is skipped (the fused path is not taken when overflow cannot be ruled out).
TEST(NonFiniteGradientTest, OverflowInTheRowSumSkipsTheStep) {
  CollectionOptions o = standard_options(OptimizerKind::kSgd);
  TrackingAllocator alloc;
  auto c = must_create(o, &alloc);
  const OwnedBatch b = standard_batch();
  std::vector<float> G(pooled_size(*c, b), 3.0e38f);  // finite; any row seen twice overflows
  const auto before = snapshot(*c);
  auto r = c->backward_update(b.view(), G);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->skipped_nonfinite);
  EXPECT_TRUE(same_bytes(snapshot(*c), before));
  EXPECT_EQ(c->step(), 0);
}

// True if any optimizer state float of any table is Inf or NaN.
bool any_state_non_finite(const EmbeddingCollection& c) {
  for (int t = 0; t < c.num_tables(); ++t) {
    const int64_t rows = c.options().tables[static_cast<size_t>(t)].num_rows, k = c.state_floats_per_row(t);
    std::vector<float> s(static_cast<size_t>(rows * k));
    EXPECT_TRUE(c.read_state(t, 0, rows, s).ok());
    for (float x : s)
      if (!std::isfinite(x)) return true;
  }
  return false;
}

// A finite but huge gradient (1e20: g^2 overflows float) used to turn Adagrad's and Adam's
// state infinite while skipped_nonfinite stayed false, so those rows stopped learning
// silently. Now a reduced gradient above UpdateOptions::max_abs_grad skips the step like a
// non-finite one (nothing changes); with the bound off (+Inf) the old failure shows.
TEST(NonFiniteGradientTest, HugeFiniteGradientSkipsTheStepBeforeStateOverflows) {
  for (OptimizerKind kind : {OptimizerKind::kAdagrad, OptimizerKind::kAdam, OptimizerKind::kRowwiseAdagrad}) {
    SCOPED_TRACE(std::string(optimizer_name(kind)));
    auto c = must_create(standard_options(kind));
    const OwnedBatch b = standard_batch();
    const auto before = snapshot(*c);
    std::vector<float> G = random_floats(pooled_size(*c, b), 7);
    G[5] = 1e20f;
    auto r = c->backward_update(b.view(), G);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->skipped_nonfinite);
    EXPECT_TRUE(r->skipped_huge_grad);
    EXPECT_TRUE(same_bytes(snapshot(*c), before));
    EXPECT_EQ(c->step(), 0);
    UpdateOptions off;
    off.max_abs_grad = std::numeric_limits<float>::infinity();
    r = c->backward_update(b.view(), G, {}, off);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->skipped_nonfinite);
    EXPECT_TRUE(any_state_non_finite(*c));  // what the bound prevents
  }
  auto c = must_create(standard_options());
  UpdateOptions bad;
  bad.max_abs_grad = 0.0f;
  const OwnedBatch b = standard_batch();
  EXPECT_EQ(c->backward_update(b.view(), random_floats(pooled_size(*c, b), 7), {}, bad).status().code(), StatusCode::kInvalidArgument);
}

// The bound only picks the path for gradients near it: a step whose upper bound exceeds
// max_abs_grad but whose reduced gradients do not goes through the two-pass path and gives the
// same bytes as the fused path without the bound.
TEST(NonFiniteGradientTest, GradientsBelowTheBoundTrainBitIdentically) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    SCOPED_TRACE(std::string(optimizer_name(kind)));
    auto near = must_create(standard_options(kind));
    auto free = must_create(standard_options(kind));
    const OwnedBatch b = standard_batch();
    const std::vector<float> G = random_floats(pooled_size(*near, b), 8);
    float m = 0;
    for (float x : G) m = std::max(m, std::fabs(x));
    // Row 2 of t0 is in two bags of f0 (scale 1): the step's upper bound is >= 2m, so a bound in
    // [m, 2m) makes the step take the checked path; the first such bound the reduced values stay
    // under is used (with random values one of these always is).
    UpdateOptions tight, off;
    off.max_abs_grad = std::numeric_limits<float>::infinity();
    bool trained = false;
    for (float f : {1.01f, 1.3f, 1.6f, 1.95f}) {
      tight.max_abs_grad = m * f;
      auto r = near->backward_update(b.view(), G, {}, tight);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      if (!r->skipped_nonfinite) {
        trained = true;
        break;
      }
      EXPECT_TRUE(r->skipped_huge_grad);
      EXPECT_EQ(near->step(), 0);
    }
    ASSERT_TRUE(trained);
    ASSERT_TRUE(free->backward_update(b.view(), G, {}, off).ok());
    EXPECT_TRUE(same_bytes(snapshot(*near), snapshot(*free)));
  }
}

// ---- sequence and shared-table features --------------------------------------------------------------

// Sequence (pooling none) features return each id's row, take one gradient row per id, and
// combine with a pooled feature on the same table (SGD, lr 1: row -= sum of its gradients).
TEST(SequenceFeatureTest, ReturnsRowsAndAppliesPerIdGradients) {
  CollectionOptions o;
  o.tables = {table("t", 12, 6, OptimizerKind::kSgd)};
  o.tables[0].optimizer.learning_rate = 1.0f;
  o.features = {{"seq", 0, PoolingMode::kNone}, {"pool", 0, PoolingMode::kSum}};
  o.num_threads = 2;
  auto c = must_create(o);
  EXPECT_EQ(c->pooled_dim(), 6);
  EXPECT_EQ(c->pooled_offset(0), -1);
  OwnedBatch b;
  b.B = 2;
  b.ids = {{4, 9, 4, 0, 11}, {4, 2, 2}};
  b.offsets = {{0, 3, 5}, {0, 1, 3}};
  b.weights = {{}, {}};
  const std::vector<float> w = rows_of(*c, 0);
  std::vector<float> seq(5 * 6), pooled(2 * 6);
  const std::span<float> seq_out[] = {seq};
  ASSERT_TRUE(c->forward(b.view(), pooled, seq_out).ok());
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) ASSERT_EQ(seq[i * 6 + j], w[b.ids[0][i] * 6 + j]) << i;
  EXPECT_EQ(c->forward(b.view(), pooled).code(), StatusCode::kInvalidArgument);  // missing seq buffer
  const std::vector<float> gs = random_floats(seq.size(), 1), gp = random_floats(pooled.size(), 2);
  const std::span<const float> grad_seq[] = {gs};
  auto r = c->backward_update(b.view(), gp, grad_seq);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->unique_rows, 5);  // rows 0, 2, 4, 9, 11
  std::vector<double> want(w.begin(), w.end());
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) want[b.ids[0][i] * 6 + j] -= gs[i * 6 + j];
  for (int bag = 0; bag < 2; ++bag)
    for (int64_t i = b.offsets[1][bag]; i < b.offsets[1][bag + 1]; ++i)
      for (int j = 0; j < 6; ++j) want[b.ids[1][i] * 6 + j] -= gp[bag * 6 + j];
  const std::vector<float> got = rows_of(*c, 0);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
}

// Per-id weights on a sequence feature are either rejected, or the update agrees with the
// forward: forward returns the plain rows, so (SGD, lr 1) each row moves by exactly its grad_seq.
TEST(SequenceFeatureTest, PerIdWeightsAreRejectedOrConsistentWithForward) {
  CollectionOptions o;
  o.tables = {table("t", 8, 4, OptimizerKind::kSgd)};
  o.tables[0].optimizer.learning_rate = 1.0f;
  o.features = {{"seq", 0, PoolingMode::kNone}};
  auto c = must_create(o);
  OwnedBatch b;
  b.B = 1;
  b.ids = {{2, 5}};
  b.offsets = {{0, 2}};
  b.weights = {{3.0f, 0.5f}};
  std::vector<float> seq(2 * 4), none;
  const std::span<float> seq_out[] = {seq};
  const Status fs = c->forward(b.view(), none, seq_out);
  if (!fs.ok()) {
    EXPECT_EQ(fs.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(fs.message(), "feature 'seq'")) << fs.message();
    return;
  }
  const std::vector<float> w = rows_of(*c, 0);
  for (int j = 0; j < 4; ++j) ASSERT_EQ(seq[j], w[2 * 4 + j]) << "forward ignores weights";
  const std::vector<float> gs = random_floats(seq.size(), 5);
  const std::span<const float> grad_seq[] = {gs};
  ASSERT_TRUE(c->backward_update(b.view(), none, grad_seq).ok());
  const std::vector<float> got = rows_of(*c, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t r = b.ids[0][i];
      EXPECT_FLOAT_EQ(w[r * 4 + j] - got[r * 4 + j], gs[i * 4 + j]) << "row " << r << " column " << j;
    }
}

// Two features on one table apply one combined (summed) update per row, exactly as one feature
// whose bags are the concatenation of both (Adagrad: not two sequential updates).
TEST(SharedTableTest, FeaturesSharingATableSumGradientsBeforeOneUpdate) {
  CollectionOptions two;
  two.tables = {table("t", 16, 5, OptimizerKind::kAdagrad)};
  two.features = {{"a", 0, PoolingMode::kSum}, {"b", 0, PoolingMode::kSum}};
  CollectionOptions one = two;
  one.features = {{"ab", 0, PoolingMode::kSum}};
  auto c2 = must_create(two), c1 = must_create(one);
  OwnedBatch b2;
  b2.B = 2;
  b2.ids = {{3, 3, 7}, {7, 1, 3}};
  b2.offsets = {{0, 2, 3}, {0, 1, 3}};
  b2.weights = {{}, {}};
  OwnedBatch b1;
  b1.B = 4;
  b1.ids = {{3, 3, 7, 7, 1, 3}};
  b1.offsets = {{0, 2, 3, 4, 6}};
  b1.weights = {{}};
  const std::vector<float> G2 = random_floats(2 * 10, 3);
  std::vector<float> G1(4 * 5);
  for (int bag = 0; bag < 2; ++bag)
    for (int j = 0; j < 5; ++j) G1[bag * 5 + j] = G2[bag * 10 + j], G1[(bag + 2) * 5 + j] = G2[bag * 10 + 5 + j];
  EXPECT_EQ(train_step(*c2, b2, G2).unique_rows, 3);
  EXPECT_EQ(train_step(*c1, b1, G1).unique_rows, 3);
  EXPECT_TRUE(same_bytes(snapshot(*c2), snapshot(*c1)));
}

// ---- frozen and int8 tables ---------------------------------------------------------------------------

// Frozen tables (fp32 with Adam state, and int8 rowwise) are looked up but never updated; a
// trainable int8 table is refused at create.
TEST(FrozenTableTest, FrozenAndInt8TablesAreNotUpdated) {
  CollectionOptions o;
  o.tables = {table("frozen", 10, 4, OptimizerKind::kAdam), table("int8", 10, 4, OptimizerKind::kSgd, DType::kInt8Rowwise),
              table("live", 10, 4, OptimizerKind::kSgd)};
  o.tables[0].frozen = o.tables[1].frozen = true;
  o.features = {{"a", 0, PoolingMode::kSum}, {"b", 1, PoolingMode::kMean}, {"c", 2, PoolingMode::kSum}};
  auto c = must_create(o);
  OwnedBatch b;
  b.B = 2;
  b.ids = {{1, 2, 2}, {0, 9, 9}, {5, 5, 6}};
  b.offsets = {{0, 1, 3}, {0, 2, 3}, {0, 2, 3}};
  b.weights = {{}, {}, {}};
  std::vector<float> out(2 * 12);
  ASSERT_TRUE(c->forward(b.view(), out).ok());
  const std::vector<float> w8 = rows_of(*c, 1);
  for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(out[1 * 12 + 4 + j], w8[9 * 4 + j]);  // bag 1 of "b": row 9
  const auto before = snapshot(*c);
  const UpdateReport r = train_step(*c, b, random_floats(out.size(), 4));
  EXPECT_EQ(r.unique_rows, 2);
  const auto after = snapshot(*c);
  EXPECT_TRUE(same_bytes({after[0]}, {before[0]}));
  EXPECT_TRUE(same_bytes({after[1]}, {before[1]}));
  EXPECT_FALSE(same_bytes({after[2]}, {before[2]}));
  o.tables[1].frozen = false;
  auto bad = EmbeddingCollection::create(o);
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "lookup-only")) << bad.status().message();
}

// ---- save / load --------------------------------------------------------------------------------------

// Named after this process: CTest runs tests as parallel processes.
// ---- initializers -------------------------------------------------------------------------------------

// Initial rows depend only on the seed (not on the thread count); uniform rows lie within the
// bound (default 1/sqrt(rows)) with mean ~0, normal rows have the requested mean and std, zeros
// are zeros, and optimizer state starts at zero.
TEST(InitializerTest, DeterministicAndWithinRequestedDistribution) {
  CollectionOptions o;
  o.tables = {table("u", 400, 32, OptimizerKind::kAdam), table("d", 400, 32), table("n", 400, 32), table("z", 5, 3)};
  o.tables[0].init.bound = 0.3f;
  o.tables[1].init.bound = 0.0f;  // default bound 1/sqrt(400) = 0.05
  o.tables[2].init = {InitKind::kNormal, 0.0f, 0.5f, 2.0f};
  o.tables[3].init.kind = InitKind::kZeros;
  o.features = {{"f", 0, PoolingMode::kSum}};
  o.seed = 21;
  o.num_threads = 1;
  auto a = must_create(o);
  o.num_threads = 2;
  auto b = must_create(o);
  EXPECT_TRUE(same_bytes(snapshot(*a), snapshot(*b)));
  o.seed = 22;
  EXPECT_FALSE(same_bytes({snapshot(*must_create(o))[0]}, {snapshot(*a)[0]}));
  const double n = 400 * 32;
  for (auto [t, bound] : {std::pair{0, 0.3}, std::pair{1, 0.05}}) {
    const std::vector<float> w = rows_of(*a, t);
    double sum = 0, lo = 1, hi = -1;
    for (float x : w) sum += x, lo = std::min<double>(lo, x), hi = std::max<double>(hi, x);
    EXPECT_LE(hi, bound);
    EXPECT_GE(lo, -bound);
    EXPECT_GT(hi, 0.99 * bound);
    EXPECT_LT(lo, -0.99 * bound);
    EXPECT_NEAR(sum / n, 0.0, 4 * bound / std::sqrt(3 * n));
  }
  const std::vector<float> w = rows_of(*a, 2);
  double sum = 0, sq = 0;
  for (float x : w) sum += x, sq += static_cast<double>(x) * x;
  const double mean = sum / n, std = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.5, 4 * 2.0 / std::sqrt(n));
  EXPECT_NEAR(std, 2.0, 0.05);
  const std::vector<float> z = rows_of(*a, 3);
  EXPECT_TRUE(std::all_of(z.begin(), z.end(), [](float x) { return x == 0.0f; }));
  std::vector<float> state(static_cast<size_t>(400 * a->state_floats_per_row(0)), 1.0f);
  ASSERT_TRUE(a->read_state(0, 0, 400, state).ok());
  EXPECT_TRUE(std::all_of(state.begin(), state.end(), [](float x) { return x == 0.0f; }));
}

// read/write of rows and raw rows check table, range and buffer size.
TEST(RowAccessTest, RowAccessorsCheckTableRangeAndBufferSize) {
  auto c = must_create(standard_options());
  std::vector<float> two(2 * 13);
  EXPECT_TRUE(c->read_rows(0, 28, 2, two).ok());
  EXPECT_EQ(c->read_rows(0, 29, 2, two).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->read_rows(0, -1, 2, two).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->read_rows(5, 0, 2, two).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->write_rows(0, 0, 1, two).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> raw(c->layout(1).stride_bytes);
  EXPECT_EQ(c->read_raw_rows(1, 20, 1, raw).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->write_raw_rows(1, 0, 2, raw).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->read_state(-1, 0, 1, two).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->write_rows(-1, 0, 2, two).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->write_rows(1000000, 0, 2, two).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->read_rows(1000000, 0, 2, two).code(), StatusCode::kOutOfRange);
}


}  // namespace
}  // namespace leanemb
