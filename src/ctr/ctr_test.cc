// Trainer tests: config parsing and the CtrModel step semantics (loss scaling skips, gradient
// accumulation, activation checkpointing, thread-count determinism).
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "amp/loss_scaler.h"
#include "model/ctr_model.h"
#include "ctr/ctr_config.h"
#include "ctr/ctr_testing.h"

namespace leanemb::ctr {
namespace {

// ---- config -------------------------------------------------------------------------------------

// The embedded default parses and names its synthetic files.
TEST(CtrConfigTest, EmbeddedDefaultParses) {
  auto c = parse_ctr_config(default_config_text(), "<default>");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c.value().generate);
  ASSERT_EQ(c.value().train_files.size(), 1u);
  EXPECT_EQ(c.value().train_files[0], "data/ctr_small/train.tsv");
}

// --set overrides keys (typed TOML values or bare strings) and creates missing sections.
TEST(CtrConfigTest, SetOverridesKeys) {
  const std::vector<std::string> sets = {"train.steps=7", "embedding.dtype=bf16", "memory.placement=optimizer_state=host",
                                         "model.table_rows=[5, 6]", "data.num_sparse=2"};
  auto c = parse_ctr_config(default_config_text(), "<default>", sets);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().steps, 7);
  EXPECT_EQ(c.value().row_dtype, DType::kBF16);
  EXPECT_EQ(c.value().memory.placement[Category::kOptimizerState], Tier::kHost);
  EXPECT_EQ(c.value().table_rows, (std::vector<int64_t>{5, 6}));
}

// [embedding.dynamic] gives defaults and a table list, [embedding.dynamic.C<k>] per-table keys.
TEST(CtrConfigTest, DynamicTablesFromTheConfig) {
  const std::vector<std::string> sets = {"embedding.dynamic.tables=[\"C2\"]", "embedding.dynamic.min_count=3",
                                         "embedding.dynamic.partitions=2", "embedding.dynamic.C5.capacity_rows=64",
                                         "embedding.dynamic.C5.eviction=\"lfu\"", "embedding.dynamic.C5.max_age_steps=9"};
  auto c = parse_ctr_config(default_config_text(), "<default>", sets);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto& d = c.value().dynamic_tables;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].table, "C2");
  EXPECT_EQ(d[0].capacity_rows, 0);  // the table's table_rows
  EXPECT_EQ(d[0].options.min_count, 3u);
  EXPECT_EQ(d[1].table, "C5");
  EXPECT_EQ(d[1].capacity_rows, 64);
  EXPECT_EQ(d[1].options.eviction, EvictionPolicy::kLfu);
  EXPECT_EQ(d[1].options.max_age_steps, 9);
  EXPECT_EQ(d[1].options.partitions, 2u);  // the defaults apply under the per-table keys
  EXPECT_TRUE(d[1].options.enabled);
  const std::pair<std::vector<std::string>, const char*> bad[] = {
      {{"embedding.dynamic.tables=[\"C99\"]"}, "not a table"},
      {{"embedding.dynamic.C2.capacity_rows=10", "embedding.dynamic.C2.partitions=4"}, "multiple of partitions"},
      {{"embedding.dynamic.C2.evict=\"age\""}, "embedding.dynamic.C2.evict"},
      {{"embedding.dynamic.min_count=0", "embedding.dynamic.tables=\"all\""}, "embedding.dynamic.min_count"},
      {{"embedding.dynamic.eviction=\"lfu\""}, "names no table"},
  };
  for (const auto& [s2, needle] : bad) {
    auto e = parse_ctr_config(default_config_text(), "<default>", s2);
    ASSERT_FALSE(e.ok()) << s2[0];
    EXPECT_NE(e.status().message().find(needle), std::string::npos) << s2[0] << ": " << e.status().message();
  }
}

