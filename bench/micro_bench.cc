// Google Benchmark micro-benches of the fast kernels (src/kernels/kernels.h) and of one
// EmbeddingCollection step. Each benchmark first checks the kernel it times against the scalar
// reference on the same input (SkipWithError on mismatch), so a fast wrong kernel cannot win.
//
// Tables are fat-row buffers built with make_row_layout and filled through the reference store,
// the same way EmbeddingCollection builds them. Default sizes keep tables >= 4x L3 (128 MiB) for
// lookups so rows come from DRAM; pass --benchmark_filter to pick a few.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/row_access.h"
#include "leanemb/embedding.h"
#include "leanemb/device_arena.h"
#include "leanemb/memory.h"
#include "zipf.h"

namespace leanemb::bench {
namespace {

constexpr int kThreads = 2;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A fat-row table outside any collection: rows initialized with pseudo-random weights.
struct RawTable {
  RowLayout layout;
  std::unique_ptr<uint8_t, FreeDeleter> mem;
  int64_t rows = 0;
  kernels::TableView view() const { return kernels::TableView{mem.get(), &layout, rows, 0}; }
};

std::unique_ptr<RawTable> make_table(int64_t rows, int64_t dim, DType dt, OptimizerOptions opt) {
  auto l = make_row_layout(dim, dt, opt);
  if (!l.ok()) return nullptr;
  auto t = std::make_unique<RawTable>();
  t->layout = l.value();
  t->rows = rows;
  const size_t bytes = (static_cast<size_t>(rows) * t->layout.stride_bytes + 63) / 64 * 64;
  t->mem.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  if (!t->mem) return nullptr;
  std::memset(t->mem.get(), 0, bytes);
#pragma omp parallel num_threads(kThreads)
  {
    std::vector<float> w(static_cast<size_t>(dim));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      uint64_t z = static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull + 1;
      for (float& x : w) {
        z ^= z >> 33;
        z *= 0xff51afd7ed558ccdull;
        x = (static_cast<float>(z >> 40) / 16777216.0f - 0.5f) * 0.02f;
      }
      kernels::ref_store_weights_rne(t->layout, t->mem.get() + static_cast<size_t>(r) * t->layout.stride_bytes, w.data());
    }
  }
  return t;
}

// Google Benchmark calls a benchmark function several times (to size the iteration count); the
// expensive fixture (a table of hundreds of MiB, checked against the reference) is built once per
// benchmark name and kept until the next benchmark asks for another one.
template <typename T, typename Make>
T* cached(const std::string& key, Make&& make) {
  static std::string cached_key;
  static std::shared_ptr<void> value;
  if (cached_key != key || !value) {
    value.reset();  // free the previous fixture before building the next
    std::shared_ptr<T> v = make();
    value = v;
    cached_key = v ? key : std::string();
  }
  return static_cast<T*>(value.get());
}

IdBatch ids_for(int64_t rows, int64_t batch, int64_t bag, double alpha, uint64_t seed) {
  auto gen = IdGenerator::create({rows, batch, bag, alpha, seed});
  return gen.ok() ? gen.value().batch(0) : IdBatch{};
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// ---- BM_LookupPooled/dim:D/dtype:T -------------------------------------------------------------
// Pooled sum lookup of B=4096 bags x L=20 uniform ids over a table of >= 256 MiB.
void BM_LookupPooled(benchmark::State& state, int64_t dim, DType dt) {
  const int64_t row_bytes = static_cast<int64_t>(dtype_row_bytes(dt, dim));
  const int64_t rows = std::max<int64_t>(1 << 16, (int64_t{256} << 20) / row_bytes);
  const int64_t B = 4096, L = 20;
  struct Fixture {
    std::unique_ptr<RawTable> table;
    IdBatch ids;
    bool ok = false;
  };
  const std::string key = "lookup/" + std::to_string(dim) + "/" + std::to_string(static_cast<int>(dt));
  Fixture* f = cached<Fixture>(key, [&] {
    auto fx = std::make_shared<Fixture>();
    fx->table = make_table(rows, dim, dt, OptimizerOptions{});
    if (!fx->table) return fx;
    fx->ids = ids_for(rows, B, L, 1.0, 7);
    std::vector<float> out(static_cast<size_t>(B * dim)), ref(out.size());
    kernels::PooledArgs a{fx->ids.ids.data(), fx->ids.offsets.data(), nullptr, B, PoolingMode::kSum, out.data(), dim};
    kernels::pooled_lookup(fx->table->view(), a, kThreads);
    a.out = ref.data();
    kernels::ref_pooled_lookup(fx->table->view(), a);
    fx->ok = same_floats(out, ref);
    return fx;
  });
  if (!f || !f->table) return state.SkipWithError("table allocation failed");
  if (!f->ok) return state.SkipWithError("pooled_lookup differs from ref_pooled_lookup");
  const RawTable* t = f->table.get();
  std::vector<float> out(static_cast<size_t>(B * dim));
  kernels::PooledArgs a{f->ids.ids.data(), f->ids.offsets.data(), nullptr, B, PoolingMode::kSum, out.data(), dim};
  for (auto _ : state) {
    kernels::pooled_lookup(t->view(), a, kThreads);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(B * L * row_bytes + B * dim * 4);
  state.counters["GB"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["lookups"] = benchmark::Counter(static_cast<double>(B * L), benchmark::Counter::kIsIterationInvariantRate);
}

// ---- BM_UpdateRows/optimizer:K/dtype:T/state:S -------------------------------------------------
// Fused optimizer update of U = 65536 distinct sorted random rows of a 1M-row table, D = 128.
void BM_UpdateRows(benchmark::State& state, OptimizerKind k, DType dt, DType sd) {
  const int64_t dim = 128, rows = 1 << 20, U = 1 << 16;
  OptimizerOptions o;
  o.kind = k;
  o.eps = default_eps(k);
  o.state_dtype = sd;
  // Distinct sorted rows spread over the table: one random row in every block of rows / U.
  auto row_list = [](int64_t n, int64_t u_count) {
    std::vector<int64_t> r(static_cast<size_t>(u_count));
    const int64_t block = n / u_count;
    for (int64_t u = 0; u < u_count; ++u) r[static_cast<size_t>(u)] = u * block + (u * 7919) % block;
    return r;
  };
  auto grads = [&](int64_t u_count) {
    std::vector<float> g(static_cast<size_t>(u_count * dim));
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(static_cast<int64_t>(i * 2654435761u % 2001) - 1000) * 1e-5f;
    return g;
  };
  struct Fixture {
    std::unique_ptr<RawTable> table;
    bool ok = false;
  };
  const std::string key = "update/" + std::to_string(static_cast<int>(k)) + "/" + std::to_string(static_cast<int>(dt)) + "/" +
                          std::to_string(static_cast<int>(sd));
  Fixture* f = cached<Fixture>(key, [&] {
    auto fx = std::make_shared<Fixture>();
    // Check on a small table of the same layout: two steps through the fast kernel and through
    // the reference on a copy, compared byte for byte (weights and state).
    {
      const int64_t small_rows = 1 << 14, small_u = 1 << 10;
      auto a = make_table(small_rows, dim, dt, o), b = make_table(small_rows, dim, dt, o);
      if (!a || !b) return fx;
      const auto r = row_list(small_rows, small_u);
      const auto g = grads(small_u);
      for (int64_t step = 1; step <= 2; ++step) {
        kernels::update_rows(a->view(), r.data(), g.data(), small_u, {3, step}, kThreads);
        for (int64_t u = 0; u < small_u; ++u)
          kernels::ref_update_row(b->view(), r[static_cast<size_t>(u)], g.data() + u * dim, {3, step});
      }
      fx->ok = std::memcmp(a->mem.get(), b->mem.get(), static_cast<size_t>(small_rows) * a->layout.stride_bytes) == 0;
    }
    fx->table = make_table(rows, dim, dt, o);
    return fx;
  });
  if (!f || !f->table) return state.SkipWithError("table allocation failed");
  if (!f->ok) return state.SkipWithError("update_rows differs from ref_update_row");
  RawTable* t = f->table.get();
  const std::vector<int64_t> r = row_list(rows, U);
  const std::vector<float> g = grads(U);
  int64_t step = 3;
  for (auto _ : state) {
    kernels::update_rows(t->view(), r.data(), g.data(), U, {3, step++}, kThreads);
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(U) * (2.0 * static_cast<double>(t->layout.stride_bytes) + dim * 4.0);
  state.counters["GB"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["rows"] = benchmark::Counter(static_cast<double>(U), benchmark::Counter::kIsIterationInvariantRate);
}

// The dedup benchmarks' batch: 4096 x 20 Zipf(1.05) ids for range(1) = 81,920, else 8192 x 32
// Zipf(1.15) ids (range(1) = 262,144), over range(0) rows.
IdBatch dedup_bench_ids(const benchmark::State& state) {
  const int64_t bag = state.range(1) == 262144 ? 32 : 20, batch = state.range(1) / bag;
  return ids_for(state.range(0), batch, bag, bag == 32 ? 1.15 : 1.05, 11);
}

// ---- BM_RadixSortDedup/rows:R/ids:N ------------------------------------------------------------
// The dedup sort of one batch: the optimizer workload's 4096 x 20 Zipf(1.05) ids over 2M rows
// (21 row bits), and the tiered workload's 8192 x 32 Zipf(1.15) ids over 10M rows (24 bits).
void BM_RadixSortDedup(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const IdBatch ids = dedup_bench_ids(state);
  int row_bits = 0;
  while ((int64_t{1} << row_bits) < rows) ++row_bits;
  const int64_t n = static_cast<int64_t>(ids.ids.size());
  std::vector<uint64_t> keys0(static_cast<size_t>(n)), keys(keys0.size()), scratch(keys0.size());
  for (int64_t i = 0; i < n; ++i) keys0[static_cast<size_t>(i)] = (static_cast<uint64_t>(ids.ids[static_cast<size_t>(i)]) << 32) | static_cast<uint64_t>(i);
  keys = keys0;
  kernels::radix_sort_row_src(keys.data(), scratch.data(), n, row_bits);
  std::vector<uint64_t> want = keys0;
  std::stable_sort(want.begin(), want.end(), [](uint64_t a, uint64_t b) { return (a >> 32) < (b >> 32); });
  if (keys != want) return state.SkipWithError("radix_sort_row_src differs from std::stable_sort");
  for (auto _ : state) {
    std::memcpy(keys.data(), keys0.data(), keys.size() * 8);
    kernels::radix_sort_row_src(keys.data(), scratch.data(), n, row_bits);
    benchmark::DoNotOptimize(keys.data());
  }
  state.counters["keys"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

// ---- BM_UniqueFirstOccurrence/rows:R/ids:N ----------------------------------------------------
// The row cache's distinct rows of one batch (the same two batch shapes as BM_RadixSortDedup).
void BM_UniqueFirstOccurrence(benchmark::State& state) {
  const IdBatch ids = dedup_bench_ids(state);
  const int64_t n = static_cast<int64_t>(ids.ids.size());
  std::vector<int64_t> uniq(static_cast<size_t>(n));
  std::vector<uint32_t> inv(static_cast<size_t>(n));
  std::vector<uint64_t> keys(2 * static_cast<size_t>(n));
  // Gate: each id maps back to itself, and a new distinct row takes the next index (first
  // occurrence order).
  int64_t u = kernels::unique_first_occurrence(ids.ids.data(), n, uniq.data(), inv.data(), keys.data());
  int64_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = inv[static_cast<size_t>(i)];
    if (k > next || uniq[static_cast<size_t>(k)] != ids.ids[static_cast<size_t>(i)])
      return state.SkipWithError("unique_first_occurrence breaks its contract");
    if (k == next) ++next;
  }
  if (next != u) return state.SkipWithError("unique_first_occurrence miscounts its distinct rows");
  for (auto _ : state) {
    u = kernels::unique_first_occurrence(ids.ids.data(), n, uniq.data(), inv.data(), keys.data());
    benchmark::DoNotOptimize(uniq.data());
  }
  state.counters["distinct"] = static_cast<double>(u);
}

// ---- BM_StoreRowSrF16 ---------------------------------------------------------------------------
// The fp16 rows' stochastic-rounding store alone (kernels::store_row_sr_f16_fast, the build the
// CPU runs; LEANEMB_ISA caps it): 512 rows of 128 weights drawn from U(-0.05, 0.05), which stay
// in L2, so this times the arithmetic, not memory. Gate: bit-identical to store_row_sr<kF16>.
void BM_StoreRowSrF16(benchmark::State& state) {
  constexpr int64_t kDim = 128, kRows = 512;
  std::vector<float> w(static_cast<size_t>(kDim * kRows));
  uint64_t x = 88172645463325252ull;
  for (float& v : w) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = (static_cast<float>(x >> 40) / 16777216.0f - 0.5f) * 0.1f;
  }
  std::vector<uint16_t> got(w.size()), want(w.size());
  for (int64_t r = 0; r < kRows; ++r) {
    const size_t o = static_cast<size_t>(r * kDim);
    kernels::store_row_sr_f16_fast(reinterpret_cast<uint8_t*>(got.data() + o), w.data() + o, kDim, static_cast<uint32_t>(r), 0);
    kernels::store_row_sr<DType::kF16>(reinterpret_cast<uint8_t*>(want.data() + o), w.data() + o, kDim, static_cast<uint32_t>(r), 0);
  }
  if (got != want) return state.SkipWithError("store_row_sr_f16_fast differs from store_row_sr<kF16>");
  uint32_t key = 0;
  for (auto _ : state) {
    for (int64_t r = 0; r < kRows; ++r) {
      const size_t o = static_cast<size_t>(r * kDim);
      kernels::store_row_sr_f16_fast(reinterpret_cast<uint8_t*>(got.data() + o), w.data() + o, kDim, key++, 0);
    }
    benchmark::DoNotOptimize(got.data());
  }
  state.counters["rows"] = benchmark::Counter(static_cast<double>(kRows), benchmark::Counter::kIsIterationInvariantRate);
}

// ---- BM_CollectionStep/optimizer:K/dtype:T -----------------------------------------------------
// One EmbeddingCollection training step (forward + backward_update) of the optimizer workload's
// batch shape on a 1M-row table: validation, lookup, dedup, segment reduce and fused update.
void BM_CollectionStep(benchmark::State& state, OptimizerKind k, DType dt) {
  const int64_t rows = 1000000, dim = 128, B = 4096, L = 20;
  auto make = [&](bool reference, TrackingAllocator* alloc) {
    CollectionOptions co;
    TableOptions to;
    to.name = "t";
    to.num_rows = rows;
    to.dim = dim;
    to.dtype = dt;
    to.optimizer.kind = k;
    to.optimizer.eps = default_eps(k);
    co.tables.push_back(to);
    co.features.push_back(FeatureOptions{"f", 0, PoolingMode::kSum});
    co.seed = 5;
    co.num_threads = kThreads;
    co.use_reference_kernels = reference;
    return EmbeddingCollection::create(co, alloc);
  };
  struct Fixture {
    TrackingAllocator alloc;
    std::unique_ptr<EmbeddingCollection> coll;
    IdBatch ids;
    std::string error;
    ~Fixture() { coll.reset(); }
  };
  std::vector<float> grad(static_cast<size_t>(B * dim));
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(static_cast<int64_t>(i % 201) - 100) * 1e-4f;
  const std::string key = "step/" + std::to_string(static_cast<int>(k)) + "/" + std::to_string(static_cast<int>(dt));
  Fixture* f = cached<Fixture>(key, [&] {
    auto fx = std::make_shared<Fixture>();
    auto c = make(false, &fx->alloc);
    if (!c.ok()) {
      fx->error = c.status().to_string();
      return fx;
    }
    fx->coll = std::move(c).value();
    fx->ids = ids_for(rows, B, L, 1.05, 13);
    // Check: one step and a forward through a reference-kernel collection with the same seed.
    TrackingAllocator ref_alloc;
    auto r = make(true, &ref_alloc);
    if (!r.ok()) {
      fx->error = r.status().to_string();
      return fx;
    }
    SparseBatch sb;
    sb.batch_size = B;
    sb.features.push_back(FeatureInput{fx->ids.ids, fx->ids.offsets, {}});
    std::vector<float> out(static_cast<size_t>(B * dim)), ref_out(out.size());
    const bool ok = fx->coll->backward_update(sb, grad).ok() && r.value()->backward_update(sb, grad).ok() &&
                    fx->coll->forward(sb, out).ok() && r.value()->forward(sb, ref_out).ok();
    r.value().reset();
    if (!ok || !same_floats(out, ref_out)) fx->error = "collection step differs from the reference collection";
    return fx;
  });
  if (!f->error.empty()) return state.SkipWithError(f->error.c_str());
  auto* c = &f->coll;
  SparseBatch sb;
  sb.batch_size = B;
  sb.features.push_back(FeatureInput{f->ids.ids, f->ids.offsets, {}});
  std::vector<float> out(static_cast<size_t>(B * dim));
  for (auto _ : state) {
    if (!(*c)->forward(sb, out).ok()) return state.SkipWithError("forward failed");
    auto rep = (*c)->backward_update(sb, grad);
    if (!rep.ok()) return state.SkipWithError("backward_update failed");
    benchmark::DoNotOptimize(rep.value().unique_rows);
  }
  state.counters["lookups"] = benchmark::Counter(static_cast<double>(B * L), benchmark::Counter::kIsIterationInvariantRate);
}

std::string dt_name(DType t) { return std::string(dtype_name(t)); }

void register_all() {
  for (int64_t dim : {64, 128, 256})
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise})
      benchmark::RegisterBenchmark(("BM_LookupPooled/dim:" + std::to_string(dim) + "/dtype:" + dt_name(dt)).c_str(),
                                   BM_LookupPooled, dim, dt)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  using K = OptimizerKind;
  struct U {
    K k;
    DType dt;
    DType sd;
  };
  for (U u : {U{K::kSgd, DType::kF32, DType::kF32}, U{K::kAdagrad, DType::kF32, DType::kF32},
              U{K::kRowwiseAdagrad, DType::kF32, DType::kF32}, U{K::kAdam, DType::kF32, DType::kF32},
              U{K::kPartialRowwiseAdam, DType::kF32, DType::kF32}, U{K::kAdam, DType::kF32, DType::kBF16},
              U{K::kAdam, DType::kF32, DType::kInt8Blockwise}, U{K::kRowwiseAdagrad, DType::kBF16, DType::kF32},
              U{K::kRowwiseAdagrad, DType::kF16, DType::kF32}, U{K::kAdagrad, DType::kQ8, DType::kInt8Blockwise},
              U{K::kAdagrad, DType::kQ8, DType::kInt4Blockwise}, U{K::kAdam, DType::kQ8, DType::kInt4Blockwise},
              U{K::kAdagrad, DType::kQ8, DType::kF32}, U{K::kAdagrad, DType::kF32, DType::kInt4Blockwise},
              U{K::kAdagrad, DType::kBF16, DType::kF32}})
    benchmark::RegisterBenchmark(("BM_UpdateRows/optimizer:" + std::string(optimizer_name(u.k)) + "/dtype:" +
                                  dt_name(u.dt) + "/state:" + std::string(dtype_name(u.sd)))
                                     .c_str(),
                                 BM_UpdateRows, u.k, u.dt, u.sd)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  // The two dedup batch shapes (dedup_bench_ids).
  for (auto [name, fn] : {std::pair{"BM_RadixSortDedup", &BM_RadixSortDedup},
                          std::pair{"BM_UniqueFirstOccurrence", &BM_UniqueFirstOccurrence}})
    benchmark::RegisterBenchmark(name, fn)
        ->ArgNames({"rows", "ids"})
        ->Args({2000000, 81920})
        ->Args({10000000, 262144})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  benchmark::RegisterBenchmark("BM_StoreRowSrF16", BM_StoreRowSrF16)->Unit(benchmark::kMicrosecond)->UseRealTime();
  for (K k : {K::kSgd, K::kAdagrad, K::kRowwiseAdagrad, K::kAdam})
    benchmark::RegisterBenchmark(("BM_CollectionStep/optimizer:" + std::string(optimizer_name(k)) + "/dtype:fp32").c_str(),
                                 BM_CollectionStep, k, DType::kF32)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  benchmark::RegisterBenchmark("BM_CollectionStep/optimizer:rowwise_adagrad/dtype:bf16", BM_CollectionStep,
                               K::kRowwiseAdagrad, DType::kBF16)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}


// ---- allocators: cached alloc/free against the C library ----------------------------------------
// One alloc + one free per iteration over a fixed, seeded cycle of 64 sizes (log-uniform 256 B to
// 4 MiB) with 16 blocks live (FIFO), the pattern of a training step's scratch buffers. The memory
// is not touched: this times the allocator alone. glibc serves large requests with mmap/munmap,
// which is what a caching allocator avoids (as cudaMalloc on a GPU).
enum class AllocKind { kMalloc, kDeviceArena, kTracking };

void BM_AllocFree(benchmark::State& state, AllocKind kind) {
  std::vector<size_t> sizes(64);
  uint64_t x = 12345;
  for (auto& s : sizes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(x >> 11) / 9007199254740992.0;
    s = static_cast<size_t>(256.0 * std::pow(16384.0, u));  // 256 B .. 4 MiB
  }
  constexpr size_t kLive = 16;
  std::unique_ptr<Allocator> alloc;
  if (kind == AllocKind::kDeviceArena) {
    DeviceArenaOptions o;
    o.budget_bytes = size_t{1} << 30;
    auto a = DeviceArena::create(o);
    if (!a.ok()) return state.SkipWithError(a.status().to_string().c_str());
    alloc = std::move(a).value();
  } else if (kind == AllocKind::kTracking) {
    alloc = std::make_unique<TrackingAllocator>();
  }
  std::vector<Allocation> ring(kLive);
  std::vector<void*> raw(kLive, nullptr);
  size_t i = 0;
  for (auto _ : state) {
    const size_t slot = i % kLive, bytes = sizes[i % sizes.size()];
    if (kind == AllocKind::kMalloc) {
      std::free(raw[slot]);
      raw[slot] = std::malloc(bytes);
      benchmark::DoNotOptimize(raw[slot]);
    } else {
      ring[slot] = Allocation();  // frees the oldest block
      auto a = alloc->allocate(bytes, Category::kWorkspace);
      if (!a.ok()) return state.SkipWithError(a.status().to_string().c_str());
      ring[slot] = std::move(a).value();
      benchmark::DoNotOptimize(ring[slot].data());
    }
    ++i;
  }
  for (void* p : raw) std::free(p);
  ring.clear();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetLabel("one alloc + one free per item");
}
BENCHMARK_CAPTURE(BM_AllocFree, malloc, AllocKind::kMalloc);
BENCHMARK_CAPTURE(BM_AllocFree, device_arena, AllocKind::kDeviceArena);
BENCHMARK_CAPTURE(BM_AllocFree, tracking_allocator, AllocKind::kTracking);

}  // namespace
}  // namespace leanemb::bench

int main(int argc, char** argv) {
  leanemb::bench::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
