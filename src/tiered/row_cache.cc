// RowCache: slots, index (row -> slot map, eviction heap), fetch with write-back, prefetch thread.
#include "tiered/row_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tiered/sizes.h"

namespace leanemb::tiered {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr uint8_t kPinStep = 1, kPinPrefetch = 2, kInFlight = 4;
uint8_t pin_bit(PinSet s) { return s == PinSet::kStep ? kPinStep : kPinPrefetch; }

}  // namespace

std::string_view cache_policy_name(CachePolicy p) { return p == CachePolicy::kLru ? "lru" : "lfu"; }

Result<CachePolicy> parse_cache_policy(std::string_view s) {
  if (s == "lru") return CachePolicy::kLru;
  if (s == "lfu") return CachePolicy::kLfu;
  return invalid_argument("unknown cache policy '" + std::string(s) + "' (expected lru or lfu)");
}

// Per-slot metadata, the row -> slot map (open addressing, linear probing, backward-shift
// deletion) and the set of evictable slots (resident, unpinned, not in flight):
//   LRU: a ring of (slot, version) entries in release order; releasing a slot bumps its version
//        and appends it, so older entries of the slot go stale; the victim is the first entry
//        still current and evictable (stale ones are skipped, the ring compacted when full).
//        O(1) amortized per operation, sequential memory access.
//   LFU: a binary min-heap by (frequency, last use, slot).
// All arrays live in one allocation sized by row_cache_sizes().
struct RowCache::Index {
  struct MapEntry {
    uint32_t row;  // kEmpty when free (tables have < 2^32 rows, so no row is kEmpty)
    int32_t slot;
  };
  struct QueueEntry {
    int32_t slot;
    uint32_t version;
  };
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;

  CachePolicy policy = CachePolicy::kLru;
  int64_t cap = 0;
  int64_t* slot_row = nullptr;   // [cap] table row, -1 free
  uint64_t* last_use = nullptr;  // [cap] tick of the last acquire
  uint32_t* freq = nullptr;      // [cap] acquires since fetched (LFU)
  int32_t* heap_pos = nullptr;   // [cap] LFU: position in heap, -1 when not in it; LRU: version
  int32_t* heap = nullptr;       // [cap] LFU heap of slots
  uint8_t* flags = nullptr;      // [cap] pins, in flight
  uint8_t* dirty = nullptr;      // [cap]
  MapEntry* map = nullptr;       // [m]
  size_t map_mask = 0;
  QueueEntry* queue = nullptr;   // [queue_cap] LRU ring
  uint64_t queue_cap = 0, head = 0, tail = 0;
  int32_t heap_size = 0;
  std::vector<int32_t> free_slots;  // popped from the back: slot 0 first

