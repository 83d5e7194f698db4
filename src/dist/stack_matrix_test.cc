// The table stack's promise (leanemb/tables.h): every combination of residency (resident,
// optimizer state on the host, a row cache over host RAM or over a file), id mapping (hashed or
// dynamic) and distribution (one process; sharded over 2 and 4 ranks of a local-thread world)
// trains to bit-identical outputs, rows and optimizer state as one resident table in one
// process: for sum, mean and sequence features, fp32 and bf16 rows (stochastic rounding keyed
// by the global row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <tuple>

#include "dist/dist_testing.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/tables.h"
#include "table/owned_batch_testing.h"

namespace leanemb::dist {
namespace {

using test_util::run_world;
using test_util::TempDir;
using testing_util::OwnedBatch;

// kCacheLog: a cache over the file store's log layout.
enum class Mode { kResident, kStateOnHost, kCacheHost, kCacheFile, kCacheLog, kDynamic };
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kResident: return "resident";
    case Mode::kStateOnHost: return "state_on_host";
    case Mode::kCacheHost: return "cache_host";
    case Mode::kCacheFile: return "cache_file";
    case Mode::kCacheLog: return "cache_log";
    case Mode::kDynamic: return "dynamic";
  }
  return "?";
}

constexpr int kSteps = 8;
constexpr int64_t kBags = 24;
constexpr int64_t kRows[2] = {160, 80};  // multiples of the dynamic partitions (4)
constexpr int64_t kDims[2] = {8, 5};    // 5: a dim that is not a multiple of 8

struct Case {
  Mode mode;
  int world;
  PoolingMode pooling;
  DType dtype;
};

// Two tables, one feature each with the case's pooling (the first with per-id weights unless
// it is a sequence feature), Adam on fp32 rows; on bf16 rows row-wise Adagrad and SM3 (whose
// column accumulators are per table: one max over every rank's and every cache slot's rows); on q8
// rows Adagrad with 4-bit state (stochastically rounded) and SM3.
CollectionOptions options_for(const Case& c, const std::string& dir) {
  CollectionOptions o;
  for (int t = 0; t < 2; ++t) {
    TableOptions to;
    to.name = t == 0 ? "a" : "b";
    // A dynamic table's capacity is shared by its partitions unevenly (ids hash to them):
    // 4x the ids keeps every partition from evicting.
    to.num_rows = c.mode == Mode::kDynamic ? 4 * kRows[t] : kRows[t];
    to.init.bound = 0.1f;  // not 1 / sqrt(rows): the same for every capacity
    to.dim = kDims[t];
    to.dtype = c.dtype;
    to.optimizer.kind = c.dtype == DType::kF32 ? OptimizerKind::kAdam
                        : t == 1               ? OptimizerKind::kSm3
                        : c.dtype == DType::kQ8 ? OptimizerKind::kAdagrad
                                               : OptimizerKind::kRowwiseAdagrad;
    if (c.dtype == DType::kQ8 && t == 0) to.optimizer.state_dtype = DType::kInt4Blockwise;
    to.optimizer.learning_rate = 0.05f;
    to.optimizer.eps = 1e-6f;
    if (c.mode == Mode::kCacheHost || c.mode == Mode::kCacheFile || c.mode == Mode::kCacheLog) {
      to.cache.fraction = 0.8;  // holds a step's rows, but evicts between steps
      to.cache.store = c.mode == Mode::kCacheHost ? StoreKind::kHost : StoreKind::kFile;
      to.cache.store_layout = c.mode == Mode::kCacheLog ? FileStoreLayout::kLog : FileStoreLayout::kInPlace;
      if (c.mode != Mode::kCacheHost) to.cache.store_path = dir + "/" + to.name + ".rows";
    }
    if (c.mode == Mode::kDynamic) {
      to.dynamic.enabled = true;
      to.dynamic.partitions = 4;
    }
    o.tables.push_back(to);
    o.features.push_back(FeatureOptions{to.name + "_f", t, c.pooling});
  }
  o.seed = 11;
  o.num_threads = 1;
  return o;
}

MemorySystemOptions memory_for(const Case& c) {
  MemorySystemOptions m;
  m.device_budget_bytes = size_t{64} << 20;
  if (c.mode == Mode::kStateOnHost) m.placement[Category::kOptimizerState] = Tier::kHost;
  return m;
}

