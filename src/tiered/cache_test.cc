// Tests of tables behind the device-tier row cache: a cached table against the all-resident
// table (bit for bit, after every step, over randomized configurations), the collection's
// prefetch pipeline and its option errors. The RowCache itself: row_cache_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "table/table_testing.h"
#include "tiered/row_cache.h"
#include "tiered/cache_testing.h"
#include "tiered/sizes.h"

namespace leanemb {
namespace {

using table_testing::OwnedBatch;
using table_testing::same_bytes;
using table_testing::snapshot;
using tiered::testing_util::TempDir;

struct Config {
  CollectionOptions options;
  bool integer_data = false;
  bool prefetch = false;
  std::string describe;
};

// A random configuration: 1-2 tables, 1-3 features (sum / mean / sequence), a random dtype and
// optimizer, a cache of 15-60% of the rows (always at least two steps' rows when prefetching,
// so prefetch has room), host or file store, LRU, LFU or CLOCK.
Config random_config(uint64_t seed, const TempDir& dir, int64_t B, int64_t max_ids_per_bag) {
  std::mt19937_64 rng(seed);
  Config c;
  const bool integer = seed % 2 == 0;
  c.integer_data = integer;
  c.prefetch = (seed / 2) % 2 == 0;
  const OptimizerKind kinds[] = {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                                 OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam};
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  const int num_tables = 1 + static_cast<int>(rng() % 2);
  const int num_features = 1 + static_cast<int>(rng() % 3);
  std::vector<int64_t> features_of(static_cast<size_t>(num_tables), 0);
  for (int f = 0; f < num_features; ++f) {
    const PoolingMode modes[] = {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone};
    PoolingMode p = modes[rng() % 3];
    if (integer && p == PoolingMode::kMean) p = PoolingMode::kSum;
    const int t = f < num_tables ? f : static_cast<int>(rng() % num_tables);
    ++features_of[static_cast<size_t>(t)];
    c.options.features.push_back({std::string("f") + std::to_string(f), t, p});
  }
  for (int t = 0; t < num_tables; ++t) {
    // Integer data: SGD with lr 1 in fp32 keeps every value an integer, so any reordering of
    // arithmetic would still give exact results; the other configurations are bitwise checks of
    // real-valued training.
    const OptimizerKind k = integer ? OptimizerKind::kSgd : kinds[rng() % 5];
    const DType dt = integer ? DType::kF32 : dtypes[rng() % 3];
    DType st = DType::kF32;
    if (!integer && (k == OptimizerKind::kAdam || k == OptimizerKind::kAdagrad) && rng() % 3 == 0)
      st = t % 2 ? DType::kInt8Blockwise : DType::kInt4Blockwise;
    const int64_t rows = 100 + static_cast<int64_t>(rng() % 300);
    const int64_t dims[] = {4, 8, 13, 16, 33};
    TableOptions to = table_testing::table(std::string("t").append(std::to_string(t)), rows, dims[rng() % 5], k, dt, st);
    if (integer) to.optimizer.learning_rate = 1.0f;
    // The most distinct rows one step can touch; the cache must hold one step (two when
    // prefetching, so the prefetch has room); beyond that it is 10-40% of the rows.
    const int64_t step_rows = std::min<int64_t>(rows, features_of[static_cast<size_t>(t)] * B * max_ids_per_bag);
    const double fraction = 0.10 + 0.30 * static_cast<double>(rng() % 100) / 100.0;
    const int64_t need = std::min<int64_t>(rows, (c.prefetch ? 2 : 1) * step_rows);
    to.cache.capacity_rows = std::max(tiered::cache_capacity_rows(rows, fraction), need);
    const CachePolicy policies[] = {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kClock};
    to.cache.policy = policies[rng() % 3];
    to.cache.store = rng() % 2 ? StoreKind::kHost : StoreKind::kFile;
    // Half the file stores are logs (decided outside rng, which keeps every other draw as it was).
    to.cache.store_layout = (seed + static_cast<uint64_t>(t)) % 2 == 1 ? FileStoreLayout::kLog : FileStoreLayout::kInPlace;
    to.cache.store_path = dir.file(std::string("cfg") + std::to_string(seed) + "_t" + std::to_string(t) + ".rows");
    c.options.tables.push_back(to);
  }
  c.options.seed = seed;
  c.options.num_threads = 2;
  c.describe = std::string("seed ") + std::to_string(seed) + (integer ? " integer" : " real") +
               (c.prefetch ? " prefetch" : " no-prefetch");
  // Appended piece by piece: GCC 12 reports a false -Wrestrict for a long chain of operator+ here.
  for (const auto& t : c.options.tables) {
    for (std::string_view piece : {std::string_view(" ["), std::string_view(t.name), std::string_view(" ")}) c.describe += piece;
    c.describe += std::to_string(t.num_rows) + "x" + std::to_string(t.dim) + " ";
    for (std::string_view piece : {dtype_name(t.dtype), std::string_view(" cap ")}) c.describe += piece;
    c.describe += std::to_string(t.cache.capacity_rows);
    for (std::string_view piece : {std::string_view(" "), store_kind_name(t.cache.store), std::string_view(" "),
                                   t.cache.store == StoreKind::kFile ? file_store_layout_name(t.cache.store_layout) : "",
                                   std::string_view(" "),
                                   tiered::cache_policy_name(t.cache.policy), std::string_view("]")})
      c.describe += piece;
  }
  return c;
}

// Batches with ids over the whole table (Zipf-like skew: small ids more likely), so that the
// cache both hits and evicts.
OwnedBatch skewed_batch(const CollectionOptions& o, int64_t B, int64_t max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  OwnedBatch b;
  b.B = B;
  for (const FeatureOptions& f : o.features) {
    const int64_t rows = o.tables[f.table].num_rows;
    std::vector<int64_t> ids, offs{0};
    for (int64_t bag = 0; bag < B; ++bag) {
      const int64_t len = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_len + 1));
      for (int64_t i = 0; i < len; ++i) {
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        ids.push_back(std::min<int64_t>(rows - 1, static_cast<int64_t>(static_cast<double>(rows) * u * std::sqrt(u))));
      }
      offs.push_back(static_cast<int64_t>(ids.size()));
    }
    std::vector<float> w;
    if (f.pooling == PoolingMode::kMean)
      for (size_t i = 0; i < ids.size(); ++i) w.push_back(0.5f + 0.25f * static_cast<float>(rng() % 4));
    b.ids.push_back(ids);
    b.offsets.push_back(offs);
    b.weights.push_back(w);
  }
  return b;
}