  static size_t hash(int64_t row) { return static_cast<size_t>((static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull) >> 17); }
  void prefetch_row(int64_t row) const { __builtin_prefetch(&map[hash(row) & map_mask]); }
  int32_t find(int64_t row) const {
    const uint32_t key = static_cast<uint32_t>(row);
    for (size_t i = hash(row) & map_mask;; i = (i + 1) & map_mask) {
      if (map[i].row == key) return map[i].slot;
      if (map[i].row == kEmpty) return -1;
    }
  }
  void insert(int64_t row, int32_t slot) {
    size_t i = hash(row) & map_mask;
    while (map[i].row != kEmpty) i = (i + 1) & map_mask;
    map[i] = MapEntry{static_cast<uint32_t>(row), slot};
  }
  void erase(int64_t row) {
    const uint32_t key = static_cast<uint32_t>(row);
    size_t i = hash(row) & map_mask;
    while (map[i].row != key) i = (i + 1) & map_mask;
    // Backward-shift deletion: move later entries of the probe chain into the hole.
    for (size_t j = i;;) {
      map[i].row = kEmpty;
      for (;;) {
        j = (j + 1) & map_mask;
        if (map[j].row == kEmpty) return;
        const size_t home = hash(map[j].row) & map_mask;
        // Entry j may move to i if its home is not cyclically in (i, j].
        const bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) break;
      }
      map[i] = map[j];
      i = j;
    }
  }

  bool evictable(int32_t s) const { return flags[s] == 0 && slot_row[s] >= 0; }

  // ---- the evictable set ----
  void make_evictable(int32_t s) {
    if (policy == CachePolicy::kLfu) {
      if (heap_pos[s] < 0) heap_push(s);
      return;
    }
    if (tail - head == queue_cap) compact();
    const uint32_t v = static_cast<uint32_t>(heap_pos[s]) + 1;
    heap_pos[s] = static_cast<int32_t>(v);
    queue[tail++ % queue_cap] = QueueEntry{s, v};
  }
  void unmake_evictable(int32_t s) {
    if (policy == CachePolicy::kLfu && heap_pos[s] >= 0) heap_remove(s);
    // LRU: the slot's entry stays; pinned, it is skipped, and its release appends a new one.
  }
  int32_t pop_victim() {
    if (policy == CachePolicy::kLfu) return heap_pop();
    while (head < tail) {
      const QueueEntry e = queue[head++ % queue_cap];
      if (static_cast<uint32_t>(heap_pos[e.slot]) == e.version && evictable(e.slot)) return e.slot;
    }
    return -1;
  }
  // Drops stale entries (at most cap stay, so the ring is at most half full afterwards).
  void compact() {
    uint64_t out = head;
    for (uint64_t i = head; i < tail; ++i) {
      const QueueEntry e = queue[i % queue_cap];
      if (static_cast<uint32_t>(heap_pos[e.slot]) == e.version && evictable(e.slot)) queue[out++ % queue_cap] = e;
    }
    tail = out;
  }

  bool less(int32_t a, int32_t b) const {
    if (freq[a] != freq[b]) return freq[a] < freq[b];
    if (last_use[a] != last_use[b]) return last_use[a] < last_use[b];
    return a < b;
  }
  void heap_set(int32_t i, int32_t s) {
    heap[i] = s;
    heap_pos[s] = i;
  }
  void sift_up(int32_t i) {
    const int32_t s = heap[i];
    while (i > 0) {
      const int32_t p = (i - 1) / 2;
      if (!less(s, heap[p])) break;
      heap_set(i, heap[p]);
      i = p;
    }
    heap_set(i, s);
  }
  void sift_down(int32_t i) {
    const int32_t s = heap[i];
    for (;;) {
      int32_t c = 2 * i + 1;
      if (c >= heap_size) break;
      if (c + 1 < heap_size && less(heap[c + 1], heap[c])) ++c;
      if (!less(heap[c], s)) break;
      heap_set(i, heap[c]);
      i = c;
    }
    heap_set(i, s);
  }
  void heap_push(int32_t s) {
    heap_set(heap_size++, s);
    sift_up(heap_size - 1);
  }
  void heap_remove(int32_t s) {
    const int32_t i = heap_pos[s];
    heap_pos[s] = -1;
    const int32_t last = heap[--heap_size];
    if (i == heap_size) return;
    heap_set(i, last);
    sift_up(i);
    sift_down(heap_pos[last]);
  }
  int32_t heap_pop() {
    if (heap_size == 0) return -1;
    const int32_t s = heap[0];
    heap_remove(s);
    return s;
  }
};

// What phase A of a fetch decided: rows to read into new slots and victims to write back.
struct RowCache::Plan {
  struct Fresh {
    int64_t row;
    int32_t slot;
    bool from_free;
  };
  struct Victim {
    int32_t slot;
    int64_t row;
    bool dirty;
  };
  std::vector<Fresh> fresh;
  std::vector<Victim> victims;
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
  if (options.capacity_rows >= (int64_t{1} << 31)) return invalid_argument("row cache capacity must be < 2^31 rows");
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
  const RowCacheSizes sz = row_cache_sizes(cap, layout.stride_bytes, options.max_rows_per_step);
  auto fail = [&](const Status& s, const char* what) {
    return Status(s.code(), std::string("row cache ") + what + " (" + std::to_string(cap) + " rows): " + s.message());
  };
  auto slots = device->allocate(sz.slot_bytes, Category::kRowCache, 64);
  if (!slots.ok()) return fail(slots.status(), "slots");
  c->slots_ = std::move(slots).value();
  auto index = device->allocate(sz.index_bytes, Category::kRowCache, 64);
  if (!index.ok()) return fail(index.status(), "index");
  c->index_mem_ = std::move(index).value();

