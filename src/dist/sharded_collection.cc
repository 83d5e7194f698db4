// ShardedEmbeddingCollection: routing of ids, rows and gradients between ranks.
//
// Invariants that make the results equal to a single process (see the header):
// - A requester lists its ids per owner in (feature, bag, position) order; an owner serves the
//   requests of ranks 0..P-1 in rank order and answers each in its request order. So the
//   requester can take the rows of each owner with one cursor per (owner, feature).
// - The local collection has the global features first, all pooled features turned into kSum
//   (per-id weights carry the exact scales of the single-process backward), then one kNone
//   "rows" feature per table that the forward uses to read rows. Its pooled_dim and
//   pooled_offset() therefore equal the global ones.
// - The backward's local batch lists, per feature, the bags of rank 0, then rank 1, ..., each
//   with its owned ids in their original order; the local dedup is a stable sort by row, so
//   every row's contributions are summed in the order of the concatenated global batch.
//
// Wire formats (little-endian host bytes; all ranks run the same build):
//   forward request  to owner o:  int64 [F] ids per feature, [n] local rows (uint32 when every
//                                 rank's tables have < 2^32 rows, else int64: id_bytes)
//   forward reply    to requester: per feature, its rows encoded in forward_payload
//   backward         to owner o:  int64 [F] bags per feature, int64 [F] scaled flags,
//                                 uint32 [M] ids per bag, [N] local rows (id_bytes), fp32
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

#include "memory/accounted_resource.h"
#include "table/collection_impl.h"  // init_row: the single-process initial bytes of a row

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
  ShardPlan plan = std::move(ShardPlan::create({}).value());
  std::unique_ptr<EmbeddingCollection> local;
  int num_features = 0;                // F
  int num_tables = 0;                  // T
  std::vector<int> feature_table;      // [F]
  std::vector<int64_t> feature_dim;    // [F]
  std::vector<PoolingMode> pooling;    // [F] global pooling
  ShardedStepStats stats;
  ShardedTotals totals;
  size_t id_bytes = 8;  // local rows on the wire: 4 when every rank's tables have < 2^32 rows

  Status validate(const SparseBatch& batch, size_t pooled_size, const char* what) const;
  // Every rank learns which ranks failed; returns this rank's own error, an error naming the
  // failed ranks, or OK. extra: flags all-reduced along (max) and returned.
  Status agree(const Status& mine, const char* what, std::vector<int64_t>* extra = nullptr);
  Status init_rows();
  uint64_t bytes_sent() const { return comm->stats().bytes_sent; }

  // forward: what this rank asks each owner for.
  struct Requests {
    explicit Requests(std::pmr::memory_resource* r) : per_owner(r), owner_of(r) {}
    PVec<PVec<int64_t>> per_owner;  // [P]: [F] counts, then local rows
    PVec<PVec<int>> owner_of;       // [F][nnz_f] owner of each id
  };
  // forward: what this rank serves.
  struct Served {
    explicit Served(std::pmr::memory_resource* r) : table_rows(r) {}
    std::vector<std::vector<int64_t>> counts;    // [P][F] rows rank q asked for, per feature
    PVec<PVec<float>> table_rows;                // [T][n_t * dim] rows read, requesters in rank order
    int64_t rows = 0;
  };
  // backward: the gradients between one requester and one owner.
  struct BagGradients {
    explicit BagGradients(std::pmr::memory_resource* r) : counts(r), rows(r), scales(r), grads(r) {}
    std::vector<int64_t> bags;              // [F] bags per feature
    std::vector<int64_t> scaled;            // [F] 1: the feature's ids carry scales (kMean, weights)
    PVec<int64_t> counts;                   // [M] ids per bag
    PVec<int64_t> rows;                     // [N] local rows
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
    PVec<PVec<int64_t>> table_ids;            // serve: [T] rows asked for
    PVec<PVec<float>> owner_rows;             // pool: [P] one feature's decoded rows
    std::vector<BagGradients> out_bags, in_bags;  // backward: [P] sent, received
    PVec<PVec<int64_t>> ids, offsets;         // assemble_local: [F]
    PVec<PVec<float>> weights;                // assemble_local: [F]
    PVec<float> grads;                        // assemble_local: [bags, pooled_dim]
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

  void route(const SparseBatch& batch, bool valid, Requests* r) const;
  Status serve(std::span<const uint8_t> recv, const std::vector<int64_t>& recv_counts, Served* out);
  Status encode_replies(const Served& served, PVec<uint8_t>* send, std::vector<int64_t>* send_counts) const;
  std::vector<int64_t> reply_counts(const Requests& req) const;  // [P] bytes expected from each owner
  Status pool(const SparseBatch& batch, const Requests& req, std::span<const uint8_t> replies,
              const std::vector<int64_t>& counts, std::span<float> pooled_out) const;
  void split_gradients(const SparseBatch& batch, std::span<const float> grad_pooled, bool valid, std::vector<BagGradients>* out) const;
  Status serialize(const std::vector<BagGradients>& out, PVec<uint8_t>* send, std::vector<int64_t>* send_counts) const;
  Status parse_gradients(std::span<const uint8_t> recv, const std::vector<int64_t>& counts, std::vector<BagGradients>* in) const;
  // Builds the owner's local batch and its gradients (decoded from the wire straight into
  // scratch->grads) from the received bags; flags non-finite decoded gradients.
  Status assemble_local(const std::vector<BagGradients>& in, bool check_finite, int64_t* nonfinite);
};