// Unknown keys and sections, wrong types, out-of-range values and inconsistent combinations are
// rejected with the key named.
TEST(CtrConfigTest, BadConfigsNameTheKey) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"train.stpes=3"}, "unknown key train.stpes"},
      {{"trian.steps=3"}, "unknown section"},
      {{"train.steps=\"ten\""}, "train.steps"},
      {{"train.batch_size=0"}, "train.batch_size"},
      {{"embedding.optimizer=lamb"}, "lamb"},
      {{"train.precision=fp8"}, "fp8"},
      {{"model.bottom_mlp=[64, 8]"}, "interaction dot needs model.bottom_mlp to end in embedding_dim"},
      {{"train.micro_batches=3"}, "multiple of train.micro_batches"},
      {{"model.table_rows=[1, 2, 3]"}, "model.table_rows has 3 values"},
      {{"memory.placement=gradients=host"}, "gradients must stay on the device"},
      {{"memory.device_budget=\"12 parsecs\""}, "memory.device_budget"},
      {{"data.generate=false", "data.train=[]"}, "data.train is empty"},
      {{"nonsense"}, "section.key=value"},
  };
  for (const auto& [sets, needle] : cases) {
    auto c = parse_ctr_config(default_config_text(), "<default>", sets);
    ASSERT_FALSE(c.ok()) << sets[0];
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << sets[0] << ": " << c.status().message();
  }
  auto bad_toml = parse_ctr_config("[train\nsteps = 1", "x.toml");
  ASSERT_FALSE(bad_toml.ok());
  EXPECT_NE(bad_toml.status().message().find("x.toml:1"), std::string::npos) << bad_toml.status().message();
  EXPECT_EQ(load_ctr_config("/nonexistent/leanemb.toml").status().code(), StatusCode::kNotFound);
}

// ---- model --------------------------------------------------------------------------------------

// loss_scale_trace: with fp16 loss scaling, steps given a non-finite gradient change no
// embedding row, dense parameter or optimizer state; the scale halves at each and grows after
// growth_interval clean steps; skipped steps are counted.
TEST(LossScaleTest, LossScaleTraceSkippedStepsChangeNothing) {
  model::CtrModelOptions o = small_model();
  o.precision = DType::kF16;
  Rig r = make_rig(o);
  amp::LossScalerOptions so;
  so.growth_interval = 3;
  amp::LossScaler scaler = std::move(amp::LossScaler::create(so)).value();
  const std::vector<int> inject = {2, 5};
  std::vector<float> scales;
  for (int step = 1; step <= 9; ++step) {
    const data::Batch b = random_batch(o, 32, step);
    const auto before = state_bytes(*r.model);
    const bool bad = std::find(inject.begin(), inject.end(), step) != inject.end();
    auto s = r.model->train_step(b, 1, scaler, bad);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s.value().skipped, bad) << "step " << step;
    if (bad) EXPECT_EQ(state_bytes(*r.model), before) << "a skipped step changed state at step " << step;
    else EXPECT_NE(state_bytes(*r.model), before) << "step " << step;
    scales.push_back(scaler.scale());
  }
  // 65536 -> clean -> 32768 (step 2) -> 3 clean: 65536 (step 5 backs off first: 32768) -> ...
  const std::vector<float> want = {65536, 32768, 32768, 32768, 16384, 16384, 16384, 32768, 32768};
  EXPECT_EQ(scales, want);
  EXPECT_EQ(scaler.num_skipped_steps(), 2);
}

// Gradient accumulation: k micro-batches of B/k give the same step as one batch of B (fp32,
// within rounding of the reordered sums).
TEST(AccumulationTest, MicroBatchesEqualOneBatch) {
  const model::CtrModelOptions o = small_model();
  Rig one = make_rig(o), four = make_rig(o);
  amp::LossScaler s1 = std::move(amp::LossScaler::create({.enabled = false})).value();
  amp::LossScaler s4 = std::move(amp::LossScaler::create({.enabled = false})).value();
  for (int step = 0; step < 3; ++step) {
    const data::Batch b = random_batch(o, 64, 100 + step);
    auto a = one.model->train_step(b, 1, s1);
    auto c = four.model->train_step(b, 4, s4);
    ASSERT_TRUE(a.ok() && c.ok());
    EXPECT_NEAR(a.value().loss, c.value().loss, 1e-6);
  }
  const auto d1 = dense_values(*one.model), d4 = dense_values(*four.model);
  const auto t1 = table_values(*one.model), t4 = table_values(*four.model);
  ASSERT_EQ(d1.size(), d4.size());
  double worst = 0;
  for (size_t i = 0; i < d1.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(d1[i]) - d4[i]));
  for (size_t i = 0; i < t1.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(t1[i]) - t4[i]));
  EXPECT_LT(worst, 2e-5);
  EXPECT_GT(worst, 0.0) << "suspicious: the two paths should round differently somewhere";
}

