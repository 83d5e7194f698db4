// CachedRows (residency.h): a table whose rows live in a RowStore (host memory or an O_DIRECT
// file) with the hot ones in a device-tier RowCache. The kernels run on the cache's slots: a
// step's rows are acquired (fetched on a miss, pinned for the step) and its view rows are slots;
// the update marks them dirty, and eviction or flush writes them back (docs/tiered.md).
#include <string>
#include <vector>

#include "table/residency.h"
#include "tiered/sizes.h"

namespace leanemb::table_internal {

namespace {

class CachedRows final : public Residency {
 public:
  CachedRows(const ResidencyContext& c, std::unique_ptr<tiered::RowCache> cache)
      : layout_(c.layout), cache_(std::move(cache)) {}

  std::string_view name() const override { return "cached"; }
  kernels::TableView view() const override {
    kernels::TableView v{cache_->slots(), &layout_, cache_->capacity(), 0, cache_->slot_rows64(), cache_->slot_rows32()};
    v.tier = Tier::kDevice;  // the row_cache category is always on the device
    return v;
  }
  void set_learning_rate(float lr) override { layout_.optimizer.learning_rate = lr; }

  bool maps_rows() const override { return true; }
  Status acquire(std::span<const int64_t> rows, int64_t* out, tiered::PinSet set, bool touch) override {
    return cache_->acquire(rows, out, set, touch);
  }
  Result<bool> take_prefetched(std::span<const int64_t> rows, int64_t* out) override {
    return cache_->take_prefetched(rows, out);
  }
  void release(tiered::PinSet set) override { cache_->release(set); }
  Status start_prefetch(std::span<const int64_t> rows) override { return cache_->start_prefetch(rows); }
  Status wait_prefetch() override { return cache_->wait_prefetch(); }
  Status flush() override { return cache_->flush(); }
  Result<RowCacheStats> cache_stats() const override { return cache_->stats(); }

  void end_update(const int64_t* rows, int64_t n, std::span<const uint8_t>, Tier) override {
    cache_->mark_dirty(std::span<const int64_t>(rows, static_cast<size_t>(n)));
  }

  // The caller's memory is read and written by the cache and its store directly (host memory).
  Status read_rows_at(std::span<const int64_t> rows, size_t, uint8_t* out, Tier) const override {
    return cache_->read_rows_at(rows, out);
  }
  Status read_rows(int64_t begin, int64_t count, uint8_t* out, Tier) const override {
    return cache_->read_rows(begin, count, out);
  }
  Status write_rows(int64_t begin, int64_t count, const uint8_t* in, Tier) override {
    return cache_->write_rows(begin, count, in);  // bulk: the store in large blocks
  }
  Status write_row(int64_t row, const uint8_t* fat, Tier) override { return cache_->write_row(row, fat); }

  bool can_link_rows(const std::string& into_dir) const override { return cache_->store()->links_rows(into_dir); }
  Result<LinkedRows> link_rows(const std::string& dir, const RowPlaceSink& sink) override {
    LEANEMB_RETURN_IF_ERROR(cache_->flush());  // every changed row into the store, clean in the cache
    return cache_->store()->link_rows(dir, sink);
  }
  Status adopt_links(const std::string& dir, const LinkedRows& linked, const RowPlaceSource& source) override {
    if (cache_->stats().resident_rows != 0) return failed_precondition("adopt_links: the cache holds rows already");
    return cache_->store()->adopt_links(dir, linked, source);
  }

 private:
  RowLayout layout_;
  std::unique_ptr<tiered::RowCache> cache_;
};

}  // namespace

// The store and cache of a table with TableOptions::cache (no rows are allocated or initialized
// up front: a row is initialized on its first touch). Its weights and optimizer state live
// together in the store (the store is the offload), whatever the placement says for the weights
// and optimizer_state categories.
Result<std::unique_ptr<Residency>> make_cached_rows(const ResidencyContext& c) {
  const TableOptions& to = c.options;
  const TableCacheOptions& co = to.cache;
  if (!co.enabled()) return std::unique_ptr<Residency>();
  auto fail = [&](const Status& s) { return Status(s.code(), "table '" + to.name + "' cache: " + s.message()); };
  if (co.fraction < 0.0 || co.fraction > 1.0 || co.capacity_rows < 0 || co.capacity_rows > to.num_rows)
    return invalid_argument("table '" + to.name + "' cache: fraction must be in [0, 1] and capacity_rows in [0, " +
                            std::to_string(to.num_rows) + "]");
  if (co.prefetch_nice < -20 || co.prefetch_nice > 19)
    return invalid_argument("table '" + to.name + "' cache: prefetch_nice must be in [-20, 19], got " +
                            std::to_string(co.prefetch_nice));
  tiered::RowStoreOptions so;
  so.kind = co.store;
  so.num_rows = to.num_rows;
  so.row_bytes = c.layout.stride_bytes;
  so.path = co.store_path;
  so.direct_io = co.direct_io;
  so.layout = co.store_layout;
  if (so.kind == StoreKind::kFile && so.path.empty())
    return invalid_argument("table '" + to.name + "' cache: the file store needs store_path");
  auto store = tiered::make_row_store(so, c.host());
  if (!store.ok()) return fail(store.status());
  tiered::RowCacheOptions rc;
  rc.capacity_rows = co.capacity_rows > 0 ? co.capacity_rows : tiered::cache_capacity_rows(to.num_rows, co.fraction);
  rc.policy = co.policy;
  rc.num_threads = c.exec.num_threads;
  rc.prefetch_nice = co.prefetch_nice;
  tiered::RowInitFn init = [c](int64_t row, uint8_t* fat) {
    thread_local std::vector<float> tmp;  // called for many rows in a row: no allocation each
    tmp.resize(static_cast<size_t>(c.layout.dim));
    c.init_row(row, c.layout, tmp.data(), fat);
  };
  auto cache = tiered::RowCache::create(rc, c.layout, std::move(store).value(), std::move(init),
                                        c.allocator_for(Category::kRowCache), c.allocator_for(Category::kIoBuffers),
                                        c.memory);
  if (!cache.ok()) return fail(cache.status());
  return std::unique_ptr<Residency>(std::make_unique<CachedRows>(c, std::move(cache).value()));
}

}  // namespace leanemb::table_internal
