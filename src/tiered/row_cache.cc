// RowCache: slots, fetch with write-back, prefetch thread (the index is tiered/cache_index.h).
#include "tiered/row_cache.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/parallel.h"
#include "kernels/kernels.h"
#include "kernels/row_access.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Slot flags and keys (megabytes for a large cache) are prefetched this many entries ahead by the
// passes over a step's pins: one pass touches tens of thousands of random slots.
constexpr size_t kMetaAhead = 32;
// Rows per chunk of a fetch's copy loops (a few microseconds of copying or initializing).
constexpr int64_t kCopyGrain = 256;
// Dirty rows per store call of flush().
constexpr size_t kFlushChunkRows = 8192;

// Scratch arrays are grown before a call changes anything (so that a refused allocation leaves
// the cache as it was) to row_cache_scratch_elems(n), the size the planner predicts.
// reserve_fresh drops the contents (the old buffer is freed before the new one is taken);
// reserve_kept keeps them.
template <typename V>
void reserve_fresh(V& v, size_t n) {
  if (v.capacity() >= n) return;
  V(v.get_allocator()).swap(v);  // frees the old buffer (a swap needs the same resource)
  v.reserve(row_cache_scratch_elems(n));
}
template <typename V>
void reserve_kept(V& v, size_t n) {
  if (v.capacity() < n) v.reserve(row_cache_scratch_elems(n));
}

Status scratch_exhausted() {
  return resource_exhausted(
      "row cache: its per-call scratch (category io_buffers) does not fit in the budget of its tier");
}

}  // namespace

// What phase A of a fetch decided: rows to read into new slots and victims to write back. Its
// arrays are kept between fetches (io_buffers; row_cache_scratch_bytes counts 16 B per new row
// and per victim).
struct RowCache::Plan {
  struct Fresh {
    int64_t row;
    int32_t slot;
    bool from_free;
  };
  struct Victim {
    int64_t row;
    int32_t slot;
    bool dirty;
  };
  static_assert(sizeof(Fresh) == 16 && sizeof(Victim) == 16, "row_cache_scratch_bytes counts 16 B per new row and victim");
  explicit Plan(Allocator* a)
      : res(a, Category::kIoBuffers),
        fresh(&res), victims(&res), wb_rows(&res), rd_rows(&res), wb_slots(&res), rd_slots(&res), found(&res), miss_at(&res),
        present(&res) {}
  AccountedResource res;
  std::pmr::vector<Fresh> fresh;
  std::pmr::vector<Victim> victims;
  std::pmr::vector<int64_t> wb_rows, rd_rows;
  std::pmr::vector<int32_t> wb_slots, rd_slots;  // the slots of wb_rows and rd_rows
  std::pmr::vector<int32_t> found;
  std::pmr::vector<size_t> miss_at;  // positions of the rows pass 1 did not find
  std::pmr::vector<uint8_t> present;  // the store's presence of rd_rows
  // Every array for a fetch of n rows (before anything changes). Throws std::bad_alloc.
  void reserve(size_t n) {
    reserve_fresh(fresh, n);
    reserve_fresh(victims, n);
    reserve_fresh(wb_rows, n);
    reserve_fresh(rd_rows, n);
    reserve_fresh(wb_slots, n);
    reserve_fresh(rd_slots, n);
    reserve_fresh(found, n);
    reserve_fresh(miss_at, n);
    reserve_fresh(present, n);
  }
};