  auto ix = std::make_unique<Index>();
  ix->policy = options.policy;
  ix->cap = cap;
  const size_t m = row_cache_map_entries(cap);
  uint8_t* p = c->index_mem_.as<uint8_t>();
  const size_t ucap = static_cast<size_t>(cap);
  auto carve = [&](auto*& dst, size_t count) {
    using T = std::remove_reference_t<decltype(*dst)>;
    dst = reinterpret_cast<T*>(p);
    p += count * sizeof(T);
  };
  // Largest alignment first so every array is aligned.
  const size_t qcap = row_cache_queue_entries(cap);
  carve(ix->slot_row, ucap);
  carve(ix->last_use, ucap);
  carve(ix->map, m);
  carve(ix->queue, qcap);
  carve(ix->freq, ucap);
  carve(ix->heap_pos, ucap);
  carve(ix->heap, ucap);
  carve(ix->flags, ucap);
  carve(ix->dirty, ucap);
  ix->map_mask = m - 1;
  ix->queue_cap = qcap;
  std::fill(ix->slot_row, ix->slot_row + cap, int64_t{-1});
  std::fill(ix->last_use, ix->last_use + cap, uint64_t{0});
  std::fill(ix->freq, ix->freq + cap, 0u);
  std::fill(ix->heap_pos, ix->heap_pos + cap, options.policy == CachePolicy::kLfu ? -1 : 0);
  std::fill(ix->flags, ix->flags + cap, uint8_t{0});
  std::fill(ix->dirty, ix->dirty + cap, uint8_t{0});
  std::fill(ix->map, ix->map + m, Index::MapEntry{Index::kEmpty, -1});
  ix->free_slots.resize(ucap);
  for (int64_t s = 0; s < cap; ++s) ix->free_slots[ucap - 1 - static_cast<size_t>(s)] = static_cast<int32_t>(s);
  c->slot_row_ = ix->slot_row;
  c->index_ = std::move(ix);
  c->stats_.capacity_rows = cap;
  c->worker_ = std::thread([raw = c.get()] { raw->prefetch_main(); });
  return c;
}

RowCache::~RowCache() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void RowCache::pin_locked(int64_t slot, PinSet set) {
  Index& ix = *index_;
  const int32_t s = static_cast<int32_t>(slot);
  const uint8_t bit = pin_bit(set);
  if (ix.flags[s] & bit) return;
  ix.unmake_evictable(s);
  ix.flags[s] |= bit;
  pinned_[static_cast<int>(set)].push_back(slot);
}

void RowCache::release(PinSet set) {
  std::lock_guard<std::mutex> l(mu_);
  Index& ix = *index_;
  const uint8_t bit = pin_bit(set);
  for (int64_t slot : pinned_[static_cast<int>(set)]) {
    const int32_t s = static_cast<int32_t>(slot);
    ix.flags[s] &= static_cast<uint8_t>(~bit);
    if (ix.evictable(s)) ix.make_evictable(s);
  }
  pinned_[static_cast<int>(set)].clear();
}

void RowCache::mark_dirty(std::span<const int64_t> slots) {
  std::lock_guard<std::mutex> l(mu_);
  for (int64_t s : slots) index_->dirty[s] = 1;
}

