// Private state of EmbeddingCollection, shared by its implementation files
// (embedding_collection.cc: creation, forward, row access; backward.cc: backward_update).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "leanemb/embedding.h"
#include "table/batch_check.h"
#include "table/residency.h"
#include "tiered/id_map.h"
#include "tiered/row_cache.h"
#include "table/step_sizes.h"

namespace leanemb {

using table_internal::CheckedBatch;
using table_internal::FeatureMeta;

// The id-mapping layer of one dynamic table (dynamic_tables.cc): the IdMaps of the partitions
// this collection holds (TableDynamicOptions::partitions, TableShardOptions), and the raw id
// that holds each row (the rows' global keys for stochastic rounding).
//   local partition k = global partition first + k holds local rows [k * part_rows, (k+1) * part_rows)
class DynamicIds {
 public:
  // REQUIRES: to.dynamic.enabled. Errors: InvalidArgument (partitions), the IdMaps' errors.
  static Result<std::unique_ptr<DynamicIds>> create(const TableOptions& to, uint64_t seed, int table, Allocator* host);
  // rows_out[i] := the row of raw_ids[i] or -1, admitting ids (IdMap::map per partition, each
  // partition seeing its ids in order). assigned: rows given to ids by this call.
  Status map(std::span<const int64_t> raw_ids, int64_t step, std::span<int64_t> rows_out,
             std::vector<tiered::RowAssignment>* assigned);
  int64_t find(int64_t raw_id) const;  // -1: no row (or not a partition held here)
  Status end_step(int64_t step);
  DynamicTableStats stats() const;
  uint32_t num_partitions() const { return partitions_; }  // global count
  uint32_t first_partition() const { return first_; }
  uint32_t held_partitions() const { return static_cast<uint32_t>(maps_.size()); }
  int64_t partition_rows() const { return part_rows_; }
  // The IdMap state of held partition k (0-based here) / restoring it (capacity must match).
  std::vector<uint8_t> serialize(uint32_t k) const;
  // Replaces held partitions parts[i] by the states bytes[i]: all or nothing.
  Status deserialize(std::span<const uint32_t> parts, std::span<const std::span<const uint8_t>> bytes, Allocator* host);
  // [num local rows]: the raw id of each row, -1 for rows no id holds.
  const int64_t* row_keys() const { return row_keys_.as<int64_t>(); }
  size_t held_bytes() const;

 private:
  std::vector<tiered::IdMap> maps_;
  Allocation row_keys_;
  uint32_t partitions_ = 1, first_ = 0;
  int64_t part_rows_ = 0;
  std::vector<uint32_t> part_of_;    // map(): scratch, local partition of each id
  std::vector<int64_t> ids_, rows_;  // map(): scratch, one partition's ids and rows
  tiered::MapReport report_;
  void track(const tiered::MapReport& r, int64_t base, std::vector<tiered::RowAssignment>* assigned);
};

// One table: its layers (docs/architecture.md, "Table layers"). The residency holds the rows
// (resident, split across tiers, or cached over a store: table/residency.h); a dynamic table's
// id mapping turns raw ids into rows first.
struct TableState {
  RowLayout layout;  // the fat row
  int64_t num_rows = 0;
  std::unique_ptr<table_internal::Residency> residency;
  // Dynamic table (TableOptions::dynamic): maps the features' raw ids to rows (dynamic_tables.cc).
  std::unique_ptr<DynamicIds> id_map;
  // The global key of local row l (TableShardOptions): l * key_stride + key_offset, or the raw id
  // holding it for a dynamic table.
  int64_t key_stride = 1, key_offset = 0;
  // SM3 (OptimizerKind::kSm3): the column accumulators [dim] and the buffer a step writes the
  // new ones to (backward.cc swaps them after the table's update); empty for other optimizers.
  // Host memory outside the allocator's accounting: 8 * dim bytes per table.
  std::vector<float> sm3_col, sm3_next;
  // No row changed since create (EmbeddingCollection::has_initial_rows): cleared by a step's
  // update, a raw write and an admitted id (the residency's end_update / write_rows / write_row).
  bool initial_rows = true;

