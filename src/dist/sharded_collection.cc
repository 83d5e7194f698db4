// ShardedEmbeddingCollection: routing of ids, rows and gradients between ranks.
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
#include "dist/sharded_collection.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "dist/comm_sizes.h"
#include "memory/accounted_resource.h"
#include "kernels/kernels.h"
#include "table/batch_check.h"

namespace leanemb::dist {

namespace {

// The per-call buffers live in kCommBuffers memory (AccountedResource).
template <typename T>
using PVec = std::pmr::vector<T>;

template <typename Bytes, typename T>
void append_bytes(Bytes* out, std::span<const T> v) {
  const size_t at = out->size();
  out->resize(at + v.size_bytes());
  if (!v.empty()) std::memcpy(out->data() + at, v.data(), v.size_bytes());
}

// Non-negative integers on the wire in `bytes` = 4 (uint32) or 8 (int64) each: local rows (4
// when every rank's rows fit), ids per bag (4).
template <typename Bytes>
void append_uint(Bytes* out, std::span<const int64_t> v, size_t bytes) {
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
void widen_uint(std::span<const uint8_t> raw, size_t n, size_t bytes, Vec* out) {
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

// Reads consecutive sections of a received message; fails (instead of reading past the end)
// when the message is shorter than its header promises.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename Vec>
  bool take(size_t n, Vec* out) {
    using T = typename Vec::value_type;
    if (n > (bytes_.size() - pos_) / sizeof(T)) return false;
    out->resize(n);
    if (n) std::memcpy(out->data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool take_raw(size_t n, std::span<const uint8_t>* out) {
    if (n > bytes_.size() - pos_) return false;
    *out = bytes_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

std::vector<int64_t> displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) d[i + 1] = d[i] + counts[i];
  return d;
}

bool all_finite(std::span<const float> v) {
  bool ok = true;
  for (float x : v) ok &= std::isfinite(x);
  return ok;
}

}  // namespace

struct ShardedEmbeddingCollection::Impl {
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
  Status serve(Served* out);
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

Status ShardedEmbeddingCollection::Impl::check_outputs(const SparseBatch& b, size_t pooled_size,
                                                       std::span<const size_t> seq_sizes, const char* what) const {
  const std::string where = std::string("dist: ") + what + ": ";
  if (pooled_size != static_cast<size_t>(b.batch_size * global_pooled_dim))
    return invalid_argument(where + "pooled buffer has " + std::to_string(pooled_size) +
                            " floats, expected batch_size x pooled_dim = " + std::to_string(b.batch_size * global_pooled_dim));
  size_t s = 0;
  for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
    if (!is_seq(f)) continue;
    const size_t want = b.features[f].ids.size() * static_cast<size_t>(feature_dim[f]);
    if (s >= seq_sizes.size() || seq_sizes[s] != want)
      return invalid_argument(where + "sequence buffer of feature '" + meta[f].name + "' must have nnz x dim = " +
                              std::to_string(want) + " floats");
    ++s;
  }
  if (s != seq_sizes.size())
    return invalid_argument(where + std::to_string(seq_sizes.size()) + " sequence buffers for " + std::to_string(s) +
                            " sequence features");
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::Impl::agree(const Status& mine, const char* what, std::vector<int64_t>* extra) {
  const auto p = static_cast<size_t>(comm->size());
  std::vector<int64_t> flags(p + (extra ? extra->size() : 0), 0);
  flags[static_cast<size_t>(comm->rank())] = mine.ok() ? 0 : 1;
  if (extra) std::copy(extra->begin(), extra->end(), flags.begin() + static_cast<ptrdiff_t>(p));
  LEANEMB_RETURN_IF_ERROR(comm->all_reduce(std::span<int64_t>(flags), ReduceOp::kMax));
  if (extra) std::copy(flags.begin() + static_cast<ptrdiff_t>(p), flags.end(), extra->begin());
  if (!mine.ok()) return mine;
  const std::string failed = flagged_ranks(std::span<const int64_t>(flags).first(p));
  if (failed.empty()) return Status::ok_status();
  return invalid_argument(std::string("dist: ") + what + ": rank(s) " + failed + " failed (see their errors); nothing changed here");
}

namespace {

// The rank-local options of table t (see the header): its rows, their global keys, a cache
// file of its own.
Status local_table(const ShardPlan& plan, int t, int rank, int world, TableOptions* to) {
  const int64_t global = to->num_rows, local = plan.local_num_rows(t, rank);
  to->num_rows = std::max<int64_t>(1, local);
  to->shard.global_rows = global;
  to->shard.key_stride = plan.kind(t) == ShardingKind::kRowModulo ? world : 1;
  to->shard.key_offset = local > 0 ? plan.global_row(t, rank, 0) : 0;
  if (to->dynamic.enabled) {
    const uint32_t g = to->dynamic.partitions;
    if (g % static_cast<uint32_t>(world) != 0 || global % g != 0)
      return invalid_argument("dist: dynamic table '" + to->name + "': dynamic.partitions (" + std::to_string(g) +
                              ") must be a multiple of the world size (" + std::to_string(world) +
                              ") and divide the row capacity (" + std::to_string(global) + ")");
    to->shard.first_partition = static_cast<uint32_t>(rank) * (g / static_cast<uint32_t>(world));
    to->shard.held_partitions = g / static_cast<uint32_t>(world);
  }
  if (to->cache.enabled()) {
    if (local == 0) {
      to->cache = TableCacheOptions{};  // the unused row of a rank without rows
    } else {
      if (to->cache.capacity_rows > 0)  // the same share of this rank's rows
        to->cache.capacity_rows = std::clamp<int64_t>((to->cache.capacity_rows * local + global - 1) / global, 1, local);
      if (!to->cache.store_path.empty())
        to->cache.store_path += ".rank-" + std::to_string(rank) + "-of-" + std::to_string(world);
    }
  }
  return Status::ok_status();
}

}  // namespace

Result<std::unique_ptr<ShardedEmbeddingCollection>> ShardedEmbeddingCollection::create(
    const ShardedCollectionOptions& options, Communicator* comm, MemorySystem* memory) {
  if (memory == nullptr) return invalid_argument("dist: ShardedEmbeddingCollection::create: null MemorySystem");
  return create_impl(options, comm, memory, memory->allocator_for(Category::kWorkspace),
                     memory->allocator_for(Category::kCommBuffers));
}

Result<std::unique_ptr<ShardedEmbeddingCollection>> ShardedEmbeddingCollection::create(
    const ShardedCollectionOptions& options, Communicator* comm, Allocator* allocator, Allocator* comm_allocator) {
  Allocator* a = allocator ? allocator : default_host_allocator();
  return create_impl(options, comm, nullptr, a, comm_allocator ? comm_allocator : a);
}

Result<std::unique_ptr<ShardedEmbeddingCollection>> ShardedEmbeddingCollection::create_impl(
    const ShardedCollectionOptions& options, Communicator* comm, MemorySystem* memory, Allocator* allocator,
    Allocator* comm_allocator) {
  if (comm == nullptr) return invalid_argument("dist: ShardedEmbeddingCollection needs a communicator");
  const CollectionOptions& co = options.collection;
  if (co.tables.empty() || co.features.empty()) return invalid_argument("dist: the collection needs tables and features");
  const int P = comm->size(), rank = comm->rank();
  ShardPlanOptions po;
  po.world_size = P;
  po.table_assign = options.table_assign;
  for (const TableOptions& t : co.tables) {
    // A dynamic table's rows are blocks of whole id partitions: kRowRange over its capacity.
    const ShardingKind kind = t.dynamic.enabled ? ShardingKind::kRowRange : options.sharding;
    po.tables.push_back({t.num_rows, std::max<int64_t>(t.dim, 1), kind, -1});
  }
  LEANEMB_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::create(po));

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->comm = comm;
  impl->alloc = allocator;
  impl->plan = std::move(plan);
  impl->num_features = static_cast<int>(co.features.size());
  impl->num_tables = static_cast<int>(co.tables.size());
  CollectionOptions lo = co;
  for (int t = 0; t < impl->num_tables; ++t) {
    const TableOptions& g = co.tables[static_cast<size_t>(t)];
    impl->partitions.push_back(g.dynamic.enabled ? g.dynamic.partitions : 0);
    LEANEMB_RETURN_IF_ERROR(local_table(impl->plan, t, rank, P, &lo.tables[static_cast<size_t>(t)]));
  }
  impl->id_bytes = wire_id_bytes(impl->plan, impl->partitions, options.wide_ids);
  if (!options.max_call.empty() && options.max_call.size() != co.features.size())
    return invalid_argument("dist: max_call has " + std::to_string(options.max_call.size()) + " entries for " +
                            std::to_string(co.features.size()) + " features");
  for (size_t f = 0; f < co.features.size(); ++f) {
    const FeatureOptions& fo = co.features[f];
    if (fo.table < 0 || fo.table >= impl->num_tables) {
      return invalid_argument("dist: feature '" + fo.name + "' refers to table " + std::to_string(fo.table));
    }
    const TableOptions& to = co.tables[static_cast<size_t>(fo.table)];
    impl->feature_table.push_back(fo.table);
    impl->feature_dim.push_back(to.dim);
    impl->pooling.push_back(fo.pooling);
    impl->global_offset.push_back(fo.pooling == PoolingMode::kNone ? -1 : impl->global_pooled_dim);
    if (fo.pooling != PoolingMode::kNone) impl->global_pooled_dim += to.dim;
    impl->meta.push_back({fo.name, to.name, to.num_rows, fo.pooling, to.dynamic.enabled});
    lo.features[f].pooling = PoolingMode::kSum;
  }
  for (int t = 0; t < impl->num_tables; ++t) {
    lo.features.push_back(FeatureOptions{"__rows_of_" + co.tables[static_cast<size_t>(t)].name, t, PoolingMode::kNone});
  }
  if (memory) {
    LEANEMB_ASSIGN_OR_RETURN(impl->local, EmbeddingCollection::create(lo, memory));
  } else {
    LEANEMB_ASSIGN_OR_RETURN(impl->local, EmbeddingCollection::create(lo, allocator));
  }
  impl->resource = std::make_unique<AccountedResource>(comm_allocator, Category::kCommBuffers);
  impl->scratch = std::make_unique<Impl::Scratch>(impl->resource.get());
  return std::unique_ptr<ShardedEmbeddingCollection>(new ShardedEmbeddingCollection(std::move(impl)));
}

ShardedEmbeddingCollection::ShardedEmbeddingCollection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedEmbeddingCollection::~ShardedEmbeddingCollection() = default;

const ShardPlan& ShardedEmbeddingCollection::plan() const { return impl_->plan; }
const ShardedCollectionOptions& ShardedEmbeddingCollection::sharded_options() const { return impl_->options; }
Communicator* ShardedEmbeddingCollection::communicator() const { return impl_->comm; }
int ShardedEmbeddingCollection::rank() const { return impl_->comm->rank(); }
int ShardedEmbeddingCollection::world_size() const { return impl_->comm->size(); }
EmbeddingCollection& ShardedEmbeddingCollection::local() { return *impl_->local; }
const EmbeddingCollection& ShardedEmbeddingCollection::local() const { return *impl_->local; }
const CollectionOptions& ShardedEmbeddingCollection::options() const { return impl_->options.collection; }
const RowLayout& ShardedEmbeddingCollection::layout(int table) const { return impl_->local->layout(table); }
int64_t ShardedEmbeddingCollection::pooled_dim() const { return impl_->global_pooled_dim; }
int64_t ShardedEmbeddingCollection::pooled_offset(int feature) const {
  LEANEMB_CHECK(feature >= 0 && feature < impl_->num_features, "feature index out of range");
  return impl_->global_offset[static_cast<size_t>(feature)];
}
int64_t ShardedEmbeddingCollection::step() const { return impl_->local->step(); }
void ShardedEmbeddingCollection::set_step(int64_t step) { impl_->local->set_step(step); }
Status ShardedEmbeddingCollection::set_learning_rate(int table, float lr) { return impl_->local->set_learning_rate(table, lr); }
Status ShardedEmbeddingCollection::flush() { return impl_->local->flush(); }
MemoryStats ShardedEmbeddingCollection::memory_stats() const { return impl_->local->memory_stats(); }
Result<RowCacheStats> ShardedEmbeddingCollection::cache_stats(int table) const { return impl_->local->cache_stats(table); }
Result<DynamicTableStats> ShardedEmbeddingCollection::dynamic_stats(int table) const {
  return impl_->local->dynamic_stats(table);
}
void ShardedEmbeddingCollection::release_step_buffers() {
  impl_->local->release_step_buffers();
  impl_->scratch = std::make_unique<Impl::Scratch>(impl_->resource.get());
  impl_->reserved = false;  // reserved again by the next call
}
const ShardedStepStats& ShardedEmbeddingCollection::last_step_stats() const { return impl_->stats; }
const ShardedTotals& ShardedEmbeddingCollection::totals() const { return impl_->totals; }

Status ShardedEmbeddingCollection::validate(const SparseBatch& batch) const {
  table_internal::CheckedBatch cb;
  return impl_->check(batch, &cb);
}

// ---- buffers -------------------------------------------------------------------------------

void ShardedEmbeddingCollection::Impl::ensure_reserved() {
  if (reserved || options.max_call.empty()) return;
  reserved = true;
  CommShape shape;
  shape.world = comm->size();
  shape.rank = comm->rank();
  for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
    const FeatureCallShape& c = f < options.max_call.size() ? options.max_call[f] : FeatureCallShape{};
    shape.features.push_back({feature_table[f], c.bags, c.max_ids, feature_dim[f], is_seq(f),
                              pooling[f] == PoolingMode::kMean || c.weighted});
  }
  shape.owner_share = owner_shares(plan, partitions);
  shape.id_bytes = id_bytes;
  shape.forward_payload = options.forward_payload;
  shape.backward_payload = options.backward_payload;
  const CommBufferCounts z = comm_buffer_counts(shape);
  const auto n = [](int64_t v) { return static_cast<size_t>(v); };
  Scratch& sc = *scratch;
  const size_t p = z.per_owner.size(), nf = z.owner_of.size(), nt = z.table_ids.size();
  sc.req.per_owner.resize(p);
  for (size_t o = 0; o < p; ++o) sc.req.per_owner[o].reserve(n(z.per_owner[o]));
  sc.req.owner_of.resize(nf);
  for (size_t f = 0; f < nf; ++f) sc.req.owner_of[f].reserve(n(z.owner_of[f]));
  sc.send.reserve(n(z.send));
  sc.recv.reserve(n(z.recv));
  sc.table_ids.resize(nt);
  sc.served.table_rows.resize(nt);
  for (size_t t = 0; t < nt; ++t) {
    sc.table_ids[t].reserve(n(z.table_ids[t]));
    sc.served.table_rows[t].reserve(n(z.table_rows[t]));
  }
  sc.owner_rows.resize(p);
  for (size_t o = 0; o < p; ++o) sc.owner_rows[o].reserve(n(z.owner_rows[o]));
  while (sc.out_bags.size() < p) sc.out_bags.emplace_back(resource.get());
  while (sc.in_bags.size() < p) sc.in_bags.emplace_back(resource.get());
  for (size_t o = 0; o < p; ++o) {
    BagGradients& m = sc.out_bags[o];
    m.counts.reserve(n(z.out_counts[o]));
    m.rows.reserve(n(z.out_rows[o]));
    m.scales.reserve(n(z.out_scales[o]));
    m.grads.resize(nf);
    for (size_t f = 0; f < nf; ++f) m.grads[f].reserve(n(z.out_grads[o][f]));
    BagGradients& q = sc.in_bags[o];
    q.counts.reserve(n(z.in_counts[o]));
    q.rows.reserve(n(z.in_rows[o]));
    q.scales.reserve(n(z.in_scales[o]));
  }
  sc.ids.resize(nf);
  sc.weights.resize(nf);
  sc.offsets.resize(nf);
  for (size_t f = 0; f < nf; ++f) {
    sc.ids[f].reserve(n(z.local_ids[f]));
    sc.weights[f].reserve(n(z.local_weights[f]));
    sc.offsets[f].reserve(n(z.local_offsets[f]));
  }
  sc.grads.reserve(n(z.local_grads));
  sc.no_ids.reserve(n(z.no_ids));
}

// ---- forward -------------------------------------------------------------------------------

void ShardedEmbeddingCollection::Impl::route(const SparseBatch& batch, bool valid, Requests* rp) const {
  const auto p = static_cast<size_t>(comm->size());
  const auto nf = static_cast<size_t>(num_features);
  Requests& r = *rp;
  r.per_owner.resize(p);
  for (auto& v : r.per_owner) v.assign(nf, 0);
  r.owner_of.resize(nf);
  for (auto& v : r.owner_of) v.clear();
  if (!valid) return;  // empty requests: this rank still takes part
  for (size_t f = 0; f < nf; ++f) {
    const int t = feature_table[f];
    r.owner_of[f].reserve(batch.features[f].ids.size());
    for (int64_t id : batch.features[f].ids) {
      const int o = owner(t, id);
      r.per_owner[static_cast<size_t>(o)].push_back(owner_id(t, id));
      ++r.per_owner[static_cast<size_t>(o)][f];
      r.owner_of[f].push_back(o);
    }
  }
}

Status ShardedEmbeddingCollection::Impl::exchange_requests(const SparseBatch& batch, bool valid, Served* out) {
  const auto p = static_cast<size_t>(comm->size());
  const auto nf = static_cast<size_t>(num_features);
  Scratch& sc = *scratch;
  route(batch, valid, &sc.req);
  sc.begin_send(p);
  for (size_t o = 0; o < p; ++o) {
    const size_t before = sc.send.size();
    const std::span<const int64_t> all(sc.req.per_owner[o]);
    append_bytes(&sc.send, all.first(nf));  // [F] counts
    append_uint(&sc.send, all.subspan(nf), id_bytes);
    sc.send_counts[o] = static_cast<int64_t>(sc.send.size() - before);
  }
  LEANEMB_RETURN_IF_ERROR(comm->all_to_all_v_alloc(sc.send, sc.send_counts, &sc.recv, &sc.recv_counts));
  // Parse every requester's message, then lay the ids out per table in (feature, requester)
  // order: the order of the concatenated global batch.
  out->counts.resize(p);
  out->first.assign(p, std::vector<size_t>(nf, 0));
  std::vector<std::vector<std::span<const uint8_t>>> raw(p, std::vector<std::span<const uint8_t>>(nf));
  const std::vector<int64_t> disp = displacements(sc.recv_counts);
  for (size_t q = 0; q < p; ++q) {
    Reader rd(std::span<const uint8_t>(sc.recv).subspan(static_cast<size_t>(disp[q]), static_cast<size_t>(sc.recv_counts[q])));
    bool ok = rd.take(nf, &out->counts[q]);
    for (size_t f = 0; f < nf && ok; ++f)
      ok = out->counts[q][f] >= 0 && rd.take_raw(static_cast<size_t>(out->counts[q][f]) * id_bytes, &raw[q][f]);
    if (!ok || !rd.done()) return internal_error("dist: malformed request from rank " + std::to_string(q));
  }
  auto& table_ids = sc.table_ids;
  table_ids.resize(static_cast<size_t>(num_tables));
  for (auto& v : table_ids) v.clear();
  for (size_t f = 0; f < nf; ++f) {
    auto& ids = table_ids[static_cast<size_t>(feature_table[f])];
    for (size_t q = 0; q < p; ++q) {
      out->first[q][f] = ids.size();
      widen_uint(raw[q][f], static_cast<size_t>(out->counts[q][f]), id_bytes, &ids);
    }
  }
  return Status::ok_status();
}

SparseBatch ShardedEmbeddingCollection::Impl::rows_batch(std::vector<std::vector<int64_t>>* offsets) const {
  static const int64_t kEmpty[2] = {0, 0};
  SparseBatch lb;
  lb.batch_size = 1;
  for (int f = 0; f < num_features; ++f) lb.features.push_back({{}, std::span<const int64_t>(kEmpty, 2), {}});
  offsets->resize(static_cast<size_t>(num_tables));
  for (int t = 0; t < num_tables; ++t) {
    const auto& ids = scratch->table_ids[static_cast<size_t>(t)];
    (*offsets)[static_cast<size_t>(t)] = {0, static_cast<int64_t>(ids.size())};
    lb.features.push_back({ids, (*offsets)[static_cast<size_t>(t)], {}});
  }
  return lb;
}

Status ShardedEmbeddingCollection::Impl::serve(Served* out) {
  // One sequence lookup per table ("rows" features); the global features get empty bags.
  std::vector<std::vector<int64_t>> offsets;
  const SparseBatch lb = rows_batch(&offsets);
  std::vector<std::span<float>> seq_out;
  out->table_rows.resize(static_cast<size_t>(num_tables));
  out->rows = 0;
  for (int t = 0; t < num_tables; ++t) {
    const auto ts = static_cast<size_t>(t);
    const size_t n = scratch->table_ids[ts].size();
    out->table_rows[ts].resize(n * static_cast<size_t>(local->layout(t).dim));
    seq_out.emplace_back(out->table_rows[ts]);
    out->rows += static_cast<int64_t>(n);
  }
  std::vector<float> unused(static_cast<size_t>(local->pooled_dim()));
  return local->forward(lb, unused, seq_out);
}

Status ShardedEmbeddingCollection::Impl::encode_replies(const Served& served, PVec<uint8_t>* send,
                                                        std::vector<int64_t>* send_counts) const {
  const PayloadDType pd = options.forward_payload;
  send->clear();
  for (size_t q = 0; q < served.counts.size(); ++q) {
    const size_t before = send->size();
    for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
      const auto t = static_cast<size_t>(feature_table[f]);
      const auto dim = static_cast<size_t>(feature_dim[f]);
      const auto n = static_cast<size_t>(served.counts[q][f]);
      const size_t at = send->size();
      send->resize(at + n * payload_bytes_per_row(pd, feature_dim[f]));
      const auto rows = std::span<const float>(served.table_rows[t]).subspan(served.first[q][f] * dim, n * dim);
      LEANEMB_RETURN_IF_ERROR(encode_rows(pd, feature_dim[f], rows, std::span<uint8_t>(*send).subspan(at)));
    }
    (*send_counts)[q] = static_cast<int64_t>(send->size() - before);
  }
  return Status::ok_status();
}

std::vector<int64_t> ShardedEmbeddingCollection::Impl::reply_counts(const Requests& req) const {
  std::vector<int64_t> counts(req.per_owner.size(), 0);
  for (size_t o = 0; o < counts.size(); ++o) {
    for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
      counts[o] += req.per_owner[o][f] * static_cast<int64_t>(payload_bytes_per_row(options.forward_payload, feature_dim[f]));
    }
  }
  return counts;
}

Status ShardedEmbeddingCollection::Impl::pool(const SparseBatch& batch, const Requests& req, std::span<const uint8_t> replies,
                                              const std::vector<int64_t>& counts, std::span<float> pooled_out,
                                              std::span<const std::span<float>> seq_out) const {
  const PayloadDType pd = options.forward_payload;
  const size_t p = req.per_owner.size();
  const std::vector<int64_t> disp = displacements(counts);
  std::vector<size_t> block_at(disp.begin(), disp.end() - 1);
  const int64_t ldo = global_pooled_dim;
  size_t seq_index = 0;
  for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
    const int64_t dim = feature_dim[f];
    const auto d = static_cast<size_t>(dim);
    auto& rows = scratch->owner_rows;  // this feature's rows from each owner
    rows.resize(p);
    for (size_t o = 0; o < p; ++o) {
      const auto n = static_cast<size_t>(req.per_owner[o][f]);
      const size_t bytes = n * payload_bytes_per_row(pd, dim);
      rows[o].resize(n * d);
      LEANEMB_RETURN_IF_ERROR(decode_rows(pd, dim, replies.subspan(block_at[o], bytes), rows[o]));
      block_at[o] += bytes;
    }
    std::vector<size_t> next(p, 0);
    const FeatureInput& in = batch.features[f];
    if (is_seq(f)) {  // the rows themselves, in position order
      float* out = seq_out[seq_index++].data();
      for (size_t i = 0; i < in.ids.size(); ++i) {
        const auto o = static_cast<size_t>(req.owner_of[f][i]);
        std::memcpy(out + i * d, rows[o].data() + next[o]++ * d, d * 4);
      }
      continue;
    }
    const float* w = in.weights.empty() ? nullptr : in.weights.data();
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      float* out = pooled_out.data() + b * ldo + global_offset[f];
      std::fill(out, out + dim, 0.0f);
      const int64_t lo = in.offsets[static_cast<size_t>(b)], hi = in.offsets[static_cast<size_t>(b + 1)];
      for (int64_t i = lo; i < hi; ++i) {
        const auto o = static_cast<size_t>(req.owner_of[f][static_cast<size_t>(i)]);
        const float* x = rows[o].data() + next[o]++ * d;
        if (w) {
          const float wi = w[i];
          for (size_t j = 0; j < d; ++j) out[j] += wi * x[j];
        } else {
          for (size_t j = 0; j < d; ++j) out[j] += x[j];
        }
      }
      if (pooling[f] == PoolingMode::kMean && hi > lo) {
        const float n = static_cast<float>(hi - lo);
        for (size_t j = 0; j < d; ++j) out[j] /= n;
      }
    }
  }
  return Status::ok_status();
}

