// ShardedEmbeddingCollection: the distribution layer of the table stack (leanemb/tables.h):
// tables sharded over the ranks of a Communicator (ShardPlan), trained with the same forward /
// backward_update calls as a local collection.
//
// Each rank holds one local EmbeddingCollection with only its own rows, built on the same
// MemorySystem (so split placement, row caches over host RAM or a file, and dynamic tables
// apply to each rank's rows) and told each row's global key (TableShardOptions): local row l of
// a hashed table t is global row plan().global_row(t, rank, l); a dynamic table's rank holds
// whole id partitions (TableDynamicOptions::partitions, a multiple of the world size), and its
// rows are keyed by raw id. Initialization and stochastic rounding use the global key, so every
// row's bytes equal the single-process collection's whatever the world size.
// Each rank passes its slice of the global batch (any number of bags; the global batch is the
// ranks' slices concatenated in rank order).
//
// forward (per call, on every rank):
//   1. every id of the slice goes to its owner (all_to_all_v), in (feature, bag, position)
//      order, as a local row (hashed tables) or as the raw id (dynamic tables);
//   2. each owner reads the requested rows (one sequence lookup per table on its local
//      collection, requests ordered by feature, then requester: the order of the concatenated
//      global batch, which is also the order a dynamic table's IdMap sees the ids in) and
//      returns them individually, encoded in `forward_payload` (all_to_all_v); no partial sums
//      are formed at the owner;
//   3. the requester pools the rows of each bag in the original id order with the pooled
//      kernel's arithmetic (out = 0; out += w * row or out += row; kMean: out /= length), or
//      copies them in position order for sequence (kNone) features.
//   With fp32 payloads the outputs are bit-identical to a single-process collection's.
// backward_update:
//   1. for every (bag, owner) pair with at least one id of the bag on that owner, the bag's
//      pooled-output gradient (encoded in `backward_payload`), the owned ids and their exact
//      fp32 scales (weight, times 1 / bag length for kMean) go to the owner; a sequence
//      feature sends each position as a bag of one id with its own gradient row;
//   2. found-inf: every rank checks its own incoming gradients and the decoded gradients it
//      received (not with fp32 payloads: those are the bits their sender checked), and the
//      flags are all-reduced, so either every rank updates or none does;
//   3. each owner runs its local backward_update on a batch made of the received bags,
//      requesters in rank order, bags and ids in their original order (its features are
//      kSum with the scales as per-id weights). The local dedup sorts contributions stably by
//      row, so each row's gradient is summed in the order of the concatenated global batch:
//      with fp32 payloads the weights and optimizer state after any number of steps are
//      bit-identical to one process trained on the concatenated batches, for every dtype.
// BoundsCheckMode::kSkip drops bad ids at the requester, as a local collection does.
//
// Collective agreement: every call makes the same collectives on every rank whatever happens
// locally; a rank whose batch is invalid (or whose local lookup fails) still takes part, and
// an all-reduced flag makes every rank return an error naming the failing ranks. A
// communicator failure (timeout naming the dead rank) is returned as is.
//
// Thread safety: like EmbeddingCollection, one call at a time; the communicator must not be
// used by anyone else during a call.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dist/communicator.h"
#include "dist/payload.h"
#include "table/shard_plan.h"
#include "leanemb/embedding.h"

namespace leanemb::dist {

struct ShardedCollectionOptions {
  // The global collection: tables with their global row counts, features, seed, threads.
  CollectionOptions collection;
  ShardingKind sharding = ShardingKind::kRowModulo;       // of every hashed table
  TableAssign table_assign = TableAssign::kRoundRobin;    // kTableWise: owners of the tables
  DType forward_payload = DType::kF32;      // rows owner -> requester
  DType backward_payload = DType::kF32;     // gradients requester -> owner
  // Ids travel as uint32 local rows when every rank's hashed tables have fewer than 2^32 rows
  // and no table is dynamic, else as int64 (local rows, or raw ids of dynamic tables); true
  // forces int64 (tests of that path).
  bool wide_ids = false;
  // DistributionOptions::max_call: the buffers reserved from dist/comm_sizes.h when given.
  std::vector<FeatureCallShape> max_call;
};

// Bytes this rank sent to other ranks (Communicator::stats, self excluded) in the last call.
struct ShardedStepStats {
  uint64_t forward_bytes_sent = 0;   // last forward: ids, then rows
  uint64_t backward_bytes_sent = 0;  // last backward_update: gradients, ids, scales, flags
  int64_t rows_served = 0;           // last forward: rows this rank looked up for all ranks
  int64_t bags_received = 0;         // last backward_update: (bag, owner) gradients received
  // Of the bytes sent: the encoded rows (forward) and gradients (backward) alone, in the payload
  // dtype; the rest is routing (ids, counts, scales) and the agreement flags.
  uint64_t forward_payload_bytes_sent = 0;
  uint64_t backward_payload_bytes_sent = 0;
};

// Sums over every call since creation (bytes to other ranks).
using ShardedTotals = TablesCommTotals;

class ShardedEmbeddingCollection final : public EmbeddingTables {
 public:
  // Collective (every rank calls it with equal options). `comm` must outlive the collection.
  // With `memory`, each category lives in the tier its placement gives (the local collection
  // is created on it) and the messages and routing buffers in kCommBuffers memory of
  // memory->allocator_for(kCommBuffers). A row cache's file store gets one file per rank:
  // "<store_path>.rank-<r>-of-<P>". The buffers are kept between calls: reserved from
  // options.max_call when given (dist/comm_sizes.h), else grown to the largest batch seen.
  // Errors: InvalidArgument (options; a dynamic table's partitions not a multiple of the world
  // size), the local collection's errors.
  static Result<std::unique_ptr<ShardedEmbeddingCollection>> create(const ShardedCollectionOptions& options,
                                                                    Communicator* comm, MemorySystem* memory);
  // As above on plain allocators: `allocator` for the rows (null: the default host allocator),
  // `comm_allocator` for the messages (null: `allocator`).
  static Result<std::unique_ptr<ShardedEmbeddingCollection>> create(const ShardedCollectionOptions& options,
                                                                    Communicator* comm,
                                                                    Allocator* allocator = nullptr,
                                                                    Allocator* comm_allocator = nullptr);
  ~ShardedEmbeddingCollection() override;

