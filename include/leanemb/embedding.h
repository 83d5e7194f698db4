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

#include "leanemb/linked_rows.h"
#include "leanemb/table_options.h"
#include "leanemb/tables.h"

namespace leanemb {

// The local layer of the table stack (leanemb/tables.h): every row in this process. Also the
// per-rank store of a sharded collection (src/dist), which gives it the global key of each of
// its rows (TableOptions::key).
class EmbeddingCollection final : public EmbeddingTables {
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
  ~EmbeddingCollection() override;

  const CollectionOptions& options() const override;
  const RowLayout& layout(int table) const override;
  // Sum of the dims of pooled features: the width of the pooled output.
  int64_t pooled_dim() const override;
  // Column where feature f's pooled vector starts in the pooled output (-1 for kNone features).
  int64_t pooled_offset(int feature) const override;
  int64_t step() const override;      // successful updates so far
  // Ids dropped by BoundsCheckMode::kSkip so far: in backward_update (ids the training ignored)
  // and, counted separately, in forward (lookups that read nothing).
  uint64_t num_skipped_ids() const;
  uint64_t num_skipped_lookups() const;
  // Changes table `table`'s optimizer learning rate for later updates (a schedule such as
  // linear decay); optimizer state is kept. Errors: OutOfRange (table), InvalidArgument (lr not
  // finite or < 0); nothing changes on error.
  Status set_learning_rate(int table, float lr) override;
  // Sets the step counter (Adam's bias correction, stochastic-rounding keys); used when rows are
  // restored from a file or checkpoint. REQUIRES: step >= 0.
  void set_step(int64_t step) override;

  // Checks a batch under the bounds-check policy without computing anything.
  // Errors: InvalidArgument / OutOfRange naming feature, bag and position.
  Status validate(const SparseBatch& batch) const override;

  // pooled_out: [B, pooled_dim()] row-major fp32. seq_out: one span per kNone feature, in
  // feature order, each [nnz_f, dim] fp32. On error nothing is written.
  // Cached tables: forward pins the batch's rows in the cache until backward_update (or the next
  // forward) so that the update finds them; the update marks them changed and unpins them.
  // mode kEval (ForwardMode): lookup only; dynamic tables find rows without admitting ids, and
  // a backward_update right after it fails with FailedPrecondition.
  Status forward(const SparseBatch& batch, std::span<float> pooled_out,
                 std::span<const std::span<float>> seq_out = {},
                 ForwardMode mode = ForwardMode::kTrain) override;

  // grad_pooled: [B, pooled_dim()] gradient of the loss w.r.t. the pooled output.
  // grad_seq: one span per kNone feature, [nnz_f, dim]. Applies each table's optimizer to the
  // unique rows of the batch. On error (bad input, allocation failure; FailedPrecondition after
  // a kEval forward) no row changes.
  Result<UpdateReport> backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                       std::span<const std::span<const float>> grad_seq = {},
                                       const UpdateOptions& update = {}) override;

  // Gradient accumulation over micro-batches (leanemb/tables.h): the step's distinct rows are
  // found once (begin: the batch's rows sorted in the step buffers), each micro-batch is deduped
  // as backward_update dedups a batch and its runs are added into the rows' sums [U, dim]
  // (category gradients, kept between steps as the other step buffers; the rows [U] int64 in
  // workspace); apply multiplies by grad_multiplier, checks as the two-pass path does and runs
  // the optimizer once per row.
  Status begin_accumulation(const SparseBatch& batch, const UpdateOptions& update = {}) override;
  Status accumulate(int64_t bag_begin, int64_t bag_end, std::span<const float> grad_pooled,
                    std::span<const std::span<const float>> grad_seq = {}) override;
  Result<UpdateReport> apply_accumulated() override;
  void discard_accumulation() override;
  bool accumulates_by_row() const override { return true; }

