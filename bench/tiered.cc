// The `tiered` workload: one table behind a device-tier row cache over a host or file store,
// against the same table fully resident, on a fresh Zipf id stream (no batch repeats, so the
// cache sees production-like traffic rather than a cycle of a few batches).
//
// Per contender: warm-up steps (the cache fills), then measured steps in interleaved rounds
// (blocks of steps, rotating order), each step = forward, prefetch of the next batch (cached,
// --prefetch on), backward_update. Reported: step time median / p10 / p90 and the ratio cached /
// resident, the cache's hit rate over the measured steps next to an offline LRU simulation of
// the same trace (same capacity, same warm-up), bytes read and written per step per tier, fetch
// time hidden vs exposed, memory by tier and category, peak RSS, and for the file store the
// store's achieved random-read IOPS next to a same-run O_DIRECT random-read probe of the same
// file. A gate compares sampled rows (weights and optimizer state) of the two contenders bit for
// bit. `--policy a,b` runs one cached contender per policy in the same interleaved rounds
// (summary.policies: each one's step time, its ratio over the first policy's and over resident,
// hit rate and index bytes per cached row; the gate checks each against resident). `--sweep`
// instead reports hit rates for every --sweep-fractions x --sweep-alphas (x policy) pair.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <list>
#include <random>
#include <unordered_map>

#include "bench_internal.h"
#include "leanemb/disk_probe.h"
#include "tiered/file_io.h"
#include "tiered/row_cache.h"
#include "leanemb/json.h"