// Micro-batches summed by row in the tables as they come (ctr_accumulates) train bit-identically
// to keeping the whole pooled gradient for one update: rows, optimizer state and dense
// parameters, over uneven micro-batches, sum and mean pooling, and a skipped (non-finite) step.
TEST(AccumulationTest, ByRowAccumulationIsBitIdenticalToOneUpdate) {
  for (PoolingMode pooling : {PoolingMode::kSum, PoolingMode::kMean}) {
    model::CtrModelOptions o = small_model();
    o.pooling = pooling;
    o.row_optimizer.kind = OptimizerKind::kAdam;
    o.row_optimizer.learning_rate = 0.01f;
    o.row_optimizer.eps = 1e-8f;
    model::CtrModelOptions kept_o = o;
    kept_o.accumulate_by_row = false;
    Rig by_row = make_rig(o), kept = make_rig(kept_o);
    train_pair(by_row, kept, o, 3, 70, 500, 3, 3);  // 70 records: micro-batches of 23, 23, 24
    EXPECT_EQ(state_bytes(*by_row.model), state_bytes(*kept.model));
    amp::LossScaler s1 = std::move(amp::LossScaler::create({.enabled = false})).value();
    amp::LossScaler s2 = std::move(amp::LossScaler::create({.enabled = false})).value();
    const data::Batch b = random_batch(o, 70, 900);
    auto r1 = by_row.model->train_step(b, 3, s1, /*inject_nonfinite=*/true);
    auto r2 = kept.model->train_step(b, 3, s2, /*inject_nonfinite=*/true);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_TRUE(r1.value().skipped);
    EXPECT_TRUE(r2.value().skipped);
    train_pair(by_row, kept, o, 2, 70, 600, 3, 3);
    EXPECT_EQ(state_bytes(*by_row.model), state_bytes(*kept.model));
    EXPECT_EQ(by_row.model->embeddings().step(), 5);
  }
}

// Activation checkpointing recomputes the MLP activations: training is bit-identical and the
// activations peak is lower.
TEST(CheckpointActivationsTest, IdenticalTrainingAndLowerActivationPeak) {
  model::CtrModelOptions o = small_model();
  o.bottom_hidden = {64, 64, 8};
  o.top_hidden = {64, 64};
  model::CtrModelOptions oc = o;
  oc.checkpoint_activations = true;
  Rig plain = make_rig(o), ckpt = make_rig(oc);
  train_pair(plain, ckpt, o, 3, 256, 200);
  EXPECT_EQ(state_bytes(*plain.model), state_bytes(*ckpt.model));
  const size_t p = plain.mem->stats()[0][Category::kActivations].peak_bytes;
  const size_t c = ckpt.mem->stats()[0][Category::kActivations].peak_bytes;
  EXPECT_LT(c, p) << "checkpointing should lower the activations peak";
}

// deterministic: the same steps with 1 and 2 OpenMP threads give identical bits.
TEST(DeterminismTest, ThreadCountDoesNotChangeResults) {
  model::CtrModelOptions o1 = small_model(), o2 = small_model();
  o1.num_threads = 1;
  o2.num_threads = 2;
  Rig a = make_rig(o1), b = make_rig(o2);
  amp::LossScaler s1 = std::move(amp::LossScaler::create({.enabled = false})).value();
  amp::LossScaler s2 = std::move(amp::LossScaler::create({.enabled = false})).value();
  for (int step = 0; step < 3; ++step) {
    const data::Batch batch = random_batch(o1, 200, 300 + step);
    omp_set_num_threads(1);
    ASSERT_TRUE(a.model->train_step(batch, 2, s1).ok());
    omp_set_num_threads(2);
    ASSERT_TRUE(b.model->train_step(batch, 2, s2).ok());
  }
  EXPECT_EQ(state_bytes(*a.model), state_bytes(*b.model));
}

// Offloading the optimizer state to the host changes no result.
TEST(PlacementTrainTest, OptimizerStateOnHostTrainsIdentically) {
  const model::CtrModelOptions o = small_model();
  Rig a = make_rig(o);
  Rig b;
  MemorySystemOptions mo;
  mo.placement[Category::kOptimizerState] = Tier::kHost;
  b.mem = std::move(MemorySystem::create(mo)).value();
  b.model = std::move(model::CtrModel::create(o, b.mem.get())).value();
  amp::LossScaler s1 = std::move(amp::LossScaler::create({.enabled = false})).value();
  amp::LossScaler s2 = std::move(amp::LossScaler::create({.enabled = false})).value();
  for (int step = 0; step < 3; ++step) {
    const data::Batch batch = random_batch(o, 64, 400 + step);
    ASSERT_TRUE(a.model->train_step(batch, 1, s1).ok());
    ASSERT_TRUE(b.model->train_step(batch, 1, s2).ok());
  }
  EXPECT_EQ(state_bytes(*a.model), state_bytes(*b.model));
  EXPECT_GT(b.mem->transfers().host_to_device(), 0u);
  EXPECT_GT(b.mem->stats()[1][Category::kOptimizerState].current_bytes, 0u);
}

