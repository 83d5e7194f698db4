// KernelBackend tests (src/kernels/backend.h, docs/backend.md): a collection on the reference
// backend is the oracle of one on the CPU backend (bit-identical outputs, rows and optimizer
// state over several steps, with split placement, sequence features and a row cache), and a
// counting backend shows that the table layer's lookups, updates, row conversions and copies
// between tiers all go through the backend, which records every transfer the collection makes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "table/table_testing.h"

namespace leanemb {
namespace {

using namespace table_testing;  // NOLINT: test helpers
using kernels::ExecContext;
using kernels::KernelBackend;

// Forwards every call to `inner` and counts it; the transfers the inner backend records pass
// through a tap that tallies them by direction before they reach the collection's sink.
class CountingBackend final : public KernelBackend {
 public:
  explicit CountingBackend(const KernelBackend& inner) : inner_(inner) {}

  mutable std::atomic<int64_t> lookups{0}, sorts{0}, reduces{0}, updates{0}, row_format{0}, copies{0};
  uint64_t moved(Tier from, Tier to) const { return moved_[index(from, to)].load(); }

  std::string_view name() const override { return "counting"; }
  void pooled_lookup(const kernels::PooledJob* jobs, int num_jobs, const ExecContext& x) const override {
    ++lookups;
    Tap tap(this, x);
    inner_.pooled_lookup(jobs, num_jobs, tap.context);
  }
  void sequence_lookup(const kernels::TableView& t, const int64_t* ids, int64_t nnz, float* out,
                       const ExecContext& x) const override {
    ++lookups;
    Tap tap(this, x);
    inner_.sequence_lookup(t, ids, nnz, out, tap.context);
  }
  void sort_row_src(uint64_t* keys, uint64_t* scratch, int64_t n, int row_bits, const ExecContext& x) const override {
    ++sorts;
    Tap tap(this, x);
    inner_.sort_row_src(keys, scratch, n, row_bits, tap.context);
  }
  bool reduce_segments(const kernels::SegmentSource& s, int64_t num_unique, float* out,
                       const ExecContext& x) const override {
    ++reduces;
    Tap tap(this, x);
    return inner_.reduce_segments(s, num_unique, out, tap.context);
  }
  void update_rows(const kernels::TableView& t, const int64_t* rows, const float* grads, int64_t num_unique,
                   const kernels::UpdateStep& s, const ExecContext& x) const override {
    ++updates;
    Tap tap(this, x);
    inner_.update_rows(t, rows, grads, num_unique, s, tap.context);
  }
  void reduce_and_update(const kernels::TableView& t, const kernels::SegmentSource& s, const int64_t* rows,
                         int64_t num_unique, const kernels::UpdateStep& step, const ExecContext& x,
                         float* scratch) const override {
    ++updates;
    Tap tap(this, x);
    inner_.reduce_and_update(t, s, rows, num_unique, step, tap.context, scratch);
  }
  size_t reduce_and_update_scratch_floats(int64_t dim, int num_threads) const override {
    return inner_.reduce_and_update_scratch_floats(dim, num_threads);
  }
  void uniform_fill(uint32_t key, int64_t d, float bound, float* out) const override {
    ++row_format;
    inner_.uniform_fill(key, d, bound, out);
  }
  void store_weights_rne(const RowLayout& l, uint8_t* row, const float* w) const override {
    ++row_format;
    inner_.store_weights_rne(l, row, w);
  }
  void load_weights(const RowLayout& l, const uint8_t* row, float* out) const override {
    ++row_format;
    inner_.load_weights(l, row, out);
  }
  void load_elem_state(const RowLayout& l, const uint8_t* row, int k, float* out) const override {
    ++row_format;
    inner_.load_elem_state(l, row, k, out);
  }
  float load_rowwise_state(const RowLayout& l, const uint8_t* row) const override {
    ++row_format;
    return inner_.load_rowwise_state(l, row);
  }
  void copy(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes,
            const ExecContext& x) const override {
    ++copies;
    Tap tap(this, x);
    inner_.copy(dst, dst_tier, src, src_tier, bytes, tap.context);
  }
  void copy_rows(std::span<const kernels::RowCopy> parts, int64_t count, const ExecContext& x) const override {
    ++copies;
    Tap tap(this, x);
    inner_.copy_rows(parts, count, tap.context);
  }

