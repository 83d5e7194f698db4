// RowCache: slots, index (row -> slot map, eviction heap), fetch with write-back, prefetch thread.
#include "tiered/row_cache.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/row_access.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr uint8_t kPinStep = 1, kPinPrefetch = 2, kInFlight = 4;
// Slot metadata (24 B per slot, megabytes for a large cache) is prefetched this many entries
// ahead by the passes over a step's pins: one pass touches tens of thousands of random slots.
constexpr size_t kMetaAhead = 32;
constexpr int64_t kMapAhead = 32;  // the same for the row -> slot map's buckets in lookup passes
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
  // A slot's metadata in one cache line's share: a hit reads and writes one line, not four.
  struct SlotMeta {
    uint64_t last_use;  // tick of the last acquire
    uint32_t freq;      // acquires since fetched (LFU)
    int32_t heap_pos;   // LFU: position in heap, -1 when not in it; LRU: version
    uint8_t flags;      // pins, in flight
    uint8_t dirty;
    uint8_t pad[6];
  };
  static_assert(sizeof(SlotMeta) == 24);
  SlotMeta* meta = nullptr;      // [cap]
  int32_t* heap = nullptr;       // [cap] LFU heap of slots
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

  bool evictable(int32_t s) const { return meta[s].flags == 0 && slot_row[s] >= 0; }

  // Prefetches for the LRU victim `ahead` entries past the ring's head (stale entries make this
  // a guess): its metadata and row (`bucket` false), or, once that row has arrived, its map
  // bucket, which erase() probes (`bucket` true). Victim choice is a chain of dependent cache
  // misses per row; a fetch with thousands of misses runs them ahead of use this way.
  void prefetch_victim(uint64_t ahead, bool bucket) const {
    if (policy != CachePolicy::kLru || head + ahead >= tail) return;
    const int32_t s = queue[(head + ahead) % queue_cap].slot;
    if (!bucket) {
      __builtin_prefetch(&meta[s]);
      __builtin_prefetch(&slot_row[s]);
    } else if (slot_row[s] >= 0) {
      prefetch_row(slot_row[s]);
    }
  }

  // ---- the evictable set ----
  void make_evictable(int32_t s) {
    if (policy == CachePolicy::kLfu) {
      if (meta[s].heap_pos < 0) heap_push(s);
      return;
    }
    if (tail - head == queue_cap) compact();
    const uint32_t v = static_cast<uint32_t>(meta[s].heap_pos) + 1;
    meta[s].heap_pos = static_cast<int32_t>(v);
    queue[tail++ % queue_cap] = QueueEntry{s, v};
  }
  void unmake_evictable(int32_t s) {
    if (policy == CachePolicy::kLfu && meta[s].heap_pos >= 0) heap_remove(s);
    // LRU: the slot's entry stays; pinned, it is skipped, and its release appends a new one.
  }
  int32_t pop_victim() {
    if (policy == CachePolicy::kLfu) return heap_pop();
    while (head < tail) {
      const QueueEntry e = queue[head++ % queue_cap];
      if (static_cast<uint32_t>(meta[e.slot].heap_pos) == e.version && evictable(e.slot)) return e.slot;
    }
    return -1;
  }
  // Drops stale entries (at most cap stay, so the ring is at most half full afterwards).
  void compact() {
    uint64_t out = head;
    for (uint64_t i = head; i < tail; ++i) {
      if (i + kMetaAhead < tail) {  // millions of entries, each naming a random slot
        const int32_t ahead = queue[(i + kMetaAhead) % queue_cap].slot;
        __builtin_prefetch(&meta[ahead]);
        __builtin_prefetch(&slot_row[ahead]);
      }
      const QueueEntry e = queue[i % queue_cap];
      if (static_cast<uint32_t>(meta[e.slot].heap_pos) == e.version && evictable(e.slot)) queue[out++ % queue_cap] = e;
    }
    tail = out;
  }

  bool less(int32_t a, int32_t b) const {
    if (meta[a].freq != meta[b].freq) return meta[a].freq < meta[b].freq;
    if (meta[a].last_use != meta[b].last_use) return meta[a].last_use < meta[b].last_use;
    return a < b;
  }
  void heap_set(int32_t i, int32_t s) {
    heap[i] = s;
    meta[s].heap_pos = i;
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
    const int32_t i = meta[s].heap_pos;
    meta[s].heap_pos = -1;
    const int32_t last = heap[--heap_size];
    if (i == heap_size) return;
    heap_set(i, last);
    sift_up(i);
    sift_down(meta[last].heap_pos);
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
  std::vector<int64_t> wb_rows, rd_rows;
  std::vector<int32_t> found;
  std::vector<size_t> miss_at;  // positions of the rows pass 1 did not find
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
  carve(ix->meta, ucap);
  carve(ix->map, m);
  carve(ix->queue, qcap);
  carve(ix->heap, ucap);
  ix->map_mask = m - 1;
  ix->queue_cap = qcap;
  std::fill(ix->slot_row, ix->slot_row + cap, int64_t{-1});
  std::fill(ix->meta, ix->meta + cap,
            Index::SlotMeta{0, 0, options.policy == CachePolicy::kLfu ? -1 : 0, 0, 0, {}});
  std::fill(ix->map, ix->map + m, Index::MapEntry{Index::kEmpty, -1});
  ix->free_slots.resize(ucap);
  for (int64_t s = 0; s < cap; ++s) ix->free_slots[ucap - 1 - static_cast<size_t>(s)] = static_cast<int32_t>(s);
  c->plan_ = std::make_unique<Plan>();
  c->slot_row_ = ix->slot_row;
  c->index_ = std::move(ix);
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

void RowCache::pin_locked(int64_t slot, PinSet set) {
  Index& ix = *index_;
  const int32_t s = static_cast<int32_t>(slot);
  const uint8_t bit = pin_bit(set);
  if (ix.meta[s].flags & bit) return;
  ix.unmake_evictable(s);
  ix.meta[s].flags |= bit;
  pinned_[static_cast<int>(set)].push_back(slot);
}

void RowCache::release(PinSet set) {
  std::lock_guard<std::mutex> l(mu_);
  Index& ix = *index_;
  const uint8_t bit = pin_bit(set);
  const auto& pins = pinned_[static_cast<int>(set)];
  for (size_t i = 0; i < pins.size(); ++i) {
    if (i + kMetaAhead < pins.size()) {
      __builtin_prefetch(&ix.meta[pins[i + kMetaAhead]]);
      __builtin_prefetch(&ix.slot_row[pins[i + kMetaAhead]]);  // evictable() reads it
    }
    const int32_t s = static_cast<int32_t>(pins[i]);
    ix.meta[s].flags &= static_cast<uint8_t>(~bit);
    if (ix.evictable(s)) ix.make_evictable(s);
  }
  pinned_[static_cast<int>(set)].clear();
}

void RowCache::mark_dirty(std::span<const int64_t> slots) {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kMetaAhead < slots.size()) __builtin_prefetch(&index_->meta[slots[i + kMetaAhead]]);
    index_->meta[slots[i]].dirty = 1;
  }
}