Status ShardedEmbeddingCollection::Impl::validate(const SparseBatch& batch, size_t pooled_size, const char* what) const {
  const std::string where = std::string("dist: ") + what + ": ";
  if (batch.batch_size < 0) return invalid_argument(where + "batch_size " + std::to_string(batch.batch_size) + " < 0");
  if (static_cast<int>(batch.features.size()) != num_features) {
    return invalid_argument(where + "batch has " + std::to_string(batch.features.size()) + " features, the collection has " +
                            std::to_string(num_features));
  }
  const int64_t b_size = batch.batch_size;
  if (pooled_size != static_cast<size_t>(b_size * local->pooled_dim())) {
    return invalid_argument(where + "pooled buffer has " + std::to_string(pooled_size) +
                            " floats, expected batch_size x pooled_dim = " + std::to_string(b_size * local->pooled_dim()));
  }
  for (int f = 0; f < num_features; ++f) {
    const FeatureInput& in = batch.features[static_cast<size_t>(f)];
    const std::string fw = where + "feature '" + options.collection.features[static_cast<size_t>(f)].name + "' (index " +
                           std::to_string(f) + ")";
    const auto nnz = static_cast<int64_t>(in.ids.size());
    if (static_cast<int64_t>(in.offsets.size()) != b_size + 1 || in.offsets[0] != 0 || in.offsets[static_cast<size_t>(b_size)] != nnz) {
      return invalid_argument(fw + ": offsets must have batch_size + 1 entries from 0 to the number of ids " + std::to_string(nnz));
    }
    for (int64_t b = 0; b < b_size; ++b) {
      if (in.offsets[static_cast<size_t>(b + 1)] < in.offsets[static_cast<size_t>(b)]) {
        return invalid_argument(fw + ": offsets not monotone at bag " + std::to_string(b));
      }
    }
    if (!in.weights.empty() && in.weights.size() != in.ids.size()) {
      return invalid_argument(fw + ": " + std::to_string(in.weights.size()) + " per-id weights for " + std::to_string(nnz) + " ids");
    }
    const int t = feature_table[static_cast<size_t>(f)];
    for (int64_t b = 0; b < b_size; ++b) {
      for (int64_t i = in.offsets[static_cast<size_t>(b)]; i < in.offsets[static_cast<size_t>(b + 1)]; ++i) {
        const int64_t id = in.ids[static_cast<size_t>(i)];
        if (id < 0 || id >= plan.num_rows(t)) {
          return out_of_range(fw + ": bag " + std::to_string(b) + ", position " + std::to_string(i) + ": id " +
                              std::to_string(id) + " is outside [0, " + std::to_string(plan.num_rows(t)) + ")");
        }
        if (!in.weights.empty() && !std::isfinite(in.weights[static_cast<size_t>(i)])) {
          return invalid_argument(fw + ": bag " + std::to_string(b) + ", position " + std::to_string(i) +
                                  ": per-id weight is not finite");
        }
      }
    }
  }
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
  std::string failed;
  for (size_t r = 0; r < p; ++r) {
    if (flags[r]) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (failed.empty()) return Status::ok_status();
  return invalid_argument(std::string("dist: ") + what + ": rank(s) " + failed + " failed (see their errors); nothing changed here");
}

Status ShardedEmbeddingCollection::Impl::init_rows() {
  const int rank = comm->rank();
  constexpr int64_t kChunkRows = 4096;
  for (int t = 0; t < num_tables; ++t) {
    const TableOptions& global = options.collection.tables[static_cast<size_t>(t)];
    const RowLayout& layout = local->layout(t);
    const int64_t n = plan.local_num_rows(t, rank);
    std::vector<float> tmp(static_cast<size_t>(global.dim));
    std::vector<uint8_t> fat;
    for (int64_t l0 = 0; l0 < n; l0 += kChunkRows) {
      const int64_t count = std::min(kChunkRows, n - l0);
      fat.assign(static_cast<size_t>(count) * layout.stride_bytes, 0);
      for (int64_t i = 0; i < count; ++i) {
        init_row(global, layout, options.collection.seed, static_cast<uint32_t>(t), plan.global_row(t, rank, l0 + i),
                 tmp.data(), fat.data() + static_cast<size_t>(i) * layout.stride_bytes);
      }
      LEANEMB_RETURN_IF_ERROR(local->write_raw_rows(t, l0, count, fat));
    }
  }
  return Status::ok_status();
}

Result<std::unique_ptr<ShardedEmbeddingCollection>> ShardedEmbeddingCollection::create(
    const ShardedCollectionOptions& options, Communicator* comm, Allocator* allocator, Allocator* comm_allocator) {
  if (comm == nullptr) return invalid_argument("dist: ShardedEmbeddingCollection needs a communicator");
  const CollectionOptions& co = options.collection;
  if (co.bounds_check != BoundsCheckMode::kError) {
    return unimplemented("dist: sharded collections support BoundsCheckMode::kError only");
  }
  for (const TableOptions& t : co.tables) {
    if (t.cache.enabled() || t.dynamic.enabled) {
      return unimplemented("dist: table '" + t.name + "': row caches and dynamic tables are not supported when sharded yet");
    }
  }
  ShardPlanOptions po;
  po.world_size = comm->size();
  po.table_assign = options.table_assign;
  for (const TableOptions& t : co.tables) po.tables.push_back({t.num_rows, std::max<int64_t>(t.dim, 1), options.sharding, -1});
  LEANEMB_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::create(po));

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->comm = comm;
  impl->plan = std::move(plan);
  impl->num_features = static_cast<int>(co.features.size());
  impl->num_tables = static_cast<int>(co.tables.size());
  CollectionOptions lo = co;
  for (int t = 0; t < impl->num_tables; ++t) {
    TableOptions& to = lo.tables[static_cast<size_t>(t)];
    to.num_rows = std::max<int64_t>(1, impl->plan.local_num_rows(t, comm->rank()));
    to.init = InitOptions{InitKind::kZeros};  // rows are written by init_rows()
  }
  for (size_t f = 0; f < co.features.size(); ++f) {
    const FeatureOptions& fo = co.features[f];
    if (fo.table < 0 || fo.table >= impl->num_tables) {
      return invalid_argument("dist: feature '" + fo.name + "' refers to table " + std::to_string(fo.table));
    }
    if (fo.pooling == PoolingMode::kNone) {
      return unimplemented("dist: feature '" + fo.name + "': sequence (pooling none) features are not supported when sharded yet");
    }
    impl->feature_table.push_back(fo.table);
    impl->feature_dim.push_back(co.tables[static_cast<size_t>(fo.table)].dim);
    impl->pooling.push_back(fo.pooling);
    lo.features[f].pooling = PoolingMode::kSum;
  }
  for (int t = 0; t < impl->num_tables; ++t) {
    lo.features.push_back(FeatureOptions{"__rows_of_" + co.tables[static_cast<size_t>(t)].name, t, PoolingMode::kNone});
  }
  LEANEMB_ASSIGN_OR_RETURN(impl->local, EmbeddingCollection::create(lo, allocator));
  Allocator* comm_alloc = comm_allocator ? comm_allocator : (allocator ? allocator : default_host_allocator());
  impl->resource = std::make_unique<AccountedResource>(comm_alloc, Category::kCommBuffers);
  impl->id_bytes = options.wide_ids ? 8 : 4;
  for (int t = 0; t < impl->num_tables; ++t)
    for (int r = 0; r < comm->size(); ++r)
      if (impl->plan.local_num_rows(t, r) > int64_t{UINT32_MAX}) impl->id_bytes = 8;
  impl->scratch = std::make_unique<Impl::Scratch>(impl->resource.get());
  LEANEMB_RETURN_IF_ERROR(impl->init_rows());
  return std::unique_ptr<ShardedEmbeddingCollection>(new ShardedEmbeddingCollection(std::move(impl)));
}