 private:
  static size_t index(Tier from, Tier to) { return static_cast<size_t>(from) * kNumTiers + static_cast<size_t>(to); }
  struct Tap final : kernels::TransferSink {
    Tap(const CountingBackend* owner, const ExecContext& x) : self(owner), next(x.transfers), context(x) {
      context.transfers = this;
    }
    void record(Tier from, Tier to, uint64_t bytes) override {
      self->moved_[index(from, to)] += bytes;
      if (next) next->record(from, to, bytes);
    }
    const CountingBackend* self;
    kernels::TransferSink* next;
    ExecContext context;
  };
  const KernelBackend& inner_;
  mutable std::array<std::atomic<uint64_t>, kNumTiers * kNumTiers> moved_{};
};

// Tables of every kind the seam must carry: fp32 Adam (split when state is on the host) with a
// sum and a weighted mean feature, bf16 row-wise Adagrad with a sequence and a sum feature, and
// optionally a bf16 table behind a row cache over the host store.
CollectionOptions mixed_options(bool with_cache) {
  CollectionOptions o;
  o.tables = {table("fp32_adam", 40, 13, OptimizerKind::kAdam),
              table("bf16_rowwise", 30, 8, OptimizerKind::kRowwiseAdagrad, DType::kBF16)};
  o.features = {{"sum", 0, PoolingMode::kSum},
                {"mean", 0, PoolingMode::kMean},
                {"seq", 1, PoolingMode::kNone},
                {"sum1", 1, PoolingMode::kSum}};
  if (with_cache) {
    // Ids fall in [0, 50] (random_batch); a step of 4 bags holds at most 32 of them, so 34 slots
    // always hold a step while the steps together touch more rows than that (evictions).
    TableOptions t = table("bf16_cached", 100, 16, OptimizerKind::kAdagrad, DType::kBF16);
    t.cache.capacity_rows = 34;
    o.tables.push_back(t);
    o.features.push_back({"cached", 2, PoolingMode::kSum});
  }
  o.seed = 11;
  o.num_threads = 2;
  return o;
}

std::unique_ptr<MemorySystem> memory_for(const char* placement) {
  MemorySystemOptions mo;
  auto p = parse_placement(placement);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (p.ok()) mo.placement = p.value();
  auto m = MemorySystem::create(mo);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// One collection on its own MemorySystem.
struct Coll {
  std::unique_ptr<MemorySystem> mem;
  std::unique_ptr<EmbeddingCollection> c;
};

Coll make_run(CollectionOptions o, const KernelBackend* backend, const char* placement) {
  o.backend = backend;
  Coll r;
  r.mem = memory_for(placement);
  if (!r.mem) return r;
  auto c = EmbeddingCollection::create(o, r.mem.get());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (c.ok()) r.c = std::move(c).value();
  return r;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// The outputs of one step: pooled, then every sequence feature's rows; compared bit for bit.
struct StepOut {
  std::vector<float> pooled;
  std::vector<std::vector<float>> seq;
  bool operator==(const StepOut& o) const {
    if (!same_floats(pooled, o.pooled) || seq.size() != o.seq.size()) return false;
    for (size_t i = 0; i < seq.size(); ++i)
      if (!same_floats(seq[i], o.seq[i])) return false;
    return true;
  }
};

// forward and backward_update of batch `step` (random ids and gradients from the step number):
// 12 bags, 4 with a row cache (see mixed_options).
StepOut train(EmbeddingCollection& c, int step, bool fused) {
  const CollectionOptions& o = c.options();
  bool cached = false;
  for (const TableOptions& t : o.tables) cached = cached || t.cache.enabled();
  const OwnedBatch b = random_batch(o, cached ? 4 : 12, 300 + static_cast<uint64_t>(step));
  StepOut out;
  out.pooled.resize(pooled_size(c, b));
  std::vector<std::span<float>> seq_spans;
  std::vector<std::vector<float>> seq_grads;
  std::vector<std::span<const float>> grad_spans;
  for (size_t f = 0; f < o.features.size(); ++f) {
    if (o.features[f].pooling != PoolingMode::kNone) continue;
    const size_t n = b.ids[f].size() * static_cast<size_t>(o.tables[o.features[f].table].dim);
    out.seq.emplace_back(n);
    seq_grads.push_back(random_floats(n, 500 + static_cast<uint64_t>(step) * 7 + f));
  }
  for (auto& s : out.seq) seq_spans.emplace_back(s);
  for (auto& g : seq_grads) grad_spans.emplace_back(g);
  EXPECT_TRUE(c.forward(b.view(), out.pooled, seq_spans).ok());
  UpdateOptions uo;
  uo.fuse_when_safe = fused;
  auto r = c.backward_update(b.view(), random_floats(out.pooled.size(), 400 + static_cast<uint64_t>(step)), grad_spans, uo);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return out;
}

struct OracleCase {
  const char* placement;
  bool cache;
  bool fused;
};

class ReferenceBackendTest : public testing::TestWithParam<OracleCase> {};

// The reference backend is the CPU backend's oracle: over eight steps both give bit-identical
// pooled and sequence outputs, raw rows (weights and optimizer state, fp32 and bf16) and fp32
// state, with the same transfers recorded, on the fused and the two-pass update path.
TEST_P(ReferenceBackendTest, GivesBitIdenticalOutputsRowsAndState) {
  const OracleCase oc = GetParam();
  const CollectionOptions o = mixed_options(oc.cache);
  Coll cpu = make_run(o, &kernels::cpu_backend(), oc.placement);
  Coll ref = make_run(o, &kernels::reference_backend(), oc.placement);
  ASSERT_TRUE(cpu.c && ref.c);
  ASSERT_TRUE(same_bytes(snapshot(*cpu.c), snapshot(*ref.c)));
  for (int step = 0; step < 8; ++step) {
    const StepOut a = train(*cpu.c, step, oc.fused), b = train(*ref.c, step, oc.fused);
    ASSERT_TRUE(a == b) << "outputs differ at step " << step;
    ASSERT_TRUE(same_bytes(snapshot(*cpu.c), snapshot(*ref.c))) << "rows differ after step " << step;
  }
  for (int t = 0; t < cpu.c->num_tables(); ++t) {
    const size_t n = static_cast<size_t>(o.tables[t].num_rows * cpu.c->state_floats_per_row(t));
    std::vector<float> sa(n), sb(n);
    ASSERT_TRUE(cpu.c->read_state(t, 0, o.tables[t].num_rows, sa).ok());
    ASSERT_TRUE(ref.c->read_state(t, 0, o.tables[t].num_rows, sb).ok());
    EXPECT_EQ(std::memcmp(sa.data(), sb.data(), n * 4), 0) << "state of table " << t;
    EXPECT_TRUE(same_floats(rows_of(*cpu.c, t), rows_of(*ref.c, t))) << "fp32 rows of table " << t;
  }
  EXPECT_EQ(cpu.mem->transfers().bytes, ref.mem->transfers().bytes);
  EXPECT_EQ(cpu.c->step(), 8);
  if (oc.cache) {  // the cache evicted and fetched rows back during the run
    auto cs = cpu.c->cache_stats(2);
    ASSERT_TRUE(cs.ok());
    EXPECT_GT(cs.value().evictions, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, ReferenceBackendTest,
                         testing::Values(OracleCase{"optimizer_state=host", true, true},
                                         OracleCase{"optimizer_state=host", true, false},
                                         OracleCase{"weights=host", false, true},
                                         OracleCase{"weights=device", true, true}));

// Batches large enough that the dedup's passes over the sorted keys and the radix sort split
// into parts over threads (72,000 ids of a skewed stream, runs of one row across part
// boundaries): the CPU backend still equals the reference (std::stable_sort, scalar kernels)
// bit for bit, fused and two-pass, and with 1 and 2 threads.
TEST(ReferenceBackendTest, LargeSkewedBatchesSplitOverThreadsGiveTheReferenceRows) {
  for (bool fused : {true, false}) {
    for (int threads : {1, 2}) {
      CollectionOptions o;
      o.tables = {table("big", 5000, 8, OptimizerKind::kAdagrad)};
      o.features = {{"sum", 0, PoolingMode::kSum}};
      o.seed = 5;
      o.num_threads = threads;
      Coll cpu = make_run(o, &kernels::cpu_backend(), "weights=device");
      Coll ref = make_run(o, &kernels::reference_backend(), "weights=device");
      ASSERT_TRUE(cpu.c && ref.c);
      for (int step = 0; step < 3; ++step) {
        OwnedBatch b;
        b.B = 6000;
        b.ids.resize(1);
        b.offsets.resize(1);
        b.weights.resize(1);
        std::mt19937_64 rng(70 + static_cast<uint64_t>(step));
        b.offsets[0].push_back(0);
        for (int64_t bag = 0; bag < b.B; ++bag) {
          for (int i = 0; i < 12; ++i) {
            const uint64_t r = rng() % 5000;
            b.ids[0].push_back(static_cast<int64_t>(r * r / 5000));  // skewed toward low rows
          }
          b.offsets[0].push_back(static_cast<int64_t>(b.ids[0].size()));
        }
        const auto grad = random_floats(static_cast<size_t>(b.B * 8), 900 + static_cast<uint64_t>(step));
        UpdateOptions uo;
        uo.fuse_when_safe = fused;
        for (Coll* c : {&cpu, &ref}) {
          std::vector<float> out(static_cast<size_t>(b.B * 8));
          ASSERT_TRUE(c->c->forward(b.view(), out, {}).ok());
          ASSERT_TRUE(c->c->backward_update(b.view(), grad, {}, uo).ok());
        }
        ASSERT_TRUE(same_bytes(snapshot(*cpu.c), snapshot(*ref.c)))
            << "rows differ after step " << step << " fused " << fused << " threads " << threads;
      }
    }
  }
}

// Every lookup, update, row conversion and tier copy of the table layer goes through the
// backend: a counting wrapper of the CPU backend sees all of them, trains bit-identically to the
// CPU backend, and the transfers it saw recorded are exactly the MemorySystem's figures (steps,
// staging, row reads and writes, a save and load of a table).
TEST(CountingBackendTest, SeesEveryKernelCallAndEveryTransfer) {
  for (const char* placement : {"optimizer_state=host", "weights=host", "weights=host,optimizer_state=host"}) {
    SCOPED_TRACE(placement);
    const CollectionOptions o = mixed_options(/*with_cache=*/false);
    CountingBackend counting(kernels::cpu_backend());
    Coll run = make_run(o, &counting, placement);
    Coll plain = make_run(o, nullptr, placement);  // the default: the CPU backend
    ASSERT_TRUE(run.c && plain.c);
    EXPECT_GT(counting.row_format.load(), 0);  // initialization
    for (int step = 0; step < 3; ++step) ASSERT_TRUE(train(*run.c, step, step != 1) == train(*plain.c, step, step != 1));
    EXPECT_GT(counting.lookups.load(), 0);
    EXPECT_GT(counting.sorts.load(), 0);
    EXPECT_GT(counting.updates.load(), 0);
    EXPECT_GT(counting.reduces.load(), 0);  // step 1 ran the two-pass path
    // Row I/O: raw reads and writes of a whole table, fp32 rows and state.
    const int64_t copies_before = counting.copies.load();
    ASSERT_TRUE(same_bytes(snapshot(*run.c), snapshot(*plain.c)));
    std::vector<float> w(static_cast<size_t>(3 * o.tables[1].dim), 0.25f);
    ASSERT_TRUE(run.c->write_rows(1, 4, 3, w).ok());
    std::vector<float> st(static_cast<size_t>(5 * run.c->state_floats_per_row(0)));
    ASSERT_TRUE(run.c->read_state(0, 2, 5, st).ok());
    std::vector<uint8_t> all(static_cast<size_t>(o.tables[0].num_rows) * run.c->layout(0).stride_bytes);
    ASSERT_TRUE(run.c->read_raw_rows(0, 0, o.tables[0].num_rows, all).ok());
    ASSERT_TRUE(run.c->write_raw_rows(0, 0, o.tables[0].num_rows, all).ok());
    EXPECT_GT(counting.copies.load(), copies_before);
    EXPECT_GT(counting.moved(Tier::kHost, Tier::kDevice), 0u);
    EXPECT_GT(counting.moved(Tier::kDevice, Tier::kHost), 0u);
    const TransferStats ts = run.mem->transfers();
    for (int from = 0; from < kNumTiers; ++from)
      for (int to = 0; to < kNumTiers; ++to)
        EXPECT_EQ(counting.moved(static_cast<Tier>(from), static_cast<Tier>(to)), ts.bytes[from][to])
            << tier_name(static_cast<Tier>(from)) << " -> " << tier_name(static_cast<Tier>(to));
  }
}

// Cached tables run their kernels on the cache's slots through the backend as well; the cache
// moves rows between its store and its slots itself (docs/backend.md: not behind the seam), so
// the MemorySystem sees the backend's transfers plus the cache's.
TEST(CountingBackendTest, CachedTablesRunTheirKernelsThroughTheBackend) {
  CollectionOptions o = mixed_options(/*with_cache=*/true);
  o.features.resize(1);  // only the cached table and its feature stay looked up
  o.features[0] = {"cached", 2, PoolingMode::kSum};
  CountingBackend counting(kernels::cpu_backend());
  Coll run = make_run(o, &counting, "optimizer_state=host");
  ASSERT_TRUE(run.c);
  for (int step = 0; step < 8; ++step) train(*run.c, step, true);
  EXPECT_GT(counting.lookups.load(), 0);
  EXPECT_GT(counting.updates.load(), 0);
  auto cs = run.c->cache_stats(2);
  ASSERT_TRUE(cs.ok());
  EXPECT_GT(cs.value().evictions, 0u);
  // The cache's slots are on the device: its table's kernels record nothing themselves.
  EXPECT_EQ(counting.moved(Tier::kHost, Tier::kDevice), 0u);
}

// copy_rows gathers and scatters row parts by row number and records count x row_bytes per part
// from its source tier to its destination tier, on both backends alike.
TEST(BackendCopyTest, CopyRowsGathersScattersAndRecords) {
  struct Tally final : kernels::TransferSink {
    std::array<uint64_t, kNumTiers * kNumTiers> bytes{};
    void record(Tier from, Tier to, uint64_t n) override { bytes[static_cast<size_t>(from) * kNumTiers + static_cast<size_t>(to)] += n; }
  };
  for (const KernelBackend* be : {&kernels::cpu_backend(), &kernels::reference_backend()}) {
    SCOPED_TRACE(std::string(be->name()));
    std::vector<uint8_t> tab(10 * 6), fat(3 * 8, 0xee), back(10 * 6, 0);
    for (size_t i = 0; i < tab.size(); ++i) tab[i] = static_cast<uint8_t>(i);
    const int64_t rows[3] = {7, 2, 9};
    Tally tally;
    const ExecContext x{2, &tally};
    // gather: bytes [0, 4) of table rows 7, 2, 9 into fat bytes [0, 4); bytes [4, 6) into [6, 8)
    const kernels::RowCopy g[2] = {{fat.data(), 8, nullptr, Tier::kDevice, tab.data(), 6, rows, Tier::kHost, 4},
                                   {fat.data() + 6, 8, nullptr, Tier::kDevice, tab.data() + 4, 6, rows, Tier::kHost, 2}};
    be->copy_rows(g, 3, x);
    for (int u = 0; u < 3; ++u) {
      for (int j = 0; j < 4; ++j) EXPECT_EQ(fat[static_cast<size_t>(u * 8 + j)], tab[static_cast<size_t>(rows[u] * 6 + j)]);
      EXPECT_EQ(fat[static_cast<size_t>(u * 8 + 4)], 0xee);  // gaps are not written
      for (int j = 0; j < 2; ++j) EXPECT_EQ(fat[static_cast<size_t>(u * 8 + 6 + j)], tab[static_cast<size_t>(rows[u] * 6 + 4 + j)]);
    }
    EXPECT_EQ(tally.bytes[static_cast<size_t>(Tier::kHost) * kNumTiers + static_cast<size_t>(Tier::kDevice)], 3u * 6u);
    // scatter back into an empty table: the three rows return, the others stay zero
    const kernels::RowCopy s[2] = {{back.data(), 6, rows, Tier::kHost, fat.data(), 8, nullptr, Tier::kDevice, 4},
                                   {back.data() + 4, 6, rows, Tier::kHost, fat.data() + 6, 8, nullptr, Tier::kDevice, 2}};
    be->copy_rows(s, 3, x);
    for (int r = 0; r < 10; ++r) {
      const bool moved = r == 7 || r == 2 || r == 9;
      for (int j = 0; j < 6; ++j)
        EXPECT_EQ(back[static_cast<size_t>(r * 6 + j)], moved ? tab[static_cast<size_t>(r * 6 + j)] : 0) << r << " " << j;
    }
    EXPECT_EQ(tally.bytes[static_cast<size_t>(Tier::kDevice) * kNumTiers + static_cast<size_t>(Tier::kHost)], 3u * 6u);
    // a copy within one tier records nothing
    be->copy(back.data(), Tier::kHost, tab.data(), Tier::kHost, tab.size(), x);
    EXPECT_EQ(back, tab);
    uint64_t total = 0;
    for (uint64_t b : tally.bytes) total += b;
    EXPECT_EQ(total, 2u * 3u * 6u);
  }
}

}  // namespace
}  // namespace leanemb