namespace leanemb::bench {
namespace internal {
namespace {

struct TieredShape {
  int64_t rows, dim, batch, bag;
  double alpha;
  DType dtype;
  OptimizerOptions optimizer;
};

// Distinct rows of each batch in first-occurrence order: the trace the cache sees.
std::vector<int64_t> distinct_rows(const std::vector<int64_t>& ids) {
  std::vector<int64_t> out;
  std::unordered_map<int64_t, char> seen;
  seen.reserve(ids.size() * 2);
  for (int64_t r : ids)
    if (seen.emplace(r, 1).second) out.push_back(r);
  return out;
}

// Offline LRU over the per-step distinct rows: the hit rate of the measured steps (those from
// `first_measured` on), after the earlier steps warmed it.
double simulate_lru(const std::vector<std::vector<int64_t>>& steps, size_t first_measured, int64_t capacity) {
  std::list<int64_t> order;  // front = most recent
  std::unordered_map<int64_t, std::list<int64_t>::iterator> where;
  where.reserve(static_cast<size_t>(capacity) * 2);
  uint64_t lookups = 0, misses = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (int64_t r : steps[s]) {
      auto it = where.find(r);
      const bool measured = s >= first_measured;
      if (measured) ++lookups;
      if (it != where.end()) {
        order.splice(order.begin(), order, it->second);
        continue;
      }
      if (measured) ++misses;
      if (static_cast<int64_t>(where.size()) >= capacity) {
        where.erase(order.back());
        order.pop_back();
      }
      order.push_front(r);
      where[r] = order.begin();
    }
  }
  return lookups ? 1.0 - static_cast<double>(misses) / static_cast<double>(lookups) : 0.0;
}

struct Run {
  std::string name;
  Engine e;
  bool cached = false;
  CachePolicy policy = CachePolicy::kLru;  // cached
  std::vector<double> step_ms;
  // The measured steps' parts: forward (its wait for the prefetch included), and the rest
  // (starting the next prefetch, backward_update).
  std::vector<double> forward_ms, update_ms;
  bool timing = false;  // record the parts (measured steps only)
  RowCacheStats after_warmup{};
  TransferStats transfers_after_warmup{};
  size_t next = 0;  // next batch index
  Run(std::string n, Engine en) : name(std::move(n)), e(std::move(en)) {}
};

Result<Engine> make_engine(const TieredShape& s, const BenchOptions& o, const TableCacheOptions* cache) {
  TableOptions t;
  t.num_rows = s.rows;
  t.dim = s.dim;
  t.dtype = s.dtype;
  t.optimizer = s.optimizer;
  if (cache) t.cache = *cache;
  return build_one_table_engine(t, o.memory, o.seed, o.threads);
}

Status one_step(Run& r, const std::vector<IdBatch>& batches, const std::vector<float>& grad, int64_t B,
                std::vector<float>& out, bool prefetch) {
  const IdBatch& b = batches[r.next];
  SparseBatch sb;
  sb.batch_size = B;
  sb.features.push_back({b.ids, b.offsets, {}});
  const auto t0 = Clock::now();
  // The next batch's prefetch is called before this forward: it starts once the forward holds
  // this batch's rows, so the fetch overlaps the forward's compute and the update
  // (docs/tiered.md, Pipelining).
  if (r.cached && prefetch && r.next + 1 < batches.size()) {
    SparseBatch nb;
    nb.batch_size = B;
    nb.features.push_back({batches[r.next + 1].ids, batches[r.next + 1].offsets, {}});
    LEANEMB_RETURN_IF_ERROR(r.e.coll->prefetch(nb));
  }
  LEANEMB_RETURN_IF_ERROR(r.e.coll->forward(sb, out));
  const auto t1 = Clock::now();
  LEANEMB_RETURN_IF_ERROR(r.e.coll->backward_update(sb, grad).status());
  if (r.timing) {
    r.forward_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    r.update_ms.push_back(ms_since(t1));
  }
  ++r.next;
  return Status();
}

json cache_json(const RowCacheStats& s, const RowCacheStats& base, int64_t steps, size_t stride) {
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  const uint64_t lookups = s.lookups - base.lookups, misses = s.misses - base.misses;
  json j;
  j["capacity_rows"] = s.capacity_rows;
  j["resident_rows"] = s.resident_rows;  // < capacity: the cache has not filled yet
  j["index_bytes"] = s.index_bytes;      // row_cache besides the slots (docs/tiered.md)
  j["index_bytes_per_cached_row"] = s.capacity_rows ? static_cast<double>(s.index_bytes) / static_cast<double>(s.capacity_rows) : 0.0;
  j["lookups_per_step"] = static_cast<double>(lookups) / n;
  j["misses_per_step"] = static_cast<double>(misses) / n;
  j["hit_rate"] = lookups ? 1.0 - static_cast<double>(misses) / static_cast<double>(lookups) : 0.0;
  j["prefetched_rows_per_step"] = static_cast<double>(s.prefetched_rows - base.prefetched_rows) / n;
  j["prefetches_taken_per_step"] = static_cast<double>(s.prefetches_taken - base.prefetches_taken) / n;
  j["evictions_per_step"] = static_cast<double>(s.evictions - base.evictions) / n;
  j["writebacks_per_step"] = static_cast<double>(s.writebacks - base.writebacks) / n;
  j["store_bytes_read_per_step"] = static_cast<double>(s.bytes_read - base.bytes_read) / n;
  j["store_bytes_written_per_step"] = static_cast<double>(s.bytes_written - base.bytes_written) / n;
  j["row_bytes"] = stride;
  const double fetch = s.fetch_seconds - base.fetch_seconds, exposed = s.exposed_seconds - base.exposed_seconds;
  j["fetch_ms_per_step"] = fetch * 1e3 / n;
  j["exposed_fetch_ms"] = exposed * 1e3 / n;
  j["hidden_fetch_ms"] = std::max(0.0, fetch - exposed) * 1e3 / n;
  const uint64_t rops = s.store_read_ops - base.store_read_ops;
  const double rsec = s.store_read_seconds - base.store_read_seconds;
  j["store_read_ops_per_step"] = static_cast<double>(rops) / n;
  j["store_read_iops"] = rsec > 0 ? static_cast<double>(rops) / rsec : 0.0;
  j["store_write_ops_per_step"] = static_cast<double>(s.store_write_ops - base.store_write_ops) / n;
  // Time inside the store's calls (the fetch's phases: write-backs, then reads), and compaction.
  j["store_write_ms_per_step"] = (s.store_write_seconds - base.store_write_seconds) * 1e3 / n;
  j["store_read_ms_per_step"] = rsec * 1e3 / n;
  j["store_gc_passes"] = s.store_gc_passes - base.store_gc_passes;
  j["store_gc_rows_moved_per_step"] = static_cast<double>(s.store_gc_rows_moved - base.store_gc_rows_moved) / n;
  return j;
}

// Bit-for-bit comparison of `sample` random rows (and the last batch's rows) of two engines.
Result<bool> same_rows(EmbeddingCollection& a, EmbeddingCollection& b, const std::vector<int64_t>& last, int64_t rows,
                       uint64_t seed) {
  std::vector<int64_t> check = last;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 20000; ++i) check.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
  const size_t stride = a.layout(0).stride_bytes;
  std::vector<uint8_t> ra(stride), rb(stride);
  for (int64_t r : check) {
    LEANEMB_RETURN_IF_ERROR(a.read_raw_rows(0, r, 1, ra));
    LEANEMB_RETURN_IF_ERROR(b.read_raw_rows(0, r, 1, rb));
    if (ra != rb) return false;
  }
  return true;
}

Result<std::vector<IdBatch>> make_batches(const TieredShape& s, size_t n, uint64_t seed) {
  IdStreamOptions io;
  io.num_rows = s.rows;
  io.batch_size = s.batch;
  io.bag_size = s.bag;
  io.alpha = s.alpha;
  io.seed = seed;
  LEANEMB_ASSIGN_OR_RETURN(IdGenerator gen, IdGenerator::create(io));
  std::vector<IdBatch> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = gen.batch(static_cast<int64_t>(i));
  return out;
}

std::vector<std::vector<int64_t>> trace_of(const std::vector<IdBatch>& batches) {
  std::vector<std::vector<int64_t>> t;
  for (const auto& b : batches) t.push_back(distinct_rows(b.ids));
  return t;
}

Status run_sweep(const TieredShape& base, const BenchOptions& o, const Progress& progress, int warmup, int iters,
                 json* doc) {
  json rows = json::array();
  for (double alpha : o.sweep_alphas) {
    TieredShape s = base;
    s.alpha = alpha;
    LEANEMB_ASSIGN_OR_RETURN(auto batches, make_batches(s, static_cast<size_t>(warmup + iters), derive_seed(o.seed, 7)));
    const auto trace = trace_of(batches);
    std::vector<float> grad(static_cast<size_t>(s.batch * s.dim), 0.01f);
    std::vector<float> out(static_cast<size_t>(s.batch * s.dim));
    for (double f : o.sweep_fractions) {
      for (CachePolicy policy : o.cache_policies) {
        TableCacheOptions co;
        co.fraction = f;
        co.policy = policy;
        LEANEMB_ASSIGN_OR_RETURN(Engine e, make_engine(s, o, &co));
        Run r("cached", std::move(e));
        r.cached = true;
        for (int i = 0; i < warmup; ++i) LEANEMB_RETURN_IF_ERROR(one_step(r, batches, grad, s.batch, out, false));
        LEANEMB_ASSIGN_OR_RETURN(r.after_warmup, r.e.coll->cache_stats(0));
        for (int i = 0; i < iters; ++i) LEANEMB_RETURN_IF_ERROR(one_step(r, batches, grad, s.batch, out, false));
        LEANEMB_ASSIGN_OR_RETURN(RowCacheStats st, r.e.coll->cache_stats(0));
        const double sim = simulate_lru(trace, static_cast<size_t>(warmup), st.capacity_rows);
        json j = cache_json(st, r.after_warmup, iters, r.e.coll->layout(0).stride_bytes);
        json row{{"alpha", alpha}, {"cache_fraction", f}, {"policy", std::string(tiered::cache_policy_name(policy))},
                 {"hit_rate", j["hit_rate"]}, {"lru_simulation_hit_rate", sim}, {"capacity_rows", st.capacity_rows},
                 {"resident_rows", st.resident_rows}, {"evictions_per_step", j["evictions_per_step"]},
                 {"distinct_rows_per_step", j["lookups_per_step"]}};
        const std::string pname(tiered::cache_policy_name(policy));
        progress("sweep alpha %.2f fraction %.2f %s: hit rate %.4f (offline LRU %.4f)", alpha, f, pname.c_str(),
                 j["hit_rate"].get<double>(), sim);
        std::printf("alpha %-5.2f cache %5.1f%% %-5s  hit rate %.4f  offline LRU %.4f\n", alpha, 100 * f, pname.c_str(),
                    j["hit_rate"].get<double>(), sim);
        rows.push_back(row);
      }
    }
  }
  (*doc)["sweep"] = rows;
  return Status();
}

// The table and id stream (defaults: 10M rows x 128 bf16, rowwise Adagrad, batch 4096 x 16).
TieredShape tiered_shape(const BenchOptions& o) {
  TieredShape s;
  s.rows = o.rows.value_or(10000000);
  s.dim = o.dim.value_or(128);
  s.batch = o.batch.value_or(4096);
  s.bag = o.bag_size.value_or(16);
  s.alpha = o.alpha.value_or(1.15);
  s.dtype = o.dtype.value_or(DType::kBF16);
  s.optimizer.kind = o.optimizer.value_or(OptimizerKind::kRowwiseAdagrad);
  s.optimizer.learning_rate = 0.05f;
  s.optimizer.eps = default_eps(s.optimizer.kind);
  s.optimizer.state_dtype = o.state_dtype.value_or(DType::kF32);
  return s;
}

// The cached contenders' cache (its policy: the first one's) and the report's "cache" entry.
TableCacheOptions tiered_cache(const BenchOptions& o, bool file, const std::string& path, json* doc) {
  TableCacheOptions co;
  co.fraction = o.cache_fraction;
  co.policy = o.cache_policies[0];
  co.store = o.store;
  co.store_path = path;
  co.store_layout = o.store_layout;
  co.direct_io = o.store_direct_io;
  co.prefetch_nice = o.prefetch_nice;
  json policy_names = json::array();
  for (CachePolicy p : o.cache_policies) policy_names.push_back(std::string(tiered::cache_policy_name(p)));
  (*doc)["cache"] = {{"fraction", co.fraction}, {"policy", std::string(tiered::cache_policy_name(co.policy))},
                     {"policies", policy_names}, {"store", std::string(store_kind_name(co.store))}, {"store_path", file ? path : ""},
                     {"store_layout", file ? std::string(file_store_layout_name(co.store_layout)) : ""},
                     {"store_direct_io", file && co.direct_io},
                     {"prefetch", o.prefetch}, {"prefetch_nice", co.prefetch_nice}};
  return co;
}

// Gradients drawn from N(0, 0.01), [n].
std::vector<float> random_grad(size_t n, uint64_t seed) {
  std::vector<float> grad(n);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.01f);
  for (auto& x : grad) x = g(rng);
  return grad;
}