  int64_t global_row(int64_t l) const { return l * key_stride + key_offset; }
  // Gives a view over rows or staged rows the keys of this table's rows.
  void set_keys(kernels::TableView* v) const {
    v->row_keys = id_map ? id_map->row_keys() : nullptr;
    v->key_stride = key_stride;
    v->key_offset = key_offset;
  }
  // The fused update of table t's `n` distinct rows (backward_update, apply_accumulated): the
  // residency's target with this table's keys; an SM3 table's rows read its column
  // accumulators of before the step and write the new ones to sm3_next.
  table_internal::Residency::UpdateTarget begin_update(int t, const int64_t* rows, int64_t n, std::span<uint8_t> fat,
                                                       std::span<int64_t> slots, Tier tier) {
    table_internal::Residency::UpdateTarget u = residency->begin_update(rows, n, fat, slots, tier);
    u.view.table_index = static_cast<uint32_t>(t);
    set_keys(&u.view);
    if (!sm3_col.empty()) {
      std::copy(sm3_col.begin(), sm3_col.end(), sm3_next.begin());
      u.view.sm3_col = sm3_col.data();
      u.view.sm3_col_next = sm3_next.data();
    }
    return u;
  }
  // After the kernel: staged rows written back (cached rows marked changed), the new SM3
  // column accumulators in place, and the table no longer at its initial rows if a row changed.
  void end_update(const int64_t* rows, int64_t n, std::span<const uint8_t> fat, Tier tier) {
    residency->end_update(rows, n, fat, tier);
    initial_rows = initial_rows && n == 0;
    sm3_col.swap(sm3_next);
  }
};

// One table's ids of a step grouped by row: the sorted contributions and their runs.
struct TableDedup {
  kernels::SegmentSource source;  // keys, seg, src_ptr, scale, dim, multiplier
  const int64_t* rows = nullptr;  // [U] the unique rows, ascending
  int64_t num_unique = 0;
  int64_t num_ids = 0;
  float max_abs_scale = 0.0f;     // largest |scale| of a contribution
  int64_t max_run = 0;            // most contributions to one row
};

// A split table's staging buffers for one update (backward.cc): fat rows [U, stride] and slot
// numbers 0..U-1; both empty for a table whose residency updates in place.
struct UpdateStaging {
  std::span<uint8_t> fat;
  std::span<int64_t> slots;
};

// The StepBuffers slots of EmbeddingCollection::Impl::buffers: kStepSlotsPerTable per table
// (backward.cc: sort keys, radix scratch / run starts, contribution pointers and scales in
// position order, the same sorted by row, unique rows, gradients of the two-pass path), then
// shared ones. begin_accumulation (accumulate.cc) sorts the step's rows in table t's keys slot.
enum StepSlot : size_t {
  kSlotKeys, kSlotRuns, kSlotSrcPtr, kSlotScale, kSlotSortedPtr, kSlotSortedScale, kSlotRows, kSlotGrads
};
inline constexpr size_t kStepSlotsPerTable = 8;
inline size_t step_slot(int table, StepSlot s) { return static_cast<size_t>(table) * kStepSlotsPerTable + s; }

// Buffers of a step, kept between steps and grown on demand: allocating and freeing them every
// step would make the OS fault in and zero fresh pages each time (a large share of a step's
// time at 2 million rows). They stay visible in the allocator's accounting while held;
// EmbeddingCollection::release_step_buffers() returns them.
class StepBuffers {
 public:
  // A buffer of at least `bytes` for `slot`, allocated in `category` if the held one is smaller
  // (with headroom up to most_bytes: no request of this slot exceeds it).
  Result<void*> get(size_t slot, size_t bytes, Category category, Allocator* alloc, size_t most_bytes = SIZE_MAX) {
    if (slot >= slots_.size()) slots_.resize(slot + 1);
    Allocation& a = slots_[slot];
    if (a.size_bytes() < bytes || a.empty()) {
      a.reset();  // free first: the old and new buffer never coexist
      // 1/8 headroom so that slowly growing batches do not reallocate every step.
      LEANEMB_ASSIGN_OR_RETURN(a, alloc->allocate(step_buffer_alloc_bytes(bytes, most_bytes), category));
    }
    return a.data();
  }
  void release() { slots_.clear(); }