Result<std::unique_ptr<RowCache>> RowCache::create(const RowCacheOptions& options, const RowLayout& layout,
                                                    std::unique_ptr<RowStore> store, RowInitFn init, Allocator* device,
                                                    Allocator* staging, MemorySystem* memory) {
  if (!store) return invalid_argument("RowCache: no row store");
  if (store->row_bytes() != layout.stride_bytes)
    return invalid_argument("RowCache: store rows of " + std::to_string(store->row_bytes()) + " B, table rows of " +
                            std::to_string(layout.stride_bytes) + " B");
  const int64_t n = store->num_rows();
  if (options.capacity_rows < 1 || options.capacity_rows > n)
    return invalid_argument("row cache capacity " + std::to_string(options.capacity_rows) + " outside [1, " +
                            std::to_string(n) + "] rows");
  // Slots are int32 in the index (and its map entries): checked here, so no slot number can
  // overflow later. Rows are int64 throughout.
  if (options.capacity_rows >= (int64_t{1} << 31) - 1)
    return invalid_argument("row cache capacity " + std::to_string(options.capacity_rows) + " must be < 2^31 - 1 rows");
  if (options.renormalize_at < 16) return invalid_argument("row cache: renormalize_at must be >= 16");
  std::unique_ptr<RowCache> c(new RowCache());
  c->options_ = options;
  c->layout_ = layout;
  c->store_ = std::move(store);
  c->init_ = std::move(init);
  c->staging_alloc_ = staging;
  c->memory_ = memory;
  c->store_tier_ = c->store_->kind() == StoreKind::kFile ? Tier::kDisk : Tier::kHost;
  c->capacity_ = options.capacity_rows;
  const int64_t cap = c->capacity_;
  const RowCacheSizes sz = row_cache_sizes(cap, n, layout.stride_bytes, options.policy);
  auto fail = [&](const Status& s, const char* what) {
    return Status(s.code(), std::string("row cache ") + what + " (" + std::to_string(cap) + " rows): " + s.message());
  };
  auto slots = device->allocate(sz.slot_bytes, Category::kRowCache, 64);
  if (!slots.ok()) return fail(slots.status(), "slots");
  c->slots_ = std::move(slots).value();
  auto index = device->allocate(sz.index_bytes, Category::kRowCache, 64);
  if (!index.ok()) return fail(index.status(), "index");
  c->index_mem_ = std::move(index).value();

  c->index_.init(c->index_mem_.data(), cap, n, options.policy, options.renormalize_at);
  c->plan_ = std::make_unique<Plan>(staging);
  c->pins_ = std::make_unique<Pins>(staging);
  c->owner_ = std::make_unique<CallerScratch>(staging);
  c->prefetch_ = std::make_unique<CallerScratch>(staging);
  c->stats_.capacity_rows = cap;
  c->worker_ = std::thread([raw = c.get()] { raw->prefetch_main(); });
  return c;
}

RowCache::~RowCache() {
  stop_worker();
}

void RowCache::stop_worker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void RowCache::pin_locked(int32_t s, PinSet set) {
  const uint8_t bit = pin_bit(set);
  uint8_t& f = index_.flags(s);
  if (f & bit) return;
  f |= bit;
  pinned(set).push_back(s);  // never allocates: reserved for the call (reserve_pins_locked)
}

void RowCache::release(PinSet set) {
  std::lock_guard<std::mutex> l(mu_);
  CacheIndex& ix = index_;
  const uint8_t bit = pin_bit(set);
  const auto& pins = pinned(set);
  for (size_t i = 0; i < pins.size(); ++i) {
    if (i + kMetaAhead < pins.size()) ix.prefetch_meta(pins[i + kMetaAhead]);
    const int32_t s = pins[i];
    ix.flags(s) &= static_cast<uint8_t>(~bit);
    if (ix.evictable(s)) ix.make_evictable(s);
  }
  pinned(set).clear();
  // The prefetch's slots are no longer pinned (a later fetch may reuse them): its mapping can no
  // longer be taken, and one still in flight completes untakeable (prefetch_epoch_).
  if (set == PinSet::kPrefetch) {
    job_complete_ = false;
    ++prefetch_epoch_;
  }
}

void RowCache::mark_dirty(std::span<const int64_t> slots) {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kMetaAhead < slots.size()) __builtin_prefetch(&index_.flags(static_cast<int32_t>(slots[i + kMetaAhead])));
    index_.flags(static_cast<int32_t>(slots[i])) |= CacheIndex::kDirty;
  }
}

// found[i] = the slot of rows[i] or -1; true if every row is resident and not in flight. The
// lookups only read the index: in chunks over the pool's threads for large calls, each chunk
// pipelining its share.
bool RowCache::lookup(std::span<const int64_t> rows, int32_t* found, int num_threads, bool check_flags) const {
  const int64_t n = static_cast<int64_t>(rows.size());
  constexpr int64_t kChunk = 8192;
  if (n < 2 * kChunk || num_threads == 1) return index_.find_batch(rows.data(), n, found, check_flags);
  std::atomic<bool> ready{true};
  parallel_for(n, kChunk, [&](int64_t b, int64_t e, int) {
    if (!index_.find_batch(rows.data() + b, e - b, found + b, check_flags)) ready.store(false, std::memory_order_relaxed);
  }, num_threads);
  return ready.load();
}

