// EmbeddingTables: the one table interface. Models, trainers and the Python binding hold an
// EmbeddingTables and never ask how its rows are stored or where they live.
//
// A collection of tables is a stack of layers (docs/embedding.md, "The table stack"):
//
//   distribution   local (this process holds every row)  |  sharded over a Communicator
//                  (row-wise or table-wise; ids, rows and gradients routed between ranks)
//   id mapping     hashed ids are rows  |  dynamic IdMap (raw 64-bit ids -> rows on admission)
//   residency      resident  |  split placement (optimizer state in another tier)  |  row cache
//                  over a RowStore (host RAM or an O_DIRECT file)
//   kernels        the backend's lookup / update kernels and copies (docs/backend.md)
//
// Every combination is legal. Each row has one global key: its global row number (the raw id
// for dynamic tables). Initialization, stochastic rounding and checkpoints use that key and
// nothing else (not a shard's local row, a cache slot or an IdMap row), so in deterministic
// mode (fp32 payloads) every combination gives bit-identical rows, optimizer state and outputs
// to one resident table in one process, at any process count, fp16 / bf16 rows included.
//
// Calls that a sharded collection makes collective (every rank calls them, in the same order,
// with the same arguments unless stated): create, forward, backward_update, prefetch, the
// row accessors, memory and cache statistics summed over ranks (*_total), checkpoint save and
// load. With world_size() == 1 nothing is collective.
//
// Batches: forward / backward_update take THIS PROCESS's bags (any number per rank; the global
// batch is the ranks' batches concatenated in rank order). Ids are global rows (raw ids for
// dynamic tables). Outputs are this process's bags.
//
// Thread safety: one call at a time per object; calls use up to options().num_threads OpenMP
// threads internally.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/optimizer.h"
#include "leanemb/table_options.h"
#include "leanemb/memory.h"
#include "leanemb/memory_system.h"
#include "leanemb/status.h"
#include "leanemb/table_save.h"

namespace leanemb {

class EmbeddingCollection;
namespace dist {
class Communicator;
class ShardPlan;
}

// How a sharded collection splits each table over the ranks (docs/dist.md):
//   kTableWise  the whole table on one rank (round-robin or by size over the table-wise tables)
//   kRowModulo  global row r on rank r % P (local row r / P)
//   kRowRange   contiguous blocks of rows, the first N % P ranks one row more
// Dynamic tables are always split by id partition (TableDynamicOptions::partitions).
enum class ShardingKind : uint8_t { kTableWise, kRowModulo, kRowRange };
std::string_view sharding_kind_name(ShardingKind k);           // "table" | "row_modulo" | "row_range"
Result<ShardingKind> parse_sharding_kind(std::string_view s);  // errors: InvalidArgument

enum class TableAssign : uint8_t { kRoundRobin, kBySize };

// One feature of the largest call (forward or backward_update) a rank makes with its slice.
struct FeatureCallShape {
  int64_t bags = 0;      // bags (a sequence feature: positions)
  int64_t max_ids = 0;   // ids, at most
  bool weighted = false;  // the ids carry per-id weights
};

struct DistributionOptions {
  // Null: a local collection (this process holds every row). Otherwise the tables are sharded
  // over its ranks; it must outlive the collection and be used by no one else during its calls.
  dist::Communicator* comm = nullptr;
  ShardingKind sharding = ShardingKind::kRowModulo;     // of every hashed table
  TableAssign table_assign = TableAssign::kRoundRobin;  // owners of kTableWise tables
  // Encoding of rows (forward) and gradients (backward) between ranks, a DType of
  // DTypeUse::kPayload: kF32 is exact; kBF16 / kF16 round to nearest; kInt8Rowwise ("int8")
  // sends a per-row scale and offset with 8-bit codes.
  DType forward_payload = DType::kF32;    // rows owner -> requester
  DType backward_payload = DType::kF32;   // gradients requester -> owner
  // Local row numbers travel as uint32 when every rank's tables have fewer than 2^32 rows, else
  // as int64; true forces int64 (tests of that path).
  bool wide_ids = false;
  // The largest call this rank makes, one entry per feature (CollectionOptions::features order),
  // or empty (unknown). Given, the sharded collection reserves its message and routing buffers
  // (kCommBuffers) once, from the size function `leanemb plan` predicts them with
  // (src/dist/comm_sizes.h), so that calls allocate nothing; without it they grow to the
  // largest call seen. docs/dist.md, "Memory".
  std::vector<FeatureCallShape> max_call;
};

// Bytes a sharded collection sent to other ranks since creation (zero for a local one).
struct TablesCommTotals {
  uint64_t bytes_sent = 0;          // everything the forward and backward calls sent
  uint64_t payload_bytes_sent = 0;  // of which encoded rows and gradients
  int64_t forward_calls = 0;
  int64_t backward_calls = 0;
};

class EmbeddingTables {
 public:
  EmbeddingTables();
  virtual ~EmbeddingTables();