// Tiered tables (a small cache over host RAM, and over files in place, as logs and mapped) train
// identically to resident ones.
TEST(TieredTrainTest, CachedTablesTrainIdentically) {
  const model::CtrModelOptions o = small_model(400);
  const std::string dir = ::testing::TempDir() + "leanemb_tiered_train_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (int store_case = 0; store_case < 4; ++store_case) {
    const StoreKind store = store_case == 0 ? StoreKind::kHost : StoreKind::kFile;
    SCOPED_TRACE(std::string(store_kind_name(store)) + " " + std::to_string(store_case));
    model::CtrModelOptions oc = o;
    oc.row_cache.fraction = 0.25;  // 100 slots per table; a batch of 64 touches at most 64 rows
    oc.row_cache.store = store;
    oc.row_cache.store_layout = store_case == 2   ? FileStoreLayout::kLog
                                : store_case == 3 ? FileStoreLayout::kMapped
                                                  : FileStoreLayout::kInPlace;
    oc.store_dir = dir;
    Rig a = make_rig(o), b = make_rig(oc);
    amp::LossScaler s1 = std::move(amp::LossScaler::create({.enabled = false})).value();
    amp::LossScaler s2 = std::move(amp::LossScaler::create({.enabled = false})).value();
    for (int step = 0; step < 4; ++step) {
      const data::Batch batch = random_batch(o, 64, 500 + step);
      auto ra = a.model->train_step(batch, 2, s1);
      auto rb = b.model->train_step(batch, 2, s2);
      ASSERT_TRUE(ra.ok() && rb.ok()) << rb.status().to_string();
      EXPECT_EQ(ra.value().loss, rb.value().loss);
    }
    EXPECT_EQ(state_bytes(*a.model), state_bytes(*b.model));
    EXPECT_GT(b.mem->stats()[0][Category::kRowCache].current_bytes, 0u);
    EXPECT_GT(b.model->embeddings().cache_stats(0).value().evictions, 0u);  // the cache really evicted
  }
  std::filesystem::remove_all(dir);
  // Config keys.
  auto c = parse_ctr_config(default_config_text(), "<default>", std::vector<std::string>{"embedding.cache_fraction=0.25", "embedding.cache_policy=\"lfu\"", "embedding.store_layout=\"log\""});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().row_cache.fraction, 0.25);
  EXPECT_EQ(c.value().row_cache.policy, CachePolicy::kLfu);
  EXPECT_EQ(c.value().row_cache.store_layout, FileStoreLayout::kLog);
  for (const auto& [set, needle] : std::vector<std::pair<std::string, std::string>>{
           {"embedding.store=\"tape\"", "embedding.store"}, {"embedding.cache_policy=\"mru\"", "embedding.cache_policy"},
           {"embedding.cache_fraction=2", "embedding.cache_fraction"}, {"embedding.store_layout=\"lsm\"", "embedding.store_layout"}, {"embedding.cache_prefetch_nice=25", "embedding.cache_prefetch_nice"}}) {
    auto bad = parse_ctr_config(default_config_text(), "<default>", std::vector<std::string>{set});
    ASSERT_FALSE(bad.ok()) << set;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().message();
  }
  auto no_dir = parse_ctr_config(default_config_text(), "<default>",
                             std::vector<std::string>{"embedding.cache_fraction=0.5", "embedding.store=\"file\""});
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.status().message().find("store_dir"), std::string::npos) << no_dir.status().message();
}

