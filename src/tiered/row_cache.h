// RowCache: a device-tier cache of one table's hot fat rows over a RowStore (host RAM or a file).
//
// The cache has `capacity` slots of fat rows (weights and optimizer state together, exactly as
// a resident table stores them) in the device tier (category row_cache). acquire() maps table
// rows to slots: a resident row is a hit; a missing row gets a free slot or the slot of a
// victim (the least recently used row, the least frequently used one for LFU, or CLOCK's
// second-chance pick; never a pinned row), whose bytes are written back to the store first if
// they changed (dirty). A row that was never written to the store is initialized by the
// table's initializer when it is first fetched, so a cached table starts exactly like a
// resident one.
//
// Pins: every acquire() pins the slots it returns in one of two pin sets (the step in flight,
// or the prefetch of the next step); a pinned slot is never evicted. release() drops a set.
//
// Prefetch: start_prefetch() runs acquire() for the next step's rows on a background thread,
// pinned in the prefetch set, while the caller computes the current step with its own rows
// pinned. The cache's index is guarded by a mutex; the I/O runs outside it, on slots no one else
// touches (victims are unpinned, new rows are pinned by the prefetch set until their bytes are
// in). Only one fetch runs at a time. The arithmetic never depends on which rows are cached, so
// results are bit-identical with any capacity, policy, store and prefetch setting.
//
// Threads: a large fetch splits its lookups and row copies over the pool (core/parallel.h,
// num_threads; finding its distinct rows is one serial pass). The prefetch thread does so only
// while the owner waits for it: while the step computes, its cores are busy and the prefetch
// runs alone. The split never changes the cache's state (slots, victims, counters).
//
// Errors: acquire() returns ResourceExhausted when the distinct rows of one call do not fit in
// the slots that are not pinned by the other set, and the store's errors (IoError,
// ResourceExhausted for a full disk); after an error no row's bytes are lost: a failed
// write-back leaves its rows dirty in their slots, a failed read leaves the rows in the store.
//
// Thread safety: acquire/release/mark_dirty/flush from the owner's thread; start_prefetch()'s
// work runs on the cache's own thread; stats() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "leanemb/memory_system.h"
#include "leanemb/optimizer.h"
#include "leanemb/status.h"
#include "memory/accounted_resource.h"
#include "tiered/cache_index.h"
#include "tiered/row_store.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {

using leanemb::CachePolicy;
using leanemb::cache_policy_name;   // include/leanemb/table_options.h
using leanemb::parse_cache_policy;

enum class PinSet : uint8_t { kStep = 0, kPrefetch = 1 };

using CacheStats = RowCacheStats;  // include/leanemb/embedding.h

struct RowCacheOptions {
  int64_t capacity_rows = 0;  // slots (1 <= capacity <= num_rows)
  CachePolicy policy = CachePolicy::kLru;
  int num_threads = 1;            // pool threads (parallel_for) for the parallel parts of large fetches
  int prefetch_nice = 0;          // the prefetch thread's nice value (TableCacheOptions::prefetch_nice)
  // Test hook: the index's 32-bit stamps / ticks are renormalized when they reach this value
  // (>= 16; see cache_index.h). Tests lower it to exercise the renormalization.
  uint32_t renormalize_at = 0xFFFFFFF0u;
  // Calls of at least this many ids are reduced to their distinct rows first (see Distinct
  // below); tests raise it to compare with the cache that probes every id.
  size_t distinct_min_ids = kRowCacheDistinctMinIds;
};

// Fills one fat row (stride_bytes) of table row `row` with its initial bytes. A large fetch
// calls it from several threads at once (for different rows): it must be thread-safe.
using RowInitFn = std::function<void(int64_t row, uint8_t* fat)>;