// The buffers grow through AccountedResource, which throws std::bad_alloc when the comm
// allocator refuses (a budget): reported as ResourceExhausted. The other ranks then fail in the
// collective this rank no longer makes (its timeout), so the run ends, as an out-of-memory
// inside a collective must.
Status ShardedEmbeddingCollection::forward(const SparseBatch& input, std::span<float> pooled_out,
                                           std::span<const std::span<float>> seq_out) try {
  Impl& im = *impl_;
  Communicator& comm = *im.comm;
  const auto p = static_cast<size_t>(comm.size());
  const uint64_t sent0 = im.bytes_sent();
  im.ensure_reserved();
  table_internal::CheckedBatch cb;
  Status valid = im.check(input, &cb);
  std::vector<size_t> seq_sizes;
  for (const auto& s : seq_out) seq_sizes.push_back(s.size());
  if (valid.ok()) valid = im.check_outputs(*cb.batch, pooled_out.size(), seq_sizes, "forward");
  static const SparseBatch kNoBatch;
  const SparseBatch& batch = valid.ok() ? *cb.batch : kNoBatch;

  // 1. Requests: per owner, [F] counts then the ids, in (feature, bag, position) order.
  Impl::Scratch& sc = *im.scratch;
  Impl::Served& served = sc.served;
  LEANEMB_RETURN_IF_ERROR(im.exchange_requests(batch, valid.ok(), &served));

  // 2. Serve the requests; every rank learns whether every rank succeeded.
  const Status lookup = im.serve(&served);
  LEANEMB_RETURN_IF_ERROR(im.agree(valid.ok() ? lookup : valid, "forward"));

  // 3. Replies: to each requester, per feature, its rows in request order; then pool.
  auto& send = sc.send;
  auto& send_counts = sc.send_counts;
  LEANEMB_RETURN_IF_ERROR(im.encode_replies(served, &send, &send_counts));
  uint64_t payload = 0;  // the replies are encoded rows only
  for (size_t q = 0; q < p; ++q)
    if (static_cast<int>(q) != comm.rank()) payload += static_cast<uint64_t>(send_counts[q]);
  const std::vector<int64_t> counts = im.reply_counts(sc.req);
  sc.recv.resize(static_cast<size_t>(displacements(counts)[p]));
  LEANEMB_RETURN_IF_ERROR(comm.all_to_all_v(send, send_counts, sc.recv, counts));
  LEANEMB_RETURN_IF_ERROR(im.pool(batch, sc.req, sc.recv, counts, pooled_out, seq_out));
  im.stats.forward_bytes_sent = im.bytes_sent() - sent0;
  im.stats.forward_payload_bytes_sent = payload;
  im.stats.rows_served = served.rows;
  im.totals.bytes_sent += im.stats.forward_bytes_sent;
  im.totals.payload_bytes_sent += payload;
  ++im.totals.forward_calls;
  return Status::ok_status();
} catch (const std::bad_alloc&) {
  return resource_exhausted("dist: forward: the communication buffers (kCommBuffers) exceed their allocator's budget");
}

