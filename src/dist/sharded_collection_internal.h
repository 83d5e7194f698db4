// Internal to src/dist (not installed, not for callers outside it): the state of a
// ShardedEmbeddingCollection (its Impl) and the wire helpers that its four source files share:
//   sharded_collection.cc           construction, accessors, call checks, buffer reservation
//   sharded_collection_forward.cc   forward and prefetch: routing ids, serving rows, pooling
//   sharded_collection_backward.cc  backward_update: splitting, sending and applying gradients
//   sharded_collection_rows.cc      row access by global row (read_rows, write_rows, ...)
//
// Invariants that make the results equal to a single process (see the header):
// - A requester lists its ids per owner in (feature, bag, position) order; an owner looks the
//   requests up per table in (feature, requester 0..P-1) order (the order of the concatenated
//   global batch) and answers each requester in its request order. So the requester can take
//   the rows of each owner with one cursor per (owner, feature).
// - The local collection has the global features first, all turned into kSum (per-id weights
//   carry the exact scales of the single-process backward; a sequence feature's positions are
//   bags of one id), then one kNone "rows" feature per table that the forward uses to read
//   rows. Its pooled_dim therefore counts the sequence features too: the global pooled layout
//   (global_offset, global_pooled_dim) is kept separately.
// - The backward's local batch lists, per feature, the bags of rank 0, then rank 1, ..., each
//   with its owned ids in their original order; the local dedup is a stable sort by row, so
//   every row's contributions are summed in the order of the concatenated global batch.
// - The local collection keys initialization and stochastic rounding by the global row (raw id
//   for dynamic tables; TableShardOptions), so its rows are the single-process rows.
//
// Wire formats (little-endian host bytes; all ranks run the same build):
//   forward request  to owner o:  int64 [F] ids per feature, [n] ids for the owner: local rows
//                                 of hashed tables, raw ids of dynamic ones (uint32 when every
//                                 rank's hashed tables have < 2^32 rows and no table is
//                                 dynamic, else int64: id_bytes)
//   forward reply    to requester: per feature, its rows encoded in forward_payload
//   backward         to owner o:  int64 [F] bags per feature, int64 [F] scaled flags,
//                                 uint32 [M] ids per bag, [N] ids for the owner (id_bytes), fp32
//                                 scales of the ids of scaled features only (kMean or per-id
//                                 weights; the others' scales are exactly 1), then per feature
//                                 its bags' gradients encoded in backward_payload
//
// Thread safety: as ShardedEmbeddingCollection (one call at a time).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "dist/sharded_collection.h"
#include "memory/accounted_resource.h"
#include "table/batch_check.h"

namespace leanemb::dist {

namespace sharded_internal {

// The per-call buffers live in kCommBuffers memory (AccountedResource).
template <typename T>
using PVec = std::pmr::vector<T>;

// Messages are written with core/bytes.h (little-endian scalars back to back) and read with its
// ByteReader (array / view fail instead of reading past the end of a short message).
template <typename Bytes, typename T>
inline void append_bytes(Bytes* out, std::span<const T> v) {
  BasicByteWriter<Bytes>(out).span(v);
}

// Non-negative integers on the wire in `bytes` = 4 (uint32) or 8 (int64) each: local rows (4
// when every rank's rows fit), ids per bag (4).
template <typename Bytes>
inline void append_uint(Bytes* out, std::span<const int64_t> v, size_t bytes) {
  if (bytes == 8) return append_bytes(out, v);
  const size_t at = out->size();
  out->resize(at + v.size() * 4);
  uint8_t* dst = out->data() + at;
  for (size_t i = 0; i < v.size(); ++i) {
    const auto x = static_cast<uint32_t>(v[i]);
    std::memcpy(dst + i * 4, &x, 4);
  }
}

// Appends the n integers of `bytes` each in raw to *out (widened to int64).
template <typename Vec>
inline void widen_uint(std::span<const uint8_t> raw, size_t n, size_t bytes, Vec* out) {
  const size_t at = out->size();
  out->resize(at + n);
  if (bytes == 8) {
    if (n) std::memcpy(out->data() + at, raw.data(), n * 8);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, raw.data() + i * 4, 4);
    (*out)[at + i] = x;
  }
}

using ::leanemb::ByteReader;

inline std::vector<int64_t> displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) d[i + 1] = d[i] + counts[i];
  return d;
}

// Largest |x| of v (0 when empty; only called on finite values).
inline double max_abs_of(std::span<const float> v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

inline bool all_finite(std::span<const float> v) {
  bool ok = true;
  for (float x : v) ok &= std::isfinite(x);
  return ok;
}

}  // namespace sharded_internal

