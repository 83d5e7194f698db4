// Benchmark workloads behind `leanemb bench` (see docs/benchmarks.md): each builds one
// EmbeddingCollection per contender with its own TrackingAllocator, feeds every contender the same
// pre-generated id stream, gates correctness against the reference kernels before timing, and
// reports medians, p10/p90, bandwidth, memory and bytes per parameter as JSON. Contenders that are
// compared are alive together and timed in interleaved rounds (blocks of iterations, rotating
// order), so that their ratios are same-moment ratios on this shared, noisy machine.
//
// Also the machine's measured ceilings (roofline): sequential read, triad, random row gather and
// random row read-modify-write, which forward-heavy workloads measure again in the same run so
// that their efficiency is a same-run ratio.
//
// Thread safety: none of these functions may run concurrently with another benchmark (they
// measure the whole machine and reset the process's peak-RSS counter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "leanemb/dtype.h"
#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "leanemb/optimizer.h"
#include "leanemb/status.h"

namespace leanemb::bench {

// ---- roofline ----------------------------------------------------------------------------------

struct RooflineOptions {
  size_t buffer_bytes = size_t{1} << 30;  // working set; must be >> L3 (32 MiB here)
  int num_threads = 2;                    // OpenMP threads
  std::vector<size_t> row_bytes = {64, 128, 256, 512, 1024};
  int repeats = 3;                        // each probe runs this many times; the best is kept
  // Pointer-chase buffers of the page-walk probe (measure_page_walk); empty: none.
  std::vector<size_t> page_walk_bytes = {size_t{64} << 20, size_t{512} << 20, size_t{2} << 30};
  int64_t page_walk_loads = int64_t{1} << 21;  // dependent loads per pass
};

// Where a random gather reads: rows of `row_bytes` spaced `stride_bytes` apart, uniform over the
// whole buffer, or (segment_bytes > 0) in turns of `per_segment` rows uniform inside one segment
// of segment_bytes, segments visited round robin: the pattern of a pooled lookup over several
// tables (one segment = one table, per_segment = one feature's lookups per batch).
struct GatherPattern {
  size_t row_bytes = 0;
  size_t stride_bytes = 0;
  size_t segment_bytes = 0;
  int64_t per_segment = 0;
};

struct GatherCeiling {
  size_t row_bytes = 0;      // bytes read (and for RMW written) per row
  size_t stride_bytes = 0;   // distance between rows in the buffer
  size_t segment_bytes = 0;  // see GatherPattern (the RMW probe is always uniform)
  int64_t per_segment = 0;
  double gather_gbs = 0;     // random row gather, best of plain and software-prefetched loops
  double gather_plain_gbs = 0;
  double gather_prefetch_gbs = 0;  // best over prefetch distances of 8, 16 and 32 rows, T0 or NTA
  int best_prefetch_rows = 0;       // its distance; negative: the non-temporal hint
  double rmw_gbs = 0;        // random row read-modify-write, counting read + write bytes
};

// One buffer size of the page-walk probe: the latency of a dependent random load (pointer chase,
// one link per cache line) on 4 KiB pages (MADV_NOHUGEPAGE) and on transparent huge pages
// (MADV_HUGEPAGE, the engine's tables' policy). Their difference is the page walk's cost (nested
// under a hypervisor) that huge pages save.
struct PageWalkPoint {
  struct Side {
    double ns_per_load = 0;
    int64_t huge_page_bytes = -1;  // of the buffer on huge pages after its first touch; -1: unknown
  };
  size_t buffer_bytes = 0;
  Side small;  // 4 KiB pages
  Side huge;   // transparent huge pages, as far as the kernel granted them (huge_page_bytes)
};

struct RooflineResult {
  size_t buffer_bytes = 0;
  int num_threads = 0;
  double seq_read_gbs = 0;   // sum of a buffer read front to back
  double triad_gbs = 0;      // a[i] = b[i] + s * c[i] over three buffer/3 arrays (STREAM bytes)
  std::vector<GatherCeiling> rows;
  int64_t huge_page_bytes = -1;  // of the probe buffer (2 MiB aligned, MADV_HUGEPAGE); -1: unknown
  std::vector<PageWalkPoint> page_walk;
};

// Errors: InvalidArgument (buffer < 64 MiB, no threads), ResourceExhausted (allocation).
Result<RooflineResult> measure_roofline(const RooflineOptions& options);

// The page-walk probe alone, one thread, best of `repeats` passes of `loads` loads per buffer size
// and page size. Errors: InvalidArgument (a size outside [1 MiB, 64 GiB], loads or repeats < 1),
// ResourceExhausted.
Result<std::vector<PageWalkPoint>> measure_page_walk(const std::vector<size_t>& buffer_bytes, int64_t loads,
                                                     int repeats);
nlohmann::json to_json(const PageWalkPoint& p);

// A buffer kept alive for repeated random-gather probes, so that a workload can measure its
// ceiling between its own timing blocks (same run, same moment) without re-allocating.
class GatherProbe {
 public:
  // Allocates and first-touches `buffer_bytes` (>= 64 MiB). Errors as measure_roofline.
  static Result<std::unique_ptr<GatherProbe>> create(size_t buffer_bytes, int num_threads);
  ~GatherProbe();
  size_t buffer_bytes() const;
  // Full probe: plain and prefetched gathers (distances 8, 16, 32 rows; T0 and NTA) and RMW, best of
  // `repeats`. Errors: InvalidArgument unless 0 < row_bytes <= stride_bytes <= buffer.
  Result<GatherCeiling> measure(const GatherPattern& pattern, int repeats = 3);
  // One short gather pass (~traffic_bytes of rows) with a fixed prefetch distance; GB/s.
  Result<double> quick_gbs(const GatherPattern& pattern, int prefetch_rows, size_t traffic_bytes = size_t{64} << 20);