ShardedEmbeddingCollection::ShardedEmbeddingCollection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedEmbeddingCollection::~ShardedEmbeddingCollection() = default;

const ShardPlan& ShardedEmbeddingCollection::plan() const { return impl_->plan; }
Communicator& ShardedEmbeddingCollection::communicator() const { return *impl_->comm; }
EmbeddingCollection& ShardedEmbeddingCollection::local() { return *impl_->local; }
const EmbeddingCollection& ShardedEmbeddingCollection::local() const { return *impl_->local; }
int64_t ShardedEmbeddingCollection::pooled_dim() const { return impl_->local->pooled_dim(); }
int64_t ShardedEmbeddingCollection::pooled_offset(int feature) const { return impl_->local->pooled_offset(feature); }
int64_t ShardedEmbeddingCollection::step() const { return impl_->local->step(); }
const ShardedStepStats& ShardedEmbeddingCollection::last_step_stats() const { return impl_->stats; }
const ShardedTotals& ShardedEmbeddingCollection::totals() const { return impl_->totals; }

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
      const int o = plan.owner(t, id);
      r.per_owner[static_cast<size_t>(o)].push_back(plan.local_row(t, id));
      ++r.per_owner[static_cast<size_t>(o)][f];
      r.owner_of[f].push_back(o);
    }
  }
}