int RowCache::fetch_threads(bool prefetching) const {
  return !prefetching || owner_waiting_.load(std::memory_order_relaxed) > 0 ? options_.num_threads : 1;
}

void RowCache::wait_idle_locked(std::unique_lock<std::mutex>& l) {
  if (!has_job_ && !busy_) return;
  owner_waiting_.fetch_add(1, std::memory_order_relaxed);
  cv_.wait(l, [&] { return !has_job_ && !busy_; });
  owner_waiting_.fetch_sub(1, std::memory_order_relaxed);
}

std::span<const int64_t> RowCache::Distinct::of(std::span<const int64_t> rows, int64_t num_rows, size_t min_ids) {
  active = rows.size() >= min_ids && rows.size() < (size_t{1} << 32) - 1 && num_rows <= (int64_t{1} << 32);
  if (!active) return rows;
  const size_t n = rows.size();
  reserve_fresh(uniq, n);
  reserve_fresh(inv, n);
  reserve_fresh(keys, 2 * n);
  uniq.resize(n);
  inv.resize(n);
  keys.resize(2 * n);
  const int64_t u =
      kernels::unique_first_occurrence(rows.data(), static_cast<int64_t>(n), uniq.data(), inv.data(), keys.data());
  reserve_fresh(slots, static_cast<size_t>(u));
  slots.resize(static_cast<size_t>(u));
  return std::span<const int64_t>(uniq.data(), static_cast<size_t>(u));
}

void RowCache::Distinct::expand(int64_t* out, size_t n) const {
  for (size_t i = 0; i < n; ++i) out[i] = slots[inv[i]];
}

Status RowCache::acquire(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool touch) {
  // Every scratch array is grown before the call changes anything (reserve_fresh, reserve_kept),
  // so a refused one leaves the cache as it was.
  try {
    Distinct& d = owner_->distinct;
    const std::span<const int64_t> distinct = d.of(rows, num_rows(), options_.distinct_min_ids);
    if (!d.active) return acquire_rows(rows, slots_out, set, touch, false);
    LEANEMB_RETURN_IF_ERROR(acquire_rows(distinct, d.slots.data(), set, touch, true));
    if (slots_out) d.expand(slots_out, rows.size());
    return Status();
  } catch (const std::bad_alloc&) {
    return scratch_exhausted();
  }
}

void RowCache::reserve_pins_locked(PinSet set, size_t n) {
  auto& p = pinned(set);
  reserve_kept(p, std::min(static_cast<size_t>(capacity_), p.size() + n));  // a slot is pinned once per set
}

Status RowCache::acquire_rows(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool touch, bool distinct) {
  uint64_t looked_up_version = 0;
  {
    // Fast path: every row resident (prefetched or hot): pin them without waiting for anyone.
    std::unique_lock<std::mutex> l(mu_);
    reserve_fresh(owner_->found, rows.size());
    reserve_pins_locked(set, rows.size());
    owner_->found.resize(rows.size());
    int32_t* found = owner_->found.data();
    looked_up_version = map_version_;
    if (lookup(rows, found, options_.num_threads)) {
      CacheIndex& ix = index_;
      const uint32_t tick = touch ? ix.begin_call() : 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (i + kMetaAhead < rows.size()) ix.prefetch_touch(found[i + kMetaAhead]);
        const int32_t s = found[i];
        if (touch && ix.touch(s, tick)) ++stats_.lookups;
        pin_locked(s, set);
        if (slots_out) slots_out[i] = s;
      }
      return Status();
    }
  }
  Status st = wait_prefetch();  // counts its own wait as exposed
  const auto t0 = Clock::now();
  if (st.ok()) {
    std::lock_guard<std::mutex> f(fetch_mu_);
    // The fast path's lookups still hold if no fetch changed the map since (a prefetch waited
    // for above may have); with fetch_mu_ held none can start.
    bool still_valid;
    {
      std::lock_guard<std::mutex> l(mu_);
      still_valid = map_version_ == looked_up_version;
    }
    st = fetch(rows, slots_out, set, false, touch, distinct, still_valid ? owner_->found.data() : nullptr);
  }
  std::lock_guard<std::mutex> l(mu_);
  stats_.exposed_seconds += seconds_since(t0);
  return st;
}