  // ---- shape --------------------------------------------------------------------------------
  // The collection's options as given to create_tables (global row counts).
  virtual const CollectionOptions& options() const = 0;
  int num_tables() const { return static_cast<int>(options().tables.size()); }
  int num_features() const { return static_cast<int>(options().features.size()); }
  virtual const RowLayout& layout(int table) const = 0;
  // Width of the pooled output (sum of the dims of pooled features), and where feature f's
  // pooled vector starts in it (-1 for sequence features).
  virtual int64_t pooled_dim() const = 0;
  virtual int64_t pooled_offset(int feature) const = 0;
  // Floats of optimizer state per row in read_state (per-element states, then the row scalar).
  int64_t state_floats_per_row(int table) const;

  // ---- distribution -------------------------------------------------------------------------
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  // The communicator of a sharded collection; null for a local one.
  virtual dist::Communicator* communicator() const { return nullptr; }
  // Rows of table `table` this process holds (its shard; all of them for a local collection).
  virtual int64_t local_num_rows(int table) const { return options().tables[static_cast<size_t>(table)].num_rows; }
  // This process's part of the collection: the local collection holding its rows, the plan that
  // assigns global rows to processes and the communicator (both null for a collection on one
  // process, which is its own local part). Checkpoints and digests reach the rows through it.
  struct LocalShard {
    EmbeddingCollection* local = nullptr;
    const dist::ShardPlan* plan = nullptr;
    dist::Communicator* comm = nullptr;
  };
  virtual LocalShard local_shard() = 0;

  // ---- training -----------------------------------------------------------------------------
  virtual int64_t step() const = 0;  // successful updates so far (equal on every rank)
  // REQUIRES: step >= 0. Used when rows are restored.
  virtual void set_step(int64_t step) = 0;
  // Table `table`'s learning rate for later updates (optimizer state kept). Errors: OutOfRange,
  // InvalidArgument (not finite or < 0); nothing changes on error.
  virtual Status set_learning_rate(int table, float lr) = 0;
  // Checks a batch under the bounds-check policy without computing anything.
  virtual Status validate(const SparseBatch& batch) const = 0;
  // pooled_out: [B, pooled_dim()] fp32; seq_out: one span per sequence (kNone) feature, in
  // feature order, [nnz_f, dim]. mode: kTrain (a backward_update of this batch may follow) or
  // kEval (evaluation / prediction: lookup only; a dynamic table admits, evicts and counts
  // nothing and an id without a row reads zeros; see ForwardMode). Sharded: every rank passes
  // the same mode. Errors: InvalidArgument / OutOfRange naming feature, bag and position
  // (nothing written); the layers' errors (cache I/O, budgets).
  virtual Status forward(const SparseBatch& batch, std::span<float> pooled_out,
                         std::span<const std::span<float>> seq_out = {},
                         ForwardMode mode = ForwardMode::kTrain) = 0;
  // Gradients of the loss w.r.t. forward's outputs for the same batch; applies each table's
  // fused optimizer to the unique rows (all ranks' contributions, summed in the order of the
  // global batch). On error no row changes (on any rank). Errors: FailedPrecondition when the
  // most recent forward was a kEval one (nothing changes; run a kTrain forward of the batch).
  virtual Result<UpdateReport> backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                               std::span<const std::span<const float>> grad_seq = {},
                                               const UpdateOptions& update = {}) = 0;