// Step s's global batch: bags of 0-3 uniform ids (rows repeat within and across the ranks'
// slices; over the steps more rows than the caches hold), per-id weights on the first feature
// of pooled cases.
OwnedBatch global_batch(int step, const Case& c) {
  std::mt19937_64 rng(500 + static_cast<uint64_t>(step));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  OwnedBatch b;
  b.B = kBags;
  for (int f = 0; f < 2; ++f) {
    std::vector<int64_t> ids, offsets = {0};
    std::vector<float> w;
    for (int64_t bag = 0; bag < b.B; ++bag) {
      const int len = static_cast<int>(rng() % 4);
      for (int i = 0; i < len; ++i) {
        ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(kRows[f])));
        if (f == 0 && c.pooling != PoolingMode::kNone) w.push_back(static_cast<float>(u(rng) * 2.0 - 0.5));
      }
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offsets);
    b.weights.push_back(w);
  }
  return b;
}


// What a run produces: every forward's outputs of the global batch (each rank writes its
// slice: pooled [bags, pooled_dim], then each sequence feature's [nnz, dim]), then each table's
// fat rows by id (the row an id maps to for dynamic tables).
struct Trace {
  std::vector<std::vector<float>> outputs;  // [step]
  std::vector<std::vector<uint8_t>> rows;   // [table] [ids, stride]
  int64_t evictions = 0;                    // row caches: summed over steps and ranks
};

// Whether id appears in any step's global batch of table t.
std::vector<std::vector<bool>> seen_ids(const Case& c) {
  std::vector<std::vector<bool>> seen = {std::vector<bool>(kRows[0]), std::vector<bool>(kRows[1])};
  for (int s = 0; s < kSteps; ++s) {
    const OwnedBatch g = global_batch(s, c);
    for (int f = 0; f < 2; ++f)
      for (int64_t id : g.ids[f]) seen[f][id] = true;
  }
  return seen;
}

