// CacheIndex: the row cache's index (src/tiered/row_cache.h): which table row each slot holds, the
// row -> slot map, per-slot flags and the eviction order, in memory proportional to the cache's
// slots and nothing per table row (row_cache_index_bytes() in sizes.h gives the exact bytes).
//
// Per slot: its row (int32 when the table has at most 2^31 rows, else int64; the kernels read
// this array as the stochastic-rounding key rows, kernels::TableView::key_rows32 / key_rows),
// one flag byte (pins, in flight, dirty, resident, and a 3-bit mark of the last call that
// counted it) and the policy's key: LRU a release stamp (u32), LFU a frequency and a last-use
// tick (u32 each), CLOCK none.
//
// Marks: calls take marks 2..7 in turn; every sixth call (mark 2) first demotes every nonzero
// mark to 1. So mark == the call's mark means "counted by this call", and mark != 0 means "used
// since CLOCK's hand last cleared it" (CLOCK's reference bit).
//
// Map: Robin Hood open addressing over m = ceil(1.25 x capacity) 32-bit entries (load <= 0.8).
// An entry packs slot + 1 (0 = empty), the probe distance (saturating; the exact distance is then
// recomputed from the row) and a tag of the row's hash; a tag match is confirmed against
// slot_row, so the map holds no row bits and rows may use all 63 bits.
//
// Eviction, LRU and LFU: the victim is the evictable slot (resident, unpinned, not in flight) of
// smallest (key, slot). LRU's key is the stamp given when the slot was last made evictable (so
// the victim is the slot released longest ago); LFU's is (frequency, last use). Candidates: a
// scan over the slots selects the smallest keys (at most row_cache_candidate_entries), sorted,
// consumed in order and validated lazily (an entry whose slot was pinned since, or whose key
// changed, is skipped). Invariant: every evictable slot whose (key, slot) is at most the batch's
// threshold T is in the batch or the overflow heap; every other evictable slot is above T. A
// slot made evictable with a key <= T (LFU only: LRU stamps only grow) goes to the overflow
// heap; when the batch and the heap are used up (or the heap is full), the next victim starts a
// new scan. Pinning costs nothing; a victim costs O(1) amortized plus a sequential scan of the
// flag and key arrays every ~capacity/16 victims.
//
// Eviction, CLOCK (second chance): a hand walks the slots in order; an evictable slot with a
// nonzero mark loses it (its second chance) and the hand moves on; the first evictable slot
// without one is the victim. A fetched row starts unmarked (assign), so only a row a later call
// counts again is protected. Slots the hand passes that are not evictable keep their marks. At
// most two laps: the first one clears the marks of every evictable slot, so the second finds a
// victim if there is any. Releasing a slot costs nothing (no key to write). The hand clears
// marks only of unpinned slots, and a call pins every row it counts, so a row is never counted
// twice in one call.
//
// Stamps and ticks are 32-bit: when one reaches `renormalize_at`, the keys of the resident slots
// are replaced by their dense ranks (order and ties kept) and the candidates rescanned.
//
// Thread safety: none; the row cache calls it under its mutex (find() may run on several threads
// at once while nothing modifies the index).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "leanemb/embedding.h"

namespace leanemb::tiered {

class CacheIndex {
 public:
  static constexpr uint8_t kPinStep = 1, kPinPrefetch = 2, kInFlight = 4, kDirty = 8, kResident = 16;

  // Carves the arrays out of `mem` (row_cache_index_bytes(capacity, num_rows, policy) bytes,
  // 8-aligned) and initializes them: every slot free. Rows are < num_rows (the slot rows are
  // int32 when num_rows <= 2^31). REQUIRES: 1 <= capacity < 2^31, renormalize_at >= 16.
  void init(void* mem, int64_t capacity, int64_t num_rows, CachePolicy policy, uint32_t renormalize_at);

