// EmbeddingCollection: many embedding tables and the features that look them up, trained in
// one batched call per step (like FBGEMM's table-batched embedding, TBE).
//
// Each table stores "fat rows" (weights in fp32/fp16/bf16/int8-rowwise, then the row's
// optimizer state; see optimizer.h). Forward pools the rows of each bag into an fp32 output;
// backward_update deduplicates the batch's ids per table, sums each unique row's gradient in
// fp32 in a fixed order, and applies the optimizer once per unique row. No full-table gradient
// exists at any time: gradient memory is [unique rows, dim] (kept for reuse between steps).
//
// Inputs follow PyTorch's EmbeddingBag convention: per feature, ids [nnz] (int64), offsets
// [B + 1] (offsets[0] = 0, non-decreasing, offsets[B] = nnz), optional per-id weights [nnz].
// Untrusted input is validated at this API under a BoundsCheckMode before any kernel runs.
//
// Determinism: results are bit-identical for any thread count (each bag and each unique row is
// computed by exactly one thread in a fixed order; stochastic rounding uses a counter-based RNG
// keyed by (seed, step, table, row, column)).
//
// Thread safety: one EmbeddingCollection must not be used by two calls at once; calls use up
// to `num_threads` OpenMP threads internally.
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
enum class CachePolicy : uint8_t { kLru, kLfu };

struct TableCacheOptions {
  double fraction = 0.0;      // cache slots as a fraction of the rows; 0 (and capacity 0) = no
                              // cache: the table is resident in the weights' tier
  int64_t capacity_rows = 0;  // slots; > 0 overrides fraction
  CachePolicy policy = CachePolicy::kLru;
  std::string store = "host";  // "host" (RAM) | "file" (O_DIRECT file at store_path)
  std::string store_path;      // file store: the table file (created or truncated)
  bool direct_io = true;       // file store: O_DIRECT (buffered where the file system refuses it)
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
  uint64_t evictions = 0;
  uint64_t writebacks = 0;        // dirty rows written to the store
  uint64_t initialized_rows = 0;  // rows created by the initializer on first touch
  uint64_t bytes_read = 0;        // store -> cache
  uint64_t bytes_written = 0;     // cache -> store
  double fetch_seconds = 0;       // all fetch work (write-backs and reads)
  double exposed_seconds = 0;     // of it, time forward/backward_update waited for it
  // The store's own counters: I/O requests (file) or row copies (host) and time inside them.
  uint64_t store_read_ops = 0, store_write_ops = 0;
  double store_read_seconds = 0, store_write_seconds = 0;
  // Bytes of the cache's index in row_cache (slot rows, flags, policy keys, the row -> slot map
  // and eviction candidates; docs/tiered.md), besides the capacity_rows fat-row slots.
  uint64_t index_bytes = 0;
  double hit_rate() const { return lookups ? 1.0 - static_cast<double>(misses) / static_cast<double>(lookups) : 0.0; }
};