  // ---- gradient accumulation over micro-batches (docs/train.md, "Gradient accumulation") -----
  // One optimizer step whose output gradients arrive micro-batch by micro-batch, without keeping
  // them until the update:
  //   begin_accumulation(batch, update)                   the step's whole batch
  //   accumulate(bag_begin, bag_end, grad_pooled, grad_seq)   each micro-batch, bags in order
  //   apply_accumulated()                                 one fused optimizer update per row
  //   (or discard_accumulation(): nothing changes, as a skipped step)
  // Each micro-batch's contributions are added, as it arrives, into a buffer over the step's
  // distinct rows ([U, dim] fp32, category gradients; U <= min(rows, ids of the step)), in the
  // order backward_update sums them (feature, bag, position): when every table is looked up by
  // one feature (or micro-batch count 1) the rows, optimizer state and step counter are bit
  // identical to backward_update(batch, the whole batch's gradients, update). A table shared by
  // several features sums a row's contributions bag-major instead (each micro-batch's features
  // in turn), which can differ in the last bits. The caller may free a micro-batch's gradients
  // once accumulate returns.
  // REQUIRES: batch's arrays alive until apply or discard. Tables with a row cache or a dynamic
  // vocabulary: the kTrain forward of the whole batch came before begin_accumulation, and no
  // forward or prefetch comes before apply / discard (forward then fails with
  // FailedPrecondition); other tables may be looked up micro-batch by micro-batch in between.
  // Sharded: collective, as backward_update.
  // Errors: begin: FailedPrecondition (an accumulation is open; the most recent forward was a
  // kEval one), InvalidArgument / OutOfRange (the batch, the options), ResourceExhausted (the
  // buffers); accumulate: FailedPrecondition (none open), InvalidArgument (bags not the next
  // ones, gradient sizes); apply: FailedPrecondition (none open, bags missing). After an error of
  // begin or accumulate no row has changed and the accumulation stays as it was (accumulate) or
  // closed (begin). A non-finite incoming gradient is not an error: apply then skips the step
  // (UpdateReport::skipped_nonfinite), as backward_update does.
  virtual Status begin_accumulation(const SparseBatch& batch, const UpdateOptions& update = {});
  // grad_pooled: [bag_end - bag_begin, pooled_dim()]; grad_seq: one span per sequence feature,
  // [ids of those bags, dim].
  virtual Status accumulate(int64_t bag_begin, int64_t bag_end, std::span<const float> grad_pooled,
                            std::span<const std::span<const float>> grad_seq = {});
  virtual Result<UpdateReport> apply_accumulated();
  virtual void discard_accumulation();
  // True: accumulation keeps only the per-row sums (a local collection). False: the default
  // implementation, which keeps a copy of every micro-batch's gradients (host heap) and calls
  // backward_update in apply (sharded collections today): correct, but no memory saved.
  virtual bool accumulates_by_row() const { return false; }