 private:
  struct Impl;
  explicit GatherProbe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The random-gather (and RMW) ceiling for one row shape over a fresh buffer of `buffer_bytes`:
// what a pooled lookup of `row_bytes` rows spaced `stride_bytes` apart can at best read.
// REQUIRES: 0 < row_bytes <= stride_bytes.
Result<GatherCeiling> measure_gather_ceiling(size_t row_bytes, size_t stride_bytes, size_t buffer_bytes,
                                             int num_threads, int repeats = 3);

nlohmann::json to_json(const RooflineResult& r);
nlohmann::json to_json(const GatherCeiling& g);

// ---- workloads ---------------------------------------------------------------------------------

// Options of `leanemb bench`. An empty optional means "the workload's default" (see
// docs/benchmarks.md for each workload's shape); a set one overrides it.
struct BenchOptions {
  std::string workload = "optimizer";  // roofline | tbe-default | optimizer | precision
  std::optional<int64_t> rows;         // rows per table E
  std::optional<int64_t> dim;          // D
  std::optional<int64_t> batch;        // bags per batch B
  std::optional<int64_t> bag_size;     // ids per bag L
  std::optional<PoolingMode> pooling;  // sum | mean
  std::optional<double> alpha;         // Zipf exponent, <= 1 = uniform
  std::optional<int> tables;           // T
  std::optional<DType> dtype;          // row dtype
  std::optional<OptimizerKind> optimizer;
  std::optional<DType> state_dtype;
  int threads = 2;                     // OpenMP threads for the engine and the ceilings
  std::optional<int> iters;            // measured iterations (>= 1; default 50)
  std::optional<int> warmup;           // warm-up iterations (default 10)
  uint64_t seed = 1;                   // ids, gradients and table initialization
  std::string json_path;               // write the JSON here when not empty
  size_t roofline_bytes = size_t{1} << 30;  // buffer of the ceiling probes
  bool quiet = false;                  // no progress lines on stderr
  // Tiers of each timed contender's engine: device / host budgets, arena options, placement
  // (the correctness gate's reference engines are unbudgeted).
  MemorySystemOptions memory;
  int64_t soak_ops = 1000000;          // arena-soak: allocate/free operations per run
  // tiered: the cached table's options (docs/tiered.md, docs/benchmarks.md).
  double cache_fraction = 0.2;         // cache slots as a fraction of the rows
  // Eviction policies: one cached contender each, measured side by side in one run.
  std::vector<CachePolicy> cache_policies = {CachePolicy::kLru};
  StoreKind store = StoreKind::kHost;  // host | file
  std::string store_path;              // file store; default ./leanemb-tiered-<pid>.rows, removed after
  FileStoreLayout store_layout = TableCacheOptions{}.store_layout;  // file store: in_place | log
  bool store_direct_io = TableCacheOptions{}.direct_io;            // file store: O_DIRECT or buffered
  bool prefetch = true;                // fetch step t+1's rows while step t computes
  int prefetch_nice = TableCacheOptions{}.prefetch_nice;  // the prefetch thread's nice value
  bool no_resident = false;            // skip the resident contender (host store)
  bool sweep = false;                  // hit rates over sweep_alphas x sweep_fractions instead
  std::vector<double> sweep_fractions = {0.05, 0.2, 0.5};
  std::vector<double> sweep_alphas = {1.05, 1.15};
  // grad-accum: the micro-batch counts run, ascending, 1 first (the reference of the gate).
  std::vector<int> micro_batches = {1, 2, 4};
  // grad-accum: the output's and its gradient's precision (--precision): fp32, or bf16
  // (EmbeddingTables::forward_bf16 / backward_update_bf16 / accumulate_bf16).
  DType precision = DType::kF32;
};

// Names accepted by --workload, in help order.
const std::vector<std::string>& workload_names();

// Runs `options.workload`, prints a short table to stdout and progress to stderr, and stores the
// JSON document in *out (also written to options.json_path when set).
// Errors: InvalidArgument / Unimplemented for bad options or an unknown workload,
// ResourceExhausted when a table does not fit, Internal when a correctness gate fails (the JSON
// is still complete and written, with "gate": "fail" on the offending contenders).
Status run_workload(const BenchOptions& options, nlohmann::json* out);

// Process-wide peak resident set size in bytes (getrusage ru_maxrss).
size_t process_max_rss_bytes();

// Size of the L3 cache that cpu0 sees (sysfs cache/index3/size), 0 when unknown. Under KVM this is
// the right figure: glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) reads the CPUID leaf, which can carry
// the whole socket's L3 (256 MiB on this VM against the 32 MiB a core can use).
size_t l3_cache_bytes();

}  // namespace leanemb::bench