// Undoes phase A of a fetch: new rows leave the map, victims come back (with their dirty
// flags). Victims not restored (already written back) leave their slots free.
void RowCache::rollback_locked(PinSet set, bool restore_victims) {
  ++map_version_;
  CacheIndex& ix = index_;
  Plan& plan = *plan_;
  for (auto it = plan.fresh.rbegin(); it != plan.fresh.rend(); ++it) {
    ix.unassign(it->slot);
    ix.clear(it->slot);
    if (it->from_free || !restore_victims) ix.give_free(it->slot);
  }
  if (restore_victims)
    for (const Plan::Victim& v : plan.victims) {
      ix.restore(v.slot, v.row, v.dirty);
      ix.make_evictable(v.slot);
    }
  const uint8_t bit = pin_bit(set);
  std::erase_if(pinned(set), [&](int32_t s) { return !(ix.flags(s) & bit); });
}

// Phase A of a fetch (under mu_): hits are pinned; each miss gets a free slot or a victim's.
// Errors: ResourceExhausted when no slot is left (everything rolled back).
Status RowCache::plan_fetch_locked(std::span<const int64_t> rows, const int32_t* found, int64_t* slots_out, PinSet set,
                                   bool prefetching, bool touch, bool distinct) {
  CacheIndex& ix = index_;
  Plan& plan = *plan_;
  ++map_version_;  // pass 3 changes the map
  const uint32_t tick = ix.begin_call();
  // Pass 2: the hits are counted and pinned, all of them before any victim is chosen, so that
  // no miss can evict a row this call still needs.
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kMetaAhead < rows.size() && found[i + kMetaAhead] >= 0) ix.prefetch_touch(found[i + kMetaAhead]);
    const int32_t s = found[i];
    if (s < 0) continue;
    if (touch && ix.touch(s, tick) && !prefetching) ++stats_.lookups;
    pin_locked(s, set);
    if (slots_out) slots_out[i] = s;
  }
  // Pass 3, in order: each miss takes a free slot or a victim's. A row that repeats after its
  // first miss is found in the map by then (distinct rows do not repeat: no second probe). The
  // map lines of later misses and the coming victims' flags, rows and map lines are prefetched.
  plan.miss_at.clear();
  for (size_t i = 0; i < rows.size(); ++i)
    if (found[i] < 0) plan.miss_at.push_back(i);
  const size_t num_miss = plan.miss_at.size();
  for (size_t k = 0; k < num_miss; ++k) {
    if (k + 16 < num_miss) ix.prefetch_row(rows[plan.miss_at[k + 16]]);
    if (ix.num_free() <= static_cast<int64_t>(k + 16)) {  // the miss 16 ahead will need a victim
      ix.prefetch_victim(16, false);
      ix.prefetch_victim(8, true);
    }
    const size_t i = plan.miss_at[k];
    const int64_t r = rows[i];
    int32_t s = distinct ? -1 : ix.find(r);
    if (s < 0) {
      const bool from_free = ix.has_free();
      s = from_free ? ix.take_free() : ix.pop_victim();
      if (s < 0) {
        rollback_locked(set, true);
        return resource_exhausted("row cache of " + std::to_string(capacity_) +
                                  " rows cannot hold this step's rows: every slot is pinned by the step in flight "
                                  "or its prefetch (raise the cache capacity above the distinct rows of two "
                                  "steps, or turn prefetch off)");
      }
      if (!from_free) {
        plan.victims.push_back({ix.slot_row(s), s, (ix.flags(s) & CacheIndex::kDirty) != 0});
        ix.unassign(s);
      }
      plan.fresh.push_back({r, s, from_free});
      ix.assign(s, r, tick);
      if (!prefetching) ++stats_.lookups;
    }
    pin_locked(s, set);
    if (slots_out) slots_out[i] = s;
  }
  return Status();
}