// One cached contender per policy, after `runs`' resident one; create_s: seconds each took.
Status add_cached_runs(const TieredShape& s, const BenchOptions& o, TableCacheOptions co, const Progress& progress,
                       std::vector<Run>* runs, json* create_s) {
  const std::vector<CachePolicy>& policies = o.cache_policies;
  for (CachePolicy p : policies) {
    const std::string pname(tiered::cache_policy_name(p));
    progress("creating the cached table (%s store, %s)", std::string(store_kind_name(o.store)).c_str(), pname.c_str());
    co.policy = p;
    const auto t_create = Clock::now();
    LEANEMB_ASSIGN_OR_RETURN(Engine e, make_engine(s, o, &co));
    (*create_s)[policies.size() == 1 ? "cached" : "cached_" + pname] = ms_since(t_create) / 1e3;
    Run r{policies.size() == 1 ? "cached" : "cached_" + pname, std::move(e)};
    r.cached = true;
    r.policy = p;
    runs->push_back(std::move(r));
  }
  return Status();
}

// The steps every contender takes: warm-up (the cache fills), then the measured ones.
struct Steps {
  const std::vector<IdBatch>& batches;
  const std::vector<float>& grad;
  int64_t batch;
  bool prefetch;
  std::vector<float>& out;
  int warmup, iters;
};

