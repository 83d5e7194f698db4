// Multi-process CtrModel (ranks as threads of a LocalWorld): gradient groups, sharded tables,
// found-inf agreement. The same model over P = 1, 2, 4 ranks trains bit-identically.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"
#include "dist/dist_testing.h"
#include "dist/sharded_checkpoint.h"
#include "dist/sharded_collection.h"
#include "model/ctr_model.h"
#include "ctr/ctr_testing.h"

namespace leanemb::ctr {
namespace {

using dist::Communicator;
using dist::test_util::expect_all_ok;
using dist::test_util::mismatch;
using dist::test_util::run_world;

// Dense parameters and dense optimizer state as bytes.
std::vector<uint8_t> dense_bytes(model::CtrModel& m) {
  std::vector<uint8_t> out;
  for (const auto& v : {m.dense_parameters(), m.dense_optimizer_state()})
    for (const auto& t : v) {
      const auto* p = reinterpret_cast<const uint8_t*>(t.values.data());
      out.insert(out.end(), p, p + t.values.size() * 4);
    }
  return out;
}

// What one process trains (and predicts) with grad_groups = G, for comparing with P ranks.
struct Reference {
  std::vector<uint8_t> dense;
  std::string emb_digest;
  std::vector<double> losses;
  std::vector<float> probs;
};

// Batch sizes: uneven groups (50 / 4), a batch smaller than the number of groups (3), and one
// that needs every micro-batch.
const int64_t kBatchSizes[] = {50, 64, 3, 37};
constexpr int kMicroBatches = 8;

// The batches' options: ids of table 0 from a range wider than a dynamic table 0's capacity.
model::CtrModelOptions batch_options(model::CtrModelOptions o) {
  if (!o.table_dynamic.empty() && o.table_dynamic[0].enabled) o.table_rows[0] = 200;
  return o;
}

Reference train_one_process(const model::CtrModelOptions& o) {
  Rig r = make_rig(o);
  amp::LossScaler scaler = std::move(amp::LossScaler::create({.enabled = false})).value();
  Reference ref;
  for (size_t i = 0; i < std::size(kBatchSizes); ++i) {
    const data::Batch b = random_batch(batch_options(o), kBatchSizes[i], 500 + i);
    auto s = r.model->train_step(b, kMicroBatches, scaler);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) ref.losses.push_back(s.value().loss);
  }
  const data::Batch eval = random_batch(batch_options(o), 45, 900);
  ref.probs.resize(45);
  EXPECT_TRUE(r.model->predict(eval, ref.probs, 3).ok());
  ref.dense = dense_bytes(*r.model);
  if (!o.table_dynamic.empty() && o.table_dynamic[0].enabled) {  // the layers really worked
    EXPECT_GT(r.model->embeddings().dynamic_stats(0).value().evicted, 0);
    EXPECT_GT(r.model->embeddings().cache_stats(1).value().evictions, 0u);
  }
  ref.emb_digest = std::move(dist::sharded_collection_digest(r.model->embeddings())).value();
  return ref;
}

// Every rank trains the same global batches on its slice; compares with the reference.
Status train_rank(Communicator& comm, model::CtrModelOptions o, const Reference& ref) {
  o.comm = &comm;
  auto mem = MemorySystem::create({});
  if (!mem.ok()) return mem.status();
  LEANEMB_ASSIGN_OR_RETURN(auto m, model::CtrModel::create(o, mem.value().get()));
  LEANEMB_ASSIGN_OR_RETURN(amp::LossScaler scaler, amp::LossScaler::create({.enabled = false}));
  for (size_t i = 0; i < std::size(kBatchSizes); ++i) {
    const data::Batch b = random_batch(batch_options(o), kBatchSizes[i], 500 + i);
    LEANEMB_ASSIGN_OR_RETURN(model::StepStats s, m->train_step(b, kMicroBatches, scaler));
    // The reported loss is summed in another order (rank partials), so it is close, not equal.
    if (std::fabs(s.loss - ref.losses[i]) > 1e-12 * (1 + std::fabs(ref.losses[i]))) return mismatch("loss of step " + std::to_string(i));
    if (s.samples != kBatchSizes[i]) return mismatch("samples of step " + std::to_string(i));
  }
  const data::Batch eval = random_batch(batch_options(o), 45, 900);
  std::vector<float> probs(45);
  LEANEMB_RETURN_IF_ERROR(m->predict(eval, probs, 3));
  if (std::memcmp(probs.data(), ref.probs.data(), probs.size() * 4) != 0) return mismatch("predictions");
  if (dense_bytes(*m) != ref.dense) return mismatch("dense parameters or optimizer state");
  LEANEMB_ASSIGN_OR_RETURN(std::string digest, dist::sharded_collection_digest(m->embeddings()));
  if (digest != ref.emb_digest) return mismatch("embedding digest " + digest + " != " + ref.emb_digest);
  return Status();
}

// grad_groups = 4: one process and 2 or 4 ranks (row-wise and table-wise sharding) give the
// same predictions, dense parameters and state, and embedding rows, bit for bit.
TEST(DistTrainTest, RanksTrainBitIdenticallyToOneProcess) {
  model::CtrModelOptions o = small_model(50);
  o.num_threads = 1;
  o.grad_groups = 4;
  const Reference ref = train_one_process(o);
  for (int p : {2, 4}) {
    for (dist::ShardingKind kind : {dist::ShardingKind::kRowModulo, dist::ShardingKind::kTableWise}) {
      SCOPED_TRACE("P=" + std::to_string(p) + " sharding " + std::string(dist::sharding_kind_name(kind)));
      model::CtrModelOptions od = o;
      od.sharding = kind;
      expect_all_ok(run_world(p, [&](Communicator& c) { return train_rank(c, od, ref); }));
    }
  }
}

// The layers stack under sharding: a dynamic table that evicts (capacity 16 for 200 ids, id
// partitions), a cached table, bf16 rows with row-wise Adagrad (stochastic rounding keyed by the
// global row or raw id) and optimizer state on the host train bit-identically at P = 1, 2, 4.
TEST(DistTrainTest, DynamicCachedBf16TablesTrainBitIdenticallyAtEveryWorldSize) {
  model::CtrModelOptions o = small_model(400);
  o.num_threads = 1;
  o.grad_groups = 4;
  o.row_dtype = DType::kBF16;
  o.row_optimizer.kind = OptimizerKind::kRowwiseAdagrad;
  o.table_rows[0] = 16;
  o.table_dynamic.resize(4);
  o.table_dynamic[0].enabled = true;
  o.table_dynamic[0].partitions = 4;
  o.table_dynamic[0].eviction = EvictionPolicy::kLfu;
  o.row_cache.fraction = 0.3;  // 120 slots: a step's rows, not every row of the run
  o.row_cache.store = StoreKind::kHost;
  o.cache_min_rows = 100;  // tables 1..3 (400 rows) are cached, the dynamic table (16) is not
  const Reference ref = train_one_process(o);
  for (int p : {2, 4}) {
    SCOPED_TRACE("P=" + std::to_string(p));
    expect_all_ok(run_world(p, [&](Communicator& c) { return train_rank(c, o, ref); }));
  }
}

// Gradient groups change only the order of the dense gradient's sums: G = 2 trains like G = 1
// within fp32 rounding, and not bit-identically (so the groups are really summed separately).
TEST(DistTrainTest, GradGroupsChangeOnlyRounding) {
  model::CtrModelOptions o1 = small_model(50), o2 = small_model(50);
  o2.grad_groups = 2;
  Rig a = make_rig(o1), b = make_rig(o2);
  train_pair(a, b, o1, 3, 64, 700);
  const auto da = dense_values(*a.model), db = dense_values(*b.model);
  double worst = 0;
  for (size_t i = 0; i < da.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(da[i]) - db[i]));
  EXPECT_LT(worst, 2e-5);
  EXPECT_NE(dense_bytes(*a.model), dense_bytes(*b.model));
}