  int64_t capacity() const { return cap_; }
  // [capacity] the slots' rows (-1 free): exactly one of the two is set (sizes.h,
  // row_cache_slot_row_bytes).
  const int32_t* slot_rows32() const { return row32_; }
  const int64_t* slot_rows64() const { return row64_; }
  int64_t slot_row(int32_t s) const { return row32_ ? row32_[s] : row64_[s]; }
  uint8_t& flags(int32_t s) { return flags_[s]; }
  uint8_t flags(int32_t s) const { return flags_[s]; }
  bool evictable(int32_t s) const {
    return (flags_[s] & (kPinStep | kPinPrefetch | kInFlight | kResident)) == kResident;
  }
  // What a pass over a step's slots touches: the flags (and the keys LFU's touch updates, or
  // that a release stamps).
  void prefetch_meta(int32_t s) const {
    __builtin_prefetch(&flags_[s]);
    if (key32_) __builtin_prefetch(&key32_[s]);
    if (last_use_) __builtin_prefetch(&last_use_[s]);
  }
  void prefetch_touch(int32_t s) const {
    __builtin_prefetch(&flags_[s]);
    if (policy_ == CachePolicy::kLfu) {
      __builtin_prefetch(&key32_[s]);
      __builtin_prefetch(&last_use_[s]);
    }
  }

  // ---- row -> slot map ----
  int32_t find(int64_t row) const;  // -1 when the row is not resident
  // For tests: the map entry a row's probe starts at, and the number of entries.
  size_t home_of(int64_t row) const { return home(mix(row)); }
  size_t map_entries() const { return m_; }
  void prefetch_row(int64_t row) const { __builtin_prefetch(&map_[home(mix(row))]); }
  // found[i] = find(rows[i]) for i < n, pipelined: each row hashed once, its map line
  // prefetched 2 x kBatchAhead rows ahead and the slot its first tag match names kBatchAhead
  // rows ahead. Returns true if every row was found and none is in flight.
  // `check_flags` false: the flags are not read (nor the return value meaningful), so the
  // lookups may run while another thread changes flags (the map and the slots' rows change only
  // in a fetch, under the cache's fetch mutex).
  bool find_batch(const int64_t* rows, int64_t n, int32_t* found, bool check_flags = true) const;

  // ---- slots ----
  // Starts one acquire / fetch: a new tick (LFU last use) and a new mark (counting each row
  // once per call). Returns the tick.
  uint32_t begin_call();
  // Counts a resident row's use by the current call: true (and frequency / last use updated) the
  // first time in the call, false after.
  bool touch(int32_t s, uint32_t tick);
  // A free slot (rows freed by rollback first, last freed first; then never-used slots in
  // order), or -1.
  int32_t take_free();
  void give_free(int32_t s) { freed_.push_back(s); }
  bool has_free() const { return !freed_.empty() || next_unused_ < cap_; }
  int64_t num_free() const { return static_cast<int64_t>(freed_.size()) + (cap_ - next_unused_); }
  // Slot s now holds `row` (map entry added), fetched by the call of `tick`: in flight, clean,
  // frequency 1, counted by this call (CLOCK: unmarked; the call must not touch() it).
  void assign(int32_t s, int64_t row, uint32_t tick);
  // Slot s's row leaves the map; the slot keeps its bytes and flags. REQUIRES: resident.
  void unassign(int32_t s);
  // Slot s (resident again after a rollback) holds `row` and is clean / dirty as given.
  void restore(int32_t s, int64_t row, bool dirty);
  // Slot s becomes free: no row, no flags.
  void clear(int32_t s);

  // ---- eviction ----
  // Call when slot s has become evictable (released, or restored by a rollback).
  void make_evictable(int32_t s);
  // The next victim (LRU / LFU: the evictable slot of smallest (key, slot); CLOCK: the hand's
  // pick), or -1 when no slot is evictable.
  int32_t pop_victim();
  // Prefetches what the victim `ahead` candidates from now will touch: its flags and key, then
  // (`bucket`) the map line of its row. CLOCK: `bucket` only (its flags and rows are read in
  // slot order); a scout ahead of the hand finds the coming victims.
  void prefetch_victim(size_t ahead, bool bucket) const;

 private:
  static uint64_t mix(int64_t row) { return mix64(static_cast<uint64_t>(row)); }
  size_t home(uint64_t h) const { return static_cast<size_t>(((h >> 32) * m_) >> 32); }
  uint32_t tag_of(uint64_t h) const { return static_cast<uint32_t>(h) & tag_mask_; }
  size_t next(size_t i) const { return i + 1 == m_ ? 0 : i + 1; }
  uint32_t entry_tag(uint32_t e) const { return tag_bits_ ? e >> tag_shift_ : 0; }
  int32_t entry_slot(uint32_t e) const { return static_cast<int32_t>(e & slot_mask_) - 1; }
  uint32_t make_entry(uint32_t tag, int32_t slot, uint64_t dist) const;
  uint64_t entry_dist(uint32_t e, size_t i) const;  // exact (recomputed when saturated)
  // Walks h's probe run: the slot of the first entry whose tag matches and for which
  // accept(slot) holds, or -1 once the run shows the row is absent.
  template <typename Accept>
  int32_t probe(uint64_t h, Accept&& accept) const;
  void map_insert(int64_t row, int32_t s);
  void set_row(int32_t s, int64_t row) {
    if (row32_) row32_[s] = static_cast<int32_t>(row);
    else row64_[s] = row;
  }
  int32_t clock_victim();
  void clock_scout(size_t ahead) const;