Status ShardedEmbeddingCollection::prefetch(const SparseBatch& next) try {
  Impl& im = *impl_;
  im.ensure_reserved();
  table_internal::CheckedBatch cb;
  const Status valid = im.check(next, &cb);
  static const SparseBatch kNoBatch;
  Impl::Served served(im.resource.get());
  LEANEMB_RETURN_IF_ERROR(im.exchange_requests(valid.ok() ? *cb.batch : kNoBatch, valid.ok(), &served));
  std::vector<std::vector<int64_t>> offsets;
  const Status started = im.local->prefetch(im.rows_batch(&offsets));
  return im.agree(valid.ok() ? started : valid, "prefetch");
} catch (const std::bad_alloc&) {
  return resource_exhausted("dist: prefetch: the communication buffers (kCommBuffers) exceed their allocator's budget");
}

// ---- backward ------------------------------------------------------------------------------

void ShardedEmbeddingCollection::Impl::split_gradients(const SparseBatch& batch, std::span<const float> grad_pooled,
                                                       std::span<const std::span<const float>> grad_seq, bool valid,
                                                       std::vector<BagGradients>* outp) const {
  const auto p = static_cast<size_t>(comm->size());
  const auto nf = static_cast<size_t>(num_features);
  std::vector<BagGradients>& out = *outp;
  while (out.size() < p) out.emplace_back(resource.get());
  for (auto& o : out) {
    o.bags.assign(nf, 0);
    o.scaled.assign(nf, 0);
    o.counts.clear();
    o.rows.clear();
    o.scales.clear();
    o.grads.resize(nf);
    for (auto& g : o.grads) g.clear();
  }
  if (!valid) return;  // empty messages: this rank still takes part
  const int64_t ldo = global_pooled_dim;
  std::vector<int64_t> in_bag(p, 0);
  std::vector<size_t> touched;
  size_t seq_index = 0;
  for (size_t f = 0; f < nf; ++f) {
    const FeatureInput& in = batch.features[f];
    const int t = feature_table[f];
    const auto d = static_cast<size_t>(feature_dim[f]);
    // Scales other than 1 exist only with per-id weights or mean pooling.
    const int64_t scaled = pooling[f] == PoolingMode::kMean || !in.weights.empty() ? 1 : 0;
    for (auto& o : out) o.scaled[f] = scaled;
    if (is_seq(f)) {  // each position is a bag of one id with its own gradient row
      const float* g = grad_seq[seq_index++].data();
      for (size_t i = 0; i < in.ids.size(); ++i) {
        const int64_t id = in.ids[i];
        BagGradients& m = out[static_cast<size_t>(owner(t, id))];
        m.rows.push_back(owner_id(t, id));
        if (scaled) m.scales.push_back(in.weights[i]);
        m.counts.push_back(1);
        m.grads[f].insert(m.grads[f].end(), g + i * d, g + (i + 1) * d);
        ++m.bags[f];
      }
      continue;
    }
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      const int64_t lo = in.offsets[static_cast<size_t>(b)], hi = in.offsets[static_cast<size_t>(b + 1)];
      // The single-process backward's scale of each contribution, bit for bit.
      const float inv_len = pooling[f] == PoolingMode::kMean ? 1.0f / static_cast<float>(hi - lo) : 1.0f;
      touched.clear();
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t id = in.ids[static_cast<size_t>(i)];
        const auto o = static_cast<size_t>(owner(t, id));
        const float w = in.weights.empty() ? 1.0f : in.weights[static_cast<size_t>(i)];
        out[o].rows.push_back(owner_id(t, id));
        if (scaled) out[o].scales.push_back(pooling[f] == PoolingMode::kMean ? w * inv_len : w);
        if (in_bag[o]++ == 0) touched.push_back(o);
      }
      const float* g = grad_pooled.data() + b * ldo + global_offset[f];
      for (size_t o : touched) {
        out[o].counts.push_back(in_bag[o]);
        out[o].grads[f].insert(out[o].grads[f].end(), g, g + d);
        ++out[o].bags[f];
        in_bag[o] = 0;
      }
    }
  }
}
Status ShardedEmbeddingCollection::Impl::serialize(const std::vector<BagGradients>& out, PVec<uint8_t>* send,
                                                   std::vector<int64_t>* send_counts) const {
  const PayloadDType pd = options.backward_payload;
  for (size_t o = 0; o < out.size(); ++o) {
    const size_t before = send->size();
    const BagGradients& m = out[o];
    append_bytes(send, std::span<const int64_t>(m.bags));
    append_bytes(send, std::span<const int64_t>(m.scaled));
    append_uint(send, std::span<const int64_t>(m.counts), 4);  // ids per bag
    append_uint(send, std::span<const int64_t>(m.rows), id_bytes);
    append_bytes(send, std::span<const float>(m.scales));
    for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
      const size_t at = send->size();
      send->resize(at + static_cast<size_t>(out[o].bags[f]) * payload_bytes_per_row(pd, feature_dim[f]));
      LEANEMB_RETURN_IF_ERROR(encode_rows(pd, feature_dim[f], out[o].grads[f], std::span<uint8_t>(*send).subspan(at)));
    }
    (*send_counts)[o] = static_cast<int64_t>(send->size() - before);
  }
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::Impl::parse_gradients(std::span<const uint8_t> recv, const std::vector<int64_t>& counts,
                                                         std::vector<BagGradients>* in) const {
  const PayloadDType pd = options.backward_payload;
  const auto nf = static_cast<size_t>(num_features);
  const std::vector<int64_t> disp = displacements(counts);
  while (in->size() < counts.size()) in->emplace_back(resource.get());
  for (size_t q = 0; q < counts.size(); ++q) {
    Reader rd(recv.subspan(static_cast<size_t>(disp[q]), static_cast<size_t>(counts[q])));
    BagGradients& m = (*in)[q];
    bool ok = rd.take(nf, &m.bags) && rd.take(nf, &m.scaled);
    int64_t num_bags = 0, num_ids = 0, num_scaled = 0;
    for (size_t f = 0; f < nf && ok; ++f) {
      ok = m.bags[f] >= 0 && (m.scaled[f] == 0 || m.scaled[f] == 1);
      num_bags += m.bags[f];
    }
    std::span<const uint8_t> raw;
    m.counts.clear();
    m.rows.clear();
    ok = ok && rd.take_raw(static_cast<size_t>(num_bags) * 4, &raw);
    if (ok) widen_uint(raw, static_cast<size_t>(num_bags), 4, &m.counts);
    size_t bag = 0;
    for (size_t f = 0; f < nf && ok; ++f) {
      for (int64_t k = 0; k < m.bags[f] && ok; ++k, ++bag) {
        ok = m.counts[bag] > 0;
        num_ids += m.counts[bag];
        if (m.scaled[f]) num_scaled += m.counts[bag];
      }
    }
    ok = ok && rd.take_raw(static_cast<size_t>(num_ids) * id_bytes, &raw);
    if (ok) widen_uint(raw, static_cast<size_t>(num_ids), id_bytes, &m.rows);
    ok = ok && rd.take(static_cast<size_t>(num_scaled), &m.scales);
    m.raw.resize(nf);
    for (size_t f = 0; f < nf && ok; ++f) {
      const auto n = static_cast<size_t>(m.bags[f]);
      ok = rd.take_raw(n * payload_bytes_per_row(pd, feature_dim[f]), &m.raw[f]);
    }
    if (!ok || !rd.done()) return internal_error("dist: backward_update: malformed gradients from rank " + std::to_string(q));
  }
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::Impl::assemble_local(const std::vector<BagGradients>& in, bool check_finite,
                                                        int64_t* nonfinite) {
  // Per feature, the bags of rank 0, 1, ..., padded with empty bags to a common count.
  const PayloadDType pd = options.backward_payload;
  const auto nf = static_cast<size_t>(num_features);
  const int64_t ldo = local->pooled_dim();
  int64_t local_bags = 0;
  stats.bags_received = 0;
  for (size_t f = 0; f < nf; ++f) {
    int64_t n = 0;
    for (const BagGradients& m : in) n += m.bags[f];
    local_bags = std::max(local_bags, n);
    stats.bags_received += n;
  }
  auto& ids = scratch->ids;
  auto& offsets = scratch->offsets;
  auto& weights = scratch->weights;
  ids.resize(nf);
  offsets.resize(nf);
  weights.resize(nf);
  // Every element is written below (a received gradient, or 0 for a padding bag), so the
  // buffer is not cleared first.
  PVec<float>& grads = scratch->grads;
  grads.resize(static_cast<size_t>(local_bags * ldo));
  std::vector<size_t> bag_cursor(in.size(), 0), id_cursor(in.size(), 0), scale_cursor(in.size(), 0);
  for (size_t f = 0; f < nf; ++f) {
    ids[f].clear();
    offsets[f].clear();
    weights[f].clear();
    const auto d = static_cast<size_t>(feature_dim[f]);
    const size_t row_bytes = payload_bytes_per_row(pd, feature_dim[f]);
    const int64_t off = local->pooled_offset(static_cast<int>(f));
    offsets[f].push_back(0);
    for (size_t q = 0; q < in.size(); ++q) {
      const BagGradients& m = in[q];
      const auto first = static_cast<int64_t>(offsets[f].size() - 1);
      for (int64_t k = 0; k < m.bags[f]; ++k) {
        const int64_t c = m.counts[bag_cursor[q]++];
        for (int64_t i = 0; i < c; ++i, ++id_cursor[q]) {
          ids[f].push_back(m.rows[id_cursor[q]]);
          weights[f].push_back(m.scaled[f] ? m.scales[scale_cursor[q]++] : 1.0f);
        }
        offsets[f].push_back(static_cast<int64_t>(ids[f].size()));
      }
      // The bags' gradients, decoded into their rows of the local gradient.
      for (int64_t k = 0; k < m.bags[f]; ++k) {
        float* dst = grads.data() + (first + k) * ldo + off;
        LEANEMB_RETURN_IF_ERROR(decode_rows(pd, feature_dim[f], m.raw[f].subspan(static_cast<size_t>(k) * row_bytes, row_bytes),
                                            std::span<float>(dst, d)));
        // fp32 payloads are the bits the requester checked before sending.
        if (check_finite && pd != PayloadDType::kF32 && !all_finite(std::span<const float>(dst, d))) *nonfinite = 1;
      }
    }
    for (auto bag = static_cast<int64_t>(offsets[f].size() - 1); bag < local_bags; ++bag)
      std::fill_n(grads.data() + bag * ldo + off, d, 0.0f);
    offsets[f].resize(static_cast<size_t>(local_bags + 1), static_cast<int64_t>(ids[f].size()));
  }
  SparseBatch& lb = scratch->local_batch;
  lb.batch_size = local_bags;
  lb.features.clear();
  for (size_t f = 0; f < nf; ++f) lb.features.push_back({ids[f], offsets[f], weights[f]});
  scratch->no_ids.assign(static_cast<size_t>(local_bags + 1), 0);
  for (int t = 0; t < num_tables; ++t) lb.features.push_back({{}, scratch->no_ids, {}});
  return Status::ok_status();
}

Result<UpdateReport> ShardedEmbeddingCollection::backward_update(const SparseBatch& input, std::span<const float> grad_pooled,
                                                                 std::span<const std::span<const float>> grad_seq,
                                                                 const UpdateOptions& update) try {
  Impl& im = *impl_;
  Communicator& comm = *im.comm;
  const auto p = static_cast<size_t>(comm.size());
  const uint64_t sent0 = im.bytes_sent();
  im.ensure_reserved();
  table_internal::CheckedBatch cb;
  Status valid = im.check(input, &cb);
  std::vector<size_t> seq_sizes;
  for (const auto& s : grad_seq) seq_sizes.push_back(s.size());
  if (valid.ok()) valid = im.check_outputs(*cb.batch, grad_pooled.size(), seq_sizes, "backward_update");
  if (valid.ok() && !std::isfinite(update.grad_multiplier)) valid = invalid_argument("grad_multiplier is not finite");
  int64_t nonfinite = 0;
  if (valid.ok() && update.check_finite) {
    nonfinite = all_finite(grad_pooled) ? 0 : 1;
    for (const auto& s : grad_seq) nonfinite |= all_finite(s) ? 0 : 1;
  }
  static const SparseBatch kNoBatch;
  const SparseBatch& batch = valid.ok() ? *cb.batch : kNoBatch;

  // 1. Per owner: bags per feature, ids per bag, ids, scales, bag gradients.
  Impl::Scratch& sc = *im.scratch;
  sc.begin_send(p);
  im.split_gradients(batch, grad_pooled, grad_seq, valid.ok(), &sc.out_bags);
  uint64_t payload = 0;  // the encoded gradients
  for (size_t o = 0; o < p; ++o) {
    if (static_cast<int>(o) == comm.rank()) continue;
    for (size_t f = 0; f < sc.out_bags[o].grads.size(); ++f)
      payload += static_cast<uint64_t>(sc.out_bags[o].bags[f]) * payload_bytes_per_row(im.options.backward_payload, im.feature_dim[f]);
  }
  LEANEMB_RETURN_IF_ERROR(im.serialize(sc.out_bags, &sc.send, &sc.send_counts));
  LEANEMB_RETURN_IF_ERROR(comm.all_to_all_v_alloc(sc.send, sc.send_counts, &sc.recv, &sc.recv_counts));

  // 2. Parse and decode; found-inf (given and decoded gradients) and errors agreed by all ranks.
  std::vector<Impl::BagGradients>& in = sc.in_bags;
  Status parsed = im.parse_gradients(sc.recv, sc.recv_counts, &in);
  if (parsed.ok() && valid.ok()) parsed = im.assemble_local(in, update.check_finite, &nonfinite);
  std::vector<int64_t> extra = {nonfinite};
  LEANEMB_RETURN_IF_ERROR(im.agree(valid.ok() ? parsed : valid, "backward_update", &extra));
  UpdateReport report;
  if (extra[0]) {
    report.skipped_nonfinite = true;  // on every rank: no row, no state, no step changes
  } else {
    // 3. The owner's update over the received bags, requesters in rank order.
    const std::vector<std::span<const float>> no_seq_grads(static_cast<size_t>(im.num_tables));
    // A local failure here (a budget, a cache's I/O) is this rank's alone: the others have
    // updated. Agreement keeps the ranks in step; the run must stop (the error is returned).
    auto local = im.local->backward_update(sc.local_batch, sc.grads, no_seq_grads, update);
    LEANEMB_RETURN_IF_ERROR(im.agree(local.status(), "backward_update"));
    report = local.value();
    report.lookups = 0;
    for (const auto& f : batch.features) report.lookups += static_cast<int64_t>(f.ids.size());
  }
  im.stats.backward_bytes_sent = im.bytes_sent() - sent0;
  im.stats.backward_payload_bytes_sent = payload;
  im.totals.bytes_sent += im.stats.backward_bytes_sent;
  im.totals.payload_bytes_sent += payload;
  ++im.totals.backward_calls;
  return report;
} catch (const std::bad_alloc&) {
  return resource_exhausted("dist: backward_update: the communication buffers (kCommBuffers) exceed their allocator's budget");
}

// ---- rows by global row --------------------------------------------------------------------

Status ShardedEmbeddingCollection::Impl::check_rows(int t, int64_t begin, int64_t count, size_t have, size_t per_row,
                                                    const char* what) const {
  if (t < 0 || t >= num_tables) return out_of_range(std::string(what) + ": unknown table " + std::to_string(t));
  const int64_t rows = plan.num_rows(t);
  if (begin < 0 || count < 0 || begin > rows || count > rows - begin)
    return out_of_range(std::string(what) + ": rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                        ") outside table '" + options.collection.tables[static_cast<size_t>(t)].name + "' of " +
                        std::to_string(rows) + " rows");
  if (have != static_cast<size_t>(count) * per_row)
    return invalid_argument(std::string(what) + ": buffer has " + std::to_string(have) + " elements, expected " +
                            std::to_string(static_cast<size_t>(count) * per_row));
  return Status::ok_status();
}