struct ShardedEmbeddingCollection::Impl {
  template <typename T>
  using PVec = sharded_internal::PVec<T>;

  ShardedCollectionOptions options;
  Communicator* comm = nullptr;
  Allocator* alloc = nullptr;  // filtered batches (BoundsCheckMode::kSkip), row-access scratch
  ShardPlan plan = std::move(ShardPlan::create({}).value());
  std::unique_ptr<EmbeddingCollection> local;
  int num_features = 0;                // F
  int num_tables = 0;                  // T
  std::vector<int> feature_table;      // [F]
  std::vector<int64_t> feature_dim;    // [F]
  std::vector<PoolingMode> pooling;    // [F] global pooling
  std::vector<int64_t> global_offset;  // [F] column in the global pooled output (-1: sequence)
  int64_t global_pooled_dim = 0;
  std::vector<uint32_t> partitions;    // [T] dynamic tables' id partitions (0: hashed table)
  std::vector<table_internal::FeatureMeta> meta;  // [F] the global features, for check_batch
  ShardedStepStats stats;
  ShardedTotals totals;
  // The most recent forward was ForwardMode::kEval: backward_update fails (on every rank).
  bool eval_forward = false;
  size_t id_bytes = 8;  // ids for the owner on the wire (see the wire formats)

  bool is_seq(size_t f) const { return pooling[f] == PoolingMode::kNone; }
  int owner(int t, int64_t id) const {
    const auto ts = static_cast<size_t>(t);
    if (partitions[ts] == 0) return plan.owner(t, id);
    return static_cast<int>(static_cast<int64_t>(dynamic_partition(id, partitions[ts])) * comm->size() / partitions[ts]);
  }
  // What the owner gets for id: its local row, or the raw id of a dynamic table.
  int64_t owner_id(int t, int64_t id) const { return partitions[static_cast<size_t>(t)] ? id : plan.local_row(t, id); }

  Status check(const SparseBatch& batch, table_internal::CheckedBatch* cb) const {
    return table_internal::check_batch(batch, meta, options.collection.bounds_check, alloc, cb);
  }
  Status check_outputs(const SparseBatch& b, size_t pooled_size, std::span<const size_t> seq_sizes, const char* what) const;
  // The start of forward and backward_update, before their first collective: the buffers
  // reserved (once), then the checks of the batch (into *cb) and of the sizes of the pooled
  // buffer and of the sequence buffers `seq`.
  template <typename Float>
  Status begin_call(const SparseBatch& input, size_t pooled_size, std::span<const std::span<Float>> seq, const char* what,
                    table_internal::CheckedBatch* cb) {
    ensure_reserved();
    Status valid = check(input, cb);
    std::vector<size_t> seq_sizes;
    for (const auto& s : seq) seq_sizes.push_back(s.size());
    if (valid.ok()) valid = check_outputs(*cb->batch, pooled_size, seq_sizes, what);
    return valid;
  }
  // The batch a call works on: the checked one, or, when this rank's call is invalid, an empty
  // one (the rank still takes part in the collectives).
  static const SparseBatch& batch_or_none(const Status& valid, const table_internal::CheckedBatch& cb) {
    static const SparseBatch kNoBatch;
    return valid.ok() ? *cb.batch : kNoBatch;
  }
  // Every rank learns which ranks failed; returns this rank's own error, an error naming the
  // failed ranks, or OK. extra: flags all-reduced along (max) and returned.
  Status agree(const Status& mine, const char* what, std::vector<int64_t>* extra = nullptr);
  uint64_t bytes_sent() const { return comm->stats().bytes_sent; }