class RowCache {
 public:
  // `device`: the slots and index (category row_cache). `staging`: fetch / write-back buffers
  // (category io_buffers). `memory` (may be null): transfers are recorded there. Errors:
  // InvalidArgument (capacity), ResourceExhausted (allocation).
  static Result<std::unique_ptr<RowCache>> create(const RowCacheOptions& options, const RowLayout& layout,
                                                  std::unique_ptr<RowStore> store, RowInitFn init,
                                                  Allocator* device, Allocator* staging, MemorySystem* memory);
  ~RowCache();

  int64_t capacity() const { return capacity_; }
  int64_t num_rows() const { return store_->num_rows(); }
  const RowLayout& layout() const { return layout_; }
  uint8_t* slots() const { return slots_.as<uint8_t>(); }
  // The table row in slot s (-1 when free), and the array of them: the stochastic-rounding key
  // rows (kernels::TableView::key_rows32 / key_rows). int32 when the table has at most 2^31
  // rows (slot_rows32() set, slot_rows64() null), else int64 (the other way round).
  int64_t slot_row(int64_t s) const { return index_.slot_row(static_cast<int32_t>(s)); }
  const int32_t* slot_rows32() const { return index_.slot_rows32(); }
  const int64_t* slot_rows64() const { return index_.slot_rows64(); }
  RowStore* store() const { return store_.get(); }

  // slots_out[i] = the slot of rows[i] (rows may repeat; they are valid table rows), fetching
  // misses, pinned in `set`. Waits for a prefetch in flight unless every row is resident.
  // `touch` false: resident rows are not counted as lookups and keep their recency and
  // frequency (the update of a step whose forward already acquired its rows).
  Status acquire(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool touch = true);
  // Unpins every slot of `set`. Releasing the prefetch set also makes the last prefetch's
  // mapping untakeable (take_prefetched returns false), even one still in flight.
  void release(PinSet set);
  // Marks slots as changed (written back on eviction or flush). REQUIRES: pinned.
  void mark_dirty(std::span<const int64_t> slots);
  // Starts fetching `rows` (copied into an io_buffers buffer; pinned in the prefetch set) on the
  // cache's thread; waits for an earlier prefetch first. The prefetch's own error, if any, is
  // returned by the next wait_prefetch() / acquire(). Errors: ResourceExhausted (the copy).
  Status start_prefetch(std::span<const int64_t> rows);
  // Waits until no prefetch is running (the wait counts in exposed_seconds); returns and clears
  // the last prefetch's error.
  Status wait_prefetch();
  // After a prefetch of exactly `rows` completed: hands its pins to the step set (each distinct
  // row counted as one lookup), writes its slots to slots_out and returns true, without looking
  // any row up again. False (nothing changed) when the last prefetch was for other rows or did
  // not fetch them all; the prefetch's error, if any.
  Result<bool> take_prefetched(std::span<const int64_t> rows, int64_t* slots_out);
  // Writes every dirty row back to the store (they stay resident, clean) and flushes the store.
  Status flush();
  // One row's current bytes: from its slot if resident, else from the store (or the
  // initializer). Not for use while a prefetch is in flight (waits for it).
  Status read_row(int64_t row, uint8_t* fat);
  // Rows [begin, begin + count) into out [count, stride]: the range read from the store in
  // large transfers (RowStore::read_range), rows never written initialized, and resident rows
  // taken from their slots (their bytes are the current ones). Not while a prefetch is in flight
  // (waits for it). Errors: the store's.
  Status read_rows(int64_t begin, int64_t count, uint8_t* out);
  // Rows `rows` (any order, valid rows) into out [rows.size(), stride]: resident rows from their
  // slots, the others read from the store in one batch (RowStore::read_rows, its queue depth in
  // flight), rows never written initialized. Not while a prefetch is in flight (waits for it).
  Status read_rows_at(std::span<const int64_t> rows, uint8_t* out);
  // Replaces one row's bytes: in its slot (marked dirty) if resident, else in the store.
  Status write_row(int64_t row, const uint8_t* fat);
  // Replaces rows [begin, begin + count) from src [count, stride] (a restore). While the cache
  // has free slots, the range's first rows go to the cache alone: each row not resident takes a
  // free slot, and every row of that prefix gets its bytes in its slot, dirty (the store gets
  // them on eviction; stats().placed_rows counts them). So a restore into a fresh cache warms
  // it and writes nothing to the store for the rows it holds. The rest of the range goes to
  // the store in large aligned transfers (RowStore::write_range), and each resident row of it
  // gets the same bytes in its slot, clean (the store holds them). Waits for a prefetch in
  // flight. Errors: the store's; then the placed rows hold their new bytes, the other resident
  // rows of the range keep their old bytes and are marked dirty (so that their possibly torn
  // store copies are rewritten on eviction), and the other rows of the range may hold old, new
  // or torn bytes (as RowStore::write_rows).
  Status write_rows(int64_t begin, int64_t count, const uint8_t* src);