// One rank's part of a run: forward, gradients, update for kSteps global batches.
Status train_rank(const Case& c, const std::string& dir, Communicator* comm, Trace* trace, std::mutex* mu) {
  const int p = comm ? comm->size() : 1, r = comm ? comm->rank() : 0;
  LEANEMB_ASSIGN_OR_RETURN(auto mem, MemorySystem::create(memory_for(c)));
  DistributionOptions d;
  d.comm = comm;
  LEANEMB_ASSIGN_OR_RETURN(auto tables, create_tables(options_for(c, dir), mem.get(), d));
  const int64_t b0 = kBags * r / p, b1 = kBags * (r + 1) / p;
  for (int s = 0; s < kSteps; ++s) {
    const OwnedBatch g = global_batch(s, c), mine = g.slice(b0, b1);
    const SparseBatch batch = mine.view();
    const int64_t ldo = tables->pooled_dim();
    std::vector<float> pooled(static_cast<size_t>((b1 - b0) * ldo));
    std::vector<std::vector<float>> seq;
    std::vector<std::span<float>> seq_out;
    for (int f = 0; f < 2 && c.pooling == PoolingMode::kNone; ++f) seq.emplace_back(mine.ids[f].size() * kDims[f]);
    for (auto& v : seq) seq_out.emplace_back(v);
    LEANEMB_RETURN_IF_ERROR(tables->forward(batch, pooled, seq_out));
    // Gradients keyed by global position, so every world size draws the same ones.
    std::vector<float> gp = test_util::normal_grads(900 + static_cast<uint64_t>(s), kBags * ldo);
    gp = std::vector<float>(gp.begin() + b0 * ldo, gp.begin() + b1 * ldo);
    std::vector<std::vector<float>> gs;
    std::vector<std::span<const float>> gs_in;
    for (int f = 0; f < static_cast<int>(seq.size()); ++f) {
      const std::vector<float> all = test_util::normal_grads(950 + 10 * static_cast<uint64_t>(s) + f,
                                                             static_cast<int64_t>(g.ids[f].size()) * kDims[f]);
      const int64_t lo = g.offsets[f][static_cast<size_t>(b0)] * kDims[f];
      gs.emplace_back(all.begin() + lo, all.begin() + lo + static_cast<int64_t>(seq[f].size()));
    }
    for (auto& v : gs) gs_in.emplace_back(v);
    LEANEMB_RETURN_IF_ERROR(tables->backward_update(batch, gp, gs_in).status());
    std::lock_guard<std::mutex> lock(*mu);
    std::vector<float>& out = trace->outputs[static_cast<size_t>(s)];
    size_t total = static_cast<size_t>(kBags * ldo);
    for (int f = 0; f < static_cast<int>(seq.size()); ++f) total += g.ids[f].size() * static_cast<size_t>(kDims[f]);
    out.resize(total);
    std::copy(pooled.begin(), pooled.end(), out.begin() + b0 * ldo);
    size_t at = static_cast<size_t>(kBags * ldo);  // feature f's [nnz, dim] block of the global batch
    for (int f = 0; f < static_cast<int>(seq.size()); ++f) {
      std::copy(seq[f].begin(), seq[f].end(), out.begin() + static_cast<int64_t>(at) + g.offsets[f][static_cast<size_t>(b0)] * kDims[f]);
      at += g.ids[f].size() * static_cast<size_t>(kDims[f]);
    }
    if (c.mode == Mode::kCacheHost || c.mode == Mode::kCacheFile || c.mode == Mode::kCacheLog) {
      for (int t = 0; t < 2; ++t) {
        auto cs = tables->cache_stats(t);
        if (cs.ok()) trace->evictions += static_cast<int64_t>(cs.value().evictions);
      }
    }
  }
  const auto seen = seen_ids(c);
  // Rows by id (collective calls: every rank makes them).
  std::vector<std::vector<uint8_t>> rows(2);
  for (int t = 0; t < 2; ++t) {
    const size_t stride = tables->layout(t).stride_bytes;
    rows[static_cast<size_t>(t)].resize(static_cast<size_t>(kRows[t]) * stride);
    for (int64_t id = 0; id < kRows[t]; ++id) {
      int64_t row = id;
      if (c.mode == Mode::kDynamic) {
        LEANEMB_ASSIGN_OR_RETURN(row, tables->dynamic_row(t, id));
        if (row < 0 && seen[static_cast<size_t>(t)][static_cast<size_t>(id)])
          return test_util::mismatch("id " + std::to_string(id) + " of table " + std::to_string(t) + " has no row");
        if (row < 0) continue;  // never seen: no row
      }
      LEANEMB_RETURN_IF_ERROR(tables->read_raw_rows(
          t, row, 1, std::span<uint8_t>(rows[static_cast<size_t>(t)]).subspan(static_cast<size_t>(id) * stride, stride)));
    }
  }
  if (r == 0) trace->rows = std::move(rows);
  return Status();
}

Trace run(const Case& c) {
  TempDir dir;
  Trace trace;
  trace.outputs.resize(kSteps);
  std::mutex mu;
  if (c.world == 1) {
    const Status st = train_rank(c, dir.path, nullptr, &trace, &mu);
    EXPECT_TRUE(st.ok()) << st.to_string();
  } else {
    test_util::expect_all_ok(run_world(c.world, [&](Communicator& comm) { return train_rank(c, dir.path, &comm, &trace, &mu); }));
  }
  return trace;
}

class StackMatrixTest : public ::testing::TestWithParam<std::tuple<Mode, int, PoolingMode, DType>> {};

// Rows, optimizer state and outputs equal the resident single-process reference bit for bit.
TEST_P(StackMatrixTest, TrainsBitIdenticallyToOneResidentTable) {
  const auto [mode, world, pooling, dtype] = GetParam();
  const Trace ref = run(Case{Mode::kResident, 1, pooling, dtype});
  const Trace got = run(Case{mode, world, pooling, dtype});
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_EQ(got.outputs[s].size(), ref.outputs[s].size());
    EXPECT_EQ(0, std::memcmp(got.outputs[s].data(), ref.outputs[s].data(), ref.outputs[s].size() * 4)) << "step " << s;
  }
  ASSERT_EQ(got.rows.size(), 2u);
  const auto seen = seen_ids(Case{mode, world, pooling, dtype});
  int64_t compared = 0;
  for (size_t t = 0; t < 2; ++t) {
    const size_t stride = ref.rows[t].size() / static_cast<size_t>(kRows[t]);
    for (int64_t id = 0; id < kRows[t]; ++id) {
      if (mode == Mode::kDynamic && !seen[t][static_cast<size_t>(id)]) continue;  // never admitted: no row
      ASSERT_EQ(0, std::memcmp(ref.rows[t].data() + static_cast<size_t>(id) * stride,
                               got.rows[t].data() + static_cast<size_t>(id) * stride, stride))
          << "table " << t << " id " << id;
      ++compared;
    }
  }
  EXPECT_GT(compared, 40);
  if (mode == Mode::kCacheHost || mode == Mode::kCacheFile || mode == Mode::kCacheLog) {
    EXPECT_GT(got.evictions, 0) << "the caches never evicted";
  }
}