// Dynamic table (docs/tiered.md, "Dynamic tables in a collection"): the table's features carry
// raw 64-bit ids (hashed categorical values; any int64 value, negatives included, never
// bounds-checked: BoundsCheckMode does not apply to them) and an IdMap gives each id a row of
// the table's num_rows rows (the row capacity) when it is admitted:
// - forward() maps every id of the batch once (one sighting per occurrence; evaluation forwards
//   count too). An id gets a row on its min_count-th sighting, counted in a counting Bloom
//   filter (an overestimate is possible, never an underestimate). A new row is initialized by
//   the table's initializer keyed by the raw id, not the row, so an id starts with the same
//   bytes wherever it lands.
// - An id without a row (below min_count, or no row free that this batch does not use) reads a
//   zero vector and is not updated. Pooling kMean divides by the bag's full length: a rejected
//   id counts as a zero vector. Sequence (kNone) outputs hold zeros at its positions.
// - When every row is taken, a new id evicts the row unused for the longest time ("age") or the
//   row with the fewest uses since admission, ties by oldest use ("lfu"). max_age_steps > 0
//   also frees rows unused for more than that many steps, after each successful update.
// - backward_update() uses the mapping of the forward() of the same batch (the most recent
//   forward; without one, the rows the ids have now) and adds no sightings.
// Rows are still addressed by row number in read_rows / write_rows / save_table; rows never
// assigned read zeros, freed rows keep the bytes of their last id until reassigned.
// Stochastic rounding stays keyed by the row (the mapping is deterministic). A dynamic table
// may also have a cache (TableOptions::cache): ids map to rows first, rows to slots after.
// Not allowed with frozen (and so with int8 rows).
struct TableDynamicOptions {
  bool enabled = false;
  uint32_t min_count = 1;          // sightings before an id gets a row (1 = first touch; <= 255)
  std::string eviction = "age";    // "age" | "lfu"
  int64_t max_age_steps = 0;       // > 0: free rows unused for more than this many steps
  uint64_t bloom_counters = 1 << 20;  // counters of the admission filter (min_count > 1);
                                      // 4-bit counters up to min_count 15, 8-bit above
  uint32_t bloom_hashes = 4;       // counters per id (1..16)
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

struct UpdateOptions {
  // Gradients are multiplied by this before the optimizer (1 / loss_scale to unscale).
  float grad_multiplier = 1.0f;
  // Check every incoming gradient for Inf/NaN before any row changes; if one is found the step
  // is skipped entirely (no row, no state, no step counter changes).
  bool check_finite = true;
  // When the summed gradients are provably finite (bounded by the inputs), reduce each row's
  // gradient and update it in one pass, without a [unique rows, dim] buffer. false forces the
  // two-pass path (reduce all, check, update). Both give bit-identical results.
  bool fuse_when_safe = true;
};

struct UpdateReport {
  bool skipped_nonfinite = false;  // true: nothing was updated
  int64_t unique_rows = 0;         // rows updated, all tables
  int64_t lookups = 0;             // ids processed, all tables
};

class EmbeddingCollection {
 public:
  // Validates options, allocates every table's fat rows through `allocator` (categories weights
  // and optimizer_state) and initializes them. `allocator` must outlive the collection; null
  // means default_host_allocator(). Workspace and gradients of each step are also allocated
  // there (categories workspace, gradients, activations for internal buffers).
  static Result<std::unique_ptr<EmbeddingCollection>> create(const CollectionOptions& options,
                                                             Allocator* allocator = nullptr);
  // As above, with every category in the tier `memory`'s placement gives it: weights and
  // optimizer state in their tiers (split into two buffers when the tiers differ; a step then
  // stages the touched rows' offloaded part in device workspace and writes it back), workspace
  // and gradients in the workspace / gradients tier. Bytes that cross tiers are recorded with
  // memory->record_transfer() (see docs/memory.md). Results are bit-identical for every
  // placement. `memory` must outlive the collection.
  static Result<std::unique_ptr<EmbeddingCollection>> create(const CollectionOptions& options,
                                                             MemorySystem* memory);
  ~EmbeddingCollection();

  const CollectionOptions& options() const;
  const RowLayout& layout(int table) const;
  int num_tables() const;
  int num_features() const;
  // Sum of the dims of pooled features: the width of the pooled output.
  int64_t pooled_dim() const;
  // Column where feature f's pooled vector starts in the pooled output (-1 for kNone features).
  int64_t pooled_offset(int feature) const;
  int64_t step() const;               // successful updates so far
  // Ids dropped by BoundsCheckMode::kSkip so far: in backward_update (ids the training ignored)
  // and, counted separately, in forward (lookups that read nothing).
  uint64_t num_skipped_ids() const;
  uint64_t num_skipped_lookups() const;
  // Changes table `table`'s optimizer learning rate for later updates (a schedule such as
  // linear decay); optimizer state is kept. Errors: OutOfRange (table), InvalidArgument (lr not
  // finite or < 0); nothing changes on error.
  Status set_learning_rate(int table, float lr);
  // Sets the step counter (Adam's bias correction, stochastic-rounding keys); used when rows are
  // restored from a file or checkpoint. REQUIRES: step >= 0.
  void set_step(int64_t step);

  // Checks a batch under the bounds-check policy without computing anything.
  // Errors: InvalidArgument / OutOfRange naming feature, bag and position.
  Status validate(const SparseBatch& batch) const;

