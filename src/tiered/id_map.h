// IdMap: the vocabulary of a dynamic table. Maps raw 64-bit ids (hashed categorical values)
// to rows of a table with `capacity_rows` rows, creating a row on an id's admission and
// freeing rows by eviction, so the table holds the ids that matter instead of a fixed range.
//
// Admission: an id gets a row on its min_count-th sighting (min_count 1: on first touch).
// Sightings of ids without a row are counted in a counting Bloom filter (XXH3 double hashing,
// `bloom_hashes` saturating 4- or 8-bit counters out of `bloom_counters`), so the count can be
// overestimated (a false positive admits an id early) but never underestimated.
// Eviction when all rows are taken: `kAge` frees the row unused for the longest time; `kLfu`
// the row with the fewest uses since admission, ties by oldest use. Either way "oldest" is the
// order of last use (the step, then the position within the step's calls): deterministic.
// A row used by the current call is never evicted by it; an id that finds no row then is
// rejected (rows_out -1, counted in rejected_capacity). With max_age_steps > 0, end_step()
// frees rows unused for more than that many steps.
//
// Determinism: the mapping is a pure function of the sequence of calls (single-threaded code;
// no dependence on thread count, addresses or time).
//
// Memory: the hash table (2 x capacity slots of 16 bytes, rounded up to a power of two), the
// per-row metadata (48 bytes per row), the free-row stack (8 bytes per row), the Bloom filter
// and the re-admission filter come from the Allocator given (category row_cache: host-side
// index of the table's rows, like the row cache's own index; nothing is added to memory.h).
// held_bytes() reports them plus an estimate of the LFU frequency-bucket map.
//
// Ownership: IdMap owns its arrays; the allocator must outlive it. Thread safety: none; one
// thread calls map()/end_step() (the caller's step loop), const methods may run concurrently
// with each other only. Errors: InvalidArgument (bad options or arguments), ResourceExhausted
// (allocator), DataLoss (deserialize of corrupt bytes).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "leanemb/table_options.h"

namespace leanemb::tiered {

// EvictionPolicy (age | lfu), eviction_policy_name and parse_eviction_policy:
// leanemb/table_options.h (the values are recorded in id-map state files: id_map_io.cc).

struct IdMapOptions {
  int64_t capacity_rows = 0;        // rows of the table (> 0)
  uint32_t min_count = 1;           // sightings before admission (1..15 for 4-bit counters, ..255 for 8)
  uint64_t bloom_counters = 1 << 20;  // counters of the admission filter (unused when min_count == 1)
  uint32_t bloom_hashes = 4;        // counters per id (1..16)
  uint32_t bloom_counter_bits = 4;  // 4 or 8
  EvictionPolicy eviction = EvictionPolicy::kAge;
  int64_t max_age_steps = 0;        // > 0: end_step(s) frees rows last used before s - max_age_steps
  uint64_t seed = 0;                // hash seed of the filters and the table
  // Bits of the plain Bloom filter of evicted ids that counts re-admissions (approximate: a
  // false positive counts a first admission as a re-admission). 0: 16 bits per row.
  uint64_t readmit_filter_bits = 0;
};

// A row and the raw id it belongs (assigned) or belonged (evicted) to.
struct RowAssignment {
  int64_t row;
  int64_t raw_id;
  bool operator==(const RowAssignment&) const = default;
};

// What one map() or end_step() call did. The caller handles `evicted` first (write back or
// drop the old id's row), then initializes each `assigned` row from its raw id (never from the
// row number, so results do not depend on the mapping). An evicted row can be assigned again
// in the same call.
struct MapReport {
  std::vector<RowAssignment> assigned;  // rows given to ids in this call, in order of admission
  std::vector<RowAssignment> evicted;   // rows taken from ids (capacity or max age), in order
  int64_t admitted = 0;                 // = assigned.size()
  int64_t readmitted = 0;               // of admitted: ids that had a row before (approximate)
  int64_t rejected_min_count = 0;       // occurrences refused by admission (below min_count)
  int64_t rejected_capacity = 0;        // occurrences refused because every row is in use by the call
  int64_t expired = 0;                  // of evicted.size(): freed by max age (end_step)
  void clear() { *this = MapReport(); }
};

// Totals since creation (restored by deserialize).
struct IdMapCounters {
  int64_t admitted = 0, readmitted = 0, rejected_min_count = 0, rejected_capacity = 0;
  int64_t evicted = 0;  // for capacity
  int64_t expired = 0;  // by max age
  int64_t live_rows = 0;
};

class IdMap {
 public:
  // Errors: InvalidArgument (options), ResourceExhausted (allocator). Null alloc: the default
  // host allocator.
  static Result<IdMap> create(const IdMapOptions& options, Allocator* alloc);
  // The bytes create() allocates for `options` (category row_cache): per row its metadata (48 B),
  // a free-list entry (8 B) and the re-admission filter (16 bits unless set), the hash table
  // (bit_ceil(2 x rows) slots of 16 B), the admission filter when min_count > 1. The planner
  // (src/plan) predicts with this. REQUIRES: options valid.
  static size_t allocated_bytes(const IdMapOptions& options);