Status RowCache::acquire(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool touch) {
  {
    // Fast path: every row resident (prefetched or hot): pin them without waiting for anyone.
    std::unique_lock<std::mutex> l(mu_);
    const Index& ix = *index_;
    found_.resize(rows.size());
    bool all = true;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + 16 < rows.size()) ix.prefetch_row(rows[i + 16]);
      const int32_t s = ix.find(rows[i]);
      found_[i] = s;
      if (s < 0 || (ix.flags[s] & kInFlight)) {
        all = false;
        break;
      }
    }
    if (all) {
      const uint64_t tick = touch ? ++tick_ : 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        const int32_t s = found_[i];
        if (touch && index_->last_use[s] != tick) {
          ++stats_.lookups;
          ++index_->freq[s];
          index_->last_use[s] = tick;
        }
        pin_locked(s, set);
        if (slots_out) slots_out[i] = s;
      }
      return Status();
    }
  }
  const auto t0 = Clock::now();
  Status st = wait_prefetch();
  if (st.ok()) {
    std::lock_guard<std::mutex> f(fetch_mu_);
    st = fetch(rows, slots_out, set, false, touch);
  }
  std::lock_guard<std::mutex> l(mu_);
  stats_.exposed_seconds += seconds_since(t0);
  return st;
}

Status RowCache::fetch(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool prefetching, bool touch) {
  Index& ix = *index_;
  Plan plan;
  // Undoes phase A: new rows leave the map, victims come back (with their dirty flags).
  // Victims not restored (already written back) leave their slots free.
  auto rollback_locked = [&](bool restore_victims) {
    for (auto it = plan.fresh.rbegin(); it != plan.fresh.rend(); ++it) {
      ix.erase(it->row);
      ix.slot_row[it->slot] = -1;
      ix.flags[it->slot] = 0;
      ix.dirty[it->slot] = 0;
      if (it->from_free || !restore_victims) ix.free_slots.push_back(it->slot);
    }
    if (restore_victims)
      for (const Plan::Victim& v : plan.victims) {
        ix.slot_row[v.slot] = v.row;
        ix.dirty[v.slot] = v.dirty ? 1 : 0;
        ix.insert(v.row, v.slot);
        ix.make_evictable(v.slot);
      }
    auto& pins = pinned_[static_cast<int>(set)];
    std::erase_if(pins, [&](int64_t s) { return ix.slot_row[s] < 0 || ix.flags[s] == 0; });
  };
  // Phase A (locked): hits are pinned; each miss gets a free slot or a victim's.
  {
    std::lock_guard<std::mutex> l(mu_);
    const uint64_t tick = ++tick_;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t r = rows[i];
      if (i + 16 < rows.size()) ix.prefetch_row(rows[i + 16]);
      int32_t s = ix.find(r);
      if (s >= 0) {
        if (touch && ix.last_use[s] != tick) {
          if (!prefetching) ++stats_.lookups;
          ++ix.freq[s];
          ix.last_use[s] = tick;
        }
      } else {
        bool from_free = !ix.free_slots.empty();
        if (from_free) {
          s = ix.free_slots.back();
          ix.free_slots.pop_back();
        } else {
          s = ix.pop_victim();
          if (s < 0) {
            rollback_locked(true);
            return resource_exhausted("row cache of " + std::to_string(capacity_) +
                                      " rows cannot hold this step's rows: every slot is pinned by the step in flight "
                                      "or its prefetch (raise the cache capacity above the distinct rows of two "
                                      "steps, or turn prefetch off)");
          }
          plan.victims.push_back({s, ix.slot_row[s], ix.dirty[s] != 0});
          ix.erase(ix.slot_row[s]);
        }
        plan.fresh.push_back({r, s, from_free});
        ix.slot_row[s] = r;
        ix.insert(r, s);
        ix.freq[s] = 1;
        ix.last_use[s] = tick;
        ix.dirty[s] = 0;
        ix.flags[s] = kInFlight;
        if (!prefetching) ++stats_.lookups;
      }
      pin_locked(s, set);
      if (slots_out) slots_out[i] = s;
    }
  }
  if (plan.fresh.empty()) return Status();
  const auto t0 = Clock::now();
  const size_t stride = layout_.stride_bytes;
  auto grow = [&](Allocation& a, size_t n) -> Status {
    if (a.size_bytes() >= n * stride) return Status();
    a.reset();
    LEANEMB_ASSIGN_OR_RETURN(a, staging_alloc_->allocate(std::max<size_t>(n + n / 4, 16) * stride, Category::kIoBuffers, 4096));
    return Status();
  };
  // Phase B: write back dirty victims.
  std::vector<int64_t> wb_rows;
  for (const Plan::Victim& v : plan.victims)
    if (v.dirty) wb_rows.push_back(v.row);
  Status st;
  if (!wb_rows.empty()) {
    st = grow(stage_out_, wb_rows.size());
    if (st.ok()) {
      size_t k = 0;
      for (const Plan::Victim& v : plan.victims)
        if (v.dirty) std::memcpy(stage_out_.as<uint8_t>() + (k++) * stride, slots() + static_cast<size_t>(v.slot) * stride, stride);
      st = store_->write_rows(wb_rows, stage_out_.as<uint8_t>());
    }
    if (!st.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      rollback_locked(true);
      return st;
    }
    if (memory_) memory_->record_transfer(Tier::kDevice, store_tier_, wb_rows.size() * stride);
  }
  // Phase C: read the new rows (the initializer makes the ones never written).
  std::vector<int64_t> rd_rows(plan.fresh.size());
  for (size_t i = 0; i < plan.fresh.size(); ++i) rd_rows[i] = plan.fresh[i].row;
  st = grow(stage_in_, rd_rows.size());
  present_.resize(rd_rows.size());
  if (st.ok()) st = store_->read_rows(rd_rows, stage_in_.as<uint8_t>(), present_.data());
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    rollback_locked(false);  // the victims are clean in the store now
    return st;
  }
  uint64_t created = 0, loaded = 0;
  for (size_t i = 0; i < plan.fresh.size(); ++i) {
    uint8_t* dst = slots() + static_cast<size_t>(plan.fresh[i].slot) * stride;
    if (present_[i]) {
      std::memcpy(dst, stage_in_.as<uint8_t>() + i * stride, stride);
      ++loaded;
    } else {
      init_(plan.fresh[i].row, dst);
      ++created;
    }
  }
  if (memory_ && loaded) memory_->record_transfer(store_tier_, Tier::kDevice, loaded * stride);
  // Phase D (locked): the new rows are in.
  std::lock_guard<std::mutex> l(mu_);
  for (const Plan::Fresh& f : plan.fresh) ix.flags[f.slot] &= static_cast<uint8_t>(~kInFlight);
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
  cv_.wait(l, [&] { return !has_job_ && !busy_; });
  if (job_.size_bytes() < rows.size() * 8 || job_.empty()) {
    job_.reset();
    LEANEMB_ASSIGN_OR_RETURN(job_, staging_alloc_->allocate(std::max<size_t>(rows.size() + rows.size() / 4, 64) * 8,
                                                            Category::kIoBuffers, 64));
  }
  if (!rows.empty()) std::memcpy(job_.data(), rows.data(), rows.size() * 8);
  job_rows_ = rows.size();
  has_job_ = true;
  cv_.notify_all();
  return Status();
}