std::vector<float> grads(size_t n, uint64_t seed, bool integer) {
  std::mt19937_64 rng(seed);
  std::vector<float> g(n);
  for (auto& x : g) x = integer ? static_cast<float>(static_cast<int>(rng() % 7) - 3) : std::normal_distribution<float>(0, 1)(rng);
  return g;
}

size_t seq_floats(const EmbeddingCollection& c, const OwnedBatch& b, int f) {
  return b.ids[f].size() * static_cast<size_t>(c.options().tables[c.options().features[f].table].dim);
}

// One step on both collections: forward (outputs must agree), optional prefetch of the next
// batch (after the forward, or before it when `prefetch_first`: the pipelined order, in which
// the collection defers it until the forward has taken the outstanding prefetch), backward with
// the same gradients.
void step_both(EmbeddingCollection& cached, EmbeddingCollection& ref, const OwnedBatch& b, const OwnedBatch* next,
               bool integer, uint64_t seed, bool prefetch_first = false) {
  const size_t P = static_cast<size_t>(b.B * cached.pooled_dim());
  std::vector<float> out_c(P), out_r(P);
  std::vector<std::vector<float>> seq_c, seq_r, gseq;
  for (int f = 0; f < cached.num_features(); ++f) {
    if (cached.options().features[f].pooling != PoolingMode::kNone) continue;
    seq_c.emplace_back(seq_floats(cached, b, f));
    seq_r.emplace_back(seq_floats(cached, b, f));
    gseq.push_back(grads(seq_floats(cached, b, f), seed * 31 + static_cast<uint64_t>(f), integer));
  }
  std::vector<std::span<float>> sc(seq_c.begin(), seq_c.end()), sr(seq_r.begin(), seq_r.end());
  std::vector<std::span<const float>> gs(gseq.begin(), gseq.end());
  if (next && prefetch_first) {
    ASSERT_TRUE(cached.prefetch(next->view()).ok());
  }
  ASSERT_TRUE(cached.forward(b.view(), out_c, sc).ok());
  ASSERT_TRUE(ref.forward(b.view(), out_r, sr).ok());
  ASSERT_TRUE(P == 0 || std::memcmp(out_c.data(), out_r.data(), P * 4) == 0) << "pooled forward differs";
  for (size_t s = 0; s < seq_c.size(); ++s) ASSERT_EQ(seq_c[s], seq_r[s]) << "sequence forward differs";
  if (next && !prefetch_first) {
    ASSERT_TRUE(cached.prefetch(next->view()).ok());
  }
  const auto G = grads(P, seed, integer);
  auto rc = cached.backward_update(b.view(), G, gs);
  auto rr = ref.backward_update(b.view(), G, gs);
  ASSERT_TRUE(rc.ok()) << rc.status().to_string();
  ASSERT_TRUE(rr.ok()) << rr.status().to_string();
  ASSERT_EQ(rc.value().unique_rows, rr.value().unique_rows);
}