Status RowCache::fetch(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool prefetching, bool touch,
                       bool distinct, const int32_t* found) {
  // Reused between fetches (under fetch_mu_): a step's fetch would otherwise allocate and free
  // megabytes of vectors, and the heap's trim / regrowth faults in fresh zeroed pages each time.
  Plan& plan = *plan_;
  plan.reserve(rows.size());  // nothing below allocates scratch (a refusal throws here)
  plan.fresh.clear();
  plan.victims.clear();
  // Pass 1, without mu_ (the step's thread keeps pinning and releasing meanwhile): lookups
  // read only the map and the slots' rows, which change only in a fetch, and this thread holds
  // fetch_mu_. In parallel on the owner's thread.
  if (!found) {
    plan.found.resize(rows.size());
    (void)lookup(rows, plan.found.data(), fetch_threads(prefetching), /*check_flags=*/false);
    found = plan.found.data();
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    reserve_pins_locked(set, rows.size());
    LEANEMB_RETURN_IF_ERROR(plan_fetch_locked(rows, found, slots_out, set, prefetching, touch, distinct));
  }
  if (plan.fresh.empty()) return Status();
  const auto t0 = Clock::now();
  const size_t stride = layout_.stride_bytes;
  // Phase B: write back dirty victims, straight from their slots (the store reads them there).
  Status st;
  auto& wb_rows = plan.wb_rows;
  auto& wb_slots = plan.wb_slots;
  wb_rows.clear();
  wb_slots.clear();
  for (const Plan::Victim& v : plan.victims)
    if (v.dirty) {
      wb_rows.push_back(v.row);
      wb_slots.push_back(v.slot);
    }
  if (!wb_rows.empty()) {
    st = store_->write_rows(wb_rows, RowsAt<const uint8_t>(slots(), wb_slots.data(), stride));
    if (!st.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      rollback_locked(set, true);  // the slots still hold the victims' bytes (only read)
      return st;
    }
    if (memory_) memory_->record_transfer(Tier::kDevice, store_tier_, wb_rows.size() * stride);
  }
  // Phase C: read the new rows straight into their slots; the initializer makes the ones never
  // written (in parallel when the step waits for this fetch: fetch_threads).
  auto& rd_rows = plan.rd_rows;
  auto& rd_slots = plan.rd_slots;
  rd_rows.resize(plan.fresh.size());
  rd_slots.resize(plan.fresh.size());
  for (size_t i = 0; i < plan.fresh.size(); ++i) {
    rd_rows[i] = plan.fresh[i].row;
    rd_slots[i] = plan.fresh[i].slot;
  }
  std::pmr::vector<uint8_t>& present = plan.present;
  present.resize(rd_rows.size());
  st = store_->read_rows(rd_rows, RowsAt<uint8_t>(slots(), rd_slots.data(), stride), present.data());
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    rollback_locked(set, false);  // the victims are clean in the store now; their slots are free
    return st;
  }
  parallel_for(static_cast<int64_t>(plan.fresh.size()), kCopyGrain, [&](int64_t b, int64_t e, int) {
    for (int64_t j = b; j < e; ++j) {
      const size_t i = static_cast<size_t>(j);
      if (!present[i]) init_(plan.fresh[i].row, slots() + static_cast<size_t>(plan.fresh[i].slot) * stride);
    }
  }, fetch_threads(prefetching));
  const uint64_t loaded = static_cast<uint64_t>(std::count(present.begin(), present.end(), uint8_t{1}));
  const uint64_t created = plan.fresh.size() - loaded;
  if (memory_ && loaded) memory_->record_transfer(store_tier_, Tier::kDevice, loaded * stride);
  // Phase D (locked): the new rows are in.
  std::lock_guard<std::mutex> l(mu_);
  for (const Plan::Fresh& f : plan.fresh) index_.flags(f.slot) &= static_cast<uint8_t>(~CacheIndex::kInFlight);
  stats_.misses += plan.fresh.size();
  if (prefetching) stats_.prefetched_rows += plan.fresh.size();
  stats_.evictions += plan.victims.size();
  stats_.writebacks += wb_rows.size();
  stats_.initialized_rows += created;
  stats_.bytes_read += loaded * stride;
  stats_.bytes_written += wb_rows.size() * stride;
  stats_.fetch_seconds += seconds_since(t0);
  return Status();
}