 private:
  std::vector<Allocation> slots_;
};

// A batch whose dynamic tables' raw ids are replaced by their rows (dynamic_tables.cc). Ids
// without a row are removed; a feature that lost ids gets copies of its arrays (in `ws`) and a
// mask of the positions kept, so that sequence outputs and gradients can be expanded /
// compacted. kMean bags that lost ids get weights scaled by kept / original length, so the mean
// still divides by the original length (rejected ids count as zero vectors).
struct DynamicBatch {
  explicit DynamicBatch(Allocator* alloc) : ws(alloc) {}
  SparseBatch batch;
  std::vector<std::span<const uint8_t>> kept;  // per feature: [nnz] 1 = kept, or empty (all kept)
  Workspace ws;
};

// A step whose gradients arrive in micro-batches (EmbeddingTables::begin_accumulation ..
// apply_accumulated; accumulate.cc). Holds the step's batch as the update sees it: checked,
// dynamic ids mapped, cached rows as slots (their pins held until apply or discard).
struct Accumulation {
  explicit Accumulation(Allocator* a) : dyn(a) {}
  SparseBatch batch;          // the caller's views (its arrays must outlive the accumulation)
  CheckedBatch cb;            // checked (cb.batch: &batch or the filtered copy)
  DynamicBatch dyn;           // dynamic ids mapped
  SparseBatch step;           // the kernels' rows: the update's batch
  UpdateOptions update;
  int64_t next_bag = 0;       // the first bag the next accumulate must start at
  bool nonfinite = false;     // an incoming gradient was Inf or NaN: apply skips the step
  std::vector<int64_t> num_unique;  // per table: the step's distinct rows U (0: frozen or none)
  std::vector<const int64_t*> rows;  // per table: [U] those rows (kernel rows), ascending
  std::vector<float*> sums;          // per table: [U, dim] their summed gradients
  std::vector<int64_t> offsets;     // accumulate(): the micro-batch's rebased offsets
};

struct EmbeddingCollection::Impl {
  CollectionOptions options;
  Allocator* alloc = nullptr;      // workspace and gradients
  MemorySystem* memory = nullptr;  // null when created on one allocator
  std::vector<TableState> tables;
  std::vector<FeatureMeta> meta;
  std::vector<int64_t> pooled_offset;  // per feature, -1 for sequence features
  int64_t pooled_dim = 0;
  int64_t step = 0;
  StepBuffers buffers;           // slots: kSlotsPerTable per table, then shared ones
  uint64_t skipped_ids = 0;      // dropped in backward_update
  uint64_t skipped_lookups = 0;  // dropped in forward
  int dropped_warnings = 0;
  int num_threads = 1;
  bool maps_rows = false;        // some table's residency maps rows (a cache: pins, prefetch)
  bool tracks_changes = false;   // every residency has a TrackedRows layer (track_changes)
  ChangeBase change_base;        // what the changed rows are relative to
  StepBuffers remap_buffers;     // cached tables: per table, the step's rows and their slots
  std::vector<size_t> step_mapped;  // per table: ids the pinned step mapping holds (0 = none)
  // prefetch(): a prefetch was started and no forward has dealt with it yet (taken its rows, or
  // dropped it); the forwards that passed it without taking it (0 or 1: see
  // finish_prefetch_after_remap); whether the last remap took a prefetch's rows; and, per table,
  // the rows of a prefetch called while one was outstanding (in remap_buffers slot 2T + t;
  // 0 = none), which starts once a forward has dealt with the outstanding one.
  bool prefetch_outstanding = false;
  int prefetch_age = 0;
  bool took_prefetch = false;
  std::vector<size_t> prefetch_pending;
  bool has_dynamic = false;      // some table is dynamic
  // Dynamic tables: per table t, slots 4t (raw ids) and 4t + 1 (rows) hold the last forward's
  // mapping (fwd_ids[t] ids; -1 when none), 4t + 2 / 4t + 3 backward_update's scratch.
  StepBuffers dyn_buffers;
  std::vector<int64_t> fwd_ids;
  std::vector<tiered::RowAssignment> assigned_rows;  // map_dynamic: rows a forward gave to ids
  // The most recent forward was ForwardMode::kEval: backward_update fails until a kTrain one.
  bool eval_forward = false;
  // Gradient accumulation (accumulate.cc): the open step, if any, and its buffers, kept between
  // steps: per table t slot 2t the step's distinct rows [U] int64 (kWorkspace), slot 2t + 1
  // their summed gradients [U, dim] fp32 (kGradients).
  std::unique_ptr<Accumulation> acc;
  StepBuffers acc_buffers;