Status ShardedEmbeddingCollection::Impl::serve(std::span<const uint8_t> recv, const std::vector<int64_t>& recv_counts,
                                               Served* out) {
  const auto p = static_cast<size_t>(comm->size());
  const auto nf = static_cast<size_t>(num_features);
  out->counts.resize(p);
  auto& table_ids = scratch->table_ids;
  table_ids.resize(static_cast<size_t>(num_tables));
  for (auto& v : table_ids) v.clear();
  const std::vector<int64_t> disp = displacements(recv_counts);
  for (size_t q = 0; q < p; ++q) {
    Reader rd(recv.subspan(static_cast<size_t>(disp[q]), static_cast<size_t>(recv_counts[q])));
    bool ok = rd.take(nf, &out->counts[q]);
    for (size_t f = 0; f < nf && ok; ++f) {
      std::span<const uint8_t> raw;
      const auto n = static_cast<size_t>(out->counts[q][f]);
      ok = out->counts[q][f] >= 0 && rd.take_raw(n * id_bytes, &raw);
      if (ok) widen_uint(raw, n, id_bytes, &table_ids[static_cast<size_t>(feature_table[f])]);
    }
    if (!ok || !rd.done()) return internal_error("dist: forward: malformed request from rank " + std::to_string(q));
  }
  // One sequence lookup per table ("rows" features); the pooled features get empty bags.
  SparseBatch lb;
  lb.batch_size = 1;
  const std::vector<int64_t> empty_offsets = {0, 0};
  std::vector<std::vector<int64_t>> offsets(static_cast<size_t>(num_tables));
  std::vector<std::span<float>> seq_out;
  for (size_t f = 0; f < nf; ++f) lb.features.push_back({{}, empty_offsets, {}});
  out->table_rows.resize(static_cast<size_t>(num_tables));
  out->rows = 0;
  for (int t = 0; t < num_tables; ++t) {
    const auto ts = static_cast<size_t>(t);
    offsets[ts] = {0, static_cast<int64_t>(table_ids[ts].size())};
    lb.features.push_back({table_ids[ts], offsets[ts], {}});
    out->table_rows[ts].resize(table_ids[ts].size() * static_cast<size_t>(local->layout(t).dim));
    seq_out.emplace_back(out->table_rows[ts]);
    out->rows += static_cast<int64_t>(table_ids[ts].size());
  }
  std::vector<float> unused(static_cast<size_t>(local->pooled_dim()));
  return local->forward(lb, unused, seq_out);
}

