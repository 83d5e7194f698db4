// ShardedEmbeddingCollection: construction, accessors, the checks and agreement every call
// makes, and the reservation of the per-call buffers. The invariants and wire formats of the
// routing are in sharded_collection_internal.h; forward, backward_update and row access live in
// sharded_collection_forward.cc, _backward.cc and _rows.cc.
#include <algorithm>
#include <cstdint>
#include <string>

#include "dist/comm_sizes.h"
#include "dist/sharded_collection.h"
#include "dist/sharded_collection_internal.h"

namespace leanemb::dist {

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
  LEANEMB_RETURN_IF_ERROR(check_dtype(DTypeUse::kPayload, options.forward_payload));
  LEANEMB_RETURN_IF_ERROR(check_dtype(DTypeUse::kPayload, options.backward_payload));
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

}  // namespace leanemb::dist
