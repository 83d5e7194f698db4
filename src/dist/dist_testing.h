// Test helpers of src/dist (tests only): run a function on every rank of a local-thread world.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/local_comm.h"
#include "leanemb/embedding.h"
#include "table/owned_batch_testing.h"

namespace leanemb::dist::test_util {

using RankFn = std::function<Status(Communicator&)>;

// Runs fn on `p` threads, one per rank of a fresh LocalWorld, and returns each rank's Status.
inline std::vector<Status> run_world(int p, const RankFn& fn, int64_t timeout_ms = 30000) {
  auto world = LocalWorld::create(p, CommOptions{timeout_ms});
  EXPECT_TRUE(world.ok()) << world.status().to_string();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < p; ++r) comms.push_back(std::move((*world)->communicator(r)).value());
  std::vector<Status> out(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] { out[static_cast<size_t>(r)] = fn(*comms[static_cast<size_t>(r)]); });
  }
  for (auto& t : threads) t.join();
  return out;
}

inline void expect_all_ok(const std::vector<Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
}

// A fresh directory under the test temp dir, removed with the object.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::path(testing::TempDir()) / "leanemb_dist_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string sub(const char* name) const { return (std::filesystem::path(path) / name).string(); }
};

// n gradient values drawn from N(0, 1) by mt19937_64(seed): the same on every rank.
inline std::vector<float> normal_grads(uint64_t seed, int64_t n) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

// Step `step`'s batch of `bags` bags of 1-3 ids each, uniform over each feature's table (a step
// changes a few dozen rows), from seed batch_seed + step.
inline testing_util::OwnedBatch random_bags(int step, const CollectionOptions& o, int64_t bags, uint64_t batch_seed) {
  std::mt19937_64 rng(batch_seed + static_cast<uint64_t>(step));
  testing_util::OwnedBatch b;
  b.B = bags;
  for (const FeatureOptions& f : o.features) {
    const auto rows = static_cast<uint64_t>(o.tables[static_cast<size_t>(f.table)].num_rows);
    std::vector<int64_t> ids, offsets = {0};
    for (int64_t bag = 0; bag < b.B; ++bag) {
      for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n; ++i) ids.push_back(static_cast<int64_t>(rng() % rows));
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offsets);
    b.weights.emplace_back();
  }
  return b;
}

// Steps [s0, s1) of random_bags batches with normal gradients (seed grad_seed + step).
inline void train_random_bags(EmbeddingCollection& c, const CollectionOptions& o, int s0, int s1, int64_t bags,
                              uint64_t batch_seed, uint64_t grad_seed) {
  for (int s = s0; s < s1; ++s) {
    const testing_util::OwnedBatch g = random_bags(s, o, bags, batch_seed);
    std::vector<float> pooled(static_cast<size_t>(bags * c.pooled_dim()));
    ASSERT_TRUE(c.forward(g.view(), pooled).ok());
    ASSERT_TRUE(c.backward_update(g.view(), normal_grads(grad_seed + static_cast<uint64_t>(s), bags * c.pooled_dim())).ok());
  }
}

// The checkpoint tests' collection: table a (`a_rows` rows of 8 bf16 values) and table b (300
// rows of 4 fp32), both with Adagrad (learning rate 0.05), features fa (sum) over a and fb
// (mean) over b, one thread, `seed`. A non-empty `store_dir`: table a cached in `cache_rows`
// slots over a log-layout file store <store_dir>/a.rows, so that rows are
// evicted to the store between checkpoints; else both tables resident.
inline CollectionOptions two_table_options(int64_t a_rows, uint64_t seed, const std::string& store_dir, int64_t cache_rows) {
  CollectionOptions o;
  OptimizerOptions opt;
  opt.kind = OptimizerKind::kAdagrad;
  opt.learning_rate = 0.05f;
  o.tables = {TableOptions{"a", a_rows, 8, DType::kBF16, opt, {}, false, {}, {}, {}, {}},
              TableOptions{"b", 300, 4, DType::kF32, opt, {}, false, {}, {}, {}, {}}};
  if (!store_dir.empty()) {
    o.tables[0].cache.capacity_rows = cache_rows;
    o.tables[0].cache.store = StoreKind::kFile;
    o.tables[0].cache.store_layout = FileStoreLayout::kLog;
    o.tables[0].cache.store_path = store_dir + "/a.rows";
  }
  o.features = {FeatureOptions{"fa", 0, PoolingMode::kSum}, FeatureOptions{"fb", 1, PoolingMode::kMean}};
  o.seed = seed;
  o.num_threads = 1;
  return o;
}

// A Status that carries a test's mismatch out of a rank's thread.
inline Status mismatch(const std::string& what) { return internal_error("test mismatch: " + what); }

}  // namespace leanemb::dist::test_util