  // pooled_out: [B, pooled_dim()] row-major fp32. seq_out: one span per kNone feature, in
  // feature order, each [nnz_f, dim] fp32. On error nothing is written.
  // Cached tables: forward pins the batch's rows in the cache until backward_update (or the next
  // forward) so that the update finds them; the update marks them changed and unpins them.
  Status forward(const SparseBatch& batch, std::span<float> pooled_out,
                 std::span<const std::span<float>> seq_out = {});

  // grad_pooled: [B, pooled_dim()] gradient of the loss w.r.t. the pooled output.
  // grad_seq: one span per kNone feature, [nnz_f, dim]. Applies each table's optimizer to the
  // unique rows of the batch. On error (bad input, allocation failure) no row changes.
  Result<UpdateReport> backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                       std::span<const std::span<const float>> grad_seq = {},
                                       const UpdateOptions& update = {});

  // Rows as fp32 (dequantized): out [count, dim]. Errors: OutOfRange.
  Status read_rows(int table, int64_t row_begin, int64_t count, std::span<float> out) const;
  // Sets rows from fp32 (rounded to nearest for low-precision dtypes; optimizer state kept).
  Status write_rows(int table, int64_t row_begin, int64_t count, std::span<const float> in);
  // Optimizer state of rows as fp32: per-element states [count, num_elem_states, dim] followed
  // by per-row scalars [count] (if the optimizer has one). See state_floats_per_row().
  Status read_state(int table, int64_t row_begin, int64_t count, std::span<float> out) const;
  int64_t state_floats_per_row(int table) const;
  // The raw fat rows (weights and state bytes exactly as stored): [count, stride_bytes].
  Status read_raw_rows(int table, int64_t row_begin, int64_t count, std::span<uint8_t> out) const;
  Status write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in);
  // Saves / loads one table (header with layout + raw fat rows). Save writes `path`.tmp and
  // renames it over `path`. Load requires an equal layout and sets the collection's step to the
  // saved one (tables saved together share it).
  Status save_table(int table, const std::string& path) const;
  Status load_table(int table, const std::string& path);

  // Tables with a row cache (TableCacheOptions): starts fetching the rows `next` will touch on a
  // background thread, so that the fetch overlaps the current step. Call it after forward()
  // of the current step; the next forward() waits for it (the time spent waiting is
  // RowCacheStats::exposed_seconds). A no-op without cached tables. Errors: the batch's
  // validation errors (nothing is fetched); a fetch's own error is returned by the next forward.
  Status prefetch(const SparseBatch& next);
  // Writes every changed cached row back to its store and makes the store durable.
  Status flush();
  // Errors: OutOfRange (table), FailedPrecondition (the table has no cache).
  Result<RowCacheStats> cache_stats(int table) const;

  // Dynamic tables (TableDynamicOptions). dynamic_stats: the IdMap's counters.
  // dynamic_row: the row raw_id is mapped to now, or -1 (no side effects).
  // save_dynamic_state: the IdMap's state (mapping, use order and counts, filters, counters) as
  // a versioned, checksummed byte string; the rows themselves are saved separately
  // (read_raw_rows / save_table), with the step (step()). load_dynamic_state restores it; the
  // saved map must have the table's row capacity (its other options come from the bytes).
  // Errors: OutOfRange (table), FailedPrecondition (not a dynamic table), DataLoss (corrupt or
  // truncated bytes), InvalidArgument (capacity differs); after an error the map is unchanged.
  Result<DynamicTableStats> dynamic_stats(int table) const;
  Result<int64_t> dynamic_row(int table, int64_t raw_id) const;
  Result<std::vector<uint8_t>> save_dynamic_state(int table) const;
  Status load_dynamic_state(int table, std::span<const uint8_t> bytes);

  // The allocator's stats (with a MemorySystem: the workspace tier's). A dynamic table's IdMap
  // is host memory (category row_cache): here with one allocator, in memory->host() otherwise.
  MemoryStats memory_stats() const;
  // backward_update keeps its workspace and gradient buffers (sized to the largest step so far)
  // for the next step; they count as current bytes in their categories while held. This frees
  // them; the next step allocates again.
  void release_step_buffers();

 private:
  struct Impl;
  explicit EmbeddingCollection(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<EmbeddingCollection>> create_impl(const CollectionOptions& options,
                                                                  std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leanemb