Status warm_up(std::vector<Run>& runs, const Steps& st, const Progress& progress) {
  for (Run& r : runs) {
    progress("%s: %d warm-up steps", r.name.c_str(), st.warmup);
    for (int i = 0; i < st.warmup; ++i) LEANEMB_RETURN_IF_ERROR(one_step(r, st.batches, st.grad, st.batch, st.out, st.prefetch));
    // The last warm-up step's prefetch finishes here, not in the next contender's steps.
    if (r.cached) LEANEMB_RETURN_IF_ERROR(r.e.coll->wait_prefetch());
    if (r.cached) { LEANEMB_ASSIGN_OR_RETURN(r.after_warmup, r.e.coll->cache_stats(0)); }
    r.transfers_after_warmup = r.e.mem->transfers();
    r.e.mem->reset_peaks();
    r.timing = true;
  }
  return Status();
}

// Measured steps in interleaved rounds of 5, rotating which contender goes first. A cached
// contender's last step of a round waits for the prefetch it started (timed, as the wait its
// next forward would have had): without it the fetch would run on into the next contender's
// steps, slowing them and coming free to this one.
Status measure(std::vector<Run>& runs, const Steps& st, const Progress& progress) {
  constexpr int kBlock = 5;
  for (int done = 0, round = 0; done < st.iters; done += kBlock, ++round) {
    const int n = std::min(kBlock, st.iters - done);
    for (size_t k = 0; k < runs.size(); ++k) {
      Run& r = runs[(k + static_cast<size_t>(round)) % runs.size()];
      for (int i = 0; i < n; ++i) {
        const auto t0 = Clock::now();
        LEANEMB_RETURN_IF_ERROR(one_step(r, st.batches, st.grad, st.batch, st.out, st.prefetch));
        if (r.cached && i + 1 == n) LEANEMB_RETURN_IF_ERROR(r.e.coll->wait_prefetch());
        r.step_ms.push_back(ms_since(t0));
      }
    }
    if (round % 4 == 3) progress("measured %d/%d steps", done + n, st.iters);
  }
  return Status();
}

