// Test helper (tests only): two small tables (40 x 13 and 24 x 8; 13 is not a multiple of 8)
// behind one layer of the table stack, and random batches over them. accumulate_test and
// bf16_io_test run the same steps through two paths of one interface on these and compare rows.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <utility>

#include <gtest/gtest.h>

#include "leanemb/memory_system.h"
#include "leanemb/tables.h"
#include "table/owned_batch_testing.h"

namespace leanemb::testing_util {

// The layer under test: resident rows, a row cache over host rows, optimizer state on the host
// tier, a dynamic vocabulary (and one that admits an id at its second sighting).
enum class StackKind { kResident, kCached, kStateOnHost, kDynamic, kDynamicFiltered };

inline const char* stack_kind_name(StackKind k) {
  switch (k) {
    case StackKind::kResident: return "resident";
    case StackKind::kCached: return "cached";
    case StackKind::kStateOnHost: return "state_on_host";
    case StackKind::kDynamic: return "dynamic";
    case StackKind::kDynamicFiltered: return "dynamic_min_count_2";
  }
  return "?";
}

inline constexpr int64_t kTwoTableRows[2] = {40, 24};  // a dynamic table has 4x as many rows
inline constexpr int64_t kTwoTableDims[2] = {13, 8};

struct TwoTables {
  StackKind kind = StackKind::kResident;
  OptimizerKind opt = OptimizerKind::kAdam;
  PoolingMode first = PoolingMode::kSum, second = PoolingMode::kSum;  // the features' poolings
  bool shared = false;          // both features look up table 0
  double cache_fraction = 0.8;  // kCached: the row cache's share of the rows
  uint64_t seed = 3;            // CollectionOptions::seed
};

// Features f0 (table 0, `first`) and f1 (table 1, or 0 when shared; `second`), SGD-style rates.
inline CollectionOptions two_tables_options(const TwoTables& s) {
  const bool dynamic = s.kind == StackKind::kDynamic || s.kind == StackKind::kDynamicFiltered;
  CollectionOptions o;
  for (int t = 0; t < 2; ++t) {
    TableOptions to;
    to.name = t == 0 ? "a" : "b";
    to.num_rows = dynamic ? 4 * kTwoTableRows[t] : kTwoTableRows[t];
    to.dim = kTwoTableDims[t];
    to.optimizer.kind = s.opt;
    to.optimizer.learning_rate = 0.05f;
    to.optimizer.eps = default_eps(s.opt);
    to.init.bound = 0.1f;
    if (s.kind == StackKind::kCached) {
      to.cache.fraction = s.cache_fraction;
      to.cache.store = StoreKind::kHost;
    }
    to.dynamic.enabled = dynamic;
    // An id needs two sightings for a row: the first steps drop ids (their sequence gradients
    // are compacted, mean bags reweighted).
    if (s.kind == StackKind::kDynamicFiltered) to.dynamic.min_count = 2;
    o.tables.push_back(to);
  }
  o.features = {{"f0", 0, s.first}, {"f1", s.shared ? 0 : 1, s.second}};
  o.seed = s.seed;
  o.num_threads = 2;
  return o;
}

// The tables over a 32 MiB device budget (optimizer state on the host tier for kStateOnHost);
// null (and a failed expectation) when creating them fails.
inline std::unique_ptr<EmbeddingTables> make_two_tables(const TwoTables& s, std::unique_ptr<MemorySystem>* mem) {
  MemorySystemOptions m;
  m.device_budget_bytes = size_t{32} << 20;
  if (s.kind == StackKind::kStateOnHost) m.placement[Category::kOptimizerState] = Tier::kHost;
  auto ms = MemorySystem::create(m);
  EXPECT_TRUE(ms.ok()) << ms.status().to_string();
  if (!ms.ok()) return nullptr;
  *mem = std::move(ms).value();
  auto t = create_tables(two_tables_options(s), mem->get());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

// `bags` bags of 0 to max_ids - 1 ids each over the first half of each looked-up table's rows
// (repeats within and across bags), drawn from `rng_seed`; feature 0 carries per-id weights
// when it is pooled.
inline OwnedBatch two_tables_batch(const TwoTables& s, uint64_t rng_seed, int64_t bags, int max_ids) {
  std::mt19937_64 rng(rng_seed);
  OwnedBatch b;
  b.B = bags;
  for (int f = 0; f < 2; ++f) {
    const int64_t rows = kTwoTableRows[s.shared ? 0 : f];
    std::vector<int64_t> ids, offsets = {0};
    std::vector<float> w;
    for (int64_t bag = 0; bag < b.B; ++bag) {
      for (int i = static_cast<int>(rng() % static_cast<uint64_t>(max_ids)); i > 0; --i) {
        ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows / 2)));
        if (f == 0 && s.first != PoolingMode::kNone) w.push_back(0.25f + 0.5f * static_cast<float>(rng() % 4));
      }
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offsets);
    b.weights.push_back(w);
  }
  return b;
}

}  // namespace leanemb::testing_util