Status RowCache::wait_prefetch() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !has_job_ && !busy_; });
  Status st = prefetch_status_;
  prefetch_status_ = Status();
  return st;
}

void RowCache::prefetch_main() {
  for (;;) {
    std::span<const int64_t> rows;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || has_job_; });
      if (stop_) return;
      rows = std::span<const int64_t>(job_.as<int64_t>(), job_rows_);
      has_job_ = false;
      busy_ = true;
    }
    Status st;
    {
      std::lock_guard<std::mutex> f(fetch_mu_);
      st = fetch(rows, nullptr, PinSet::kPrefetch, true, true);
    }
    // A cache too small for two steps' rows at once: the step fetches the rest itself.
    if (st.code() == StatusCode::kResourceExhausted && st.message().rfind("row cache of", 0) == 0) st = Status();
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
      if (prefetch_status_.ok()) prefetch_status_ = st;
    }
    cv_.notify_all();
  }
}

Status RowCache::flush() {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  const size_t stride = layout_.stride_bytes;
  std::vector<int32_t> dirty;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int64_t s = 0; s < capacity_; ++s)
      if (index_->dirty[s] && index_->slot_row[s] >= 0) dirty.push_back(static_cast<int32_t>(s));
  }
  constexpr size_t kChunk = 4096;
  for (size_t b = 0; b < dirty.size(); b += kChunk) {
    const size_t n = std::min(kChunk, dirty.size() - b);
    if (stage_out_.size_bytes() < n * stride) {
      stage_out_.reset();
      LEANEMB_ASSIGN_OR_RETURN(stage_out_, staging_alloc_->allocate(n * stride, Category::kIoBuffers, 4096));
    }
    std::vector<int64_t> rows(n);
    for (size_t i = 0; i < n; ++i) {
      rows[i] = slot_row_[dirty[b + i]];
      std::memcpy(stage_out_.as<uint8_t>() + i * stride, slots() + static_cast<size_t>(dirty[b + i]) * stride, stride);
    }
    LEANEMB_RETURN_IF_ERROR(store_->write_rows(rows, stage_out_.as<uint8_t>()));
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < n; ++i) index_->dirty[dirty[b + i]] = 0;
    stats_.writebacks += n;
    stats_.bytes_written += n * stride;
    if (memory_) memory_->record_transfer(Tier::kDevice, store_tier_, n * stride);
  }
  return store_->flush();
}