// Per contender: step times, bytes moved between tiers per step, memory, and a cached one's
// cache figures; each one's median step time in *median_ms.
Result<json> contenders_json(std::vector<Run>& runs, int iters, std::vector<double>* median_ms) {
  json contenders = json::array();
  for (Run& r : runs) {
    const Summary sm = summarize(r.step_ms);
    median_ms->push_back(sm.median);
    json j{{"name", r.name},
           {"step_ms", {{"median", sm.median}, {"p10", sm.p10}, {"p90", sm.p90}}},
           {"forward_ms_median", median_of(r.forward_ms)},
           {"update_ms_median", median_of(r.update_ms)}};
    const TransferStats tr = r.e.mem->transfers();
    json tj;
    for (int from = 0; from < kNumTiers; ++from)
      for (int to = 0; to < kNumTiers; ++to) {
        const uint64_t b = tr.bytes[from][to] - r.transfers_after_warmup.bytes[from][to];
        if (b) tj[std::string(tier_name(static_cast<Tier>(from))) + "_to_" + std::string(tier_name(static_cast<Tier>(to))) + "_per_step"] = static_cast<double>(b) / iters;
      }
    j["transfers"] = tj;
    const auto ms = r.e.mem->stats();
    j["memory"] = {{"device", memory_json(ms[0])}, {"host", memory_json(ms[1])}};
    if (r.cached) {
      LEANEMB_ASSIGN_OR_RETURN(RowCacheStats st, r.e.coll->cache_stats(0));
      j["cache"] = cache_json(st, r.after_warmup, iters, r.e.coll->layout(0).stride_bytes);
      j["policy"] = std::string(tiered::cache_policy_name(r.policy));
    }
    contenders.push_back(j);
  }
  return contenders;
}

// With several policies: each one's figures, and its step time over the first policy's.
Status policies_summary(std::vector<Run>& runs, size_t first_cached, const std::vector<double>& median_ms,
                        double resident_ms, const BenchOptions& o, int iters, json* summary) {
  json per = json::array();
  for (size_t k = first_cached; k < runs.size(); ++k) {
    LEANEMB_ASSIGN_OR_RETURN(RowCacheStats pst, runs[k].e.coll->cache_stats(0));
    const json cj = cache_json(pst, runs[k].after_warmup, iters, 0);
    json pj{{"policy", std::string(tiered::cache_policy_name(runs[k].policy))},
            {"step_ms_median", median_ms[k]},
            {"step_time_ratio_over_" + std::string(tiered::cache_policy_name(o.cache_policies[0])), median_ms[k] / median_ms[first_cached]},
            {"hit_rate", cj["hit_rate"]},
            {"index_bytes_per_cached_row", cj["index_bytes_per_cached_row"]}};
    if (resident_ms > 0) pj["step_time_ratio_cached_over_resident"] = median_ms[k] / resident_ms;
    per.push_back(pj);
  }
  (*summary)["policies"] = per;
  return Status();
}