  const ShardPlan& plan() const;
  const ShardedCollectionOptions& sharded_options() const;
  // This rank's rows: table t has max(1, plan().local_num_rows(t, rank)) rows (a rank without
  // rows of a table holds one unused row, as a collection needs at least one). A dynamic
  // table's plan is kRowRange over its row capacity: rank r holds partitions
  // [r * G / P, (r + 1) * G / P) of G, and so rows of whole partitions.
  EmbeddingCollection& local();
  const EmbeddingCollection& local() const;
  const ShardedStepStats& last_step_stats() const;
  const ShardedTotals& totals() const;

  // EmbeddingTables (see leanemb/tables.h for the contracts).
  const CollectionOptions& options() const override;
  const RowLayout& layout(int table) const override;
  int64_t pooled_dim() const override;
  int64_t pooled_offset(int feature) const override;
  int rank() const override;
  int world_size() const override;
  // The communicator given to create() (sharded checkpoints and digests run their collectives
  // on it).
  Communicator* communicator() const override;
  LocalShard local_shard() override { return LocalShard{&local(), &plan(), communicator()}; }
  int64_t local_num_rows(int table) const override { return plan().local_num_rows(table, rank()); }
  int64_t step() const override;
  void set_step(int64_t step) override;
  Status set_learning_rate(int table, float lr) override;
  Status validate(const SparseBatch& batch) const override;
  // batch: this rank's slice (B bags per feature); ids are global rows (raw ids for dynamic
  // tables). Collective. Errors: InvalidArgument / OutOfRange for this rank's bad batch
  // (naming feature, bag and position), InvalidArgument "dist: rank(s) ... failed" on the
  // others, Internal from the communicator. mode: the same on every rank; each owner serves
  // its ids in that mode (kEval: its dynamic tables look ids up and change nothing).
  Status forward(const SparseBatch& batch, std::span<float> pooled_out,
                 std::span<const std::span<float>> seq_out = {},
                 ForwardMode mode = ForwardMode::kTrain) override;
  // Gradients for the same slice. Collective. The report counts this rank's work: unique_rows
  // updated here (as owner), lookups in its slice. Errors: FailedPrecondition on every rank
  // (before any message) when the most recent forward was kEval.
  Result<UpdateReport> backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                       std::span<const std::span<const float>> grad_seq = {},
                                       const UpdateOptions& update = {}) override;
  // Routes the next slice's ids to their owners, which start fetching their rows. Collective.
  Status prefetch(const SparseBatch& next) override;
  Status flush() override;
  // Global rows, collective (each owner contributes its rows; every rank gets them).
  Status read_rows(int table, int64_t row_begin, int64_t count, std::span<float> out) const override;
  Status write_rows(int table, int64_t row_begin, int64_t count, std::span<const float> in) override;
  Status read_state(int table, int64_t row_begin, int64_t count, std::span<float> out) const override;
  Status read_raw_rows(int table, int64_t row_begin, int64_t count, std::span<uint8_t> out) const override;
  Status write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in) override;
  MemoryStats memory_stats() const override;
  Result<RowCacheStats> cache_stats(int table) const override;
  Result<DynamicTableStats> dynamic_stats(int table) const override;
  // Collective: the owner's answer as a global row (partition-aligned), or -1.
  Result<int64_t> dynamic_row(int table, int64_t raw_id) const override;
  TablesCommTotals comm_totals() const override { return totals(); }
  // A sharded checkpoint (save_sharded_checkpoint, dist/sharded_checkpoint.h). Collective.
  Result<TablesSaveInfo> save(const std::string& out_dir, int64_t step, std::span<const CheckpointBlob> blobs = {},
                              const TablesSaveOptions& options = {}) override;
  // Either format at any world size: each rank reads the rows it owns
  // (src/table/sharded_checkpoint_load.cc), every phase's verdict agreed over the communicator
  // (dist/sharded_checkpoint.cc). Collective.
  Result<int64_t> load(const std::string& dir, const TablesLoadOptions& options = {}) override;
  void release_step_buffers() override;

 private:
  struct Impl;
  explicit ShardedEmbeddingCollection(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<ShardedEmbeddingCollection>> create_impl(const ShardedCollectionOptions& options,
                                                                         Communicator* comm, MemorySystem* memory,
                                                                         Allocator* allocator, Allocator* comm_allocator);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leanemb::dist
