// The message and routing buffers of one ShardedEmbeddingCollection call on one rank
// (kCommBuffers memory), from the largest slice a rank passes. One size function, two users:
// the collection reserves its buffers from it when it is created with the call shape
// (DistributionOptions::max_call), so that a call allocates nothing, and `leanemb plan`
// predicts kCommBuffers with it (src/plan/memory_model.cc). docs/dist.md, "Memory".
//
// What a rank sends to an owner depends on the ids: the sizes are the expected counts of a
// balanced shard (each owner gets its share of a feature's ids: its rows over the table's rows,
// or its partitions over a dynamic table's) times kCommSkewSlack, plus kCommHotShare of the ids
// (hot rows: their share of a call does not shrink with the owner's share) and kCommSpreadSigmas
// standard deviations, rounded up, and never more than all of the ids. A call whose ids are more skewed than that grows a buffer as it would
// without a reservation (correct, only the figure moves above the plan).
//
// Thread safety: plain functions of their inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dist/payload.h"
#include "table/shard_plan.h"

namespace leanemb::dist {

// Headroom over the balanced share: for skewed ids (hot rows that all live on one rank) and, in
// standard deviations, for the spread of a binomial draw (small calls).
inline constexpr double kCommSkewSlack = 1.25;
inline constexpr double kCommHotShare = 0.10;  // of a call's ids, what hot rows may add to one owner
inline constexpr double kCommSpreadSigmas = 3.0;

// One global feature as one call on a rank passes it.
struct CommFeature {
  int table = 0;
  int64_t bags = 0;      // bags per call (positions, for a sequence feature)
  int64_t max_ids = 0;   // ids per call, at most
  int64_t dim = 0;
  bool sequence = false;  // PoolingMode::kNone
  bool scaled = false;    // kMean pooling or per-id weights: each id travels with an fp32 scale
};

struct CommShape {
  int world = 1;
  int rank = 0;  // the rank whose buffers are sized (its shares as an owner)
  std::vector<CommFeature> features;
  // [T * world]: the share of table t's ids that rank o owns, at [t * world + o] (sums to 1
  // over o).
  std::vector<double> owner_share;
  size_t id_bytes = 4;  // ids on the wire (uint32 local rows, or int64)
  DType forward_payload = DType::kF32;
  DType backward_payload = DType::kF32;
};

// Element counts of every buffer (each vector entry is one allocation), in the collection's
// own element types: int64 for ids, counts and offsets, int for owners, float for rows,
// scales and gradients, bytes for the messages.
struct CommBufferCounts {
  std::vector<int64_t> per_owner;   // [P] int64: forward requests, [F] counts then the ids
  std::vector<int64_t> owner_of;    // [F] int: owner of each id
  int64_t send = 0, recv = 0;       // bytes: the largest outgoing / incoming message set
  std::vector<int64_t> table_ids;   // [T] int64: ids served per table
  std::vector<int64_t> table_rows;  // [T] float: rows served
  std::vector<int64_t> owner_rows;  // [P] float: one feature's decoded replies per owner
  std::vector<int64_t> out_counts, out_rows, out_scales;  // [P] backward, sent to each owner
  std::vector<std::vector<int64_t>> out_grads;            // [P][F] float
  std::vector<int64_t> in_counts, in_rows, in_scales;     // [P] backward, received from each rank
  std::vector<int64_t> local_ids, local_weights, local_offsets;  // [F] the owner's local batch
  int64_t local_grads = 0;  // float: [local bags, local pooled dim]
  int64_t no_ids = 0;       // int64: the empty offsets of the "rows" features
};

CommBufferCounts comm_buffer_counts(const CommShape& s);

// CommShape::owner_share from a plan: a hashed table's rows on each rank over its rows; a
// dynamic table's (partitions[t] > 0) id partitions on each rank over its partitions.
std::vector<double> owner_shares(const ShardPlan& plan, std::span<const uint32_t> partitions);
// Bytes of an id on the wire: 8 when forced (wide_ids), when a table is dynamic (raw ids) or
// when a rank holds 2^32 rows or more of a table; else 4 (uint32 local rows).
size_t wire_id_bytes(const ShardPlan& plan, std::span<const uint32_t> partitions, bool wide_ids);

// Every allocation the counts make in bytes (the arrays of per-feature / per-rank vectors
// included), as MemoryStats counts them; total() is their sum.
std::vector<size_t> comm_buffer_allocations(const CommBufferCounts& c);
size_t comm_buffer_bytes(const CommBufferCounts& c);

}  // namespace leanemb::dist