// The file store's end: the final flush's time, and the store's read IOPS next to a same-run
// probe of the medium. st: the cache's stats after the measured steps.
Status file_store_summary(Run& cached, const RowCacheStats& st, const BenchOptions& o, int iters, const std::string& path,
                          const std::vector<std::vector<int64_t>>& measured_trace, json* summary) {
  // Writing every dirty cached row back (what a checkpoint or the end of a run does first).
  const auto t_flush = Clock::now();
  LEANEMB_RETURN_IF_ERROR(cached.e.coll->flush());
  (*summary)["final_flush_s"] = ms_since(t_flush) / 1e3;
  const json cj = cache_json(st, cached.after_warmup, iters, 0);
  // The in-place layout's probe reads the blocks of rows the run touched (all written by now:
  // the flush above); the log layout's file holds only written segments, so its probe reads
  // blocks of the whole file (a row's number says nothing of where its record is).
  std::vector<int64_t> written;
  if (o.store_layout == FileStoreLayout::kInPlace)
    for (const auto& step : measured_trace) written.insert(written.end(), step.begin(), step.end());
  // Same-run probe of the medium: random 4 KiB O_DIRECT reads at queue depth 64
  // (leanemb/disk_probe.h); 0, with the reason on stderr, when it fails.
  const Result<double> probed =
      tiered::random_read_iops(path, 4096, 64, 3.0, o.seed, written, cached.e.coll->layout(0).stride_bytes);
  if (!probed.ok()) std::fprintf(stderr, "[bench] tiered: the disk probe failed: %s\n", probed.status().to_string().c_str());
  const double probe = probed.ok() ? probed.value() : 0.0;
  (*summary)["store_read_iops"] = cj["store_read_iops"];
  (*summary)["probe_random_read_iops_4k_qd64"] = probe;
  if (probe > 0) (*summary)["store_iops_over_probe"] = cj["store_read_iops"].get<double>() / probe;
  return Status();
}

// The report's contenders and summary: cached over resident, the first policy's hit rate next
// to the offline LRU's, each policy's figures, the determinism gate, the file store's figures,
// peak RSS.
Status tiered_summary(std::vector<Run>& runs, size_t first_cached, const std::vector<IdBatch>& batches,
                      const TieredShape& s, const BenchOptions& o, const Steps& steps, const std::string& path,
                      json* doc, json* summary) {
  const int warmup = steps.warmup, iters = steps.iters;
  std::vector<double> median_ms;
  LEANEMB_ASSIGN_OR_RETURN(json contenders, contenders_json(runs, iters, &median_ms));
  (*doc)["contenders"] = std::move(contenders);
  const double resident_ms = first_cached > 0 ? median_ms[0] : 0.0;
  if (resident_ms > 0) (*summary)["step_time_ratio_cached_over_resident"] = median_ms[first_cached] / resident_ms;
  const auto trace = trace_of(batches);
  const std::vector<std::vector<int64_t>> measured_trace(trace.begin(), trace.begin() + warmup + iters);
  Run& cached = runs[first_cached];  // the first policy's: the summary's figures
  LEANEMB_ASSIGN_OR_RETURN(RowCacheStats st, cached.e.coll->cache_stats(0));
  (*summary)["hit_rate"] = cache_json(st, cached.after_warmup, iters, 0)["hit_rate"];
  (*summary)["index_bytes_per_cached_row"] = cache_json(st, cached.after_warmup, iters, 0)["index_bytes_per_cached_row"];
  (*summary)["lru_simulation_hit_rate"] = simulate_lru(measured_trace, static_cast<size_t>(warmup), st.capacity_rows);
  if (o.cache_policies.size() > 1)
    LEANEMB_RETURN_IF_ERROR(policies_summary(runs, first_cached, median_ms, resident_ms, o, iters, summary));
  // The gate: every cached contender against the resident one (or, without it, the first policy).
  if (runs.size() >= 2) {
    bool same = true;
    for (size_t k = 1; k < runs.size(); ++k) {
      LEANEMB_ASSIGN_OR_RETURN(bool ok, same_rows(*runs[0].e.coll, *runs[k].e.coll, trace[warmup + iters - 1], s.rows, o.seed));
      same = same && ok;
    }
    (*summary)["gate"] = same ? "pass" : "fail";
    if (!same) return internal_error("tiered: cached and resident rows differ (determinism gate)");
  }
  if (o.store == StoreKind::kFile)
    LEANEMB_RETURN_IF_ERROR(file_store_summary(cached, st, o, iters, path, measured_trace, summary));
  (*summary)["peak_rss_bytes"] = process_max_rss_bytes();
  return Status();
}

}  // namespace

