// ShardedEmbeddingCollection over local-thread worlds of 1, 2 and 4 ranks against one
// single-process EmbeddingCollection trained on the concatenated global batches: pooled
// outputs and fat rows (weights and optimizer state) bit for bit with fp32 payloads, within
// the payload's bound otherwise; agreement on errors; bytes sent per step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "dist/comm_sizes.h"
#include "dist/dist_testing.h"
#include "dist/sharded_collection.h"
#include "table/owned_batch_testing.h"

namespace leanemb::dist {
namespace {

using test_util::expect_all_ok;
using test_util::mismatch;
using test_util::run_world;
using testing_util::OwnedBatch;

constexpr int kSteps = 4;
constexpr int64_t kGlobalBags = 24;

// Two tables (dims 8 and 5, so a dim not a multiple of 8), three features: sum and mean over
// table a, weighted sum over table b.
CollectionOptions global_options(OptimizerKind kind) {
  CollectionOptions o;
  OptimizerOptions opt;
  opt.kind = kind;
  opt.learning_rate = 0.05f;
  opt.eps = 1e-6f;
  o.tables = {TableOptions{"a", 61, 8, DType::kF32, opt, {}, false, {}, {}, {}, {}},
              TableOptions{"b", 23, 5, DType::kF32, opt, {}, false, {}, {}, {}, {}}};
  o.features = {FeatureOptions{"a_sum", 0, PoolingMode::kSum}, FeatureOptions{"a_mean", 0, PoolingMode::kMean},
                FeatureOptions{"b_weighted", 1, PoolingMode::kSum}};
  o.seed = 7;
  o.num_threads = 1;
  return o;
}

// Step s's global batch: bags of 0-5 ids, skewed towards low ids so that rows repeat within
// and across the ranks' slices; per-id weights on feature 2.
OwnedBatch global_batch(int step, const CollectionOptions& o) {
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(step));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  OwnedBatch b;
  b.B = kGlobalBags;
  for (const auto& f : o.features) {
    const int64_t rows = o.tables[static_cast<size_t>(f.table)].num_rows;
    std::vector<int64_t> ids, offsets = {0};
    std::vector<float> w;
    for (int64_t bag = 0; bag < b.B; ++bag) {
      const int len = static_cast<int>(rng() % 6);
      for (int i = 0; i < len; ++i) {
        ids.push_back(static_cast<int64_t>(std::pow(u(rng), 3.0) * static_cast<double>(rows)));
        if (&f == &o.features[2]) w.push_back(static_cast<float>(u(rng) * 2.0 - 0.5));
      }
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offsets);
    b.weights.push_back(w);
  }
  return b;
}


// Where rank r's slice starts: uneven slices, an empty one at P = 4.
int64_t slice_begin(int p, int r) {
  static const int64_t two[] = {0, 10, 24}, four[] = {0, 3, 3, 15, 24};
  return p == 1 ? (r == 0 ? 0 : kGlobalBags) : p == 2 ? two[r] : four[r];
}

// Step s's pooled-output gradients.
std::vector<float> step_grads(int step, int64_t n) { return test_util::normal_grads(5000 + static_cast<uint64_t>(step), n); }

// The single-process run: pooled outputs of every step and the rows it read in each forward.
struct Reference {
  std::unique_ptr<EmbeddingCollection> coll;
  std::vector<std::vector<float>> pooled;               // [step][B * pooled_dim]
  std::vector<std::vector<std::vector<float>>> rows;    // [step][table][num_rows * dim] before the update
};

Reference train_reference(const CollectionOptions& o) {
  Reference ref;
  ref.coll = std::move(EmbeddingCollection::create(o)).value();
  const int64_t pd = ref.coll->pooled_dim();
  for (int s = 0; s < kSteps; ++s) {
    const OwnedBatch g = global_batch(s, o);
    std::vector<std::vector<float>> rows;
    for (int t = 0; t < 2; ++t) {
      const auto& to = o.tables[static_cast<size_t>(t)];
      rows.emplace_back(static_cast<size_t>(to.num_rows * to.dim));
      EXPECT_TRUE(ref.coll->read_rows(t, 0, to.num_rows, rows.back()).ok());
    }
    ref.rows.push_back(rows);
    std::vector<float> pooled(static_cast<size_t>(kGlobalBags * pd));
    EXPECT_TRUE(ref.coll->forward(g.view(), pooled).ok());
    ref.pooled.push_back(pooled);
    EXPECT_TRUE(ref.coll->backward_update(g.view(), step_grads(s, kGlobalBags * pd)).ok());
  }
  return ref;
}

// Per element of a decoded row: the payload's documented error bound (payload.h).
float elem_bound(DType t, float x, float lo, float hi) {
  const float ax = std::fabs(x);
  switch (t) {
    case DType::kF32: return 0.0f;
    case DType::kBF16: return ax >= 0x1p-126f ? 0x1p-8f * ax : 0x1p-134f;
    case DType::kF16: return ax >= 0x1p-14f ? 0x1p-11f * ax : 0x1p-25f;
    case DType::kInt8Rowwise: return (hi - lo) / 510.0f + 0x1p-20f * std::max(std::fabs(lo), std::fabs(hi));
    default: break;  // not a payload dtype
  }
  return 0.0f;
}

// Whether rank r's pooled slice is within the forward payload's bound of the reference (exact
// for fp32): per bag element, sum of |w| * bound over the bag's rows (divided by the length
// for kMean) plus fp32 rounding of the two sums.
Status check_pooled(const Reference& ref, const CollectionOptions& o, DType pd, int step, const OwnedBatch& g,
                    int64_t b0, std::span<const float> got, int64_t ldo) {
  const std::vector<float>& want = ref.pooled[static_cast<size_t>(step)];
  if (pd == DType::kF32) {
    const auto w = std::span<const float>(want).subspan(static_cast<size_t>(b0 * ldo), got.size());
    return got.empty() || std::memcmp(got.data(), w.data(), got.size_bytes()) == 0 ? Status::ok_status()
                                                                                    : mismatch("pooled output differs");
  }
  int64_t col = 0;
  for (size_t f = 0; f < o.features.size(); ++f) {
    const int t = o.features[f].table;
    const int64_t dim = o.tables[static_cast<size_t>(t)].dim;
    const auto& rows = ref.rows[static_cast<size_t>(step)][static_cast<size_t>(t)];
    for (int64_t b = 0; b * ldo < static_cast<int64_t>(got.size()); ++b) {
      const int64_t lo = g.offsets[f][static_cast<size_t>(b0 + b)], hi = g.offsets[f][static_cast<size_t>(b0 + b + 1)];
      for (int64_t j = 0; j < dim; ++j) {
        double bound = 0, mag = 0;
        for (int64_t i = lo; i < hi; ++i) {
          const float* x = rows.data() + g.ids[f][static_cast<size_t>(i)] * dim;
          const float rlo = *std::min_element(x, x + dim), rhi = *std::max_element(x, x + dim);
          const double w = g.weights[f].empty() ? 1.0 : std::fabs(g.weights[f][static_cast<size_t>(i)]);
          bound += w * elem_bound(pd, x[j], rlo, rhi);
          mag += w * std::fabs(x[j]);
        }
        if (o.features[f].pooling == PoolingMode::kMean && hi > lo) bound /= static_cast<double>(hi - lo);
        bound += 1e-6 * mag;
        const size_t at = static_cast<size_t>(b * ldo + col + j);
        const double err = std::fabs(static_cast<double>(got[at]) - want[static_cast<size_t>(b0 * ldo) + at]);
        if (!(err <= bound)) return mismatch("pooled error " + std::to_string(err) + " above bound " + std::to_string(bound));
      }
    }
    col += dim;
  }
  return Status::ok_status();
}

struct RankResult {
  std::vector<std::vector<int64_t>> global_rows;    // [table][local row]
  std::vector<std::vector<uint8_t>> fat;            // [table][local rows * stride]
  std::vector<ShardedStepStats> stats;              // per step
  int64_t step = 0;
};

// This rank's rows of every table into `res`: their global row numbers and fat bytes.
Status read_rank_rows(ShardedEmbeddingCollection& sc, int rank, RankResult* res) {
  for (int t = 0; t < sc.local().num_tables(); ++t) {
    const int64_t n = sc.plan().local_num_rows(t, rank);
    res->global_rows.emplace_back();
    for (int64_t l = 0; l < n; ++l) res->global_rows.back().push_back(sc.plan().global_row(t, rank, l));
    res->fat.emplace_back(static_cast<size_t>(n) * sc.local().layout(t).stride_bytes);
    LEANEMB_RETURN_IF_ERROR(sc.local().read_raw_rows(t, 0, n, res->fat.back()));
  }
  return Status();
}

// Trains a sharded collection over P ranks on the reference's batches; checks each forward
// against the reference as it goes and returns every rank's rows and stats.
// check_forward = false skips the forward check (when the rows themselves diverge by design).
// micro > 1: each step's gradients go through begin_accumulation / accumulate (micro slices of
// the rank's bags) / apply_accumulated instead of one backward_update.
std::vector<RankResult> train_sharded(int p, const ShardedCollectionOptions& so, const Reference& ref,
                                      bool check_forward = true, int micro = 1) {
  std::vector<RankResult> results(static_cast<size_t>(p));
  auto st = run_world(p, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    RankResult& res = results[static_cast<size_t>(comm.rank())];
    const int64_t b0 = slice_begin(p, comm.rank()), b1 = slice_begin(p, comm.rank() + 1);
    const int64_t ldo = sc->pooled_dim();
    Status first_mismatch;  // kept until the end, so that every rank makes every call
    for (int s = 0; s < kSteps; ++s) {
      const OwnedBatch g = global_batch(s, so.collection);
      const OwnedBatch mine = g.slice(b0, b1);
      std::vector<float> pooled(static_cast<size_t>((b1 - b0) * ldo));
      LEANEMB_RETURN_IF_ERROR(sc->forward(mine.view(), pooled));
      if (check_forward && first_mismatch.ok()) {
        first_mismatch = check_pooled(ref, so.collection, so.forward_payload, s, g, b0, pooled, ldo);
      }
      const std::vector<float> grads = step_grads(s, kGlobalBags * ldo);
      const auto my_grads = std::span<const float>(grads).subspan(static_cast<size_t>(b0 * ldo), pooled.size());
      UpdateReport rep;
      if (micro == 1) {
        LEANEMB_ASSIGN_OR_RETURN(rep, sc->backward_update(mine.view(), my_grads));
      } else {
        LEANEMB_RETURN_IF_ERROR(sc->begin_accumulation(mine.view()));
        const int64_t n = b1 - b0;
        for (int i = 0; i < micro; ++i) {
          const int64_t m0 = n * i / micro, m1 = n * (i + 1) / micro;
          LEANEMB_RETURN_IF_ERROR(sc->accumulate(m0, m1, my_grads.subspan(static_cast<size_t>(m0 * ldo), static_cast<size_t>((m1 - m0) * ldo))));
        }
        LEANEMB_ASSIGN_OR_RETURN(rep, sc->apply_accumulated());
      }
      if (rep.skipped_nonfinite) return mismatch("step skipped");
      res.stats.push_back(sc->last_step_stats());
    }
    LEANEMB_RETURN_IF_ERROR(read_rank_rows(*sc, comm.rank(), &res));
    res.step = sc->step();
    return first_mismatch;
  });
  expect_all_ok(st);
  return results;
}