// A device budget too small for a step fails it cleanly (ResourceExhausted) and changes nothing.
TEST(BudgetTrainTest, StepOverBudgetFailsCleanly) {
  const model::CtrModelOptions o = small_model(20000);
  MemorySystemOptions mo;
  mo.device_budget_bytes = 12 << 20;  // tables (~5.2 MiB) fit, a 16384-record batch does not
  Rig r;
  r.mem = std::move(MemorySystem::create(mo)).value();
  auto m = model::CtrModel::create(o, r.mem.get());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  r.model = std::move(m).value();
  amp::LossScaler s = std::move(amp::LossScaler::create({.enabled = false})).value();
  const auto before = state_bytes(*r.model);
  auto big = r.model->train_step(random_batch(o, 16384, 1), 1, s);
  ASSERT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().to_string();
  EXPECT_EQ(state_bytes(*r.model), before);
  r.model->release_buffers();
  EXPECT_TRUE(r.model->train_step(random_batch(o, 64, 2), 1, s).ok());
  EXPECT_LE(r.mem->stats()[0].peak_bytes, mo.device_budget_bytes);
}


// Mean BCE of the model's predictions on `b` (double).
double model_loss(model::CtrModel& m, const data::Batch& b) {
  std::vector<float> p(static_cast<size_t>(b.batch_size));
  EXPECT_TRUE(m.predict(b, p).ok());
  double l = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp(static_cast<double>(p[i]), 1e-12, 1 - 1e-12);
    l -= b.labels[i] * std::log(q) + (1 - b.labels[i]) * std::log(1 - q);
  }
  return l / static_cast<double>(p.size());
}

// The embedding update of a whole model step is -lr * dLoss/dRow (SGD, dense lr 0): checked
// against central finite differences of the model's loss for a few row elements.
TEST(ModelGradientTest, EmbeddingUpdateMatchesFiniteDifferences) {
  model::CtrModelOptions o = small_model(8);
  o.row_optimizer.kind = OptimizerKind::kSgd;
  o.row_optimizer.learning_rate = 1.0f;
  o.dense_optimizer.kind = nn::DenseOptimizerKind::kSgd;
  o.dense_optimizer.learning_rate = 0.0;
  Rig r = make_rig(o);
  const data::Batch b = random_batch(o, 16, 7);
  EmbeddingTables& e = r.model->embeddings();
  const int64_t D = o.embedding_dim;
  struct Probe { int table; int64_t row, col; };
  const Probe probes[] = {{0, 1, 0}, {1, 3, 5}, {3, 7, 2}, {2, 0, 7}};
  std::vector<double> fd;
  for (const Probe& pr : probes) {
    std::vector<float> row(static_cast<size_t>(D));
    ASSERT_TRUE(e.read_rows(pr.table, pr.row, 1, row).ok());
    const float w0 = row[static_cast<size_t>(pr.col)];
    const float h = 1e-2f;
    row[static_cast<size_t>(pr.col)] = w0 + h;
    ASSERT_TRUE(e.write_rows(pr.table, pr.row, 1, row).ok());
    const double lp = model_loss(*r.model, b);
    row[static_cast<size_t>(pr.col)] = w0 - h;
    ASSERT_TRUE(e.write_rows(pr.table, pr.row, 1, row).ok());
    const double lm = model_loss(*r.model, b);
    row[static_cast<size_t>(pr.col)] = w0;
    ASSERT_TRUE(e.write_rows(pr.table, pr.row, 1, row).ok());
    fd.push_back((lp - lm) / (2.0 * h));
  }
  std::vector<float> before;
  for (const Probe& pr : probes) {
    std::vector<float> row(static_cast<size_t>(D));
    ASSERT_TRUE(e.read_rows(pr.table, pr.row, 1, row).ok());
    before.push_back(row[static_cast<size_t>(pr.col)]);
  }
  EXPECT_GT(std::fabs(*std::max_element(fd.begin(), fd.end(), [](double a, double c) { return std::fabs(a) < std::fabs(c); })), 1e-4)
      << "the probes should touch rows of the batch";
  amp::LossScaler s = std::move(amp::LossScaler::create({.enabled = false})).value();
  ASSERT_TRUE(r.model->train_step(b, 1, s).ok());
  for (size_t i = 0; i < std::size(probes); ++i) {
    std::vector<float> row(static_cast<size_t>(D));
    ASSERT_TRUE(e.read_rows(probes[i].table, probes[i].row, 1, row).ok());
    const double grad = before[i] - row[static_cast<size_t>(probes[i].col)];  // lr = 1
    EXPECT_NEAR(grad, fd[i], 2e-3 + 2e-2 * std::fabs(fd[i])) << "probe " << i;
  }
}

}  // namespace
}  // namespace leanemb::ctr
