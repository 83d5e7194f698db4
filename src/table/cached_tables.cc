// EmbeddingCollection's tiered tables: creating a table's row store and cache, remapping a step's
// ids to cache slots, prefetch, flush and cache statistics (docs/tiered.md).
#include <algorithm>
#include <cstring>

#include "table/collection_impl.h"
#include "tiered/sizes.h"

namespace leanemb {

Status EmbeddingCollection::Impl::create_cache(int t) {
  TableState& ts = tables[t];
  const TableOptions& to = options.tables[t];
  const TableCacheOptions& co = to.cache;
  auto fail = [&](const Status& s) { return Status(s.code(), "table '" + to.name + "' cache: " + s.message()); };
  if (co.fraction < 0.0 || co.fraction > 1.0 || co.capacity_rows < 0 || co.capacity_rows > to.num_rows)
    return invalid_argument("table '" + to.name + "' cache: fraction must be in [0, 1] and capacity_rows in [0, " +
                            std::to_string(to.num_rows) + "]");
  if (co.prefetch_nice < -20 || co.prefetch_nice > 19)
    return invalid_argument("table '" + to.name + "' cache: prefetch_nice must be in [-20, 19], got " +
                            std::to_string(co.prefetch_nice));
  // A cached table's weights and optimizer state live together in its store (the store is the
  // offload), whatever the placement says for the weights and optimizer_state categories.
  tiered::RowStoreOptions so;
  so.kind = co.store;
  so.num_rows = to.num_rows;
  so.row_bytes = ts.layout.stride_bytes;
  so.path = co.store_path;
  so.direct_io = co.direct_io;
  if (so.kind == StoreKind::kFile && so.path.empty())
    return invalid_argument("table '" + to.name + "' cache: the file store needs store_path");
  Allocator* host = memory ? memory->host() : alloc;
  auto store = tiered::make_row_store(so, host);
  if (!store.ok()) return fail(store.status());
  tiered::RowCacheOptions rc;
  rc.capacity_rows = co.capacity_rows > 0 ? co.capacity_rows : tiered::cache_capacity_rows(to.num_rows, co.fraction);
  rc.policy = co.policy;
  rc.num_threads = num_threads;
  rc.prefetch_nice = co.prefetch_nice;
  const uint64_t seed = options.seed;
  const RowLayout layout = ts.layout;
  const int64_t key_stride = ts.key_stride, key_offset = ts.key_offset;
  const kernels::KernelBackend* be = backend;
  tiered::RowInitFn init = [to, layout, seed, t, key_stride, key_offset, be](int64_t row, uint8_t* fat) {
    if (to.dynamic.enabled) {  // as a resident dynamic table: zeros until an id is admitted
      std::memset(fat, 0, layout.stride_bytes);
      return;
    }
    thread_local std::vector<float> tmp;  // called for many rows in a row: no allocation each
    tmp.resize(static_cast<size_t>(layout.dim));
    init_row(to, layout, seed, static_cast<uint32_t>(t), row * key_stride + key_offset, tmp.data(), fat, *be);
  };
  Allocator* device = memory ? memory->allocator_for(Category::kRowCache) : alloc;
  Allocator* staging = memory ? memory->allocator_for(Category::kIoBuffers) : alloc;
  auto cache = tiered::RowCache::create(rc, ts.layout, std::move(store).value(), std::move(init), device, staging, memory);
  if (!cache.ok()) return fail(cache.status());
  ts.cache = std::move(cache).value();
  has_cache = true;
  return Status();
}

void EmbeddingCollection::Impl::release_pins(tiered::PinSet set) {
  for (TableState& ts : tables)
    if (ts.cache) ts.cache->release(set);
  // The forward's slots are only valid while its rows are pinned.
  if (set == tiered::PinSet::kStep) std::fill(step_mapped.begin(), step_mapped.end(), size_t{0});
}

namespace {

// True if table t's ids in `b` are exactly `rows[0..n)` (concatenated in feature order).
bool same_ids(const CollectionOptions& o, const SparseBatch& b, int t, const int64_t* rows, size_t n) {
  size_t k = 0;
  for (size_t f = 0; f < o.features.size(); ++f) {
    if (o.features[f].table != t) continue;
    const auto ids = b.features[f].ids;
    if (k + ids.size() > n || (!ids.empty() && std::memcmp(rows + k, ids.data(), ids.size() * 8) != 0)) return false;
    k += ids.size();
  }
  return k == n;
}

}  // namespace

Status EmbeddingCollection::Impl::remap(const SparseBatch& b, SparseBatch* out, bool touch) {
  *out = b;
  if (!has_cache) return Status();
  step_mapped.resize(tables.size(), 0);
  if (touch) took_prefetch = false;
  for (size_t t = 0; t < tables.size(); ++t) {
    TableState& ts = tables[t];
    if (!ts.cache) continue;
    const int ti = static_cast<int>(t);
    const size_t n = table_nnz(options, b, ti);
    if (n == 0) continue;
    int64_t* slots = nullptr;
    if (!touch && step_mapped[t] == n) {
      // The update of the batch the forward just mapped: its rows are still pinned in the same
      // slots, so the forward's mapping is reused (after checking the ids are the same).
      auto rows_p = remap_buffers.get(2 * t, n * 8, Category::kWorkspace, alloc);
      auto slots_p = remap_buffers.get(2 * t + 1, n * 8, Category::kWorkspace, alloc);
      if (rows_p.ok() && slots_p.ok() && same_ids(options, b, ti, static_cast<int64_t*>(rows_p.value()), n))
        slots = static_cast<int64_t*>(slots_p.value());
    }
    if (slots == nullptr) {
      LEANEMB_ASSIGN_OR_RETURN(void* rows_p, remap_buffers.get(2 * t, n * 8, Category::kWorkspace, alloc));
      LEANEMB_ASSIGN_OR_RETURN(void* slots_p, remap_buffers.get(2 * t + 1, n * 8, Category::kWorkspace, alloc));
      int64_t* rows = static_cast<int64_t*>(rows_p);
      slots = static_cast<int64_t*>(slots_p);
      gather_table_ids(options, b, ti, rows);
      step_mapped[t] = 0;
      // A forward right after prefetch() of this batch takes the prefetch's mapping as it is.
      Result<bool> taken = touch ? ts.cache->take_prefetched(std::span<const int64_t>(rows, n), slots) : false;
      Status st = taken.status();
      if (st.ok() && taken.value()) took_prefetch = true;
      if (st.ok() && !taken.value())
        st = ts.cache->acquire(std::span<const int64_t>(rows, n), slots, tiered::PinSet::kStep, touch);
      if (!st.ok()) return Status(st.code(), "table '" + options.tables[t].name + "': " + st.message());
      step_mapped[t] = n;
    }
    size_t k = 0;
    for (size_t f = 0; f < options.features.size(); ++f) {
      if (options.features[f].table != ti) continue;
      const size_t m = b.features[f].ids.size();
      out->features[f].ids = std::span<const int64_t>(slots + k, m);
      k += m;
    }
  }
  return Status();
}

Status EmbeddingCollection::prefetch(const SparseBatch& next) {
  Impl& im = *impl_;
  if (!im.has_cache) return Status();
  CheckedBatch cb;
  LEANEMB_RETURN_IF_ERROR(im.check(next, &cb));
  // Called before the forward that takes the outstanding prefetch's rows: this one waits for
  // that forward (its rows stay in the buffer), so that each fetch overlaps a whole step.
  const bool defer = im.prefetch_outstanding;
  im.prefetch_pending.assign(im.tables.size(), 0);
  for (int t = 0; t < num_tables(); ++t) {
    TableState& ts = im.tables[t];
    if (!ts.cache) continue;
    const size_t n = table_nnz(im.options, *cb.batch, t);
    if (n == 0) continue;
    // The ids are copied by start_prefetch (into the cache's own buffer); the workspace buffer
    // avoids a heap allocation per step and holds a deferred prefetch's rows.
    LEANEMB_ASSIGN_OR_RETURN(void* rows_p, im.remap_buffers.get(2 * im.tables.size() + static_cast<size_t>(t), n * 8,
                                                                Category::kWorkspace, im.alloc));
    int64_t* rows = static_cast<int64_t*>(rows_p);
    gather_table_ids(im.options, *cb.batch, t, rows);
    size_t m = n;
    if (ts.id_map) {  // dynamic: the rows ids have now (no sightings); ids without one are skipped
      m = 0;
      for (size_t i = 0; i < n; ++i) {
        const int64_t r = ts.id_map->find(rows[i]);
        if (r >= 0) rows[m++] = r;
      }
      if (m == 0) continue;
    }
    if (defer) {
      im.prefetch_pending[static_cast<size_t>(t)] = m;
      continue;
    }
    LEANEMB_RETURN_IF_ERROR(ts.cache->start_prefetch(std::span<const int64_t>(rows, m)));
    im.prefetch_outstanding = true;
    im.prefetch_age = 0;
  }
  return Status();
}

Status EmbeddingCollection::wait_prefetch() {
  for (TableState& ts : impl_->tables)
    if (ts.cache) LEANEMB_RETURN_IF_ERROR(ts.cache->wait_prefetch());
  return Status();
}

Status EmbeddingCollection::Impl::finish_prefetch_after_remap() {
  if (prefetch_outstanding && !took_prefetch && prefetch_age == 0) {
    prefetch_age = 1;
    return Status();
  }
  release_pins(tiered::PinSet::kPrefetch);  // taken (the step holds them now), or dropped
  prefetch_outstanding = false;
  prefetch_age = 0;
  for (size_t t = 0; t < prefetch_pending.size(); ++t) {
    const size_t m = prefetch_pending[t];
    if (m == 0) continue;
    prefetch_pending[t] = 0;
    LEANEMB_ASSIGN_OR_RETURN(void* rows_p, remap_buffers.get(2 * tables.size() + t, m * 8, Category::kWorkspace, alloc));
    LEANEMB_RETURN_IF_ERROR(tables[t].cache->start_prefetch(std::span<const int64_t>(static_cast<int64_t*>(rows_p), m)));
    prefetch_outstanding = true;
    prefetch_age = 0;
  }
  return Status();
}

Status EmbeddingCollection::flush() {
  for (TableState& ts : impl_->tables)
    if (ts.cache) LEANEMB_RETURN_IF_ERROR(ts.cache->flush());
  return Status();
}

Result<RowCacheStats> EmbeddingCollection::cache_stats(int table) const {
  if (table < 0 || table >= num_tables()) return out_of_range("cache_stats: unknown table " + std::to_string(table));
  const TableState& ts = impl_->tables[table];
  if (!ts.cache) return failed_precondition("cache_stats: table '" + impl_->options.tables[table].name + "' has no cache");
  return ts.cache->stats();
}

}  // namespace leanemb
