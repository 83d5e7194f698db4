// ShardedEmbeddingCollection: an EmbeddingCollection whose tables are sharded over the ranks of
// a Communicator (ShardPlan), trained with the same forward / backward_update calls.
//
// Each rank holds one local EmbeddingCollection with only its own rows (local row l of table t
// is global row plan().global_row(t, rank, l)), initialized to exactly the bytes the
// single-process collection gives those global rows. Each rank passes its slice of the global
// batch (any number of bags; the global batch is the ranks' slices concatenated in rank order).
//
// forward (per call, on every rank):
//   1. every id of the slice goes to its owner as a local row number (all_to_all_v), in
//      (feature, bag, position) order;
//   2. each owner reads the requested rows (one sequence lookup per table on its local
//      collection) and returns them individually, encoded in `forward_payload`
//      (all_to_all_v); no partial sums are formed at the owner;
//   3. the requester pools the rows of each bag in the original id order with the pooled
//      kernel's arithmetic (out = 0; out += w * row or out += row; kMean: out /= length).
//   With fp32 payloads the pooled output is bit-identical to a single-process
//   EmbeddingCollection's forward over the same bags.
// backward_update:
//   1. for every (bag, owner) pair with at least one id of the bag on that owner, the bag's
//      pooled-output gradient (encoded in `backward_payload`), the owned ids' local rows and
//      their exact fp32 scales (weight, times 1 / bag length for kMean) go to the owner;
//   2. found-inf: every rank checks its own incoming gradients and the decoded gradients it
//      received (not with fp32 payloads: those are the bits their sender checked), and the
//      flags are all-reduced, so either every rank updates or none does;
//   3. each owner runs its local backward_update on a batch made of the received bags,
//      requesters in rank order, bags and ids in their original order (its features are
//      kSum with the scales as per-id weights). The local dedup sorts contributions stably by
//      row, so each row's gradient is summed in the order of the concatenated global batch:
//      with fp32 payloads, fp32 rows and fp32 optimizer state the weights and state after any
//      number of steps are bit-identical to one process trained on the concatenated batches.
//
// Collective agreement: every call makes the same collectives on every rank whatever happens
// locally; a rank whose batch is invalid (or whose local lookup fails) still takes part, and
// an all-reduced flag makes every rank return an error naming the failing ranks. A
// communicator failure (timeout naming the dead rank) is returned as is.
//
// Not supported yet (create() returns Unimplemented): sequence (kNone) features, tables with a
// row cache or a dynamic vocabulary, BoundsCheckMode::kSkip. Rows stored in fp16 / bf16 and
// bf16 / int8 optimizer state train, but their stochastic rounding is keyed by the local row,
// so they are not bit-identical to a single process (fp32 rows and state are).
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
#include "dist/shard_plan.h"
#include "leanemb/embedding.h"

namespace leanemb::dist {

struct ShardedCollectionOptions {
  // The global collection: tables with their global row counts, features, seed, threads.
  CollectionOptions collection;
  ShardingKind sharding = ShardingKind::kRowModulo;       // of every table
  TableAssign table_assign = TableAssign::kRoundRobin;    // kTableWise: owners of the tables
  PayloadDType forward_payload = PayloadDType::kF32;      // rows owner -> requester
  PayloadDType backward_payload = PayloadDType::kF32;     // gradients requester -> owner
  // Local row numbers travel as uint32 when every rank's tables have fewer than 2^32 rows, else
  // as int64; true forces int64 (tests of that path).
  bool wide_ids = false;
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
struct ShardedTotals {
  uint64_t bytes_sent = 0;          // everything the forward and backward calls sent
  uint64_t payload_bytes_sent = 0;  // of which encoded rows and gradients
  int64_t forward_calls = 0;
  int64_t backward_calls = 0;
};

class ShardedEmbeddingCollection {
 public:
  // Collective (every rank calls it with equal options). `comm` must outlive the collection;
  // `allocator` as in EmbeddingCollection::create (null: the default host allocator);
  // `comm_allocator` holds the messages and routing buffers of forward / backward_update, in
  // Category::kCommBuffers (null: `allocator`). They are kept between calls and grow to the
  // largest batch seen.
  // Errors: InvalidArgument (options), Unimplemented (see above), the local collection's errors.
  static Result<std::unique_ptr<ShardedEmbeddingCollection>> create(const ShardedCollectionOptions& options,
                                                                    Communicator* comm,
                                                                    Allocator* allocator = nullptr,
                                                                    Allocator* comm_allocator = nullptr);
  ~ShardedEmbeddingCollection();

  const ShardPlan& plan() const;
  // The communicator given to create() (sharded checkpoints and digests run their collectives
  // on it).
  Communicator& communicator() const;
  // This rank's rows: table t has max(1, plan().local_num_rows(t, rank)) rows (a rank without
  // rows of a table holds one unused row, as a collection needs at least one).
  EmbeddingCollection& local();
  const EmbeddingCollection& local() const;
  int64_t pooled_dim() const;
  int64_t pooled_offset(int feature) const;
  int64_t step() const;
  const ShardedStepStats& last_step_stats() const;
  const ShardedTotals& totals() const;

  // batch: this rank's slice (B bags per feature), ids are global rows.
  // pooled_out: [B, pooled_dim()] fp32. Collective.
  // Errors: InvalidArgument / OutOfRange for this rank's bad batch (naming feature, bag and
  // position), InvalidArgument "dist: rank(s) ... failed" on the others, Internal from the
  // communicator.
  Status forward(const SparseBatch& batch, std::span<float> pooled_out);

  // grad_pooled: [B, pooled_dim()] for the same slice. Collective. The report counts this
  // rank's work: unique_rows updated here (as owner), lookups in its slice.
  Result<UpdateReport> backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                       const UpdateOptions& update = {});

 private:
  struct Impl;
  explicit ShardedEmbeddingCollection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leanemb::dist
