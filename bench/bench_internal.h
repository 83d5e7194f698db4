// Internals shared by the files of `leanemb bench` (not installed, no stability promise):
// contender.cc builds and gates one contender's engine, workloads.cc plans and times workloads,
// report.cc prints and writes results. See workloads.h for the public side.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "leanemb/memory_system.h"
#include "leanemb/status.h"
#include "workloads.h"
#include "zipf.h"

namespace leanemb::bench::internal {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kStreamBatches = 8;                        // distinct batches cycled through
constexpr size_t kFullGateMaxBytes = size_t{2} << 30;    // reference copy only below this
constexpr int64_t kReducedGateRows = 65536;              // rows of the reduced gate tables
constexpr int64_t kMaxTables = 4096;

// Progress lines on stderr ("[bench] ..."), unless quiet.
struct Progress {
  bool quiet = false;
  template <typename... Args>
  void operator()(const char* fmt, Args... args) const {
    if (quiet) return;
    std::fflush(stdout);
    std::fprintf(stderr, "[bench] ");
    if constexpr (sizeof...(Args) == 0) std::fprintf(stderr, "%s", fmt);
    else std::fprintf(stderr, fmt, args...);
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
};

// ---- statistics and process facts (contender.cc) ----------------------------------------------

struct Summary {
  double median = 0, p10 = 0, p90 = 0, mean = 0;
};

// Median, p10, p90 (linear interpolation, numpy's default) and mean of v.
Summary summarize(std::vector<double> v);
double median_of(std::vector<double> v);
double ms_since(Clock::time_point t0);
// A "kB" line of /proc/self/status (VmRSS, VmHWM) in bytes; 0 when unavailable.
size_t proc_status_bytes(const char* key);
// Available memory (MemAvailable) in bytes; 0 when unknown.
size_t mem_available_bytes();
// {"tier", "current_bytes", "peak_bytes", "categories": {name: {current_bytes, peak_bytes}}}.
json memory_json(const MemoryStats& m);

// Other processes' CPU use during a run. The machine is shared: a compiler running next to a
// 2-thread benchmark leaves its OpenMP threads one core, and every barrier then costs a scheduler
// time slice; results taken under such load are not comparable, so the JSON says so. (report.cc)
class CpuLoadMonitor {
 public:
  CpuLoadMonitor();
  // {"wall_s", "foreign_cpu_cores", "steal_cpu_cores", "self_cpu_cores", ...}, with "warning"
  // when other processes kept more than a quarter core busy.
  json finish() const;

 private:
  struct SysTicks {
    uint64_t busy = 0, steal = 0;
  };
  static SysTicks read_system();
  static uint64_t read_self_ticks();
  static double read_loadavg();
  Clock::time_point t0_;
  SysTicks sys0_;
  uint64_t self0_;
  double load0_;
};

// ---- shapes, contenders, streams, engines (contender.cc) --------------------------------------

// The shape of one collection and of its input: T tables of E rows x D, one pooled feature each.
struct Shape {
  std::string name;
  int tables = 1;
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t batch = 0;
  int64_t bag = 0;
  double alpha = 0;
  PoolingMode pooling = PoolingMode::kSum;
};

struct Contender {
  std::string name;
  int shape = 0;  // index into the workload's shapes
  DType dtype = DType::kF32;
  OptimizerOptions optimizer;
  bool frozen = false;       // forward only
  bool want_ceiling = false; // measure the gather ceiling for its row shape
};

// The shared input of one shape: kStreamBatches batches of T features, and the fixed gradient.
struct Stream {
  std::vector<std::vector<IdBatch>> batches;  // [batch][table]
  std::vector<float> grad;                    // [B, T * D]
  int64_t lookups_per_batch = 0;
};

// kStreamBatches batches of the shape's T features and the fixed gradient [B, T * D].
Result<Stream> make_stream(const Shape& s, uint64_t seed);
// A SparseBatch viewing one batch of a stream (spans into `b`).
SparseBatch view_batch(const std::vector<IdBatch>& b, int64_t batch_size);

// One contender's engine: its memory system (tiers, placement) outlives the collection.
struct Engine {
  std::unique_ptr<MemorySystem> mem;
  std::unique_ptr<EmbeddingCollection> coll;
  Engine() = default;
  Engine(Engine&&) = default;
  Engine& operator=(Engine&&) = default;
  ~Engine() { reset(); }
  void reset() {
    coll.reset();
    mem.reset();
  }
};

// One table `t` (named "t0", one sum feature "f0") in a MemorySystem made from `memory`: the
// tiered and restore workloads' engines.
Result<Engine> build_one_table_engine(TableOptions t, const MemorySystemOptions& memory, uint64_t seed, int threads);

// T tables of `rows` rows (one pooled feature each) with the contender's dtype and optimizer, in
// a MemorySystem made from `memory` (budgets, placement).
Result<Engine> build_engine(const Shape& s, const Contender& c, int64_t rows, uint64_t seed, int threads, bool reference,
                            const MemorySystemOptions& memory = {});

// ---- correctness gate (contender.cc) ----------------------------------------------------------

struct Diff {
  double max_abs = 0;      // max |a - b|
  double max_ref = 0;      // max |b|
  bool bit_exact = true;
  void add(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(&a[i], &b[i], 4) != 0) bit_exact = false;
      const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
      max_abs = std::max(max_abs, std::isnan(d) ? INFINITY : d);
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
    }
  }
  // Normwise relative error: max |a - b| / max |b|.
  double rel() const { return max_abs == 0 ? 0.0 : max_abs / std::max(max_ref, 1e-30); }
};