// Every global row is held by exactly one rank, with the reference's exact fat-row bytes.
void expect_rows_identical(const Reference& ref, const std::vector<RankResult>& results) {
  for (int t = 0; t < ref.coll->num_tables(); ++t) {
    const RowLayout& l = ref.coll->layout(t);
    const int64_t n = ref.coll->options().tables[static_cast<size_t>(t)].num_rows;
    std::vector<uint8_t> want(static_cast<size_t>(n) * l.stride_bytes);
    ASSERT_TRUE(ref.coll->read_raw_rows(t, 0, n, want).ok());
    int64_t seen = 0;
    for (const RankResult& r : results) {
      for (size_t i = 0; i < r.global_rows[static_cast<size_t>(t)].size(); ++i, ++seen) {
        const int64_t g = r.global_rows[static_cast<size_t>(t)][i];
        EXPECT_EQ(std::memcmp(r.fat[static_cast<size_t>(t)].data() + i * l.stride_bytes,
                              want.data() + static_cast<size_t>(g) * l.stride_bytes, l.stride_bytes), 0)
            << "table " << t << " row " << g;
      }
    }
    EXPECT_EQ(seen, n);
  }
}

// With fp32 payloads, P = 1, 2, 4 ranks give pooled outputs, weights and optimizer state
// bit-identical to one process trained on the concatenated batches (SGD, Adagrad,
// RowwiseAdagrad, SM3 (its column accumulators all-reduced with max); row-wise modulo, row-wise
// range and table-wise sharding).
TEST(ShardedCollectionTest, Fp32ShardedTrainingIsBitIdenticalToOneProcess) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                             OptimizerKind::kSm3}) {
    const CollectionOptions o = global_options(kind);
    const Reference ref = train_reference(o);
    for (int p : {1, 2, 4}) {
      for (ShardingKind sk : {ShardingKind::kRowModulo, ShardingKind::kRowRange, ShardingKind::kTableWise}) {
        SCOPED_TRACE(std::string(optimizer_name(kind)) + " P=" + std::to_string(p) + " " + std::string(sharding_kind_name(sk)));
        ShardedCollectionOptions so;
        so.collection = o;
        so.sharding = sk;
        so.wide_ids = sk == ShardingKind::kRowRange;  // int64 local rows on the wire (else uint32)
        const auto results = train_sharded(p, so, ref);
        expect_rows_identical(ref, results);
        for (const RankResult& r : results) EXPECT_EQ(r.step, kSteps);
      }
    }
  }
}