TEST(CacheVsReference, cache_vs_reference_exact) {
  TempDir dir;
  constexpr int kConfigs = 48;
  constexpr int64_t kB = 4, kMaxLen = 3;
  int with_evictions = 0, file_configs = 0, prefetch_configs = 0, prefetch_first_configs = 0, clock_evicting = 0, log_configs = 0;
  for (int cfg = 0; cfg < kConfigs; ++cfg) {
    const Config c = random_config(1000 + static_cast<uint64_t>(cfg), dir, kB, kMaxLen);
    SCOPED_TRACE(c.describe);
    CollectionOptions resident = c.options;
    for (auto& t : resident.tables) t.cache = TableCacheOptions{};
    auto cached = EmbeddingCollection::create(c.options);
    ASSERT_TRUE(cached.ok()) << cached.status().to_string();
    auto ref = table_testing::must_create(resident);
    ASSERT_TRUE(ref);
    EmbeddingCollection& C = *cached.value();
    if (c.integer_data) {
      // Integer-valued weights on both (written through the cache's store path).
      for (int t = 0; t < ref->num_tables(); ++t) {
        const auto& to = resident.tables[t];
        std::vector<float> w(static_cast<size_t>(to.num_rows * to.dim));
        for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i * 7 % 11) - 5);
        ASSERT_TRUE(ref->write_rows(t, 0, to.num_rows, w).ok());
        ASSERT_TRUE(C.write_rows(t, 0, to.num_rows, w).ok());
      }
    }
    ASSERT_TRUE(same_bytes(snapshot(C), snapshot(*ref)));
    std::vector<OwnedBatch> batches;
    for (int s = 0; s < 13; ++s) batches.push_back(skewed_batch(c.options, kB, kMaxLen, 77 * static_cast<uint64_t>(cfg) + static_cast<uint64_t>(s)));
    for (size_t s = 0; s + 1 < batches.size(); ++s) {
      step_both(C, *ref, batches[s], c.prefetch ? &batches[s + 1] : nullptr, c.integer_data, 5 * s + 1,
                /*prefetch_first=*/cfg % 3 == 0);
      if (HasFatalFailure()) return;
      ASSERT_TRUE(same_bytes(snapshot(C), snapshot(*ref))) << "after step " << s;
    }
    bool evicted = false;
    for (int t = 0; t < C.num_tables(); ++t) {
      auto st = C.cache_stats(t);
      ASSERT_TRUE(st.ok());
      evicted = evicted || st.value().evictions > 0;
      if (st.value().evictions > 0 && c.options.tables[t].cache.policy == CachePolicy::kClock) ++clock_evicting;
      if (c.options.tables[t].cache.store == StoreKind::kFile) ++file_configs;
      if (c.options.tables[t].cache.store == StoreKind::kFile &&
          c.options.tables[t].cache.store_layout == FileStoreLayout::kLog)
        ++log_configs;
    }
    with_evictions += evicted ? 1 : 0;
    prefetch_configs += c.prefetch ? 1 : 0;
    prefetch_first_configs += c.prefetch && cfg % 3 == 0 ? 1 : 0;
    // A flush changes nothing visible.
    ASSERT_TRUE(C.flush().ok());
    ASSERT_TRUE(same_bytes(snapshot(C), snapshot(*ref)));
  }
  // The generator must really cover what the test claims.
  EXPECT_GE(with_evictions, kConfigs * 3 / 4);
  EXPECT_GE(file_configs, 10);
  EXPECT_GE(log_configs, 4);
  EXPECT_GE(prefetch_configs, 10);
  EXPECT_GE(prefetch_first_configs, 4);
  EXPECT_GE(clock_evicting, 8);  // CLOCK tables that evicted
}

