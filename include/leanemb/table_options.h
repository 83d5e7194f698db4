// Options, batches and reports of embedding tables: the vocabulary of the table interface
// (leanemb/tables.h) and of EmbeddingCollection (leanemb/embedding.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "leanemb/dtype.h"
#include "leanemb/memory.h"
#include "leanemb/memory_system.h"
#include "leanemb/optimizer.h"
#include "leanemb/status.h"

namespace leanemb {

namespace kernels {
class KernelBackend;  // src/kernels/backend.h (internal)
}  // namespace kernels

enum class PoolingMode : uint8_t { kSum, kMean, kNone };  // kNone = sequence output [nnz, dim]
enum class BoundsCheckMode : uint8_t {
  kError,  // reject the batch, naming feature, bag and position; nothing is updated
  kSkip,   // drop bad ids (counted, warned about), train on the rest
};

std::string_view pooling_name(PoolingMode p);
Result<PoolingMode> parse_pooling(std::string_view s);  // "sum" | "mean" | "none"

enum class InitKind : uint8_t { kUniform, kNormal, kZeros };

struct InitOptions {
  InitKind kind = InitKind::kUniform;
  // kUniform: U(-bound, bound); bound <= 0 means 1 / sqrt(num_rows) (TorchRec's default).
  float bound = 0.0f;
  float mean = 0.0f;  // kNormal
  float std = 1.0f;   // kNormal
};

// Tiered storage of one table (docs/tiered.md): the table's fat rows live in a row store (host
// RAM or a file) and a device-tier cache holds the hot ones. Results are bit-identical to a
// resident table for every capacity, policy, store and prefetch setting.
// Eviction policies (docs/tiered.md, Row cache): kLru evicts the row released longest ago,
// kLfu the one with the fewest acquires since fetched (ties by age), kClock is second chance
// (a hand sweeps the slots and evicts the first unpinned row not used since it last passed;
// no per-slot key, the leanest index).
enum class CachePolicy : uint8_t { kLru, kLfu, kClock };
std::string_view cache_policy_name(CachePolicy p);          // "lru" | "lfu" | "clock"
Result<CachePolicy> parse_cache_policy(std::string_view s);  // errors: InvalidArgument

// Where a cached table's rows live below the cache: host RAM, or a file (O_DIRECT where the file
// system allows it) at TableCacheOptions::store_path.
enum class StoreKind : uint8_t { kHost, kFile };
std::string_view store_kind_name(StoreKind k);           // "host" | "file"
Result<StoreKind> parse_store_kind(std::string_view s);  // errors: InvalidArgument

// How a file store lays rows out in its file (docs/tiered.md, "Row stores"):
//   kInPlace  row r at byte r * row_bytes: a write-back is a random block write (plus a read
//             of the block first when it holds another written row);
//   kLog      written rows are appended to a log of fixed-size segments in large sequential
//             writes, an index in RAM (4 or 8 bytes per row) says where each row's last copy is,
//             and segments full of stale copies are compacted and reused;
//   kMapped   row r at byte r * row_bytes of a file mapped into memory (mmap, MAP_SHARED): rows
//             move by memcpy through the page cache, which the kernel fills and writes back. For
//             a table whose file fits in RAM beside the run (the page cache is not in any
//             budget); the file's blocks are allocated when it is opened, so a full disk fails
//             there and not as SIGBUS in a step.
enum class FileStoreLayout : uint8_t { kInPlace, kLog, kMapped };
std::string_view file_store_layout_name(FileStoreLayout l);          // "in_place" | "log" | "mapped"
Result<FileStoreLayout> parse_file_store_layout(std::string_view s);  // errors: InvalidArgument

struct TableCacheOptions {
  double fraction = 0.0;      // cache slots as a fraction of the rows; 0 (and capacity 0) = no
                              // cache: the table is resident in the weights' tier
  int64_t capacity_rows = 0;  // slots; > 0 overrides fraction
  CachePolicy policy = CachePolicy::kLru;
  StoreKind store = StoreKind::kHost;  // kHost (RAM) | kFile (O_DIRECT file at store_path)
  std::string store_path;      // file store: the table file (created or truncated)
  bool direct_io = true;       // file store: O_DIRECT (buffered where the file system refuses it)
  // File store: rows in place or a log. The log is the default: in the disk-bound steady state of
  // docs/benchmarks.md it took 3.6x less time per step, for 4 bytes of RAM per row (its index).
  FileStoreLayout store_layout = FileStoreLayout::kLog;
  // Nice value of the cache's prefetch thread (setpriority on that thread; 0 keeps the caller's).
  // Background work: positive values let the step's compute threads keep their cores when they
  // share them with the prefetch thread, which then runs in the gaps. Range [-20, 19].
  int prefetch_nice = 19;
  bool enabled() const { return fraction > 0.0 || capacity_rows > 0; }
};

// Counters of a cached table. hit_rate = 1 - misses / lookups, where lookups are the distinct
// rows of each step and misses every row fetched from the store (by a step or a prefetch).
struct RowCacheStats {
  int64_t capacity_rows = 0;
  int64_t resident_rows = 0;
  uint64_t lookups = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t prefetched_rows = 0;   // of the misses, fetched ahead by prefetch()
  uint64_t prefetches_taken = 0;  // prefetches whose mapping a forward took whole (no lookup again)
  uint64_t evictions = 0;
  uint64_t writebacks = 0;        // dirty rows written to the store
  uint64_t initialized_rows = 0;  // rows created by the initializer on first touch
  uint64_t placed_rows = 0;       // rows a bulk write (a restore) put in slots instead of the store
  uint64_t bytes_read = 0;        // store -> cache
  uint64_t bytes_written = 0;     // cache -> store
  double fetch_seconds = 0;       // the fetches' store transfers (write-backs and reads), on any thread
  // Time the caller waited in the cache (forward, backward_update, wait_prefetch, flush): its own
  // fetches whole (lookups, eviction plan, transfers) and waits for a prefetch. Not a part of
  // fetch_seconds: without prefetch it exceeds it by the lookups and plans.
  double exposed_seconds = 0;
  // The store's own counters: I/O requests (file) or row copies (host) and time inside them.
  uint64_t store_read_ops = 0, store_write_ops = 0;
  double store_read_seconds = 0, store_write_seconds = 0;
  // A file store's log layout: compaction passes and the records they moved (0 otherwise).
  uint64_t store_gc_passes = 0, store_gc_rows_moved = 0;
  // Bytes of the cache's index in row_cache (slot rows, flags, policy keys, the row -> slot map
  // and eviction candidates; docs/tiered.md), besides the capacity_rows fat-row slots.
  uint64_t index_bytes = 0;
  double hit_rate() const { return lookups ? 1.0 - static_cast<double>(misses) / static_cast<double>(lookups) : 0.0; }
};

// Dynamic table (docs/tiered.md, "Dynamic tables in a collection"): the table's features carry
// raw 64-bit ids (hashed categorical values; any int64 value, negatives included, never
// bounds-checked: BoundsCheckMode does not apply to them) and an IdMap gives each id a row of
// the table's num_rows rows (the row capacity) when it is admitted:
// - forward() maps every id of the batch once (one sighting per occurrence). An evaluation
//   forward (ForwardMode::kEval) only looks ids up: no sighting, admission, eviction or row
//   initialization, and an id without a row reads zeros. An id gets a row on its min_count-th
//   sighting in training forwards, counted in a counting Bloom filter (an overestimate is
//   possible, never an underestimate). A new row is initialized by the table's initializer
//   keyed by the raw id, not the row, so an id starts with the same bytes wherever it lands.
// - An id without a row (below min_count, or no row free that this batch does not use) reads a
//   zero vector and is not updated. Pooling kMean divides by the bag's full length: a rejected
//   id counts as a zero vector. Sequence (kNone) outputs hold zeros at its positions.
// - When every row is taken, a new id evicts the row unused for the longest time ("age") or the
//   row with the fewest uses since admission, ties by oldest use ("lfu"). max_age_steps > 0
//   also frees rows unused for more than that many steps, after each successful update.
// - backward_update() uses the mapping of the forward() of the same batch (the most recent
//   forward; without one, the rows the ids have now) and adds no sightings.
// Rows are still addressed by row number in read_rows / write_rows / read_raw_rows; rows never
// assigned read zeros, freed rows keep the bytes of their last id until reassigned.
// Initialization and stochastic rounding are keyed by the raw id (the row's global key), so an
// id's row holds the bytes a resident table's row `raw_id` would. Partition p's rows are rows
// [p * num_rows / partitions, (p + 1) * num_rows / partitions). A dynamic table
// may also have a cache (TableOptions::cache): ids map to rows first, rows to slots after.
// Not allowed with frozen (and so with int8 rows).
// Which row a full dynamic table frees first: kAge the one unused longest, kLfu the one seen least
// (ties by age). The values are recorded in dynamic-table state (src/tiered/id_map_io.cc).
enum class EvictionPolicy : uint8_t { kAge = 0, kLfu = 1 };
std::string_view eviction_policy_name(EvictionPolicy p);           // "age" | "lfu"
Result<EvictionPolicy> parse_eviction_policy(std::string_view s);  // errors: InvalidArgument

struct TableDynamicOptions {
  bool enabled = false;
  uint32_t min_count = 1;          // sightings before an id gets a row (1 = first touch; <= 255)
  EvictionPolicy eviction = EvictionPolicy::kAge;
  int64_t max_age_steps = 0;       // > 0: free rows unused for more than this many steps
  uint64_t bloom_counters = 1 << 20;  // counters of the admission filter (min_count > 1);
                                      // 4-bit counters up to min_count 15, 8-bit above
  uint32_t bloom_hashes = 4;       // counters per id (1..16)
  // Id partitions: raw id x belongs to partition dynamic_partition(x, partitions), and each
  // partition is an IdMap of num_rows / partitions rows with its own admission filter
  // (bloom_counters / partitions counters) and eviction order. A sharded table gives each rank
  // whole partitions, so a table's behaviour depends on `partitions`, never on the process
  // count: any world size dividing `partitions` trains bit-identically, and checkpoints reshard
  // by moving whole partitions. REQUIRES: num_rows % partitions == 0; 1..65536.
  uint32_t partitions = 1;
};

// The partition of raw id `raw_id` among `partitions` (a fixed hash; 0 when partitions == 1).
uint32_t dynamic_partition(int64_t raw_id, uint32_t partitions);

// Where a table's rows sit in the whole table when this collection holds only part of it: set
// by the distribution layer for each rank's local collection (src/dist); the defaults describe
// a whole table. Initialization and stochastic rounding are keyed by the global row (raw id for
// dynamic tables), so a row's bytes do not depend on which process holds it.
struct TableShardOptions {
  int64_t key_stride = 1;   // local row l is global row l * key_stride + key_offset
  int64_t key_offset = 0;
  int64_t global_rows = 0;  // rows of the whole table (the uniform init bound); 0: num_rows
  // Dynamic tables: the partitions held, [first_partition, first_partition + held_partitions)
  // of dynamic.partitions; held_partitions 0 means all.
  uint32_t first_partition = 0;
  uint32_t held_partitions = 0;
};

// Counters of a dynamic table's IdMap since creation (or as restored by load_dynamic_state).
struct DynamicTableStats {
  int64_t admitted = 0;            // ids given a row (re-admissions included)
  int64_t readmitted = 0;          // of admitted: ids that had a row before (approximate, may
                                   // include a few first admissions, never misses one)
  int64_t rejected_min_count = 0;  // occurrences refused: below min_count sightings
  int64_t rejected_capacity = 0;   // occurrences refused: every row in use by the batch
  int64_t evicted = 0;             // rows taken from an id for a new one (capacity)
  int64_t expired = 0;             // rows freed by max_age_steps
  int64_t live_rows = 0;           // rows that hold an id now
  uint64_t held_bytes = 0;         // host bytes of the IdMap (category row_cache)
  // Adds every counter of `o` (the totals of several tables).
  DynamicTableStats& operator+=(const DynamicTableStats& o) {
    admitted += o.admitted;
    readmitted += o.readmitted;
    rejected_min_count += o.rejected_min_count;
    rejected_capacity += o.rejected_capacity;
    evicted += o.evicted;
    expired += o.expired;
    live_rows += o.live_rows;
    held_bytes += o.held_bytes;
    return *this;
  }
};

struct TableOptions {
  std::string name;
  int64_t num_rows = 0;  // rows; for a dynamic table the row capacity
  int64_t dim = 0;
  DType dtype = DType::kF32;
  OptimizerOptions optimizer;
  InitOptions init;
  bool frozen = false;  // lookup only: backward_update leaves it unchanged (int8 tables must be)
  TableCacheOptions cache;  // tiered storage (off by default)
  TableDynamicOptions dynamic;  // raw ids mapped to rows by an IdMap (off by default)
  TableShardOptions shard;      // set by the distribution layer (leave the defaults)
  // Where the rows live, by name (src/table/residency.h). Empty: chosen from the options and the
  // placement: "cached" with cache options, "split" when weights and optimizer state are placed
  // in different tiers, else "resident". "mirrored" keeps a checked second copy (for tests of
  // kernels and backends). A name that does not apply to the table is InvalidArgument.
  std::string residency;
};

struct FeatureOptions {
  std::string name;
  int table = 0;  // index into CollectionOptions::tables; several features may share a table
  PoolingMode pooling = PoolingMode::kSum;
};

struct CollectionOptions {
  std::vector<TableOptions> tables;
  std::vector<FeatureOptions> features;
  BoundsCheckMode bounds_check = BoundsCheckMode::kError;
  uint64_t seed = 0;      // initializers and stochastic rounding
  int num_threads = 0;    // OpenMP threads per call; 0 = OpenMP's default
  // Use the scalar reference kernels (the test oracle) instead of the fast ones.
  bool use_reference_kernels = false;
  // The kernels and copies between tiers the collection runs on (src/kernels/backend.h,
  // docs/backend.md); chosen once at creation. Null: the CPU backend, or the reference backend
  // when use_reference_kernels is set; when set it takes precedence over that flag. Not owned:
  // it must outlive the collection. An internal type: set by tests and in-tree backends.
  const kernels::KernelBackend* backend = nullptr;
};

// One feature's lookups for a batch of B bags. Spans are borrowed for the call only.
struct FeatureInput {
  std::span<const int64_t> ids;      // [nnz] row ids
  std::span<const int64_t> offsets;  // [B + 1] bag b is ids[offsets[b] .. offsets[b+1])
  std::span<const float> weights;    // [nnz] per-id weights, or empty (all 1)
};

struct SparseBatch {
  int64_t batch_size = 0;                // B
  std::vector<FeatureInput> features;    // one per feature, in CollectionOptions order
};

// What follows a forward (the last parameter of EmbeddingTables::forward):
//   kTrain  a backward_update of the same batch may follow (training): dynamic tables map the
//           batch's ids (IdMap::map: sightings counted, new ids admitted and initialized, rows
//           evicted when the table is full) and keep the mapping for the update.
//   kEval   no update follows (evaluation, test, prediction, serving): lookup only. Dynamic
//           tables find each id's row (IdMap::find) and change nothing (no sighting, admission,
//           eviction, initialization or counter; the kept training mapping stays); an id
//           without a row reads zeros, as a rejected id does in training. A backward_update
//           after a kEval forward (with no kTrain forward in between) fails with
//           FailedPrecondition. Cached tables still bring the batch's rows into the cache.
// The dense layers (nn::Mlp) take the same enum: kEval saves no activations.
enum class ForwardMode : uint8_t { kTrain, kEval };

struct UpdateOptions {
  // Gradients are multiplied by this before the optimizer (1 / loss_scale to unscale).
  float grad_multiplier = 1.0f;
  // Check every incoming gradient for Inf/NaN before any row changes; if one is found the step
  // is skipped entirely (no row, no state, no step counter changes).
  bool check_finite = true;
  // With check_finite: the step is also skipped (skipped_nonfinite and skipped_huge_grad set)
  // when a row's reduced gradient (summed over the batch, times grad_multiplier) has an element
  // larger than this in magnitude. A finite but huge gradient (1e20) would otherwise make
  // Adagrad's and Adam's state (which add g^2) infinite, and those rows would stop learning
  // silently. 1e15 leaves g^2 far below FLT_MAX; +Inf turns the bound off. REQUIRES: > 0.
  // Sharded collections (dist::ShardedEmbeddingCollection) bound each bag's incoming gradient
  // instead (every rank must agree before any owner updates), not the reduced sum.
  float max_abs_grad = 1e15f;
  // When the summed gradients are provably finite (bounded by the inputs), reduce each row's
  // gradient and update it in one pass, without a [unique rows, dim] buffer. false forces the
  // two-pass path (reduce all, check, update). Both give bit-identical results.
  bool fuse_when_safe = true;
};

struct UpdateReport {
  bool skipped_nonfinite = false;  // true: nothing was updated
  bool skipped_huge_grad = false;  // the skip was for a gradient above max_abs_grad (finite)
  int64_t unique_rows = 0;         // rows updated, all tables
  int64_t lookups = 0;             // ids processed, all tables
};

}  // namespace leanemb