std::string case_name(const ::testing::TestParamInfo<StackMatrixTest::ParamType>& info) {
  const auto [mode, world, pooling, dtype] = info.param;
  return std::string(mode_name(mode)) + "_P" + std::to_string(world) + "_" + std::string(pooling_name(pooling)) + "_" +
         std::string(dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(AllCombinations, StackMatrixTest,
                         ::testing::Combine(::testing::Values(Mode::kResident, Mode::kStateOnHost, Mode::kCacheHost,
                                                              Mode::kCacheFile, Mode::kCacheLog, Mode::kDynamic),
                                            ::testing::Values(1, 2, 4),
                                            ::testing::Values(PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone),
                                            ::testing::Values(DType::kF32, DType::kBF16, DType::kQ8)),
                         case_name);


// A table of 2^33 ids (a dynamic vocabulary: raw ids anywhere in [0, 2^33), some equal in their
// low 32 bits, rows on first touch) with bf16 rows + row-wise Adagrad behind a row cache over
// the file store trains, checkpoints, and a fresh table restored from the checkpoint trains on
// bit-identically to the one that kept going.
TEST(HugeTableTest, ATableOf2To33IdsTrainsCheckpointsAndResumesBitIdentically) {
  TempDir dir;
  constexpr int64_t kIds = int64_t{1} << 33;
  std::vector<int64_t> pool;  // 300 ids over the whole range, pairs 2^32 apart
  for (uint64_t k = 0; k < 150; ++k) {
    const auto id = static_cast<int64_t>((k * 0x9E3779B97F4A7C15ull) % static_cast<uint64_t>(kIds / 2));
    pool.push_back(id);
    pool.push_back(id + (int64_t{1} << 32));
  }
  pool.push_back(kIds - 1);
  auto options = [&](const std::string& tag) {
    CollectionOptions o;
    TableOptions to;
    to.name = "huge";
    to.num_rows = 1024;  // the rows the ids share
    to.dim = 8;
    to.dtype = DType::kBF16;
    to.optimizer.kind = OptimizerKind::kRowwiseAdagrad;
    to.optimizer.learning_rate = 0.05f;
    to.dynamic.enabled = true;
    to.dynamic.partitions = 4;
    to.cache.fraction = 0.25;
    to.cache.store = StoreKind::kFile;
    to.cache.store_path = dir.path + "/" + tag + ".rows";
    o.tables.push_back(to);
    o.features.push_back(FeatureOptions{"f", 0, PoolingMode::kSum});
    o.seed = 5;
    o.num_threads = 1;
    return o;
  };
  auto batch = [&](int step) {
    std::mt19937_64 rng(70 + static_cast<uint64_t>(step));
    OwnedBatch b;
    b.B = 32;
    std::vector<int64_t> ids, offsets = {0};
    for (int64_t bag = 0; bag < b.B; ++bag) {
      for (int i = 0; i < 3; ++i) ids.push_back(pool[rng() % pool.size()]);
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offsets);
    b.weights.emplace_back();
    return b;
  };
  auto step = [&](EmbeddingTables& t, int s, std::vector<float>* out) -> Status {
    const OwnedBatch b = batch(s);
    out->assign(static_cast<size_t>(b.B * t.pooled_dim()), 0.0f);
    LEANEMB_RETURN_IF_ERROR(t.forward(b.view(), *out));
    const std::vector<float> g = test_util::normal_grads(300 + static_cast<uint64_t>(s), b.B * t.pooled_dim());
    return t.backward_update(b.view(), g).status();
  };
  MemorySystemOptions mo;
  mo.device_budget_bytes = size_t{16} << 20;
  auto mem_a = MemorySystem::create(mo), mem_b = MemorySystem::create(mo);
  ASSERT_TRUE(mem_a.ok() && mem_b.ok());
  auto a = create_tables(options("a"), mem_a.value().get(), {});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  std::vector<float> out_a, out_b;
  for (int s = 0; s < 4; ++s) ASSERT_TRUE(step(*a.value(), s, &out_a).ok()) << "step " << s;
  auto saved = a.value()->save(dir.path + "/run", 4);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  auto b = create_tables(options("b"), mem_b.value().get(), {});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  TablesLoadOptions lo;
  lo.collection_step = a.value()->step();  // a plain checkpoint's step is the caller's (the trainer's state)
  auto loaded = b.value()->load(saved.value().path, lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  for (int s = 4; s < 8; ++s) {
    const Status sa = step(*a.value(), s, &out_a), sb = step(*b.value(), s, &out_b);
    ASSERT_TRUE(sa.ok()) << sa.to_string();
    ASSERT_TRUE(sb.ok()) << sb.to_string();
    ASSERT_EQ(0, std::memcmp(out_a.data(), out_b.data(), out_a.size() * 4)) << "step " << s;
  }
  int64_t wide = 0;
  const size_t stride = a.value()->layout(0).stride_bytes;
  std::vector<uint8_t> ra(stride), rb(stride);
  for (int64_t id : pool) {
    auto row_a = a.value()->dynamic_row(0, id), row_b = b.value()->dynamic_row(0, id);
    ASSERT_TRUE(row_a.ok() && row_b.ok());
    ASSERT_EQ(row_a.value(), row_b.value()) << "id " << id;
    if (row_a.value() < 0) continue;
    if (id >= (int64_t{1} << 32)) ++wide;
    ASSERT_TRUE(a.value()->read_raw_rows(0, row_a.value(), 1, ra).ok());
    ASSERT_TRUE(b.value()->read_raw_rows(0, row_b.value(), 1, rb).ok());
    ASSERT_EQ(ra, rb) << "id " << id;
  }
  EXPECT_GT(wide, 50) << "ids at and above 2^32 got rows";
  for (size_t i = 0; i + 1 < pool.size(); i += 2) {  // ids 2^32 apart are different ids
    auto lo = a.value()->dynamic_row(0, pool[i]), hi = a.value()->dynamic_row(0, pool[i + 1]);
    ASSERT_TRUE(lo.ok() && hi.ok());
    if (lo.value() >= 0 && hi.value() >= 0) {
      EXPECT_NE(lo.value(), hi.value()) << "ids " << pool[i] << " and " << pool[i + 1];
    }
  }
}

// ---- evaluation forwards (ForwardMode::kEval) through the stack --------------------------------

// Everything an evaluation must leave alone on this rank, as bytes: both dynamic tables' raw
// rows (collective), IdMap counters (this rank's) and the row of every id (collective).
Status dynamic_state_bytes(EmbeddingTables& tables, int64_t rows_per_table, std::vector<uint8_t>* out) {
  out->clear();
  auto append = [&](int64_t v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out->insert(out->end(), p, p + 8);
  };
  for (int t = 0; t < 2; ++t) {
    std::vector<uint8_t> rows(static_cast<size_t>(rows_per_table) * tables.layout(t).stride_bytes);
    LEANEMB_RETURN_IF_ERROR(tables.read_raw_rows(t, 0, rows_per_table, rows));
    out->insert(out->end(), rows.begin(), rows.end());
    LEANEMB_ASSIGN_OR_RETURN(DynamicTableStats st, tables.dynamic_stats(t));
    for (int64_t v : {st.admitted, st.readmitted, st.rejected_min_count, st.rejected_capacity, st.evicted, st.expired, st.live_rows})
      append(v);
    for (int64_t id = 0; id < kRows[t]; ++id) {
      LEANEMB_ASSIGN_OR_RETURN(int64_t row, tables.dynamic_row(t, id));
      append(row);
    }
  }
  return Status();
}

// One rank: kSteps training steps on full dynamic tables (16 rows, 4 per partition, for 160 and
// 80 ids), then kSteps evaluation forwards of other batches (their pooled outputs into `outs`,
// the global batch's layout); checks that they changed nothing here and that an update after
// one is refused.
Status eval_rank(Communicator* comm, std::vector<std::vector<float>>* outs, std::mutex* mu) {
  const Case c{Mode::kDynamic, comm ? comm->size() : 1, PoolingMode::kSum, DType::kF32};
  const int p = c.world, r = comm ? comm->rank() : 0;
  constexpr int64_t kCapacity = 16;
  LEANEMB_ASSIGN_OR_RETURN(auto mem, MemorySystem::create(memory_for(c)));
  DistributionOptions d;
  d.comm = comm;
  CollectionOptions o = options_for(c, "");
  for (TableOptions& to : o.tables) to.num_rows = kCapacity;
  LEANEMB_ASSIGN_OR_RETURN(auto tables, create_tables(o, mem.get(), d));
  const int64_t b0 = kBags * r / p, b1 = kBags * (r + 1) / p, ldo = tables->pooled_dim();
  OwnedBatch mine;
  std::vector<float> pooled;
  auto forward = [&](int step, ForwardMode mode) {
    mine = global_batch(step, c).slice(b0, b1);
    pooled.assign(static_cast<size_t>((b1 - b0) * ldo), 0.0f);
    return tables->forward(mine.view(), pooled, {}, mode);
  };
  for (int s = 0; s < kSteps; ++s) {
    LEANEMB_RETURN_IF_ERROR(forward(s, ForwardMode::kTrain));
    std::vector<float> gp = test_util::normal_grads(900 + static_cast<uint64_t>(s), kBags * ldo);
    gp = std::vector<float>(gp.begin() + b0 * ldo, gp.begin() + b1 * ldo);
    LEANEMB_RETURN_IF_ERROR(tables->backward_update(mine.view(), gp).status());
  }
  LEANEMB_ASSIGN_OR_RETURN(DynamicTableStats trained, tables->dynamic_stats(0));
  if (comm == nullptr && trained.evicted == 0) return test_util::mismatch("the table never filled");
  std::vector<uint8_t> before, after;
  LEANEMB_RETURN_IF_ERROR(dynamic_state_bytes(*tables, kCapacity, &before));
  for (int s = 0; s < kSteps; ++s) {
    LEANEMB_RETURN_IF_ERROR(forward(100 + s, ForwardMode::kEval));
    std::lock_guard<std::mutex> lock(*mu);
    std::vector<float>& out = (*outs)[static_cast<size_t>(s)];
    out.resize(static_cast<size_t>(kBags * ldo));
    std::copy(pooled.begin(), pooled.end(), out.begin() + b0 * ldo);
  }
  LEANEMB_RETURN_IF_ERROR(dynamic_state_bytes(*tables, kCapacity, &after));
  if (before != after) return test_util::mismatch("evaluation forwards changed rank " + std::to_string(r) + "'s tables");
  const Status refused = tables->backward_update(mine.view(), std::vector<float>(pooled.size(), 1.0f)).status();
  if (refused.code() != StatusCode::kFailedPrecondition)
    return test_util::mismatch("an update after an evaluation forward: " + refused.to_string());
  LEANEMB_RETURN_IF_ERROR(dynamic_state_bytes(*tables, kCapacity, &after));
  if (before != after) return test_util::mismatch("the refused update changed rank " + std::to_string(r) + "'s tables");
  return Status();
}

// Sharded over 2 and 4 ranks, evaluation forwards of full dynamic tables change nothing on any
// owner (rows, counters, mapping), give one process's outputs (unknown ids read zeros), and an
// update after them fails on every rank.
TEST(ShardedEvalTest, EvaluationForwardsChangeNoOwnerAndMatchOneProcess) {
  std::mutex mu;
  std::vector<std::vector<float>> ref(kSteps);
  const Status st = eval_rank(nullptr, &ref, &mu);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int world : {2, 4}) {
    std::vector<std::vector<float>> got(kSteps);
    test_util::expect_all_ok(run_world(world, [&](Communicator& comm) { return eval_rank(&comm, &got, &mu); }));
    for (int s = 0; s < kSteps; ++s) EXPECT_EQ(ref[s], got[s]) << "world " << world << " step " << s;
  }
}

}  // namespace
}  // namespace leanemb::dist