  CacheStats stats() const;

 private:
  RowCache() = default;
  struct Plan;
  // A large call's distinct rows, in the order of their first occurrence, and each row's index
  // among them: the index is probed, pinned and fetched once per distinct row (a step's ids
  // repeat several times over). The cache's state after a call is the same as with every id:
  // repeats are no-ops in each pass. One per thread that calls fetch (the owner, the prefetch).
  struct Distinct {
    explicit Distinct(std::pmr::memory_resource* r) : uniq(r), slots(r), inv(r), keys(r) {}
    std::pmr::vector<int64_t> uniq, slots;
    std::pmr::vector<uint32_t> inv;
    std::pmr::vector<uint64_t> keys;
    bool active = false;  // the last of() deduplicated
    // `rows` itself for calls below min_ids ids or tables of more than 2^32 rows, else the
    // distinct rows (slots sized to them). Throws std::bad_alloc (the scratch's budget).
    std::span<const int64_t> of(std::span<const int64_t> rows, int64_t num_rows, size_t min_ids);
    // out[i] = slots[inv[i]] for the n rows of the last of().
    void expand(int64_t* out, size_t n) const;
  };
  // One calling thread's scratch (the owner's, the prefetch thread's), kept between calls and
  // counted in io_buffers (row_cache_scratch_bytes predicts the owner's).
  struct CallerScratch {
    explicit CallerScratch(Allocator* a) : res(a, Category::kIoBuffers), distinct(&res), found(&res), slots(&res) {}
    AccountedResource res;
    Distinct distinct;
    std::pmr::vector<int32_t> found;  // the owner's fast-path lookups (under mu_)
    std::pmr::vector<int64_t> slots;  // the prefetch's slots of job_ (prefetch thread, then mu_)
  };
  // acquire() of `rows` as given (the distinct rows of a large call, or a small call's ids).
  // `distinct`: no row repeats (the fetch then probes each miss once).
  Status acquire_rows(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool touch, bool distinct);
  // `found`: the rows' lookups when the caller has them and no fetch changed the map since
  // (else null: pass 1 looks the rows up).
  Status fetch(std::span<const int64_t> rows, int64_t* slots_out, PinSet set, bool prefetching, bool touch, bool distinct,
               const int32_t* found = nullptr);
  // found: pass 1's lookups of the rows (fetch(), before taking mu_).
  Status plan_fetch_locked(std::span<const int64_t> rows, const int32_t* found, int64_t* slots_out, PinSet set,
                           bool prefetching, bool touch, bool distinct);
  // Threads for a fetch's parallel parts (distinct rows, lookups, copies): the owner's fetch
  // uses num_threads; the prefetch thread uses one while the step computes (its cores are
  // busy), and num_threads once the owner waits for it (the pool is idle then).
  int fetch_threads(bool prefetching) const;
  // Waits (under mu_, held by l) until no prefetch is queued or running, counted in
  // owner_waiting_ meanwhile.
  void wait_idle_locked(std::unique_lock<std::mutex>& l);
  void rollback_locked(PinSet set, bool restore_victims);
  bool lookup(std::span<const int64_t> rows, int32_t* found, int num_threads, bool check_flags = true) const;
  void pin_locked(int32_t slot, PinSet set);
  // Room for n more pins in `set` (at most one per slot). Throws std::bad_alloc.
  void reserve_pins_locked(PinSet set, size_t n);
  // Calls f(row, slot) for each resident row in [begin, begin + count). Under mu_, with no
  // fetch in flight (fetch_mu_ held).
  template <typename F>
  void for_each_resident_locked(int64_t begin, int64_t count, F&& f) const;
  // write_rows' prefix: rows from `begin` into slots (free ones for rows not resident), dirty,
  // until a row finds no free slot; returns the first row not placed. REQUIRES: mu_ and fetch_mu_.
  int64_t place_rows_locked(int64_t begin, int64_t count, const uint8_t* src);
  void prefetch_main();
  void stop_worker();