Status ShardedEmbeddingCollection::Impl::encode_replies(const Served& served, PVec<uint8_t>* send,
                                                        std::vector<int64_t>* send_counts) const {
  const PayloadDType pd = options.forward_payload;
  send->clear();
  std::vector<size_t> cursor(static_cast<size_t>(num_tables), 0);  // rows taken, per table
  for (size_t q = 0; q < served.counts.size(); ++q) {
    const size_t before = send->size();
    for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
      const auto t = static_cast<size_t>(feature_table[f]);
      const int64_t dim = feature_dim[f];
      const auto n = static_cast<size_t>(served.counts[q][f]);
      const size_t at = send->size();
      send->resize(at + n * payload_bytes_per_row(pd, dim));
      const auto rows = std::span<const float>(served.table_rows[t]).subspan(cursor[t] * static_cast<size_t>(dim), n * static_cast<size_t>(dim));
      LEANEMB_RETURN_IF_ERROR(encode_rows(pd, dim, rows, std::span<uint8_t>(*send).subspan(at)));
      cursor[t] += n;
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
                                              const std::vector<int64_t>& counts, std::span<float> pooled_out) const {
  const PayloadDType pd = options.forward_payload;
  const size_t p = req.per_owner.size();
  const std::vector<int64_t> disp = displacements(counts);
  std::vector<size_t> block_at(disp.begin(), disp.end() - 1);
  const int64_t ldo = local->pooled_dim();
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
    const float* w = in.weights.empty() ? nullptr : in.weights.data();
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      float* out = pooled_out.data() + b * ldo + local->pooled_offset(static_cast<int>(f));
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
Status ShardedEmbeddingCollection::forward(const SparseBatch& batch, std::span<float> pooled_out) try {
  Impl& im = *impl_;
  Communicator& comm = *im.comm;
  const auto p = static_cast<size_t>(comm.size());
  const uint64_t sent0 = im.bytes_sent();
  const Status valid = im.validate(batch, pooled_out.size(), "forward");

  // 1. Requests: per owner, [F] counts then the local rows, in (feature, bag, position) order.
  Impl::Scratch& sc = *im.scratch;
  Impl::Requests& req = sc.req;
  im.route(batch, valid.ok(), &req);
  auto [send, recv, send_counts, recv_counts] = std::tie(sc.send, sc.recv, sc.send_counts, sc.recv_counts);  // references
  sc.begin_send(p);
  for (size_t o = 0; o < p; ++o) {
    const size_t before = send.size();
    const std::span<const int64_t> all(req.per_owner[o]);
    append_bytes(&send, all.first(static_cast<size_t>(im.num_features)));  // [F] counts
    append_uint(&send, all.subspan(static_cast<size_t>(im.num_features)), im.id_bytes);
    send_counts[o] = static_cast<int64_t>(send.size() - before);
  }
  LEANEMB_RETURN_IF_ERROR(comm.all_to_all_v_alloc(send, send_counts, &recv, &recv_counts));

  // 2. Serve the requests of ranks 0..P-1; every rank learns whether every rank succeeded.
  Impl::Served& served = sc.served;
  const Status lookup = im.serve(recv, recv_counts, &served);
  LEANEMB_RETURN_IF_ERROR(im.agree(valid.ok() ? lookup : valid, "forward"));

  // 3. Replies: to each requester, per feature, its rows in request order; then pool.
  LEANEMB_RETURN_IF_ERROR(im.encode_replies(served, &send, &send_counts));
  uint64_t payload = 0;  // the replies are encoded rows only
  for (size_t q = 0; q < p; ++q)
    if (static_cast<int>(q) != comm.rank()) payload += static_cast<uint64_t>(send_counts[q]);
  const std::vector<int64_t> counts = im.reply_counts(req);
  recv.resize(static_cast<size_t>(displacements(counts)[p]));
  LEANEMB_RETURN_IF_ERROR(comm.all_to_all_v(send, send_counts, recv, counts));
  LEANEMB_RETURN_IF_ERROR(im.pool(batch, req, recv, counts, pooled_out));
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

// ---- backward ------------------------------------------------------------------------------

void ShardedEmbeddingCollection::Impl::split_gradients(const SparseBatch& batch, std::span<const float> grad_pooled,
                                                       bool valid, std::vector<BagGradients>* outp) const {
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
  const int64_t ldo = local->pooled_dim();
  std::vector<int64_t> in_bag(p, 0);
  std::vector<size_t> touched;
  for (size_t f = 0; f < nf; ++f) {
    const FeatureInput& in = batch.features[f];
    const int t = feature_table[f];
    const auto d = static_cast<size_t>(feature_dim[f]);
    // Scales other than 1 exist only with per-id weights or mean pooling.
    const int64_t scaled = pooling[f] == PoolingMode::kMean || !in.weights.empty() ? 1 : 0;
    for (auto& o : out) o.scaled[f] = scaled;
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      const int64_t lo = in.offsets[static_cast<size_t>(b)], hi = in.offsets[static_cast<size_t>(b + 1)];
      // The single-process backward's scale of each contribution, bit for bit.
      const float inv_len = pooling[f] == PoolingMode::kMean ? 1.0f / static_cast<float>(hi - lo) : 1.0f;
      touched.clear();
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t id = in.ids[static_cast<size_t>(i)];
        const auto o = static_cast<size_t>(plan.owner(t, id));
        const float w = in.weights.empty() ? 1.0f : in.weights[static_cast<size_t>(i)];
        out[o].rows.push_back(plan.local_row(t, id));
        if (scaled) out[o].scales.push_back(pooling[f] == PoolingMode::kMean ? w * inv_len : w);
        if (in_bag[o]++ == 0) touched.push_back(o);
      }
      const float* g = grad_pooled.data() + b * ldo + local->pooled_offset(static_cast<int>(f));
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

Result<UpdateReport> ShardedEmbeddingCollection::backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                                                 const UpdateOptions& update) try {
  Impl& im = *impl_;
  Communicator& comm = *im.comm;
  const auto p = static_cast<size_t>(comm.size());
  const uint64_t sent0 = im.bytes_sent();
  Status valid = im.validate(batch, grad_pooled.size(), "backward_update");
  if (valid.ok() && !std::isfinite(update.grad_multiplier)) valid = invalid_argument("grad_multiplier is not finite");
  int64_t nonfinite = valid.ok() && update.check_finite && !all_finite(grad_pooled) ? 1 : 0;

  // 1. Per owner: bags per feature, ids per bag, local rows, scales, bag gradients.
  Impl::Scratch& sc = *im.scratch;
  auto [send, recv, send_counts, recv_counts] = std::tie(sc.send, sc.recv, sc.send_counts, sc.recv_counts);  // references
  sc.begin_send(p);
  im.split_gradients(batch, grad_pooled, valid.ok(), &sc.out_bags);
  uint64_t payload = 0;  // the encoded gradients
  for (size_t o = 0; o < p; ++o) {
    if (static_cast<int>(o) == comm.rank()) continue;
    for (size_t f = 0; f < sc.out_bags[o].grads.size(); ++f)
      payload += static_cast<uint64_t>(sc.out_bags[o].bags[f]) * payload_bytes_per_row(im.options.backward_payload, im.feature_dim[f]);
  }
  LEANEMB_RETURN_IF_ERROR(im.serialize(sc.out_bags, &send, &send_counts));
  LEANEMB_RETURN_IF_ERROR(comm.all_to_all_v_alloc(send, send_counts, &recv, &recv_counts));

  // 2. Parse and decode; found-inf (given and decoded gradients) and errors agreed by all ranks.
  std::vector<Impl::BagGradients>& in = sc.in_bags;
  Status parsed = im.parse_gradients(recv, recv_counts, &in);
  if (parsed.ok() && valid.ok()) parsed = im.assemble_local(in, update.check_finite, &nonfinite);
  std::vector<int64_t> extra = {nonfinite};
  LEANEMB_RETURN_IF_ERROR(im.agree(valid.ok() ? parsed : valid, "backward_update", &extra));
  UpdateReport report;
  if (extra[0]) {
    report.skipped_nonfinite = true;  // on every rank: no row, no state, no step changes
  } else {
    // 3. The owner's update over the received bags, requesters in rank order.
    const std::vector<std::span<const float>> no_seq_grads(static_cast<size_t>(im.num_tables));
    LEANEMB_ASSIGN_OR_RETURN(report, im.local->backward_update(sc.local_batch, sc.grads, no_seq_grads, update));
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

}  // namespace leanemb::dist