// Sharded collections take micro-batches through the interface's default accumulation (the
// gradients copied, one backward_update per step): bit-identical to one process at P = 2 and 4
// with 3 uneven micro-batches per rank (an empty rank slice at P = 4), tables shared by features.
TEST(ShardedCollectionTest, AccumulatedMicroBatchesTrainBitIdenticallyToOneProcess) {
  const CollectionOptions o = global_options(OptimizerKind::kAdagrad);
  const Reference ref = train_reference(o);
  for (int p : {2, 4}) {
    SCOPED_TRACE("P=" + std::to_string(p));
    ShardedCollectionOptions so;
    so.collection = o;
    const auto results = train_sharded(p, so, ref, true, 3);
    expect_rows_identical(ref, results);
    for (const RankResult& r : results) EXPECT_EQ(r.step, kSteps);
  }
}

// bf16 outputs and gradients through the interface's chunking (EmbeddingTables::forward_bf16,
// backward_update_bf16) on P = 2 and 4 ranks: a scratch of two bags' outputs gives the ranks'
// uneven slices (an empty one at P = 4) different chunk counts, on which they agree; the outputs
// are one process's rounded to bf16 and the rows equal one process's fed the same bf16 gradients
// (the sharded accumulation copies them, so a table shared by two features is exact too).
TEST(ShardedCollectionTest, Bf16OutputsAndGradientsTrainLikeOneProcess) {
  const CollectionOptions o = global_options(OptimizerKind::kAdagrad);
  Reference ref;
  ref.coll = std::move(EmbeddingCollection::create(o)).value();
  const int64_t pd = ref.coll->pooled_dim();
  auto grads16 = [&](int s) {
    std::vector<uint16_t> g;
    for (float x : step_grads(s, kGlobalBags * pd)) g.push_back(f32_to_bf16_rne(x));
    return g;
  };
  for (int s = 0; s < kSteps; ++s) {
    const OwnedBatch g = global_batch(s, o);
    ref.pooled.emplace_back(static_cast<size_t>(kGlobalBags * pd));
    ASSERT_TRUE(ref.coll->forward(g.view(), ref.pooled.back()).ok());
    std::vector<float> wide;
    for (uint16_t h : grads16(s)) wide.push_back(bf16_to_f32(h));
    ASSERT_TRUE(ref.coll->backward_update(g.view(), wide).ok());
  }
  for (int p : {2, 4}) {
    SCOPED_TRACE("P=" + std::to_string(p));
    ShardedCollectionOptions so;
    so.collection = o;
    std::vector<RankResult> results(static_cast<size_t>(p));
    auto st = run_world(p, [&](Communicator& comm) -> Status {
      LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
      const int64_t b0 = slice_begin(p, comm.rank()), b1 = slice_begin(p, comm.rank() + 1);
      std::vector<float> scratch(static_cast<size_t>(2 * pd));
      Status first;  // kept until the end, so that every rank makes every call
      for (int s = 0; s < kSteps; ++s) {
        const OwnedBatch mine = global_batch(s, o).slice(b0, b1);
        std::vector<uint16_t> out(static_cast<size_t>((b1 - b0) * pd));
        LEANEMB_RETURN_IF_ERROR(sc->forward_bf16(mine.view(), out, {}, scratch));
        for (size_t i = 0; i < out.size() && first.ok(); ++i)
          if (out[i] != f32_to_bf16_rne(ref.pooled[static_cast<size_t>(s)][static_cast<size_t>(b0 * pd) + i])) first = mismatch("bf16 output differs");
        const std::vector<uint16_t> g = grads16(s);
        const auto my = std::span<const uint16_t>(g).subspan(static_cast<size_t>(b0 * pd), out.size());
        LEANEMB_RETURN_IF_ERROR(sc->backward_update_bf16(mine.view(), my, {}, scratch).status());
      }
      RankResult& res = results[static_cast<size_t>(comm.rank())];
      LEANEMB_RETURN_IF_ERROR(read_rank_rows(*sc, comm.rank(), &res));
      return first;
    });
    expect_all_ok(st);
    expect_rows_identical(ref, results);
  }
}