// The prefetch / write-back pipeline with the caller's thread and the cache's prefetch thread
// working at once: a small cache (many dirty evictions) over both stores, with LRU and CLOCK,
// prefetch every step. OpenMP runs one thread, so that ThreadSanitizer (the tsan preset runs
// this test) sees only the cache's own threads: Debian's libgomp is not instrumented.
TEST(TsanPipeline, PrefetchAndWriteBackAgreeWithResident) {
  TempDir dir;
  for (int store_case = 0; store_case < 3; ++store_case) {  // host, file in place, file log
    const StoreKind store = store_case == 0 ? StoreKind::kHost : StoreKind::kFile;
    const FileStoreLayout layout = store_case == 2 ? FileStoreLayout::kLog : FileStoreLayout::kInPlace;
    for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kClock}) {
      const bool prefetch_first = policy == CachePolicy::kClock;  // the pipelined order
      SCOPED_TRACE(std::string(store_kind_name(store)) + " " + std::to_string(store_case) + " " +
                   std::string(tiered::cache_policy_name(policy)) + (prefetch_first ? " prefetch first" : ""));
      CollectionOptions o;
      TableOptions t = table_testing::table("t0", 3000, 16, OptimizerKind::kAdam, DType::kBF16);
      o.tables = {t};
      o.features = {{"f0", 0, PoolingMode::kSum}, {"f1", 0, PoolingMode::kMean}};
      o.seed = 3;
      o.num_threads = 1;
      CollectionOptions cached_opts = o;
      cached_opts.tables[0].cache.capacity_rows = 400;
      cached_opts.tables[0].cache.policy = policy;
      cached_opts.tables[0].cache.store = store;
      cached_opts.tables[0].cache.store_layout = layout;
      cached_opts.tables[0].cache.store_path = dir.file(std::string("pipeline_") + std::to_string(store_case) + "_" +
                                                        std::string(tiered::cache_policy_name(policy)) + ".rows");
      auto cached = EmbeddingCollection::create(cached_opts);
      ASSERT_TRUE(cached.ok()) << cached.status().to_string();
      auto ref = table_testing::must_create(o);
      std::vector<OwnedBatch> batches;
      for (int s = 0; s < 31; ++s) batches.push_back(skewed_batch(o, 16, 5, 900 + static_cast<uint64_t>(s)));
      for (size_t s = 0; s + 1 < batches.size(); ++s) {
        step_both(*cached.value(), *ref, batches[s], &batches[s + 1], false, s + 7, prefetch_first);
        if (HasFatalFailure()) return;
      }
      ASSERT_TRUE(same_bytes(snapshot(*cached.value()), snapshot(*ref)));
      const RowCacheStats st = cached.value()->cache_stats(0).value();
      EXPECT_GT(st.writebacks, 100u);
      EXPECT_GT(st.prefetched_rows, 100u);
    }
  }
}

// The pipelined order (prefetch(k + 1) before forward(k), from the first step on): every forward
// after the first takes the prefetch that the forward before it started, and after the first
// forward, which fetches its own rows, every miss is fetched by a prefetch. A collection that
// started prefetch(k + 1) at once would make every forward miss its prefetch (its rows then
// found by lookups or fetched by the step).
// One Adagrad table of 5000 x 8 rows, one summed feature, one thread (no cache).
CollectionOptions pipeline_options() {
  CollectionOptions o;
  o.tables = {table_testing::table("t0", 5000, 8, OptimizerKind::kAdagrad, DType::kF32)};
  o.features = {{"f0", 0, PoolingMode::kSum}};
  o.seed = 5;
  o.num_threads = 1;
  return o;
}

TEST(CachePipeline, PrefetchBeforeForwardOverlapsTheNextStep) {
  const CollectionOptions o = pipeline_options();
  CollectionOptions cached_opts = o;
  cached_opts.tables[0].cache.capacity_rows = 600;
  auto cached = EmbeddingCollection::create(cached_opts);
  ASSERT_TRUE(cached.ok()) << cached.status().to_string();
  auto ref = table_testing::must_create(o);
  std::vector<OwnedBatch> batches;
  for (int s = 0; s < 12; ++s) batches.push_back(skewed_batch(o, 32, 6, 4100 + static_cast<uint64_t>(s)));
  uint64_t first_step_misses = 0;
  for (size_t s = 0; s + 1 < batches.size(); ++s) {
    step_both(*cached.value(), *ref, batches[s], &batches[s + 1], false, s + 3, /*prefetch_first=*/true);
    if (HasFatalFailure()) return;
    const RowCacheStats st = cached.value()->cache_stats(0).value();
    if (s == 0) first_step_misses = st.misses - st.prefetched_rows;
    EXPECT_EQ(st.misses - st.prefetched_rows, first_step_misses) << "forward " << s << " fetched rows itself";
    EXPECT_EQ(st.prefetches_taken, s) << "forward " << s;
  }
  ASSERT_TRUE(same_bytes(snapshot(*cached.value()), snapshot(*ref)));
  const RowCacheStats st = cached.value()->cache_stats(0).value();
  EXPECT_GT(first_step_misses, 0u);
  EXPECT_GT(st.prefetched_rows, 500u);
  EXPECT_GT(st.evictions, 0u);
}