template <typename Fn>
Status ShardedEmbeddingCollection::Impl::for_owned_runs(int t, int64_t begin, int64_t count, Fn fn) const {
  const int r = comm->rank();
  int64_t run_local = -1, run_len = 0, run_index = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t g = begin + i;
    if (plan.owner(t, g) != r) continue;
    const int64_t l = plan.local_row(t, g);
    if (run_len > 0 && l == run_local + run_len && i == run_index + run_len) {
      ++run_len;
      continue;
    }
    if (run_len > 0) LEANEMB_RETURN_IF_ERROR(fn(run_local, run_len, run_index));
    run_local = l;
    run_len = 1;
    run_index = i;
  }
  if (run_len > 0) LEANEMB_RETURN_IF_ERROR(fn(run_local, run_len, run_index));
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::Impl::gather_raw(int t, int64_t begin, int64_t count, std::span<uint8_t> out) const {
  const size_t stride = local->layout(t).stride_bytes;
  // Every rank contributes its own rows and zeros elsewhere; an integer sum of the bytes (as
  // 64-bit words: exact) gives every rank every row.
  std::vector<int64_t> words((static_cast<size_t>(count) * stride + 7) / 8, 0);
  auto* bytes = reinterpret_cast<uint8_t*>(words.data());
  const Status mine = for_owned_runs(t, begin, count, [&](int64_t l, int64_t n, int64_t i) {
    return local->read_raw_rows(t, l, n, std::span<uint8_t>(bytes + static_cast<size_t>(i) * stride, static_cast<size_t>(n) * stride));
  });
  LEANEMB_RETURN_IF_ERROR(dist::agree(*comm, mine, "dist: read rows"));
  LEANEMB_RETURN_IF_ERROR(comm->all_reduce(std::span<int64_t>(words), ReduceOp::kSum));
  if (!out.empty()) std::memcpy(out.data(), bytes, out.size());
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::read_raw_rows(int table, int64_t row_begin, int64_t count, std::span<uint8_t> out) const {
  const Impl& im = *impl_;
  const Status ok = im.check_rows(table, row_begin, count, out.size(), table < 0 || table >= im.num_tables ? 1 : layout(table).stride_bytes, "read_raw_rows");
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, ok, "dist: read_raw_rows"));
  return im.gather_raw(table, row_begin, count, out);
}