  RowCacheOptions options_;
  RowLayout layout_;
  std::unique_ptr<RowStore> store_;
  RowInitFn init_;
  Allocator* staging_alloc_ = nullptr;
  MemorySystem* memory_ = nullptr;
  Tier store_tier_ = Tier::kHost;
  int64_t capacity_ = 0;

  Allocation slots_;
  Allocation index_mem_;  // the index's arrays (row_cache_index_bytes)
  CacheIndex index_;
  std::unique_ptr<Plan> plan_;  // fetch's reused scratch (under fetch_mu_; io_buffers)

  mutable std::mutex mu_;        // guards the index, pins, dirty flags and stats
  uint64_t map_version_ = 0;     // changes whenever the row -> slot map may change (under mu_)
  std::mutex fetch_mu_;          // one fetch at a time
  // Slots pinned per set (step scratch, not per slot; io_buffers), under mu_.
  struct Pins {
    explicit Pins(Allocator* a)
        : res(a, Category::kIoBuffers), set{std::pmr::vector<int32_t>(&res), std::pmr::vector<int32_t>(&res)} {}
    AccountedResource res;
    std::pmr::vector<int32_t> set[2];
  };
  std::unique_ptr<Pins> pins_;
  // Which flag bit and which of pins_->set a PinSet uses: the two swap when a forward takes a
  // prefetch while the step set is empty (take_prefetched), so the prefetch's pins become the
  // step's without touching a slot. Under mu_.
  bool pins_swapped_ = false;
  int pin_index(PinSet s) const { return static_cast<int>(s) ^ (pins_swapped_ ? 1 : 0); }
  uint8_t pin_bit(PinSet s) const { return pin_index(s) == 0 ? CacheIndex::kPinStep : CacheIndex::kPinPrefetch; }
  std::pmr::vector<int32_t>& pinned(PinSet s) { return pins_->set[pin_index(s)]; }
  CacheStats stats_;
  uint64_t tick_ = 0;

  std::unique_ptr<CallerScratch> owner_;     // acquire()'s (the owner's thread)
  std::unique_ptr<CallerScratch> prefetch_;  // the prefetch thread's

  // The prefetch thread.
  std::thread worker_;
  std::condition_variable cv_;
  std::atomic<int> owner_waiting_{0};  // threads in wait_idle_locked (the prefetch reads it)
  bool stop_ = false;
  bool has_job_ = false;
  bool busy_ = false;
  Allocation job_;  // the prefetch's rows (io_buffers)
  size_t job_rows_ = 0;
  bool job_complete_ = false;       // the last prefetch fetched every row of job_, still pinned
  uint64_t prefetch_epoch_ = 0;     // release(kPrefetch) calls (a prefetch in flight across one is not takeable)
  Status prefetch_status_;
};

}  // namespace leanemb::tiered