  // forward: what this rank asks each owner for.
  struct Requests {
    explicit Requests(std::pmr::memory_resource* r) : per_owner(r), owner_of(r) {}
    PVec<PVec<int64_t>> per_owner;  // [P]: [F] counts, then ids for the owner
    PVec<PVec<int>> owner_of;       // [F][nnz_f] owner of each id
  };
  // forward: what this rank serves.
  struct Served {
    explicit Served(std::pmr::memory_resource* r) : table_rows(r) {}
    std::vector<std::vector<int64_t>> counts;    // [P][F] rows rank q asked for, per feature
    std::vector<std::vector<size_t>> first;      // [P][F] row of (q, f)'s block in its table's rows
    PVec<PVec<float>> table_rows;                // [T][n_t * dim] rows read, (feature, requester) order
    int64_t rows = 0;
  };
  // backward: the gradients between one requester and one owner.
  struct BagGradients {
    explicit BagGradients(std::pmr::memory_resource* r) : counts(r), rows(r), scales(r), grads(r) {}
    std::vector<int64_t> bags;              // [F] bags per feature
    std::vector<int64_t> scaled;            // [F] 1: the feature's ids carry scales (kMean, weights)
    PVec<int64_t> counts;                   // [M] ids per bag
    PVec<int64_t> rows;                     // [N] ids for the owner
    PVec<float> scales;                     // exact fp32 scales of the scaled features' ids
    PVec<PVec<float>> grads;                // [F][bags_f * dim_f] (sent)
    std::vector<std::span<const uint8_t>> raw;  // [F] the encoded gradients (received)
  };
  // Per-call buffers, kept between calls so that a step allocates (and faults in) nothing new.
  // In kCommBuffers memory of the collection's comm allocator (counted in MemoryStats).
  struct Scratch {
    explicit Scratch(std::pmr::memory_resource* r)
        : req(r), served(r), send(r), recv(r), table_ids(r), owner_rows(r), ids(r), offsets(r), weights(r),
          grads(r), no_ids(r) {}
    Requests req;
    Served served;
    PVec<uint8_t> send, recv;
    std::vector<int64_t> send_counts, recv_counts;
    PVec<PVec<int64_t>> table_ids;            // serve: [T] ids asked for
    PVec<PVec<float>> owner_rows;             // pool: [P] one feature's decoded rows
    std::vector<BagGradients> out_bags, in_bags;  // backward: [P] sent, received
    PVec<PVec<int64_t>> ids, offsets;         // assemble_local: [F]
    PVec<PVec<float>> weights;                // assemble_local: [F]
    PVec<float> grads;                        // assemble_local: [bags, local pooled_dim]
    SparseBatch local_batch;                  // assemble_local: the owner's batch
    PVec<int64_t> no_ids;                     // assemble_local: empty "rows" features
    // Starts the next outgoing all_to_all_v: no bytes yet for any of the p ranks.
    void begin_send(size_t p) {
      send.clear();
      send_counts.assign(p, 0);
    }
  };
  std::unique_ptr<AccountedResource> resource;  // declared before scratch: outlives it
  std::unique_ptr<Scratch> scratch;
  bool reserved = false;  // scratch holds the reservation of options.max_call

  // Reserves every buffer of scratch from comm_buffer_counts (dist/comm_sizes.h) for
  // options.max_call, once per scratch; nothing without a call shape.
  void ensure_reserved();

  void route(const SparseBatch& batch, bool valid, Requests* r) const;
  // Sends the requests and parses what this rank must serve into scratch->table_ids.
  Status exchange_requests(const SparseBatch& batch, bool valid, Served* served);
  // The owner's batch that reads table_ids (one kNone "rows" feature per table).
  SparseBatch rows_batch(std::vector<std::vector<int64_t>>* offsets) const;
  // Looks up the rows of table_ids on the local collection in `mode` (kEval: its dynamic tables
  // find rows and change nothing).
  Status serve(ForwardMode mode, Served* out);
  Status encode_replies(const Served& served, PVec<uint8_t>* send, std::vector<int64_t>* send_counts) const;
  std::vector<int64_t> reply_counts(const Requests& req) const;  // [P] bytes expected from each owner
  Status pool(const SparseBatch& batch, const Requests& req, std::span<const uint8_t> replies,
              const std::vector<int64_t>& counts, std::span<float> pooled_out,
              std::span<const std::span<float>> seq_out) const;
  void split_gradients(const SparseBatch& batch, std::span<const float> grad_pooled,
                       std::span<const std::span<const float>> grad_seq, bool valid, std::vector<BagGradients>* out) const;
  Status serialize(const std::vector<BagGradients>& out, PVec<uint8_t>* send, std::vector<int64_t>* send_counts) const;
  Status parse_gradients(std::span<const uint8_t> recv, const std::vector<int64_t>& counts, std::vector<BagGradients>* in) const;
  // Builds the owner's local batch and its gradients (decoded from the wire straight into
  // scratch->grads) from the received bags; flags non-finite decoded gradients.
  Status assemble_local(const std::vector<BagGradients>& in, bool check_finite, int64_t* nonfinite);

  // Row access by global row: calls fn(local_begin, count, index of the first row in the
  // range) for each run of consecutive local rows this rank owns among [begin, begin + count).
  template <typename Fn>
  Status for_owned_runs(int t, int64_t begin, int64_t count, Fn fn) const;
  Status check_rows(int t, int64_t begin, int64_t count, size_t have, size_t per_row, const char* what) const;
  // The raw fat rows [count, stride] of global rows [begin, begin + count), on every rank.
  Status gather_raw(int t, int64_t begin, int64_t count, std::span<uint8_t> out) const;
};

}  // namespace leanemb::dist