  // Rows as fp32 (dequantized): out [count, dim]. Errors: OutOfRange.
  Status read_rows(int table, int64_t row_begin, int64_t count, std::span<float> out) const override;
  // Sets rows from fp32 (rounded to nearest for low-precision dtypes; optimizer state kept).
  Status write_rows(int table, int64_t row_begin, int64_t count, std::span<const float> in) override;
  // Optimizer state of rows as fp32: per-element states [count, num_elem_states, dim] followed
  // by per-row scalars [count] (if the optimizer has one). See state_floats_per_row().
  Status read_state(int table, int64_t row_begin, int64_t count, std::span<float> out) const override;
  // The raw fat rows (weights and state bytes exactly as stored): [count, stride_bytes].
  Status read_raw_rows(int table, int64_t row_begin, int64_t count, std::span<uint8_t> out) const override;
  Status write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in) override;
  // The raw fat rows `rows` (any order) into out [rows.size(), stride_bytes]: a cached table
  // reads its resident rows from their slots and the others from its store in one batch (a
  // checkpoint's changed rows). Errors: OutOfRange (a row outside the table), InvalidArgument
  // (the buffer's size), the store's.
  Status read_raw_rows_at(int table, std::span<const int64_t> rows, std::span<uint8_t> out) const;
  // Whole tables are saved and loaded with checkpoints (save / load, EmbeddingTables:
  // crash-safe, checksummed, any world size). save writes the plain format, full or incremental
  // (src/table/table_checkpoint_save.cc); load reads either format, a sharded checkpoint as a
  // world of one rank holding every row (src/table/sharded_checkpoint_load.cc).
  Result<TablesSaveInfo> save(const std::string& out_dir, int64_t step, std::span<const CheckpointBlob> blobs = {},
                              const TablesSaveOptions& options = {}) override;
  Result<int64_t> load(const std::string& dir, const TablesLoadOptions& options = {}) override;

  // Changed rows, for incremental checkpoints (TablesSaveOptions::incremental). After
  // track_changes(), every row a step updates or a write replaces is marked, per table (a layer
  // over the table's residency: one bit per row in host memory, category weights). The marks
  // are relative to a base, the checkpoint they started from (its step and id; step -1: none),
  // or the tables' initial state (`initial`: tracking began before any row changed, so the
  // first checkpoint can hold only the changed rows, a sparse base: docs/formats/checkpoint.md,
  // "Chains"); reset_changes(base) clears them. Tracking never changes results. Errors:
  // ResourceExhausted.
  struct ChangeBase {
    int64_t step = -1;
    std::string id;        // the checkpoint's id (32 hex digits)
    bool initial = false;  // step -1: the marks count from the initial rows (what create gave)
  };
  Status track_changes();
  bool tracks_changes() const;
  const ChangeBase& change_base() const;
  void reset_changes(ChangeBase base);
  // Rows of `table` changed since the base (0 when not tracking).
  int64_t num_changed_rows(int table) const;
  // Up to out.size() changed rows >= from of `table`, ascending, into out; returns how many.
  int64_t changed_rows(int table, int64_t from, std::span<int64_t> out) const;
  // Marks `rows` of `table` changed (a checkpoint writer widening an increment to a new sparse
  // base: the rows of the chain it replaces). No-op when not tracking. REQUIRES: valid rows.
  void mark_changed(int table, std::span<const int64_t> rows);
  // True while no row of `table` has changed since create (no update, write or admitted id).
  bool has_initial_rows(int table) const;
  // Gives every row of `table` its initial bytes again (those create gave it): nothing to do
  // when has_initial_rows(table), else every row is rewritten in chunks (O(rows); for a cached
  // table through its store). Loading a sparse base starts with it. Errors: the residency's.
  Status reset_rows_to_initial(int table);

  // Linked rows (leanemb/linked_rows.h; docs/formats/checkpoint.md, "Linked rows"). can_link_rows:
  // `table`'s rows can be kept by hard links of its store's files (a cache over a log-layout
  // file store; not a dynamic table). link_rows writes the table's changed rows back to its store
  // (they stay cached, clean), hard-links the store's files holding rows into the existing
  // directory `dir` and gives each written row's place to `sink`; every row without a place
  // holds its initial bytes. adopt_linked_rows makes a table that holds its initial rows (as
  // created) take such files as its rows, with no row copied. Errors: Unimplemented (not
  // linkable), FailedPrecondition (adopt: rows changed already, or another store layout: copy
  // the rows instead; nothing changed, so the table still has its initial rows), DataLoss (a file or place that does not fit), the store's.
  // into_dir: the links must be able to go there too (one file system); empty: not checked.
  bool can_link_rows(int table, const std::string& into_dir = {}) const;
  Result<LinkedRows> link_rows(int table, const std::string& dir, const RowPlaceSink& sink);
  Status adopt_linked_rows(int table, const std::string& dir, const LinkedRows& linked, const RowPlaceSource& source);

  // Tables with a row cache (TableCacheOptions): starts fetching the rows `next` will touch on a
  // background thread, so that the fetch overlaps the current step. Call it after forward()
  // of the current step; the next forward() waits for it (the time spent waiting is
  // RowCacheStats::exposed_seconds). A no-op without cached tables. Errors: the batch's
  // validation errors (nothing is fetched); a fetch's own error is returned by the next forward.
  Status prefetch(const SparseBatch& next) override;
  // Waits until the outstanding prefetch, if any, has fetched its rows (they stay pinned for the
  // forward that takes them); a prefetch deferred behind it has not started and is not waited
  // for. The wait counts in RowCacheStats::exposed_seconds: a benchmark that stops stepping
  // calls it so that the fetch is timed as the step's, not as whatever runs next. Returns (and
  // clears) the prefetch's own error, if any; the forward then fetches the rows itself.
  Status wait_prefetch();
  // Writes every changed cached row back to its store and makes the store durable.
  Status flush() override;
  // Errors: OutOfRange (table), FailedPrecondition (the table has no cache).
  Result<RowCacheStats> cache_stats(int table) const override;
  LocalShard local_shard() override { return LocalShard{this, nullptr, nullptr}; }

  // Dynamic tables (TableDynamicOptions). dynamic_stats: the IdMap's counters.
  // dynamic_row: the row raw_id is mapped to now, or -1 (no side effects).
  // save_dynamic_state: the IdMap's state (mapping, use order and counts, filters, counters) as
  // a versioned, checksummed byte string; the rows themselves are saved separately
  // (read_raw_rows, or a checkpoint), with the step (step()). load_dynamic_state restores it; the
  // saved map must have the table's row capacity (its other options come from the bytes).
  // Errors: OutOfRange (table), FailedPrecondition (not a dynamic table), DataLoss (corrupt or
  // truncated bytes), InvalidArgument (capacity differs); after an error the map is unchanged.
  Result<DynamicTableStats> dynamic_stats(int table) const override;
  Result<int64_t> dynamic_row(int table, int64_t raw_id) const override;
  Result<std::vector<uint8_t>> save_dynamic_state(int table) const;
  Status load_dynamic_state(int table, std::span<const uint8_t> bytes);
  // The same for one held id partition k (0-based among the partitions this collection holds;
  // TableDynamicOptions::partitions, TableShardOptions): its rows are rows
  // [k * rows per partition, (k + 1) * rows per partition). Used by checkpoints to move whole
  // partitions between process counts. Errors: as above, OutOfRange (k).
  Result<std::vector<uint8_t>> save_dynamic_partition(int table, uint32_t k) const;
  Status load_dynamic_partition(int table, uint32_t k, std::span<const uint8_t> bytes);

  // Optimizer state a table keeps outside its fat rows: SM3's column accumulators ([dim] fp32,
  // OptimizerKind::kSm3); empty for every other optimizer. Checkpoints save and restore it; a
  // sharded collection all-reduces it with max after each step. REQUIRES: 0 <= table < num_tables().
  std::span<float> column_state(int table);
  std::span<const float> column_state(int table) const;

  // The allocator's stats (with a MemorySystem: the workspace tier's). A dynamic table's IdMap
  // is host memory (category row_cache): here with one allocator, in memory->host() otherwise.
  MemoryStats memory_stats() const override;
  // backward_update keeps its workspace and gradient buffers (sized to the largest step so far)
  // for the next step; they count as current bytes in their categories while held. This frees
  // them; the next step allocates again.
  void release_step_buffers() override;

 private:
  struct Impl;
  explicit EmbeddingCollection(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<EmbeddingCollection>> create_impl(const CollectionOptions& options,
                                                                  std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leanemb
