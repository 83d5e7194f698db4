// Test helpers of the table module (tests only): a standard collection and batches, snapshots
// of raw rows, one training step. Shared by table_test.cc and placement_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "leanemb/embedding.h"
#include "table/owned_batch_testing.h"

namespace leanemb::table_testing {

using testing_util::OwnedBatch;

// ---- shared by table_test.cc and placement_test.cc ---------------------------------------------------------------------------------------

inline TableOptions table(const std::string& name, int64_t rows, int64_t dim, OptimizerKind kind = OptimizerKind::kAdagrad,
                   DType dtype = DType::kF32, DType state = DType::kF32) {
  TableOptions t;
  t.name = name;
  t.num_rows = rows;
  t.dim = dim;
  t.dtype = dtype;
  t.optimizer.kind = kind;
  t.optimizer.learning_rate = 0.1f;
  t.optimizer.eps = default_eps(kind);
  t.optimizer.state_dtype = state;
  t.init.bound = 0.5f;
  return t;
}

// The standard collection: t0 (30 x 13) serves f0 (sum) and f1 (mean, weighted); t1 (20 x 8)
// serves f2 (sum).
inline CollectionOptions standard_options(OptimizerKind kind = OptimizerKind::kAdagrad, DType dtype = DType::kF32,
                                   DType state = DType::kF32) {
  CollectionOptions o;
  o.tables = {table("t0", 30, 13, kind, dtype, state), table("t1", 20, 8, kind, dtype, state)};
  o.features = {{"f0", 0, PoolingMode::kSum}, {"f1", 0, PoolingMode::kMean}, {"f2", 1, PoolingMode::kSum}};
  o.seed = 5;
  o.num_threads = 2;
  return o;
}

// A valid batch for standard_options: duplicates within and across bags, an empty bag.
inline OwnedBatch standard_batch() {
  OwnedBatch b;
  b.B = 4;
  b.ids = {{1, 2, 2, 5, 29, 0, 7}, {3, 3, 4, 10, 11}, {0, 19, 19, 7}};
  b.offsets = {{0, 2, 2, 5, 7}, {0, 1, 3, 4, 5}, {0, 1, 2, 3, 4}};
  b.weights = {{}, {0.5f, 1.0f, 1.5f, 2.0f, 0.25f}, {}};
  return b;
}

// A random batch with B bags of 0..8 ids drawn from a narrow range (many duplicates).
inline OwnedBatch random_batch(const CollectionOptions& o, int64_t B, uint64_t seed) {
  std::mt19937_64 rng(seed);
  OwnedBatch b;
  b.B = B;
  for (const FeatureOptions& f : o.features) {
    std::uniform_int_distribution<int64_t> id(0, o.tables[f.table].num_rows / 2), len(0, 8);
    std::vector<int64_t> ids, offs{0};
    for (int64_t bag = 0; bag < B; ++bag) {
      for (int64_t n = len(rng); n > 0; --n) ids.push_back(id(rng));
      offs.push_back(static_cast<int64_t>(ids.size()));
    }
    std::vector<float> w;
    if (f.pooling == PoolingMode::kMean)
      for (size_t i = 0; i < ids.size(); ++i) w.push_back(0.25f + 0.125f * static_cast<float>(rng() % 12));
    b.ids.push_back(ids);
    b.offsets.push_back(offs);
    b.weights.push_back(w);
  }
  return b;
}

inline std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

inline std::unique_ptr<EmbeddingCollection> must_create(const CollectionOptions& o, Allocator* alloc = nullptr) {
  auto r = EmbeddingCollection::create(o, alloc);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Raw fat rows (weights and state) of every table.
inline std::vector<std::vector<uint8_t>> snapshot(const EmbeddingCollection& c) {
  std::vector<std::vector<uint8_t>> s;
  for (int t = 0; t < c.num_tables(); ++t) {
    const int64_t rows = c.options().tables[t].num_rows;
    s.emplace_back(static_cast<size_t>(rows) * c.layout(t).stride_bytes);
    EXPECT_TRUE(c.read_raw_rows(t, 0, rows, s.back()).ok());
  }
  return s;
}

// Compares raw snapshots, naming the first differing table and byte instead of dumping them.
inline testing::AssertionResult same_bytes(const std::vector<std::vector<uint8_t>>& a,
                                    const std::vector<std::vector<uint8_t>>& b) {
  if (a.size() != b.size()) return testing::AssertionFailure() << a.size() << " vs " << b.size() << " tables";
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size())
      return testing::AssertionFailure() << "table " << t << ": " << a[t].size() << " vs " << b[t].size() << " bytes";
    const auto m = std::mismatch(a[t].begin(), a[t].end(), b[t].begin());
    if (m.first != a[t].end())
      return testing::AssertionFailure() << "table " << t << " differs first at byte " << (m.first - a[t].begin())
                                         << " of " << a[t].size();
  }
  return testing::AssertionSuccess() << "all " << a.size() << " tables are byte-identical";
}

inline std::vector<float> rows_of(const EmbeddingCollection& c, int t) {
  std::vector<float> w(static_cast<size_t>(c.options().tables[t].num_rows * c.options().tables[t].dim));
  EXPECT_TRUE(c.read_rows(t, 0, c.options().tables[t].num_rows, w).ok());
  return w;
}

// One training step with gradient G; returns the report (fails the test on error).
inline UpdateReport train_step(EmbeddingCollection& c, const OwnedBatch& b, const std::vector<float>& G) {
  auto r = c.backward_update(b.view(), G);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : UpdateReport{};
}

inline size_t pooled_size(const EmbeddingCollection& c, const OwnedBatch& b) {
  return static_cast<size_t>(std::max<int64_t>(b.B, 0) * c.pooled_dim());
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace leanemb::table_testing