Status RowCache::acquire(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool touch) {
  {
    // Fast path: every row resident (prefetched or hot): pin them without waiting for anyone.
    std::unique_lock<std::mutex> l(mu_);
    const Index& ix = *index_;
    found_.resize(rows.size());
    const int64_t n = static_cast<int64_t>(rows.size());
    int32_t* found = found_.data();
    int missing = 0;
    // Lookups only (the index is not modified): in parallel, with the probes prefetched.
#pragma omp parallel for num_threads(n >= 16384 ? options_.num_threads : 1) reduction(| : missing) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      if (i + kMapAhead < n) ix.prefetch_row(rows[i + kMapAhead]);
      const int32_t s = ix.find(rows[i]);
      found[i] = s;
      missing |= (s < 0 || (ix.meta[s].flags & kInFlight)) ? 1 : 0;
    }
    if (!missing) {
      const uint64_t tick = touch ? ++tick_ : 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (i + kMetaAhead < rows.size()) __builtin_prefetch(&index_->meta[found[i + kMetaAhead]]);
        const int32_t s = found[i];
        if (touch && index_->meta[s].last_use != tick) {
          ++stats_.lookups;
          ++index_->meta[s].freq;
          index_->meta[s].last_use = tick;
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
  // Reused between fetches (under fetch_mu_): a step's fetch would otherwise allocate and free
  // megabytes of vectors, and the heap's trim / regrowth faults in fresh zeroed pages each time.
  Plan& plan = *plan_;
  plan.fresh.clear();
  plan.victims.clear();
  // Undoes phase A: new rows leave the map, victims come back (with their dirty flags).
  // Victims not restored (already written back) leave their slots free.
  auto rollback_locked = [&](bool restore_victims) {
    for (auto it = plan.fresh.rbegin(); it != plan.fresh.rend(); ++it) {
      ix.erase(it->row);
      ix.slot_row[it->slot] = -1;
      ix.meta[it->slot].flags = 0;
      ix.meta[it->slot].dirty = 0;
      if (it->from_free || !restore_victims) ix.free_slots.push_back(it->slot);
    }
    if (restore_victims)
      for (const Plan::Victim& v : plan.victims) {
        ix.slot_row[v.slot] = v.row;
        ix.meta[v.slot].dirty = v.dirty ? 1 : 0;
        ix.insert(v.row, v.slot);
        ix.make_evictable(v.slot);
      }
    auto& pins = pinned_[static_cast<int>(set)];
    std::erase_if(pins, [&](int64_t s) { return ix.slot_row[s] < 0 || ix.meta[s].flags == 0; });
  };
  // Phase A (locked): hits are pinned; each miss gets a free slot or a victim's.
  {
    std::lock_guard<std::mutex> l(mu_);
    const uint64_t tick = ++tick_;
    // Pass 1: lookups only (probes prefetched; in parallel on the owner's thread).
    const int64_t n = static_cast<int64_t>(rows.size());
    plan.found.resize(rows.size());
    int32_t* found = plan.found.data();
#pragma omp parallel for num_threads(!prefetching && n >= 16384 ? options_.num_threads : 1) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      if (i + kMapAhead < n) ix.prefetch_row(rows[i + kMapAhead]);
      found[i] = ix.find(rows[i]);
    }
    // Pass 2: the hits update their metadata (prefetched ahead) and are pinned, all of them
    // before any victim is chosen, so that no miss can evict a row this call still needs.
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + kMetaAhead < rows.size() && found[i + kMetaAhead] >= 0) __builtin_prefetch(&ix.meta[found[i + kMetaAhead]]);
      const int32_t s = found[i];
      if (s < 0) continue;
      if (touch && ix.meta[s].last_use != tick) {
        if (!prefetching) ++stats_.lookups;
        ++ix.meta[s].freq;
        ix.meta[s].last_use = tick;
      }
      pin_locked(s, set);
      if (slots_out) slots_out[i] = s;
    }
    // Pass 3, in order: each miss takes a free slot or a victim's. A row that repeats after its
    // first miss is found in the map by then. The map buckets of later misses and the coming
    // victims' metadata, rows and buckets are prefetched.
    plan.miss_at.clear();
    for (size_t i = 0; i < rows.size(); ++i)
      if (found[i] < 0) plan.miss_at.push_back(i);
    const size_t num_miss = plan.miss_at.size();
    for (size_t k = 0; k < num_miss; ++k) {
      if (k + 16 < num_miss) ix.prefetch_row(rows[plan.miss_at[k + 16]]);
      if (ix.free_slots.size() <= k + 16) {  // the miss 16 ahead will need a victim
        ix.prefetch_victim(16, false);
        ix.prefetch_victim(8, true);
      }
      const size_t i = plan.miss_at[k];
      const int64_t r = rows[i];
      int32_t s = ix.find(r);
      if (s < 0) {
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
          plan.victims.push_back({s, ix.slot_row[s], ix.meta[s].dirty != 0});
          ix.erase(ix.slot_row[s]);
        }
        plan.fresh.push_back({r, s, from_free});
        ix.slot_row[s] = r;
        ix.insert(r, s);
        ix.meta[s].freq = 1;
        ix.meta[s].last_use = tick;
        ix.meta[s].dirty = 0;
        ix.meta[s].flags = kInFlight;
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
  std::vector<int64_t>& wb_rows = plan.wb_rows;
  wb_rows.clear();
  for (const Plan::Victim& v : plan.victims)
    if (v.dirty) wb_rows.push_back(v.row);
  Status st;
  if (!wb_rows.empty()) {
    st = grow(stage_out_, wb_rows.size());
    if (st.ok()) {
      size_t k = 0;
      for (size_t i = 0; i < plan.victims.size(); ++i) {
        const Plan::Victim& v = plan.victims[i];
        if (i + 8 < plan.victims.size())
          kernels::prefetch_span<0, 0>(slots() + static_cast<size_t>(plan.victims[i + 8].slot) * stride, stride);
        if (v.dirty) std::memcpy(stage_out_.as<uint8_t>() + (k++) * stride, slots() + static_cast<size_t>(v.slot) * stride, stride);
      }
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
  std::vector<int64_t>& rd_rows = plan.rd_rows;
  rd_rows.resize(plan.fresh.size());
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
    if (i + 8 < plan.fresh.size())
      kernels::prefetch_span<1, 0>(slots() + static_cast<size_t>(plan.fresh[i + 8].slot) * stride, stride);
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
  for (const Plan::Fresh& f : plan.fresh) ix.meta[f.slot].flags &= static_cast<uint8_t>(~kInFlight);
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
  job_complete_ = false;
  has_job_ = true;
  cv_.notify_all();
  return Status();
}

Result<bool> RowCache::take_prefetched(std::span<const int64_t> rows, int64_t* slots_out) {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !has_job_ && !busy_; });
  stats_.exposed_seconds += seconds_since(t0);
  if (!prefetch_status_.ok()) {
    Status st = prefetch_status_;
    prefetch_status_ = Status();
    return st;
  }
  if (!job_complete_ || rows.size() != job_rows_ || job_slots_.size() != rows.size() ||
      (!rows.empty() && std::memcmp(rows.data(), job_.data(), rows.size() * 8) != 0))
    return false;
  job_complete_ = false;
  // The prefetch's pins become the step's: every distinct row of the batch, each counted once
  // as a lookup (the prefetch counted none).
  Index& ix = *index_;
  auto& from = pinned_[static_cast<int>(PinSet::kPrefetch)];
  auto& to = pinned_[static_cast<int>(PinSet::kStep)];
  for (size_t i = 0; i < from.size(); ++i) {
    if (i + kMetaAhead < from.size()) __builtin_prefetch(&ix.meta[from[i + kMetaAhead]]);
    uint8_t& f = ix.meta[from[i]].flags;
    f &= static_cast<uint8_t>(~kPinPrefetch);
    if (!(f & kPinStep)) {
      f |= kPinStep;
      to.push_back(from[i]);
    }
  }
  stats_.lookups += from.size();
  from.clear();
  for (size_t i = 0; i < rows.size(); ++i) slots_out[i] = job_slots_[i];
  return true;
}

Status RowCache::wait_prefetch() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !has_job_ && !busy_; });
  Status st = prefetch_status_;
  prefetch_status_ = Status();
  return st;
}