Status ShardedEmbeddingCollection::read_rows(int table, int64_t row_begin, int64_t count, std::span<float> out) const {
  const Impl& im = *impl_;
  const Status ok = im.check_rows(table, row_begin, count, out.size(), table < 0 || table >= im.num_tables ? 1 : static_cast<size_t>(layout(table).dim), "read_rows");
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, ok, "dist: read_rows"));
  const RowLayout& l = layout(table);
  std::vector<uint8_t> raw(static_cast<size_t>(count) * l.stride_bytes);
  LEANEMB_RETURN_IF_ERROR(im.gather_raw(table, row_begin, count, raw));
  for (int64_t r = 0; r < count; ++r) kernels::ref_load_weights(l, raw.data() + static_cast<size_t>(r) * l.stride_bytes, out.data() + r * l.dim);
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::read_state(int table, int64_t row_begin, int64_t count, std::span<float> out) const {
  const Impl& im = *impl_;
  const bool known = table >= 0 && table < im.num_tables;
  const int64_t per_row = known ? state_floats_per_row(table) : 1;
  const Status ok = im.check_rows(table, row_begin, count, out.size(), static_cast<size_t>(per_row), "read_state");
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, ok, "dist: read_state"));
  const RowLayout& l = layout(table);
  std::vector<uint8_t> raw(static_cast<size_t>(count) * l.stride_bytes);
  LEANEMB_RETURN_IF_ERROR(im.gather_raw(table, row_begin, count, raw));
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* row = raw.data() + static_cast<size_t>(r) * l.stride_bytes;
    float* o = out.data() + r * per_row;
    for (int k = 0; k < l.num_elem_states; ++k) kernels::ref_load_elem_state(l, row, k, o + k * l.dim);
    if (l.has_rowwise) o[l.num_elem_states * l.dim] = kernels::ref_load_rowwise_state(l, row);
  }
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in) {
  Impl& im = *impl_;
  Status st = im.check_rows(table, row_begin, count, in.size(), table < 0 || table >= im.num_tables ? 1 : layout(table).stride_bytes, "write_raw_rows");
  if (st.ok()) {
    const size_t stride = layout(table).stride_bytes;
    st = im.for_owned_runs(table, row_begin, count, [&](int64_t l, int64_t n, int64_t i) {
      return im.local->write_raw_rows(table, l, n, in.subspan(static_cast<size_t>(i) * stride, static_cast<size_t>(n) * stride));
    });
  }
  return dist::agree(*im.comm, st, "dist: write_raw_rows");
}