  // ---- bf16 outputs and output gradients (mixed precision; docs/embedding.md, "bf16 outputs") -
  // forward and backward with the outputs and their gradients held as bf16 (uint16 bit
  // patterns), the layout of forward's fp32 buffers, for every layer of the stack: they call
  // forward / accumulate over consecutive chunks of bags through the caller's fp32 `scratch`, so
  // the fp32 copy of the outputs or gradients is never larger than the scratch. A chunk is the
  // longest run of the next bags whose outputs (pooled_dim plus each sequence feature's ids x
  // dim floats per bag) fit in scratch.size() floats; kBf16ScratchFloats or one bag's outputs,
  // whichever is larger, is what `leanemb plan` counts (workspace).
  //   forward_bf16: the fp32 outputs rounded to bf16 (round to nearest even, NaN stays NaN).
  //   accumulate_bf16: inside an open accumulation (begin_accumulation(batch)), the micro-batch
  //     [bag_begin, bag_end)'s bf16 gradients, widened to fp32 exactly and passed to accumulate
  //     chunk by chunk. `batch` is the batch begin_accumulation was given.
  //   backward_update_bf16: begin_accumulation, accumulate_bf16 of every bag, apply_accumulated.
  // The optimizer sums and updates in fp32 as ever. Deterministic: the rows, optimizer state and
  // report equal backward_update's fed the same bf16 values as fp32, bit for bit, at any scratch
  // size, when every table is looked up by one feature (accumulate's rule: a table shared by
  // features sums bag-major across chunks, which can differ in the last bits). Tables with a row
  // cache or a dynamic vocabulary are looked up chunk by chunk, so the batch's rows are mapped
  // again by the update (a cache may evict and reload some of them). Sharded: collective; the
  // ranks agree on the number of chunks (a rank with fewer makes empty calls).
  // Errors: InvalidArgument (one bag's outputs do not fit in the scratch; buffer sizes; the
  // batch's offsets), and those of forward / begin_accumulation / accumulate / apply.
  static constexpr int64_t kBf16ScratchFloats = int64_t{1} << 20;  // 4 MiB
  Status forward_bf16(const SparseBatch& batch, std::span<uint16_t> pooled_out, std::span<const std::span<uint16_t>> seq_out,
                      std::span<float> scratch, ForwardMode mode = ForwardMode::kTrain);
  Status accumulate_bf16(const SparseBatch& batch, int64_t bag_begin, int64_t bag_end, std::span<const uint16_t> grad_pooled,
                         std::span<const std::span<const uint16_t>> grad_seq, std::span<float> scratch);
  Result<UpdateReport> backward_update_bf16(const SparseBatch& batch, std::span<const uint16_t> grad_pooled,
                                            std::span<const std::span<const uint16_t>> grad_seq, std::span<float> scratch,
                                            const UpdateOptions& update = {});
  // Floats of scratch the calls above need for `batch` at least: its largest bag's outputs.
  int64_t bf16_min_scratch_floats(const SparseBatch& batch) const;

  // Starts fetching the rows `next` will touch (tables with a row cache); a no-op otherwise.
  // Call it after forward(current), or before it (the pipelined order): while an earlier
  // prefetch is outstanding, this one starts once forward(current) has taken that prefetch's
  // rows, so that it overlaps the whole step (docs/tiered.md, Pipelining).
  virtual Status prefetch(const SparseBatch& next) = 0;
  // Writes every changed cached row back to its store and makes the store durable.
  virtual Status flush() = 0;