// A non-finite gradient on one rank only skips the step on every rank: nothing changes
// anywhere and every rank's loss scaler backs off.
TEST(DistTrainTest, NonFiniteOnOneRankSkipsEveryRank) {
  model::CtrModelOptions o = small_model(50);
  o.num_threads = 1;
  o.precision = DType::kF16;
  o.grad_groups = 2;
  expect_all_ok(run_world(2, [&](Communicator& comm) -> Status {
    model::CtrModelOptions od = o;
    od.comm = &comm;
    LEANEMB_ASSIGN_OR_RETURN(auto mem, MemorySystem::create({}));
    LEANEMB_ASSIGN_OR_RETURN(auto m, model::CtrModel::create(od, mem.get()));
    LEANEMB_ASSIGN_OR_RETURN(amp::LossScaler scaler, amp::LossScaler::create({}));
    LEANEMB_RETURN_IF_ERROR(m->train_step(random_batch(od, 32, 1), 1, scaler).status());
    const auto before = dense_bytes(*m);
    LEANEMB_ASSIGN_OR_RETURN(std::string emb_before, dist::sharded_collection_digest(m->embeddings()));
    const float scale = scaler.scale();
    LEANEMB_ASSIGN_OR_RETURN(model::StepStats s, m->train_step(random_batch(od, 32, 2), 1, scaler, comm.rank() == 1));
    if (!s.skipped) return mismatch("rank " + std::to_string(comm.rank()) + " did not skip");
    if (dense_bytes(*m) != before) return mismatch("a skipped step changed dense state");
    LEANEMB_ASSIGN_OR_RETURN(std::string emb_after, dist::sharded_collection_digest(m->embeddings()));
    if (emb_after != emb_before) return mismatch("a skipped step changed embedding rows");
    if (!(scaler.scale() < scale)) return mismatch("the loss scale did not back off");
    return Status();
  }));
}

// grad_groups must be a multiple of the world size.
TEST(DistTrainTest, GradGroupsNotAMultipleOfRanksIsRejected) {
  model::CtrModelOptions o = small_model(50);
  o.num_threads = 1;
  o.grad_groups = 3;
  const auto st = run_world(2, [&](Communicator& comm) -> Status {
    model::CtrModelOptions od = o;
    od.comm = &comm;
    LEANEMB_ASSIGN_OR_RETURN(auto mem, MemorySystem::create({}));
    auto m = model::CtrModel::create(od, mem.get());
    if (m.ok()) return mismatch("created");
    if (m.status().message().find("multiple of the world size") == std::string::npos) return m.status();
    return Status();
  });
  expect_all_ok(st);
}

}  // namespace
}  // namespace leanemb::ctr