Status ShardedEmbeddingCollection::write_rows(int table, int64_t row_begin, int64_t count, std::span<const float> in) {
  Impl& im = *impl_;
  Status st = im.check_rows(table, row_begin, count, in.size(), table < 0 || table >= im.num_tables ? 1 : static_cast<size_t>(layout(table).dim), "write_rows");
  if (st.ok()) {
    const auto dim = static_cast<size_t>(layout(table).dim);
    st = im.for_owned_runs(table, row_begin, count, [&](int64_t l, int64_t n, int64_t i) {
      return im.local->write_rows(table, l, n, in.subspan(static_cast<size_t>(i) * dim, static_cast<size_t>(n) * dim));
    });
  }
  return dist::agree(*im.comm, st, "dist: write_rows");
}

Result<int64_t> ShardedEmbeddingCollection::dynamic_row(int table, int64_t raw_id) const {
  const Impl& im = *impl_;
  Status st = table < 0 || table >= im.num_tables ? out_of_range("dynamic_row: unknown table " + std::to_string(table))
              : im.partitions[static_cast<size_t>(table)] == 0
                  ? failed_precondition("dynamic_row: table '" + options().tables[static_cast<size_t>(table)].name + "' is not dynamic")
                  : Status::ok_status();
  int64_t row = -1;
  if (st.ok() && im.owner(table, raw_id) == im.comm->rank()) {
    auto l = im.local->dynamic_row(table, raw_id);
    if (!l.ok()) st = l.status();
    else if (l.value() >= 0) row = im.plan.global_row(table, im.comm->rank(), l.value());
  }
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, st, "dist: dynamic_row"));
  std::vector<int64_t> v = {row};
  LEANEMB_RETURN_IF_ERROR(im.comm->all_reduce(std::span<int64_t>(v), ReduceOp::kMax));
  return v[0];
}

}  // namespace leanemb::dist