  // ---- checkpoints (the table's state; docs/formats/checkpoint.md) ------------------------------
  // Every row (weights and optimizer state, byte for byte), dynamic tables' id maps and the step
  // counter, crash-safe, in the checkpoint format of leanemb/checkpoint.h, as TorchRec's
  // state_dict is part of its module contract. What `leanemb train`, `leanemb test` / `predict`
  // and leanemb.torch's save / load call; leanemb/table_checkpoint.h has the formats and the
  // functions that need no tables (verify, find, digest).
  //
  // save: writes checkpoint `step` into <out_dir>/checkpoints/step-<N> with the caller's `blobs`.
  // A local collection writes a plain checkpoint (optionally incremental: IncrementalOptions;
  // src/table/table_checkpoint_save.cc), a sharded one a sharded checkpoint (every rank its
  // shard, rank 0 the global directory last; src/dist). Collective for a sharded collection.
  // Errors: InvalidArgument (step < 0, options out of range, a reserved blob name), the
  // checkpoint writer's (IoError, "disk full", ResourceExhausted), Internal (a collective
  // failed); with a sharded collection every rank fails if one does.
  virtual Result<TablesSaveInfo> save(const std::string& out_dir, int64_t step, std::span<const CheckpointBlob> blobs = {},
                                      const TablesSaveOptions& options = {}) = 0;
  // load: rows, dynamic partitions and the step counter of checkpoint `dir` (a step-<N>
  // directory) of either format, saved at any world size (rows are keyed by their global row);
  // tables are matched by name and must agree in rows, dim, dtype, optimizer and state dtype. An
  // incremental checkpoint's whole chain is read. A local collection that tracks changes gets the
  // loaded checkpoint as its change base. Collective. Returns the collection step set (plain
  // checkpoints: options.collection_step; sharded: the recorded one). After an error in the copy
  // phase (e.g. DataLoss in a block) the rows are a mix of old and loaded ones: load again or
  // recreate the collection. A local collection reads either format as a world of one rank
  // (src/table/sharded_checkpoint_load.cc); a sharded one adds the cross-rank steps (src/dist).
  // Errors: InvalidArgument (tables differ, naming every field), NotFound / DataLoss (missing or
  // corrupt files), IoError; every rank fails if one does.
  virtual Result<int64_t> load(const std::string& dir, const TablesLoadOptions& options = {}) = 0;

  // ---- rows by global row number ------------------------------------------------------------
  // As EmbeddingCollection's accessors (fp32 rows [count, dim], state [count, state floats],
  // raw fat rows [count, stride_bytes]) over global rows [row_begin, row_begin + count). For a
  // dynamic table "row" is a row of its capacity (see dynamic_row()). Sharded: collective; the
  // readers give every rank the rows, the writers take the same input on every rank.
  // Errors: OutOfRange (table, rows), InvalidArgument (buffer size).
  virtual Status read_rows(int table, int64_t row_begin, int64_t count, std::span<float> out) const = 0;
  virtual Status write_rows(int table, int64_t row_begin, int64_t count, std::span<const float> in) = 0;
  virtual Status read_state(int table, int64_t row_begin, int64_t count, std::span<float> out) const = 0;
  virtual Status read_raw_rows(int table, int64_t row_begin, int64_t count, std::span<uint8_t> out) const = 0;
  virtual Status write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in) = 0;

  // ---- statistics ---------------------------------------------------------------------------
  // This process's bytes (the allocators the collection uses).
  virtual MemoryStats memory_stats() const = 0;
  // Errors: OutOfRange (table), FailedPrecondition (no cache / not dynamic). This process's part.
  virtual Result<RowCacheStats> cache_stats(int table) const = 0;
  virtual Result<DynamicTableStats> dynamic_stats(int table) const = 0;
  // Dynamic tables: the global row raw_id is mapped to now, or -1 (no side effects). Sharded:
  // collective (the owner answers).
  virtual Result<int64_t> dynamic_row(int table, int64_t raw_id) const = 0;
  virtual TablesCommTotals comm_totals() const { return {}; }
  // Frees the per-step buffers kept between steps.
  virtual void release_step_buffers() = 0;

 private:
  // The default accumulation's copies of the gradients (tables_accumulate.cc).
  struct CopiedGradients;
  std::unique_ptr<CopiedGradients> copied_;
};

// Creates the stack the options describe: a local EmbeddingCollection, or with
// dist.comm a sharded collection (collective). `memory` gives every category its tier
// (placement); it must outlive the collection. Errors: InvalidArgument (options), the layers'
// errors (ResourceExhausted for budgets, IoError for stores).
Result<std::unique_ptr<EmbeddingTables>> create_tables(const CollectionOptions& options, MemorySystem* memory,
                                                       const DistributionOptions& dist = {});

}  // namespace leanemb