  uint64_t key(int32_t s) const {
    return policy_ == CachePolicy::kLru ? key32_[s] : (static_cast<uint64_t>(key32_[s]) << 32) | last_use_[s];
  }
  bool below_threshold(uint64_t k, int32_t s) const {
    return k < thr_key_ || (k == thr_key_ && static_cast<int64_t>(s) <= thr_slot_);
  }
  void rescan();
  // Sorts [0, cand_n_) by (key, slot); they arrive in slot order. A radix sort when the keys
  // span less than 2^32 (LRU stamps), else std::sort (LFU's frequency and tick).
  void sort_candidates();
  void heap_push(uint64_t k, int32_t s);
  void heap_pop();
  bool heap_less(size_t a, size_t b) const {
    return heap_key_[a] != heap_key_[b] ? heap_key_[a] < heap_key_[b] : heap_slot_[a] < heap_slot_[b];
  }
  void renormalize(uint32_t* values, uint32_t* counter);

  CachePolicy policy_ = CachePolicy::kLru;
  int64_t cap_ = 0;
  uint32_t renormalize_at_ = 0;
  int32_t* row32_ = nullptr;     // [cap] table row, -1 free (tables of <= 2^31 rows) ...
  int64_t* row64_ = nullptr;     // [cap] ... or this (larger tables)
  uint8_t* flags_ = nullptr;     // [cap]
  uint32_t* key32_ = nullptr;    // [cap] LRU stamp / LFU frequency (CLOCK: none)
  uint32_t* last_use_ = nullptr; // [cap] LFU only
  uint32_t* map_ = nullptr;      // [m]
  size_t m_ = 0;
  uint32_t slot_mask_ = 0, dist_max_ = 0, tag_mask_ = 0;
  int dist_shift_ = 0, tag_shift_ = 0, tag_bits_ = 0;

  // Candidates: [cand_head_, cand_n_) sorted by (key, slot); the LFU overflow heap.
  uint64_t* cand_key_ = nullptr;
  uint32_t* cand_slot_ = nullptr;
  size_t cand_cap_ = 0, cand_n_ = 0, cand_head_ = 0;
  uint64_t* heap_key_ = nullptr;
  uint32_t* heap_slot_ = nullptr;
  size_t heap_cap_ = 0, heap_n_ = 0;
  bool cand_valid_ = false;
  uint64_t thr_key_ = 0;
  int64_t thr_slot_ = -1;
  std::vector<uint32_t> hist_;  // the scan's histogram (4096 buckets)

  uint32_t stamp_ = 1;   // LRU: the next release stamp
  uint32_t tick_ = 0;    // LFU: the current call's tick
  uint64_t calls_ = 0;
  uint8_t mark_ = 0;     // the current call's mark (2..7), in flag bits 5..7
  // CLOCK: the hand (the next slot it looks at) and the scout: the slots
  // [hand_, hand_ + scout_dist_) (mod cap) have been looked at, scout_lead_ of them predicted
  // victims whose map lines were prefetched. Reset by each call; only prefetching depends on it.
  int64_t hand_ = 0;
  mutable int64_t scout_dist_ = 0;
  mutable size_t scout_lead_ = 0;
  int64_t next_unused_ = 0;
  std::vector<int32_t> freed_;  // slots freed by a rollback (few; reused first)
};

// The marks' demotion of CacheIndex::begin_call over n flag bytes: each byte's mark (bits
// 5..7) becomes 1 ("used before") when it was set, else stays 0; bits 0..4 are kept. Eight
// bytes per word operation; demote_marks_reference is the byte-at-a-time definition.
void demote_marks(uint8_t* flags, int64_t n);
void demote_marks_reference(uint8_t* flags, int64_t n);

}  // namespace leanemb::tiered