void RowCache::prefetch_main() {
  // Best effort: a lower priority needs no privilege; a refused one (negative values without
  // CAP_SYS_NICE) leaves the thread as it was.
  if (options_.prefetch_nice != 0)
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), options_.prefetch_nice);
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
      job_slots_.resize(rows.size());
      st = fetch(rows, job_slots_.data(), PinSet::kPrefetch, true, true);
    }
    const bool complete = st.ok();
    // A cache too small for two steps' rows at once: the step fetches the rest itself.
    if (st.code() == StatusCode::kResourceExhausted && st.message().rfind("row cache of", 0) == 0) st = Status();
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
      job_complete_ = complete;
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
    for (int64_t s = 0; s < capacity_; ++s)
      if (index_->meta[s].dirty && index_->slot_row[s] >= 0) dirty_slots.push_back(static_cast<int32_t>(s));
  }
  constexpr size_t kChunk = 4096;
  for (size_t b = 0; b < dirty_slots.size(); b += kChunk) {
    const size_t n = std::min(kChunk, dirty_slots.size() - b);
    if (stage_out_.size_bytes() < n * stride) {
      stage_out_.reset();
      LEANEMB_ASSIGN_OR_RETURN(stage_out_, staging_alloc_->allocate(n * stride, Category::kIoBuffers, 4096));
    }
    std::vector<int64_t> rows(n);
    for (size_t i = 0; i < n; ++i) {
      rows[i] = slot_row_[dirty_slots[b + i]];
      std::memcpy(stage_out_.as<uint8_t>() + i * stride, slots() + static_cast<size_t>(dirty_slots[b + i]) * stride, stride);
    }
    LEANEMB_RETURN_IF_ERROR(store_->write_rows(rows, stage_out_.as<uint8_t>()));
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < n; ++i) index_->meta[dirty_slots[b + i]].dirty = 0;
    stats_.writebacks += n;
    stats_.bytes_written += n * stride;
    if (memory_) memory_->record_transfer(Tier::kDevice, store_tier_, n * stride);
  }
  return store_->flush();
}

Status RowCache::read_row(int64_t row, uint8_t* fat) { return read_rows(row, 1, fat); }

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
      index_->meta[s].dirty = 1;
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