  IdMap(IdMap&&) noexcept = default;
  IdMap& operator=(IdMap&&) noexcept = default;

  // rows_out[i] := the row of raw_ids[i], or -1 when the id is not admitted (the caller reads a
  // zero vector for it and does not update it). Ids are processed in order; an id's sightings
  // are counted per occurrence. `step` is the training step (non-decreasing over calls).
  // `report` (may be null) is cleared and filled. REQUIRES rows_out.size() == raw_ids.size().
  // Errors: InvalidArgument (sizes, step going back); nothing changes then.
  Status map(std::span<const int64_t> raw_ids, int64_t step, std::span<int64_t> rows_out, MapReport* report);
  // End of step `step`: with max_age_steps > 0, frees every row last used at a step
  // < step - max_age_steps (reported in `evicted`, counted in `expired`). Errors: InvalidArgument.
  Status end_step(int64_t step, MapReport* report);

  // The row of a raw id, or -1 (no side effects).
  int64_t find(int64_t raw_id) const;
  // The raw id that holds `row` now, or -1 (a free row or out of range).
  int64_t raw_id_of(int64_t row) const;
  // The admission filter's count for an id without a row (0..counter max); 0 when min_count 1.
  uint32_t sightings(int64_t raw_id) const;
  const IdMapCounters& counters() const { return counters_; }
  const IdMapOptions& options() const { return options_; }
  size_t held_bytes() const;

  // Checkpoint: the whole state (options, mapping, use order and counts, filters, counters) in a
  // versioned, checksummed byte string. deserialize() validates everything; corrupt or
  // truncated input is DataLoss (naming what is wrong), never a crash.
  std::vector<uint8_t> serialize() const;
  static Result<IdMap> deserialize(std::span<const uint8_t> bytes, Allocator* alloc);

 private:
  struct RowMeta {
    int64_t raw_id;
    int64_t last_seen;   // step of the last use
    uint64_t freq;       // uses since admission
    uint64_t seq;        // order of the last use; 0: the row is free
    int64_t prev, next;  // bucket list links (-1: none)
  };
  struct Slot {
    int64_t id;
    int64_t row;  // -1: empty
  };
  struct Bucket {
    int64_t head = -1, tail = -1;
  };
  IdMap() = default;

  Status allocate(Allocator* alloc);
  uint64_t hash(int64_t id, uint64_t salt) const;
  int64_t table_find_slot(int64_t id) const;  // slot holding id, or -1
  void table_insert(int64_t id, int64_t row);
  void table_erase(int64_t id);
  bool admit_sighting(int64_t id);  // counts one sighting; true when the count reaches min_count
  bool readmit_test(int64_t id) const;
  void readmit_add(int64_t id);
  uint64_t bucket_key(int64_t row) const;
  void link_tail(int64_t row);
  void unlink(int64_t row);
  int64_t pick_victim() const;  // -1 when every row is pinned by the current call
  void drop_row(int64_t row);   // unlink + erase + readmit filter; the caller reuses or frees it

  IdMapOptions options_;
  IdMapCounters counters_;
  Allocation meta_mem_, table_mem_, free_mem_, bloom_mem_, readmit_mem_;
  RowMeta* meta_ = nullptr;    // [capacity_rows]
  Slot* table_ = nullptr;      // [table_slots_]
  int64_t* free_ = nullptr;    // [capacity_rows] stack of freed rows
  uint8_t* bloom_ = nullptr;   // counters, 4-bit packed two per byte or 8-bit
  uint64_t* readmit_ = nullptr;  // [readmit_bits / 64]
  uint64_t table_slots_ = 0, readmit_bits_ = 0;
  int64_t num_free_ = 0, next_unused_ = 0;
  uint64_t seq_ = 0;           // use counter: a row's last use is meta.seq (0: free row)
  uint64_t call_start_seq_ = 1;  // rows with seq >= this were used by the current call
  int64_t last_step_ = INT64_MIN;
  std::map<uint64_t, Bucket> buckets_;  // by frequency (lfu) or one bucket 0 (age), oldest first
};

}  // namespace leanemb::tiered