Status RowCache::start_prefetch(std::span<const int64_t> rows) {
  std::unique_lock<std::mutex> l(mu_);
  wait_idle_locked(l);
  if (job_.size_bytes() < rows.size() * 8 || job_.empty()) {
    job_.reset();
    LEANEMB_ASSIGN_OR_RETURN(job_, staging_alloc_->allocate(std::max<size_t>(rows.size() + rows.size() / 4, 64) * 8,
                                                            Category::kIoBuffers, 64));
  }
  if (!rows.empty()) std::memcpy(job_.data(), rows.data(), rows.size() * 8);
  job_rows_ = rows.size();
  job_complete_ = false;
  has_job_ = true;
  cv_.notify_all();
  return Status();
}

Result<bool> RowCache::take_prefetched(std::span<const int64_t> rows, int64_t* slots_out) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> l(mu_);
  wait_idle_locked(l);
  stats_.exposed_seconds += seconds_since(t0);
  if (!prefetch_status_.ok()) {
    Status st = prefetch_status_;
    prefetch_status_ = Status();
    return st;
  }
  std::pmr::vector<int64_t>& job_slots = prefetch_->slots;
  if (!job_complete_ || rows.size() != job_rows_ || job_slots.size() != rows.size() ||
      (!rows.empty() && std::memcmp(rows.data(), job_.data(), rows.size() * 8) != 0))
    return false;
  job_complete_ = false;
  // The prefetch's pins become the step's: every distinct row of the batch, each counted once
  // as a lookup (the prefetch counted none).
  CacheIndex& ix = index_;
  auto& from = pinned(PinSet::kPrefetch);
  auto& to = pinned(PinSet::kStep);
  const size_t taken = from.size();
  if (to.empty()) {
    // The usual case (the step released its pins before this forward): the two sets trade
    // roles, flag bit and list, so no slot's flags change; the prefetch set is then the empty one.
    pins_swapped_ = !pins_swapped_;
  } else {
    try {
      reserve_pins_locked(PinSet::kStep, from.size());
    } catch (const std::bad_alloc&) {
      return scratch_exhausted();  // nothing changed
    }
    const uint8_t from_bit = pin_bit(PinSet::kPrefetch), to_bit = pin_bit(PinSet::kStep);
    for (size_t i = 0; i < from.size(); ++i) {
      if (i + kMetaAhead < from.size()) ix.prefetch_touch(from[i + kMetaAhead]);
      uint8_t& f = ix.flags(from[i]);
      f &= static_cast<uint8_t>(~from_bit);
      if (!(f & to_bit)) {
        f |= to_bit;
        to.push_back(from[i]);
      }
    }
    from.clear();
  }
  stats_.lookups += taken;
  ++stats_.prefetches_taken;
  for (size_t i = 0; i < rows.size(); ++i) slots_out[i] = job_slots[i];
  return true;
}

Status RowCache::wait_prefetch() {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> l(mu_);
  wait_idle_locked(l);
  stats_.exposed_seconds += seconds_since(t0);
  Status st = prefetch_status_;
  prefetch_status_ = Status();
  return st;
}

void RowCache::prefetch_main() {
  // Named for profilers (perf -s comm, top -H): 15 characters at most.
  pthread_setname_np(pthread_self(), "leanemb-fetch");
  // Best effort: a lower priority needs no privilege; a refused one (negative values without
  // CAP_SYS_NICE) leaves the thread as it was.
  if (options_.prefetch_nice != 0)
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), options_.prefetch_nice);
  for (;;) {
    std::span<const int64_t> rows;
    uint64_t epoch = 0;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || has_job_; });
      if (stop_) return;
      rows = std::span<const int64_t>(job_.as<int64_t>(), job_rows_);
      epoch = prefetch_epoch_;
      has_job_ = false;
      busy_ = true;
    }
    Status st;
    {
      std::lock_guard<std::mutex> f(fetch_mu_);
      try {
        std::pmr::vector<int64_t>& job_slots = prefetch_->slots;
        reserve_fresh(job_slots, rows.size());
        job_slots.resize(rows.size());
        Distinct& d = prefetch_->distinct;
        const std::span<const int64_t> distinct = d.of(rows, num_rows(), options_.distinct_min_ids);
        st = fetch(distinct, d.active ? d.slots.data() : job_slots.data(), PinSet::kPrefetch, true, true, d.active);
        if (st.ok() && d.active) d.expand(job_slots.data(), rows.size());
      } catch (const std::bad_alloc&) {
        st = scratch_exhausted();
      }
    }
    const bool complete = st.ok();
    // A cache too small for two steps' rows at once: the step fetches the rest itself.
    if (st.code() == StatusCode::kResourceExhausted && st.message().rfind("row cache of", 0) == 0) st = Status();
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
      job_complete_ = complete && epoch == prefetch_epoch_;
      if (prefetch_status_.ok()) prefetch_status_ = st;
    }
    cv_.notify_all();
  }
}

