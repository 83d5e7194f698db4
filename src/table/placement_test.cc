// Placement tests: weights and optimizer state in different tiers, allocation failures on the
// budgeted device arena, out-of-memory behaviour (docs/memory.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "table/table_testing.h"

namespace leanemb {
namespace {

using namespace table_testing;  // NOLINT: test helpers

// ---- placement: weights and optimizer state in different tiers -----------------------------------

struct PlacementCase {
  const char* placement;
  OptimizerKind kind;
  DType dtype;
  DType state;
  bool reference;
  bool fused;
};

class PlacementTest : public testing::TestWithParam<PlacementCase> {};

std::unique_ptr<MemorySystem> must_memory(const MemorySystemOptions& o) {
  auto r = MemorySystem::create(o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Offloading optimizer state (or weights) to the host changes where bytes live and what crosses
// the link, never the results: three steps give byte-identical rows and state to an all-device
// twin, stochastic rounding included; the tiers hold what the placement says; the transfers are
// the touched rows' offloaded bytes, both ways.
TEST_P(PlacementTest, OffloadTrainsBitIdenticallyAndCountsTransfers) {
  const PlacementCase pc = GetParam();
  CollectionOptions o = standard_options(pc.kind, pc.dtype, pc.state);
  o.use_reference_kernels = pc.reference;
  MemorySystemOptions mo;
  auto placement = parse_placement(pc.placement);
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  mo.placement = placement.value();
  auto mem = must_memory(mo), twin_mem = must_memory(MemorySystemOptions{});
  auto r = EmbeddingCollection::create(o, mem.get());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto c = std::move(r).value();
  auto rt = EmbeddingCollection::create(o, twin_mem.get());
  ASSERT_TRUE(rt.ok());
  auto twin = std::move(rt).value();
  ASSERT_TRUE(same_bytes(snapshot(*c), snapshot(*twin)));
  mem->reset_transfers();  // the snapshots' reads into host buffers are row I/O, not steps
  twin_mem->reset_transfers();
  const bool weights_host = mo.placement[Category::kWeights] == Tier::kHost;
  const bool state_host = mo.placement[Category::kOptimizerState] == Tier::kHost;
  uint64_t forward_bytes = 0, update_bytes = 0;  // expected transfers
  for (int step = 0; step < 3; ++step) {
    const OwnedBatch b = random_batch(o, 6, 40 + step);
    std::vector<float> out(pooled_size(*c, b)), out_twin(out.size());
    ASSERT_TRUE(c->forward(b.view(), out).ok());
    ASSERT_TRUE(twin->forward(b.view(), out_twin).ok());
    ASSERT_EQ(std::memcmp(out.data(), out_twin.data(), out.size() * 4), 0);
    const std::vector<float> G = random_floats(out.size(), 70 + step);
    UpdateOptions uo;
    uo.fuse_when_safe = pc.fused;
    auto rep = c->backward_update(b.view(), G, {}, uo);
    auto rep_twin = twin->backward_update(b.view(), G, {}, uo);
    ASSERT_TRUE(rep.ok() && rep_twin.ok());
    ASSERT_EQ(rep.value().unique_rows, rep_twin.value().unique_rows);
    for (int t = 0; t < c->num_tables(); ++t) {
      const RowLayout& l = c->layout(t);
      std::vector<int64_t> rows;
      for (size_t f = 0; f < o.features.size(); ++f) {
        if (o.features[f].table != t) continue;
        rows.insert(rows.end(), b.ids[f].begin(), b.ids[f].end());
        if (weights_host) forward_bytes += b.ids[f].size() * l.weight_bytes;  // one row read per lookup
      }
      std::sort(rows.begin(), rows.end());
      const size_t unique = static_cast<size_t>(std::unique(rows.begin(), rows.end()) - rows.begin());
      update_bytes += unique * ((weights_host ? l.weight_bytes : 0) + (state_host ? l.state_bytes : 0));
    }
  }
  EXPECT_EQ(twin_mem->transfers().host_to_device(), 0u);
  EXPECT_EQ(twin_mem->transfers().device_to_host(), 0u);
  EXPECT_EQ(mem->transfers().host_to_device(), forward_bytes + update_bytes);
  EXPECT_EQ(mem->transfers().device_to_host(), update_bytes);
  EXPECT_TRUE(same_bytes(snapshot(*c), snapshot(*twin)));
  // Bytes sit in the tiers the placement names; staging buffers were returned.
  const auto st = mem->stats();
  for (Category cat : {Category::kWeights, Category::kOptimizerState}) {
    if (cat == Category::kOptimizerState && c->layout(0).state_bytes == 0) continue;  // SGD has none
    const bool on_host = mo.placement[cat] == Tier::kHost;
    EXPECT_EQ(st[0][cat].current_bytes > 0, !on_host) << category_name(cat);
    EXPECT_EQ(st[1][cat].current_bytes > 0, on_host) << category_name(cat);
  }
  c->release_step_buffers();
  EXPECT_EQ(mem->stats()[0][Category::kWorkspace].current_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Placements, PlacementTest,
    testing::Values(
        PlacementCase{"optimizer_state=host", OptimizerKind::kAdam, DType::kF32, DType::kF32, false, true},
        PlacementCase{"optimizer_state=host", OptimizerKind::kAdam, DType::kF32, DType::kF32, false, false},
        PlacementCase{"optimizer_state=host", OptimizerKind::kAdam, DType::kF32, DType::kF32, true, false},
        PlacementCase{"optimizer_state=host", OptimizerKind::kRowwiseAdagrad, DType::kBF16, DType::kF32, false, true},
        PlacementCase{"optimizer_state=host", OptimizerKind::kPartialRowwiseAdam, DType::kF16, DType::kBF16, false, true},
        PlacementCase{"optimizer_state=host", OptimizerKind::kAdam, DType::kBF16, DType::kInt8Blockwise, false, true},
        PlacementCase{"weights=host", OptimizerKind::kAdagrad, DType::kF32, DType::kF32, false, true},
        PlacementCase{"weights=host,optimizer_state=host", OptimizerKind::kAdam, DType::kBF16, DType::kF32, false, true},
        PlacementCase{"weights=host", OptimizerKind::kSgd, DType::kF16, DType::kF32, false, true}));

// Raw row access sees fat rows whatever the placement: a table read from a split collection
// writes into an all-device one byte for byte.
TEST(PlacementIoTest, SplitTableRawRowsMatchFatRows) {
  const CollectionOptions o = standard_options(OptimizerKind::kAdam);
  MemorySystemOptions mo;
  mo.placement[Category::kOptimizerState] = Tier::kHost;
  auto mem = must_memory(mo), mem2 = must_memory(MemorySystemOptions{});
  auto c = std::move(EmbeddingCollection::create(o, mem.get())).value();
  auto d = std::move(EmbeddingCollection::create(o, mem2.get())).value();
  train_step(*c, standard_batch(), random_floats(pooled_size(*c, standard_batch()), 3));
  std::vector<uint8_t> all(static_cast<size_t>(o.tables[0].num_rows) * c->layout(0).stride_bytes);
  ASSERT_TRUE(c->read_raw_rows(0, 0, o.tables[0].num_rows, all).ok());
  ASSERT_TRUE(d->write_raw_rows(0, 0, o.tables[0].num_rows, all).ok());
  EXPECT_TRUE(same_bytes({snapshot(*c)[0]}, {snapshot(*d)[0]}));
  // write_raw_rows into the split table round-trips
  std::vector<uint8_t> raw(5 * c->layout(1).stride_bytes);
  ASSERT_TRUE(d->read_raw_rows(1, 3, 5, raw).ok());
  ASSERT_TRUE(c->write_raw_rows(1, 3, 5, raw).ok());
  std::vector<uint8_t> back(raw.size());
  ASSERT_TRUE(c->read_raw_rows(1, 3, 5, back).ok());
  EXPECT_EQ(back, raw);
}

// Every allocation of a step on a budgeted DeviceArena with offloaded state (staging included)
// fails cleanly: ResourceExhausted, no leak, no row or step change; the retry trains exactly like
// a twin that never failed.
TEST(PlacementAllocFailureTest, SweepOnTheArenaWithOffloadedState) {
  const CollectionOptions o = standard_options(OptimizerKind::kAdam, DType::kBF16);
  MemorySystemOptions mo;
  mo.device_budget_bytes = 16 << 20;
  mo.placement[Category::kOptimizerState] = Tier::kHost;
  auto mem = must_memory(mo), twin_mem = must_memory(mo);
  auto c = std::move(EmbeddingCollection::create(o, mem.get())).value();
  auto twin = std::move(EmbeddingCollection::create(o, twin_mem.get())).value();
  const OwnedBatch b = standard_batch();
  const std::vector<float> G = random_floats(pooled_size(*c, b), 8);
  const uint64_t a0 = twin_mem->arena()->arena_stats().num_allocs;
  train_step(*twin, b, G);
  const int64_t allocs = static_cast<int64_t>(twin_mem->arena()->arena_stats().num_allocs - a0);
  ASSERT_GE(allocs, 8);  // dedup buffers, scratch and the staging buffers
  for (int64_t k = 0; k < allocs; ++k) {
    for (bool always : {false, true}) {
      SCOPED_TRACE("allocation " + std::to_string(k) + (always ? " always" : " once"));
      c->release_step_buffers();
      const auto before = snapshot(*c);
      const size_t in_use = mem->arena()->arena_stats().allocated_bytes;
      mem->arena()->inject_failure(k, always);
      auto r = c->backward_update(b.view(), G);
      ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
      EXPECT_TRUE(contains(r.status().message(), "device budget")) << r.status().message();
      c->release_step_buffers();
      EXPECT_EQ(mem->arena()->arena_stats().allocated_bytes, in_use) << "leaked";
      ASSERT_TRUE(same_bytes(snapshot(*c), before));
      ASSERT_EQ(c->step(), 0);
    }
  }
  mem->arena()->inject_failure(-1);
  train_step(*c, b, G);
  EXPECT_TRUE(same_bytes(snapshot(*c), snapshot(*twin)));
}

// post_oom_usable: with half the device budget taken, a request for 60% fails cleanly naming
// the budget, the request, the categories in use, the cached free bytes and the largest free
// block; after freeing, the same request succeeds, and then a full training step runs.
TEST(OomTest, PostOomUsable) {
  const CollectionOptions o = standard_options(OptimizerKind::kAdam);
  MemorySystemOptions mo;
  mo.device_budget_bytes = 32 << 20;
  auto mem = must_memory(mo);
  auto c = std::move(EmbeddingCollection::create(o, mem.get())).value();
  const size_t budget = mo.device_budget_bytes;
  auto half = mem->device()->allocate(budget / 2, Category::kActivations);
  ASSERT_TRUE(half.ok()) << half.status().to_string();
  auto big = mem->device()->allocate(budget * 6 / 10, Category::kWorkspace);
  ASSERT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  for (const char* part : {"requested 19.20 MiB (workspace 19.20 MiB)", "device budget 32.00 MiB", "activations", "weights",
                           "optimizer_state", "cached free", "largest free block"})
    EXPECT_TRUE(contains(big.status().message(), part)) << big.status().message();
  half = Allocation();
  big = mem->device()->allocate(budget * 6 / 10, Category::kWorkspace);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  big = Allocation();
  const OwnedBatch b = standard_batch();
  std::vector<float> out(pooled_size(*c, b));
  ASSERT_TRUE(c->forward(b.view(), out).ok());
  EXPECT_EQ(train_step(*c, b, random_floats(out.size(), 4)).unique_rows, 13);  // t0: 9 rows, t1: 4
  EXPECT_EQ(c->step(), 1);
}

// budget_never_exceeded: many steps of growing and shrinking batches on a tight arena keep the
// device peak within the budget; the steps that do not fit fail cleanly and change nothing.
TEST(OomTest, BudgetNeverExceededOverManySteps) {
  CollectionOptions o = standard_options(OptimizerKind::kAdagrad);
  o.tables[0].num_rows = 3000;
  o.tables[1].num_rows = 2000;
  MemorySystemOptions mo;
  mo.device_budget_bytes = 2 << 20;
  auto mem = must_memory(mo);
  auto c = std::move(EmbeddingCollection::create(o, mem.get())).value();
  int failed = 0;
  for (int step = 0; step < 40; ++step) {
    const OwnedBatch b = random_batch(o, 1 + (step * 977) % 3000, 100 + step);
    const auto before = step % 8 == 0 ? snapshot(*c) : std::vector<std::vector<uint8_t>>{};
    auto r = c->backward_update(b.view(), random_floats(pooled_size(*c, b), step));
    if (!r.ok()) {
      ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
      ++failed;
      if (!before.empty()) {
        EXPECT_TRUE(same_bytes(snapshot(*c), before));
      }
      c->release_step_buffers();
    }
    const MemoryStats s = mem->stats()[0];
    ASSERT_LE(s.peak_bytes, mo.device_budget_bytes);
    ASSERT_LE(mem->arena()->arena_stats().reserved_bytes, mo.device_budget_bytes);
  }
  EXPECT_GT(failed, 0);  // the budget is tight enough that the largest batches do not fit
  EXPECT_LT(failed, 40);
}

}  // namespace
}  // namespace leanemb