// Compressed forward payloads keep pooled outputs within the payload's documented bound; they
// do not touch training (the gradients here do not depend on the outputs), so rows stay exact.
TEST(ShardedCollectionTest, CompressedForwardPayloadsStayWithinTheirBounds) {
  const CollectionOptions o = global_options(OptimizerKind::kAdagrad);
  const Reference ref = train_reference(o);
  for (DType pd : {DType::kBF16, DType::kF16, DType::kInt8Rowwise}) {
    SCOPED_TRACE(std::string(dtype_name(pd)));
    ShardedCollectionOptions so;
    so.collection = o;
    so.forward_payload = pd;
    expect_rows_identical(ref, train_sharded(4, so, ref));
  }
}

// A bf16 backward payload trains to rows within 1% of the reference's total change per table
// (bf16 rounds each gradient element by at most 2^-8 relative); fewer bytes are sent than
// with fp32 in both directions.
TEST(ShardedCollectionTest, Bf16PayloadsTrainWithinToleranceAndSendFewerBytes) {
  const CollectionOptions o = global_options(OptimizerKind::kSgd);
  const Reference ref = train_reference(o);
  ShardedCollectionOptions so;
  so.collection = o;
  const auto exact = train_sharded(2, so, ref);
  so.forward_payload = so.backward_payload = DType::kBF16;
  const auto bf16 = train_sharded(2, so, ref, /*check_forward=*/false);
  auto init = std::move(EmbeddingCollection::create(o)).value();
  for (int t = 0; t < 2; ++t) {
    const auto& to = o.tables[static_cast<size_t>(t)];
    std::vector<float> w0(static_cast<size_t>(to.num_rows * to.dim)), w1(w0.size());
    ASSERT_TRUE(init->read_rows(t, 0, to.num_rows, w0).ok());
    ASSERT_TRUE(ref.coll->read_rows(t, 0, to.num_rows, w1).ok());
    float max_change = 0;
    for (size_t i = 0; i < w0.size(); ++i) max_change = std::max(max_change, std::fabs(w1[i] - w0[i]));
    for (const RankResult& r : bf16) {
      for (size_t i = 0; i < r.global_rows[static_cast<size_t>(t)].size(); ++i) {
        float got[8];
        std::memcpy(got, r.fat[static_cast<size_t>(t)].data() + i * ref.coll->layout(t).stride_bytes, static_cast<size_t>(to.dim) * 4);
        for (int64_t j = 0; j < to.dim; ++j) {
          EXPECT_NEAR(got[j], w1[static_cast<size_t>(r.global_rows[static_cast<size_t>(t)][i] * to.dim + j)], 0.01 * max_change);
        }
      }
    }
  }
  for (size_t r = 0; r < 2; ++r) {
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_LT(bf16[r].stats[static_cast<size_t>(s)].forward_bytes_sent, exact[r].stats[static_cast<size_t>(s)].forward_bytes_sent);
      EXPECT_LT(bf16[r].stats[static_cast<size_t>(s)].backward_bytes_sent, exact[r].stats[static_cast<size_t>(s)].backward_bytes_sent);
    }
  }
}