Status run_tiered(const BenchOptions& o, const Progress& progress, json* doc) {
  const auto started = Clock::now();
  const TieredShape s = tiered_shape(o);
  if (o.tables.value_or(1) != 1) return invalid_argument("--workload tiered runs one table (--tables 1)");
  const int warmup = o.warmup.value_or(100), iters = o.iters.value_or(50);
  (*doc)["shape"] = {{"rows", s.rows}, {"dim", s.dim}, {"batch", s.batch}, {"bag", s.bag}, {"alpha", s.alpha},
                     {"dtype", std::string(dtype_name(s.dtype))}, {"optimizer", std::string(optimizer_name(s.optimizer.kind))}};
  (*doc)["warmup"] = warmup;
  if (o.sweep) return run_sweep(s, o, progress, warmup, iters, doc);

  const bool file = o.store == StoreKind::kFile;
  if (o.cache_policies.empty()) return invalid_argument("tiered: no cache policy");
  if (file && o.cache_policies.size() > 1) return invalid_argument("tiered: several policies (--policy) need --store host");
  std::string path = o.store_path;
  if (file && path.empty()) path = "leanemb-tiered-" + std::to_string(::getpid()) + ".rows";
  const TableCacheOptions co = tiered_cache(o, file, path, doc);

  progress("tiered: %lld rows x %lld %s, %s, batch %lld x %lld ids, alpha %.2f; generating %d batches",
           static_cast<long long>(s.rows), static_cast<long long>(s.dim), std::string(dtype_name(s.dtype)).c_str(),
           std::string(optimizer_name(s.optimizer.kind)).c_str(), static_cast<long long>(s.batch),
           static_cast<long long>(s.bag), s.alpha, warmup + iters + 1);
  LEANEMB_ASSIGN_OR_RETURN(auto batches, make_batches(s, static_cast<size_t>(warmup + iters + 1), derive_seed(o.seed, 7)));
  const std::vector<float> grad = random_grad(static_cast<size_t>(s.batch * s.dim), o.seed);
  std::vector<float> out(static_cast<size_t>(s.batch * s.dim));

  std::vector<Run> runs;
  if (!file && !o.no_resident) {
    progress("creating the resident table");
    LEANEMB_ASSIGN_OR_RETURN(Engine e, make_engine(s, o, nullptr));
    runs.push_back(Run{"resident", std::move(e)});
  }
  const size_t first_cached = runs.size();
  const double batches_s = ms_since(started) / 1e3;
  json create_s = json::object();  // seconds to create each contender's table
  LEANEMB_RETURN_IF_ERROR(add_cached_runs(s, o, co, progress, &runs, &create_s));
  // Start-up: from the workload's start to its first step (the id batches, every contender's
  // table), and what the table creation took of it.
  (*doc)["startup"] = {{"time_to_first_step_s", ms_since(started) / 1e3}, {"batches_s", batches_s}, {"create_table_s", create_s}};
  progress("first step %.2f s after the start (tables created in %s s)", ms_since(started) / 1e3, create_s.dump().c_str());
  const Steps steps{batches, grad, s.batch, o.prefetch, out, warmup, iters};
  LEANEMB_RETURN_IF_ERROR(warm_up(runs, steps, progress));
  LEANEMB_RETURN_IF_ERROR(measure(runs, steps, progress));
  json summary;
  LEANEMB_RETURN_IF_ERROR(tiered_summary(runs, first_cached, batches, s, o, steps, path, doc, &summary));
  (*doc)["summary"] = summary;
  std::printf("tiered: %s\n", dump_json(summary).c_str());
  for (Run& r : runs) std::printf("\nmemory of %s:\n%s", r.name.c_str(), r.e.mem->memory_summary().c_str());
  runs.clear();
  if (file && o.store_path.empty()) ::unlink(path.c_str());
  return Status();
}

}  // namespace internal
}  // namespace leanemb::bench