Status RowCache::flush() {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  const size_t stride = layout_.stride_bytes;
  std::vector<int32_t> dirty_slots;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int32_t s = 0; s < capacity_; ++s)
      if ((index_.flags(s) & CacheIndex::kDirty) && index_.slot_row(s) >= 0) dirty_slots.push_back(s);
  }
  // In row order (a chunk's rows then share blocks where they can, and the file is written front
  // to back), straight from the slots, in chunks of kFlushChunkRows (each chunk's rows are clean
  // once it is written, so a failed flush keeps only the rest dirty).
  std::sort(dirty_slots.begin(), dirty_slots.end(),
            [&](int32_t a, int32_t b) { return index_.slot_row(a) < index_.slot_row(b); });
  std::vector<int64_t> rows;
  for (size_t b = 0; b < dirty_slots.size(); b += kFlushChunkRows) {
    const size_t n = std::min(kFlushChunkRows, dirty_slots.size() - b);
    rows.resize(n);
    for (size_t i = 0; i < n; ++i) rows[i] = index_.slot_row(dirty_slots[b + i]);
    LEANEMB_RETURN_IF_ERROR(store_->write_rows(rows, RowsAt<const uint8_t>(slots(), dirty_slots.data() + b, stride)));
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < n; ++i) index_.flags(dirty_slots[b + i]) &= static_cast<uint8_t>(~CacheIndex::kDirty);
    stats_.writebacks += n;
    stats_.bytes_written += n * stride;
    if (memory_) memory_->record_transfer(Tier::kDevice, store_tier_, n * stride);
  }
  return store_->flush();
}

Status RowCache::read_row(int64_t row, uint8_t* fat) { return read_rows(row, 1, fat); }

template <typename F>
void RowCache::for_each_resident_locked(int64_t begin, int64_t count, F&& f) const {
  const int64_t resident = capacity_ - index_.num_free();
  if (resident == 0 || count <= 0) return;
  if (count > capacity_ / 8) {  // a long range: one pass over the slots beats a probe per row
    for (int32_t s = 0; s < capacity_; ++s) {
      const int64_t r = index_.slot_row(s);
      if (r >= begin && r - begin < count) f(r, s);
    }
    return;
  }
  for (int64_t r = begin; r < begin + count; ++r) {
    const int32_t s = index_.find(r);
    if (s >= 0) f(r, s);
  }
}

Status RowCache::read_rows(int64_t begin, int64_t count, uint8_t* out) {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  const size_t stride = layout_.stride_bytes;
  std::vector<uint8_t> present(static_cast<size_t>(std::max<int64_t>(count, 0)));
  LEANEMB_RETURN_IF_ERROR(store_->read_range(begin, count, out, present.data()));
  for (int64_t i = 0; i < count; ++i)
    if (!present[static_cast<size_t>(i)]) init_(begin + i, out + static_cast<size_t>(i) * stride);
  std::lock_guard<std::mutex> l(mu_);
  for_each_resident_locked(begin, count, [&](int64_t r, int32_t s) {
    std::memcpy(out + static_cast<size_t>(r - begin) * stride, slots() + static_cast<size_t>(s) * stride, stride);
  });
  return Status();
}