// wait_prefetch() returns once the prefetch has fetched every row (counted in the stats before
// the forward runs); the forward then takes the rows and fetches none itself.
TEST(CachePipeline, WaitPrefetchFinishesTheFetchTheForwardTakes) {
  CollectionOptions o = pipeline_options();
  o.tables[0].cache.capacity_rows = 600;
  o.tables[0].cache.prefetch_nice = 19;  // the fetch is slow to get a core: the wait must wait
  auto c = EmbeddingCollection::create(o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EmbeddingCollection& coll = *c.value();
  EXPECT_TRUE(coll.wait_prefetch().ok());  // nothing outstanding: returns at once
  const OwnedBatch b = skewed_batch(o, 64, 6, 77);
  ASSERT_TRUE(coll.prefetch(b.view()).ok());
  ASSERT_TRUE(coll.wait_prefetch().ok());
  const RowCacheStats waited = coll.cache_stats(0).value();
  EXPECT_GT(waited.prefetched_rows, 0u);
  EXPECT_EQ(waited.misses, waited.prefetched_rows);  // the batch's every row, all by the prefetch
  std::vector<float> out(static_cast<size_t>(b.B * 8));
  ASSERT_TRUE(coll.forward(b.view(), out).ok());
  const RowCacheStats st = coll.cache_stats(0).value();
  EXPECT_EQ(st.prefetches_taken, 1u);
  EXPECT_EQ(st.misses, waited.misses);
}

TEST(CachedCollection, OptionsErrors) {
  CollectionOptions o = table_testing::standard_options();
  o.tables[0].cache.fraction = 0.5;
  o.tables[0].cache.store = static_cast<StoreKind>(7);  // no such store
  auto r = EmbeddingCollection::create(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  o.tables[0].cache.store = StoreKind::kFile;  // no path
  r = EmbeddingCollection::create(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(table_testing::contains(r.status().message(), "store_path")) << r.status().message();
  o.tables[0].cache.store = StoreKind::kHost;
  o.tables[0].cache.fraction = 1.5;
  EXPECT_EQ(EmbeddingCollection::create(o).status().code(), StatusCode::kInvalidArgument);
  o.tables[0].cache.fraction = 0.5;
  o.tables[0].cache.prefetch_nice = 20;
  r = EmbeddingCollection::create(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(table_testing::contains(r.status().message(), "prefetch_nice")) << r.status().message();
  o.tables[0].cache.prefetch_nice = 19;
  // A placement that splits weights and optimizer state does not apply to a cached table: its
  // fat rows stay together in the store (host tier) and the cache (device tier).
  MemorySystemOptions mo;
  mo.placement = parse_placement("weights=host").value();
  auto mem = MemorySystem::create(mo).value();
  o.tables[0].cache.fraction = 0.5;
  auto split = EmbeddingCollection::create(o, mem.get());
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  EXPECT_GT(mem->stats()[0][Category::kRowCache].current_bytes, 0u);
  EXPECT_GE(mem->stats()[1][Category::kWeights].current_bytes,
            static_cast<size_t>(o.tables[0].num_rows) * split.value()->layout(0).stride_bytes);
  EXPECT_FALSE(EmbeddingCollection::create(table_testing::standard_options()).value()->cache_stats(0).ok());
}

TEST(CachedCollection, TooSmallForOneBatchIsAClearError) {
  CollectionOptions o = table_testing::standard_options();
  o.tables[0].cache.capacity_rows = 2;
  auto c = EmbeddingCollection::create(o).value();
  const OwnedBatch b = table_testing::standard_batch();
  std::vector<float> out(static_cast<size_t>(b.B * c->pooled_dim()));
  const Status s = c->forward(b.view(), out);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(table_testing::contains(s.message(), "t0")) << s.message();
}

}  // namespace
}  // namespace leanemb