// With one rank nothing crosses the wire: the bytes sent per step are zero.
TEST(ShardedCollectionTest, OneRankSendsNoBytes) {
  const CollectionOptions o = global_options(OptimizerKind::kSgd);
  const Reference ref = train_reference(o);
  ShardedCollectionOptions so;
  so.collection = o;
  const auto results = train_sharded(1, so, ref);
  for (const ShardedStepStats& s : results[0].stats) {
    EXPECT_EQ(s.forward_bytes_sent, 0u);
    EXPECT_EQ(s.backward_bytes_sent, 0u);
    EXPECT_GT(s.rows_served, 0);
  }
}

// A bad id on one rank fails the call on every rank (that rank: OutOfRange naming the id;
// the others: InvalidArgument naming that rank), changes nothing, and the next step works.
TEST(ShardedCollectionTest, ABadBatchOnOneRankFailsEveryRankAndChangesNothing) {
  ShardedCollectionOptions so;
  so.collection = global_options(OptimizerKind::kAdagrad);
  auto st = run_world(2, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    const OwnedBatch good = global_batch(0, so.collection).slice(0, 4);
    OwnedBatch bad = good;
    bad.ids[0].push_back(61);  // one past the end of table a
    bad.offsets[0].back() += 1;
    const OwnedBatch& mine = comm.rank() == 1 ? bad : good;
    std::vector<float> pooled(static_cast<size_t>(4 * sc->pooled_dim())), grads(pooled.size(), 1.0f);
    Status f = sc->forward(mine.view(), pooled);
    const StatusCode want = comm.rank() == 1 ? StatusCode::kOutOfRange : StatusCode::kInvalidArgument;
    if (f.code() != want) return mismatch("forward: " + f.to_string());
    if (comm.rank() == 0 && f.message().find("rank(s) 1 failed") == std::string::npos) return mismatch(f.message());
    auto b = sc->backward_update(mine.view(), grads);
    if (b.status().code() != want) return mismatch("backward: " + b.status().to_string());
    if (sc->step() != 0) return mismatch("a failed step changed the step counter");
    LEANEMB_RETURN_IF_ERROR(sc->forward(good.view(), pooled));
    LEANEMB_RETURN_IF_ERROR(sc->backward_update(good.view(), grads).status());
    return sc->step() == 1 ? Status::ok_status() : mismatch("step after recovery");
  });
  expect_all_ok(st);
}