Status RowCache::read_rows_at(std::span<const int64_t> rows, uint8_t* out) {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);  // no fetch changes the row -> slot map meanwhile
  const size_t stride = layout_.stride_bytes;
  std::vector<int64_t> missed;
  std::vector<int32_t> at;  // the position in `rows` of each missed row
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int32_t s = index_.find(rows[i]);
      if (s >= 0) {
        std::memcpy(out + i * stride, slots() + static_cast<size_t>(s) * stride, stride);
      } else {
        missed.push_back(rows[i]);
        at.push_back(static_cast<int32_t>(i));
      }
    }
  }
  if (missed.empty()) return Status();
  std::vector<uint8_t> present(missed.size());
  LEANEMB_RETURN_IF_ERROR(store_->read_rows(missed, RowsAt<uint8_t>(out, at.data(), stride), present.data()));
  for (size_t j = 0; j < missed.size(); ++j)
    if (!present[j]) init_(missed[j], out + static_cast<size_t>(at[j]) * stride);
  return Status();
}

Status RowCache::write_row(int64_t row, const uint8_t* fat) {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    const int32_t s = index_.find(row);
    if (s >= 0) {
      std::memcpy(slots() + static_cast<size_t>(s) * layout_.stride_bytes, fat, layout_.stride_bytes);
      index_.flags(s) |= CacheIndex::kDirty;
      return Status();
    }
  }
  const int64_t r[1] = {row};
  return store_->write_rows(r, fat);
}

int64_t RowCache::place_rows_locked(int64_t begin, int64_t count, const uint8_t* src) {
  CacheIndex& ix = index_;
  if (!ix.has_free()) return begin;
  const size_t stride = layout_.stride_bytes;
  // No begin_call(): a restore makes many small calls, and every few calls begin_call passes
  // over all slots' marks. Placed rows carry the tick of no call (the oldest use).
  constexpr uint32_t kNoCall = 0;
  ++map_version_;  // rows join the map: a lookup made before no longer holds
  int64_t r = begin;
  for (; r < begin + count; ++r) {
    int32_t s = ix.find(r);
    const bool fresh = s < 0;
    if (fresh) {
      if (!ix.has_free()) break;
      s = ix.take_free();
      ix.assign(s, r, kNoCall);
      ix.flags(s) &= static_cast<uint8_t>(~CacheIndex::kInFlight);
    }
    std::memcpy(slots() + static_cast<size_t>(s) * stride, src + static_cast<size_t>(r - begin) * stride, stride);
    ix.flags(s) |= CacheIndex::kDirty;
    if (fresh) ix.make_evictable(s);
  }
  stats_.placed_rows += static_cast<uint64_t>(r - begin);
  return r;
}

Status RowCache::write_rows(int64_t begin, int64_t count, const uint8_t* src) {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  int64_t placed;
  {
    std::lock_guard<std::mutex> l(mu_);
    placed = place_rows_locked(begin, count, src);
  }
  const int64_t rest = begin + count - placed;
  const uint8_t* rest_src = src + static_cast<size_t>(placed - begin) * layout_.stride_bytes;
  const Status st = rest > 0 ? store_->write_range(placed, rest, rest_src) : Status();
  const size_t stride = layout_.stride_bytes;
  std::lock_guard<std::mutex> l(mu_);
  for_each_resident_locked(placed, rest, [&](int64_t r, int32_t s) {
    uint8_t& fl = index_.flags(s);
    if (st.ok()) {
      std::memcpy(slots() + static_cast<size_t>(s) * stride, rest_src + static_cast<size_t>(r - placed) * stride, stride);
      fl &= static_cast<uint8_t>(~CacheIndex::kDirty);
    } else {
      fl |= CacheIndex::kDirty;
    }
  });
  return st;
}

CacheStats RowCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  CacheStats s = stats_;
  s.resident_rows = capacity_ - index_.num_free();
  s.index_bytes = index_mem_.size_bytes();
  s.hits = s.lookups >= s.misses ? s.lookups - s.misses : 0;
  const RowStoreStats ss = store_->stats();
  s.store_read_ops = ss.read_ops;
  s.store_write_ops = ss.write_ops;
  s.store_read_seconds = ss.read_seconds;
  s.store_write_seconds = ss.write_seconds;
  s.store_gc_passes = ss.gc_passes;
  s.store_gc_rows_moved = ss.gc_rows_moved;
  return s;
}

}  // namespace leanemb::tiered