  // The backend every kernel call and every copy between tiers goes through (docs/backend.md):
  // CollectionOptions::backend, else the reference backend under use_reference_kernels, else
  // the CPU backend. Fixed at creation.
  const kernels::KernelBackend* backend = nullptr;
  // Forwards the backend's transfers to memory->record_transfer.
  struct MemorySink final : kernels::TransferSink {
    MemorySystem* memory = nullptr;
    void record(Tier from, Tier to, uint64_t bytes) override { memory->record_transfer(from, to, bytes); }
  };
  mutable MemorySink sink;
  kernels::ExecContext exec() const { return kernels::ExecContext{num_threads, memory ? &sink : nullptr}; }
  // The tier of workspace buffers (staging, new rows of dynamic tables): where compute happens.
  Tier workspace_tier() const { return memory ? memory->placement()[Category::kWorkspace] : Tier::kDevice; }
  // Tier of the callers' buffers of read_raw_rows / write_raw_rows (the public API's spans).
  static constexpr Tier kCallerTier = Tier::kHost;
  kernels::TableView view(int t) const {
    kernels::TableView v = tables[t].residency->view();
    v.table_index = static_cast<uint32_t>(t);
    tables[t].set_keys(&v);
    return v;
  }
  // Rate-limited warning about ids dropped under BoundsCheckMode::kSkip.
  void warn_dropped(uint64_t n, const char* where) {
    if (dropped_warnings >= 5) return;
    ++dropped_warnings;
    std::fprintf(stderr, "leanemb: warning: %s dropped %llu out-of-range ids in this batch%s\n", where,
                 static_cast<unsigned long long>(n), dropped_warnings == 5 ? "; further warnings suppressed" : "");
  }
  // The prologue of forward and backward_update: checks the batch under the bounds-check
  // policy (filling `cb`) and the sizes of the call's pooled and sequence buffers.
  template <typename SeqSpan>
  Status check_call(const EmbeddingCollection& c, const SparseBatch& batch, size_t pooled_size,
                    std::span<const SeqSpan> seq, const char* what, CheckedBatch* cb) const;
  Status check(const SparseBatch& batch, CheckedBatch* out) const {
    return table_internal::check_batch(batch, meta, options.bounds_check, alloc, out);
  }
  // Residencies that map rows (row_mapping.cc). remap: acquires the rows of `b` (pinned for
  // the step) and makes `out` a view of `b` whose ids of those tables are view rows (a cache's
  // slots), its arrays in remap_buffers. Without such tables `out` = `b`.
  // `touch` false (backward_update): rows already resident are not counted again as lookups.
  Status remap(const SparseBatch& b, SparseBatch* out, bool touch = true);
  void release_pins(tiered::PinSet set);
  // After a forward's remap. The outstanding prefetch is over when the forward took its rows, or
  // when it is older than one forward (its pins are dropped); a prefetch started since the
  // previous forward and not taken is kept, pinned, for the next forward (a caller that
  // prefetches batch k + 1 before forward(k) starts so). Once it is over, a deferred prefetch
  // starts.
  Status finish_prefetch_after_remap();
  // Dynamic tables (dynamic_tables.cc). create_id_map: table t's IdMap.
  Status create_id_map(int t);
  // Replaces the dynamic tables' raw ids of `b` by rows into `out`. Without dynamic tables
  // out->batch = b. The uses:
  //   kTrainForward  IdMap::map (new rows initialized and written, the mapping kept for
  //                  backward_update)
  //   kEvalForward   IdMap::find only: nothing in the IdMaps, the rows or the kept mapping
  //                  changes (ids without a row are dropped as rejected ones are)
  //   kUpdate        the kept mapping when `b` has the same ids, else IdMap::find
  enum class DynamicUse : uint8_t { kTrainForward, kEvalForward, kUpdate };
  Status map_dynamic(const SparseBatch& b, DynamicUse use, DynamicBatch* out);
  // forward: expands compacted sequence outputs in place (zeros at removed positions).
  void expand_seq_outputs(const DynamicBatch& d, std::span<const std::span<float>> seq_out) const;
  // backward_update: the sequence gradients of the kept positions (copies in d->ws as needed).
  Status compact_seq_grads(DynamicBatch* d, std::span<const std::span<const float>> grad_seq,
                           std::vector<std::span<const float>>* out);
  // After a successful update: IdMap::end_step (max-age expiry) of every dynamic table.
  Status end_dynamic_step();
  // Builds table t's sorted contributions for `batch` (buffers in StepBuffers slots of t).
  Status dedup(int t, const SparseBatch& batch, std::span<const float> grad_pooled,
               std::span<const std::span<const float>> grad_seq, float multiplier, TableDedup* out);
  // dedup's contributions of table t in summation order: keys (row << 32 | contribution, or the
  // row when `wide`), gradient pointers and scales; returns the largest |scale|.
  float dedup_contributions(int t, const SparseBatch& batch, std::span<const float> grad_pooled,
                            std::span<const std::span<const float>> grad_seq, bool wide, uint64_t* keys,
                            const float** src, float* scale);
  // dedup's end for sorted packed keys: the runs of equal rows and the contributions in row order.
  Status dedup_runs(int t, int64_t n, const uint64_t* keys, int64_t* runs, const float** src, const float* scale,
                    float multiplier, float max_scale, TableDedup* out);
  Status dedup_wide(int t, int64_t n, const uint64_t* keys, const float** src, const float* scale, float multiplier,
                    float max_scale, TableDedup* out);
  // backward_update's phases after the batch is in kernel rows (backward.cc). dedup_tables:
  // dedup of every trainable table into dd[t] ([T]); clears *fused when the bound on reduced
  // gradients does not prove them finite and within update.max_abs_grad. stage_updates: the
  // staging buffers of the tables whose residency stages rows ([T], in `staging`). Neither
  // changes a row. update_fused / update_checked: phase 2, the one-pass and the reduce, check,
  // then update paths; update_checked sets report->skipped_nonfinite (no row changed) when the
  // reduced gradients fail the check.
  Status dedup_tables(const SparseBatch& b, std::span<const float> grad_pooled,
                      std::span<const std::span<const float>> grad_seq, const UpdateOptions& update, float max_grad,
                      std::span<TableDedup> dd, bool* fused);
  Status stage_updates(std::span<const TableDedup> dd, Workspace* staging, std::span<UpdateStaging> staged);
  Status update_fused(std::span<const TableDedup> dd, std::span<const UpdateStaging> staged,
                      const kernels::UpdateStep& us, UpdateReport* report);
  Status update_checked(std::span<const TableDedup> dd, std::span<const UpdateStaging> staged,
                        const UpdateOptions& update, const kernels::UpdateStep& us, UpdateReport* report);
  // Gradient accumulation (accumulate.cc). accumulation_rows: table t's distinct rows of the
  // step batch `b` (sorted in its keys slot) into acc_buffers, and their sums zeroed.
  Status accumulation_rows(int t, const SparseBatch& b, Accumulation* a);
  // The micro-batch's sequence gradients of the kept positions (dynamic tables that dropped ids)
  // for bags [b0, b1) of the open accumulation; copies in `ws`.
  Status compact_micro_seq_grads(int64_t b0, int64_t b1, std::span<const std::span<const float>> grad_seq,
                                 Workspace* ws, std::vector<std::span<const float>>* out);
  // The update of every table's accumulated rows with their sums (already multiplied).
  Status update_accumulated(UpdateReport* report);
};

// Largest |x| over finite inputs; +Inf if any element is Inf or NaN (backward.cc).
float step_max_abs(std::span<const float> x, int num_threads);

// The ids of table t's features in `b`, concatenated in feature order, into `out` (sized by the
// caller: the table's nnz).
inline void gather_table_ids(const CollectionOptions& o, const SparseBatch& b, int t, int64_t* out) {
  size_t k = 0;
  for (size_t f = 0; f < o.features.size(); ++f) {
    if (o.features[f].table != t) continue;
    const auto ids = b.features[f].ids;
    if (!ids.empty()) std::memcpy(out + k, ids.data(), ids.size() * 8);
    k += ids.size();
  }
}

inline size_t table_nnz(const CollectionOptions& o, const SparseBatch& b, int t) {
  size_t n = 0;
  for (size_t f = 0; f < o.features.size(); ++f)
    if (o.features[f].table == t) n += b.features[f].ids.size();
  return n;
}

// Checks the sizes of the pooled and sequence buffers of a call against a checked batch.
Status check_outputs(const EmbeddingCollection& c, const SparseBatch& b, size_t pooled_size,
                     std::span<const size_t> seq_sizes, const char* what);


template <typename SeqSpan>
Status EmbeddingCollection::Impl::check_call(const EmbeddingCollection& c, const SparseBatch& batch,
                                             size_t pooled_size, std::span<const SeqSpan> seq, const char* what,
                                             CheckedBatch* cb) const {
  LEANEMB_RETURN_IF_ERROR(check(batch, cb));
  std::vector<size_t> seq_sizes;
  for (const auto& s : seq) seq_sizes.push_back(s.size());
  return check_outputs(c, *cb->batch, pooled_size, seq_sizes, what);
}

}  // namespace leanemb