// A non-finite gradient on one rank makes every rank skip the step.
TEST(ShardedCollectionTest, NonFiniteGradientOnOneRankSkipsTheStepEverywhere) {
  ShardedCollectionOptions so;
  so.collection = global_options(OptimizerKind::kSgd);
  auto st = run_world(4, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    const OwnedBatch mine = global_batch(0, so.collection).slice(comm.rank() * 4, comm.rank() * 4 + 4);
    std::vector<float> grads(static_cast<size_t>(4 * sc->pooled_dim()), 0.5f);
    if (comm.rank() == 2) grads[3] = std::nanf("");
    LEANEMB_ASSIGN_OR_RETURN(UpdateReport rep, sc->backward_update(mine.view(), grads));
    return rep.skipped_nonfinite && sc->step() == 0 ? Status::ok_status() : mismatch("not skipped");
  });
  expect_all_ok(st);
}

// A finite but huge gradient (1e20: its square overflows Adagrad's state) on one rank makes
// every rank skip the step, reported as huge (issue 37; it used to turn the owners' state
// infinite silently).
TEST(ShardedCollectionTest, HugeGradientOnOneRankSkipsTheStepEverywhere) {
  ShardedCollectionOptions so;
  so.collection = global_options(OptimizerKind::kAdagrad);
  auto st = run_world(4, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    const OwnedBatch mine = global_batch(0, so.collection).slice(comm.rank() * 4, comm.rank() * 4 + 4);
    std::vector<float> grads(static_cast<size_t>(4 * sc->pooled_dim()), 0.5f);
    if (comm.rank() == 2) grads[3] = 1e20f;
    LEANEMB_ASSIGN_OR_RETURN(UpdateReport rep, sc->backward_update(mine.view(), grads));
    if (!rep.skipped_nonfinite || !rep.skipped_huge_grad || sc->step() != 0) return mismatch("not skipped as huge");
    grads[3] = 0.5f;
    LEANEMB_ASSIGN_OR_RETURN(rep, sc->backward_update(mine.view(), grads));
    return !rep.skipped_nonfinite && sc->step() == 1 ? Status::ok_status() : mismatch("the next step did not train");
  });
  expect_all_ok(st);
}

// A finite gradient that overflows its fp16 payload (1e6 > 65504) arrives as Inf at its owner.
// It goes to one owner only (a bag of rank 1 whose ids all live on rank 0), so only the owner's
// check of the decoded gradients can see it: every rank must still skip the step.
TEST(ShardedCollectionTest, GradientOverflowingItsPayloadSkipsTheStepEverywhere) {
  ShardedCollectionOptions so;
  so.collection = global_options(OptimizerKind::kSgd);
  so.backward_payload = DType::kF16;
  auto st = run_world(2, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    const OwnedBatch mine = global_batch(0, so.collection).slice(comm.rank() * 4, comm.rank() * 4 + 4);
    std::vector<float> grads(static_cast<size_t>(4 * sc->pooled_dim()), 0.5f);
    if (comm.rank() == 1) {
      const auto& ids = mine.ids[0];
      const auto& off = mine.offsets[0];
      int64_t bag = -1;
      for (int64_t b = 0; b < mine.B && bag < 0; ++b) {
        bool all_even = off[static_cast<size_t>(b + 1)] > off[static_cast<size_t>(b)];
        for (int64_t i = off[static_cast<size_t>(b)]; i < off[static_cast<size_t>(b + 1)]; ++i)
          all_even = all_even && ids[static_cast<size_t>(i)] % 2 == 0;  // row-modulo: rank 0's rows
        if (all_even) bag = b;
      }
      if (bag < 0) return mismatch("test data: no bag of rank 1 lives on rank 0 alone");
      float* g = grads.data() + bag * sc->pooled_dim() + sc->pooled_offset(0);
      std::fill(g, g + 8, 1e6f);
    }
    LEANEMB_ASSIGN_OR_RETURN(UpdateReport rep, sc->backward_update(mine.view(), grads));
    return rep.skipped_nonfinite && sc->step() == 0 ? Status::ok_status() : mismatch("not skipped");
  });
  expect_all_ok(st);
}