struct GateResult {
  bool pass = true;
  std::string method;
  Diff forward;
  Diff weights;
  Diff state;
  std::string detail;
};

// The gate of one contender before timing; `fast` is the engine that will be timed. Tables of
// less than kFullGateMaxBytes get a full reference copy (use_reference_kernels) with the same
// options; larger ones are checked on reduced tables of kReducedGateRows rows fed the same
// batches with ids taken mod the reduced row count: the same kernels, dtype and optimizer. Two
// steps; forward outputs, touched rows and their optimizer state are compared.
Result<GateResult> run_gate(const Shape& s, const Contender& c, Engine& fast, const Stream& st, uint64_t seed,
                            int threads);

// ---- arena soak (arena_soak.cc) ---------------------------------------------------------------

// The arena-soak workload: fragmentation figures with max_split_bytes off and on (JSON in *doc).
Status run_arena_soak(const BenchOptions& o, const Progress& progress, json* doc);

// ---- tiered storage (tiered.cc) ---------------------------------------------------------------

// The tiered workload: cached vs resident table, hit rates vs an offline LRU, store IOPS vs a
// probe (JSON in *doc).
Status run_tiered(const BenchOptions& o, const Progress& progress, json* doc);
// The restore workload: checkpoint save and restore of a cached table, host vs file store
// (restore.cc).
Status run_restore(const BenchOptions& o, const Progress& progress, json* doc);

// ---- gradient accumulation (grad_accum.cc, built with src/plan) -----------------------------

// The grad-accum workload: the embedding-only workload with 1, 2 and 4 micro-batches on the
// device arena, measured device peak by category beside the memory model's prediction.
Status run_grad_accum(const BenchOptions& o, const Progress& progress, json* doc);

// ---- sharding (sharded.cc, built with src/dist) ---------------------------------------------

// The sharded workload: per-rank embedding bytes and bytes sent per step at P = 1 and 2 ranks
// (threads over dist::LocalWorld), fp32 and bf16 payloads, gated against one process.
Status run_sharded(const BenchOptions& o, const Progress& progress, json* doc);

// ---- output (report.cc) -----------------------------------------------------------------------

// Cross-contender figures: per shape, each contender relative to its baseline; efficiencies.
json summarize_workload(const std::string& workload, const json& contenders);
void print_table(const json& doc);
void print_roofline(const json& roofline);
void print_load(const json& doc);
// Writes doc (indented) to path, creating parent directories. Errors: IoError.
Status write_json(const std::string& path, const json& doc);

}  // namespace leanemb::bench::internal