Status RowCache::read_row(int64_t row, uint8_t* fat) {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  const size_t stride = layout_.stride_bytes;
  {
    std::lock_guard<std::mutex> l(mu_);
    const int32_t s = index_->find(row);
    if (s >= 0) {
      std::memcpy(fat, slots() + static_cast<size_t>(s) * stride, stride);
      return Status();
    }
  }
  uint8_t present = 0;
  const int64_t r[1] = {row};
  LEANEMB_RETURN_IF_ERROR(store_->read_rows(r, fat, &present));
  if (!present) init_(row, fat);
  return Status();
}

Status RowCache::read_rows(int64_t begin, int64_t count, uint8_t* out) {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  const size_t stride = layout_.stride_bytes;
  constexpr int64_t kChunk = 4096;
  std::vector<int64_t> missing, pos;
  std::vector<uint8_t> buf, present;
  for (int64_t c0 = 0; c0 < count; c0 += kChunk) {
    const int64_t n = std::min(kChunk, count - c0);
    missing.clear();
    pos.clear();
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int64_t i = c0; i < c0 + n; ++i) {
        const int32_t s = index_->find(begin + i);
        if (s >= 0) {
          std::memcpy(out + static_cast<size_t>(i) * stride, slots() + static_cast<size_t>(s) * stride, stride);
        } else {
          missing.push_back(begin + i);
          pos.push_back(i);
        }
      }
    }
    if (missing.empty()) continue;
    buf.resize(missing.size() * stride);
    present.resize(missing.size());
    LEANEMB_RETURN_IF_ERROR(store_->read_rows(missing, buf.data(), present.data()));
    for (size_t k = 0; k < missing.size(); ++k) {
      uint8_t* dst = out + static_cast<size_t>(pos[k]) * stride;
      if (present[k]) std::memcpy(dst, buf.data() + k * stride, stride);
      else init_(missing[k], dst);
    }
  }
  return Status();
}

Status RowCache::write_row(int64_t row, const uint8_t* fat) {
  LEANEMB_RETURN_IF_ERROR(wait_prefetch());
  std::lock_guard<std::mutex> f(fetch_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    const int32_t s = index_->find(row);
    if (s >= 0) {
      std::memcpy(slots() + static_cast<size_t>(s) * layout_.stride_bytes, fat, layout_.stride_bytes);
      index_->dirty[s] = 1;
      return Status();
    }
  }
  const int64_t r[1] = {row};
  return store_->write_rows(r, fat);
}

CacheStats RowCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  CacheStats s = stats_;
  s.resident_rows = capacity_ - static_cast<int64_t>(index_->free_slots.size());
  s.hits = s.lookups >= s.misses ? s.lookups - s.misses : 0;
  const RowStoreStats ss = store_->stats();
  s.store_read_ops = ss.read_ops;
  s.store_write_ops = ss.write_ops;
  s.store_read_seconds = ss.read_seconds;
  s.store_write_seconds = ss.write_seconds;
  return s;
}

}  // namespace leanemb::tiered