// A rank that stops calling makes the others' forward fail naming it (the communicator's
// deadline), instead of hanging.
TEST(ShardedCollectionTest, AnAbsentRankMakesTheOthersFailNamingIt) {
  ShardedCollectionOptions so;
  so.collection = global_options(OptimizerKind::kSgd);
  auto st = run_world(2, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    if (comm.rank() == 1) return Status::ok_status();
    const OwnedBatch mine = global_batch(0, so.collection).slice(0, 4);
    std::vector<float> pooled(static_cast<size_t>(4 * sc->pooled_dim()));
    const Status f = sc->forward(mine.view(), pooled);
    return f.message().find("waiting for rank 1") != std::string::npos ? Status::ok_status() : mismatch(f.to_string());
  }, 200);
  expect_all_ok(st);
}

// BoundsCheckMode::kSkip drops bad ids at the requester, as one process does: the same
// outputs and rows as a single-process collection given the same bad ids.
TEST(ShardedCollectionTest, SkippedBadIdsTrainLikeOneProcess) {
  CollectionOptions o = global_options(OptimizerKind::kAdagrad);
  o.bounds_check = BoundsCheckMode::kSkip;
  auto ref = std::move(EmbeddingCollection::create(o)).value();
  OwnedBatch g = global_batch(0, o);
  g.ids[0][0] = -3;  // out of range: dropped on every side
  g.ids[2].back() = 999;
  std::vector<float> ref_out(static_cast<size_t>(kGlobalBags * ref->pooled_dim()));
  ASSERT_TRUE(ref->forward(g.view(), ref_out).ok());
  const std::vector<float> grads = test_util::normal_grads(3, kGlobalBags * ref->pooled_dim());
  ASSERT_TRUE(ref->backward_update(g.view(), grads).ok());
  std::vector<float> got_out(ref_out.size());
  const auto st = run_world(2, [&](Communicator& comm) -> Status {
    ShardedCollectionOptions so;
    so.collection = o;
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    const int64_t b0 = kGlobalBags * comm.rank() / 2, b1 = kGlobalBags * (comm.rank() + 1) / 2, ldo = sc->pooled_dim();
    const OwnedBatch mine = g.slice(b0, b1);
    std::vector<float> out(static_cast<size_t>((b1 - b0) * ldo));
    LEANEMB_RETURN_IF_ERROR(sc->forward(mine.view(), out));
    std::copy(out.begin(), out.end(), got_out.begin() + b0 * ldo);
    const std::vector<float> mine_grads(grads.begin() + b0 * ldo, grads.begin() + b1 * ldo);
    LEANEMB_RETURN_IF_ERROR(sc->backward_update(mine.view(), mine_grads).status());
    for (int t = 0; t < 2; ++t) {
      const int64_t rows = o.tables[static_cast<size_t>(t)].num_rows;
      std::vector<uint8_t> a(static_cast<size_t>(rows) * ref->layout(t).stride_bytes), b(a.size());
      LEANEMB_RETURN_IF_ERROR(ref->read_raw_rows(t, 0, rows, a));
      LEANEMB_RETURN_IF_ERROR(sc->read_raw_rows(t, 0, rows, b));  // collective: every rank gets all rows
      if (a != b) return mismatch("rows of table " + std::to_string(t));
    }
    return Status();
  });
  expect_all_ok(st);
  EXPECT_EQ(0, std::memcmp(got_out.data(), ref_out.data(), ref_out.size() * 4));
}

// A dynamic table's partitions must split evenly over the ranks: refused at creation otherwise.
TEST(ShardedCollectionTest, DynamicPartitionsMustBeAMultipleOfTheWorldSize) {
  CollectionOptions o = global_options(OptimizerKind::kSgd);
  o.tables[0].num_rows = 60;
  o.tables[0].dynamic.enabled = true;
  o.tables[0].dynamic.partitions = 3;
  const auto st = run_world(2, [&](Communicator& comm) -> Status {
    ShardedCollectionOptions so;
    so.collection = o;
    auto sc = ShardedEmbeddingCollection::create(so, &comm);
    if (sc.ok() || sc.status().code() != StatusCode::kInvalidArgument ||
        sc.status().message().find("multiple of the world size") == std::string::npos)
      return mismatch(sc.status().to_string());
    return Status();
  });
  expect_all_ok(st);
}

// The size function: an owner of all of a table gets every id, an owner of none gets none, a
// balanced share gets the mean with headroom and never more than the call's ids.
TEST(CommSizesTest, SharesBoundTheIdsOfEachOwner) {
  CommShape s;
  s.world = 2;
  s.rank = 0;
  s.features = {CommFeature{0, 100, 100, 4, false, false}, CommFeature{1, 100, 300, 4, false, true}};
  s.owner_share = {0.5, 0.5, 1.0, 0.0};  // table 0 row-wise, table 1 on rank 0 alone
  const CommBufferCounts c = comm_buffer_counts(s);
  // Table 0: ceil(50 * 1.25 + 100 * 0.1 + 3 * sqrt(25)) = 88 ids to each owner; table 1: all
  // 300 to rank 0.
  EXPECT_EQ(c.per_owner[0], 2 + 88 + 300);
  EXPECT_EQ(c.per_owner[1], 2 + 88);
  EXPECT_EQ(c.table_ids[0], 2 * 88);   // this rank serves both requesters
  EXPECT_EQ(c.table_ids[1], 2 * 300);
  EXPECT_EQ(c.out_scales[0], 300);     // only the scaled feature's ids carry scales
  EXPECT_EQ(c.out_grads[0][1], 100 * 4);  // bags reaching the owner: at most the call's bags
  s.rank = 1;
  const CommBufferCounts d = comm_buffer_counts(s);
  EXPECT_EQ(d.table_ids[1], 0);
  EXPECT_LT(comm_buffer_bytes(d), comm_buffer_bytes(c));
  s.owner_share = {0.01, 0.99, 1.0, 0.0};
  EXPECT_LE(comm_buffer_counts(s).per_owner[1], 2 + 100 + 300);
}

// With the call shape given, the buffers are reserved once: their bytes are the size function's
// from the first call on and do not grow over steps of that shape.
TEST(ShardedCollectionTest, ReservedBuffersDoNotGrowAndMatchTheSizeFunction) {
  const CollectionOptions o = global_options(OptimizerKind::kAdagrad);
  constexpr int kP = 2;
  constexpr int64_t kBags = kGlobalBags / kP, kMaxIds = 5;  // global_batch: at most 5 ids per bag
  expect_all_ok(run_world(kP, [&](Communicator& comm) -> Status {
    ShardedCollectionOptions so;
    so.collection = o;
    so.max_call.assign(o.features.size(), FeatureCallShape{kBags, kBags * kMaxIds, false});
    so.max_call[2].weighted = true;
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    std::vector<size_t> peaks;
    for (int step = 0; step < kSteps; ++step) {
      const OwnedBatch b = global_batch(step, o).slice(comm.rank() * kBags, (comm.rank() + 1) * kBags);
      std::vector<float> out(static_cast<size_t>(kBags * sc->pooled_dim()));
      LEANEMB_RETURN_IF_ERROR(sc->forward(b.view(), out));
      const std::vector<float> g = step_grads(step, static_cast<int64_t>(out.size()));
      LEANEMB_RETURN_IF_ERROR(sc->backward_update(b.view(), g).status());
      peaks.push_back(sc->memory_stats().by_category[static_cast<size_t>(Category::kCommBuffers)].peak_bytes);
    }
    for (size_t i = 1; i < peaks.size(); ++i)
      if (peaks[i] != peaks[0]) return mismatch("comm buffers grew at step " + std::to_string(i));
    // The bytes are the size function's (both ranks' threads share the default allocator).
    CommShape shape;
    shape.world = kP;
    shape.features = {CommFeature{0, kBags, kBags * kMaxIds, 8, false, false}, CommFeature{0, kBags, kBags * kMaxIds, 8, false, true},
                      CommFeature{1, kBags, kBags * kMaxIds, 5, false, true}};
    shape.owner_share = owner_shares(sc->plan(), {});
    shape.id_bytes = wire_id_bytes(sc->plan(), {}, false);
    size_t expected = 0;
    for (shape.rank = 0; shape.rank < kP; ++shape.rank) expected += comm_buffer_bytes(comm_buffer_counts(shape));
    if (peaks[0] != expected)
      return mismatch("comm buffers " + std::to_string(peaks[0]) + " B, the size function says " + std::to_string(expected));
    return Status();
  }));
}

}  // namespace
}  // namespace leanemb::dist
