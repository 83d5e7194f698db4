// Size functions of the tiered storage: what a row cache and its staging buffers allocate.
// The row cache allocates with exactly these, and the planner (src/plan) predicts with them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leanemb::tiered {

// Slots of a cache of `fraction` of `num_rows` rows (at least 1, at most num_rows).
inline int64_t cache_capacity_rows(int64_t num_rows, double fraction) {
  if (num_rows <= 0) return 0;
  double c = static_cast<double>(num_rows) * fraction;
  if (c < 1.0) c = 1.0;
  if (c > static_cast<double>(num_rows)) c = static_cast<double>(num_rows);
  return static_cast<int64_t>(c);
}

struct RowCacheSizes {
  size_t slot_bytes = 0;     // row_cache: capacity fat rows
  size_t index_bytes = 0;    // row_cache: slot -> row ids, per-slot policy state, row -> slot map
  size_t staging_bytes = 0;  // io_buffers: one step's fetched and written-back rows (x2 when
                             // prefetching: the next step's rows are fetched while this one runs)
  size_t device_bytes() const { return slot_bytes + index_bytes; }
};

// `max_rows_per_step`: the most distinct rows one step of this table touches (bounded by the
// batch's ids of the table).
inline RowCacheSizes row_cache_sizes(int64_t capacity_rows, size_t row_bytes, int64_t max_rows_per_step,
                                     bool prefetch) {
  RowCacheSizes s;
  const size_t cap = static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0);
  s.slot_bytes = cap * row_bytes;
  // slot_row (int64) + last-use / frequency (uint64) + pin count (uint32) + dirty (uint8),
  // and an open-addressing row -> slot table with 2 x capacity entries of (int64 row, int64 slot).
  s.index_bytes = cap * (8 + 8 + 4 + 1) + 2 * cap * 16;
  const size_t per_step = static_cast<size_t>(max_rows_per_step > 0 ? max_rows_per_step : 0) * row_bytes;
  s.staging_bytes = per_step * 2 * (prefetch ? 2 : 1);  // fetched rows + written-back rows
  return s;
}

}  // namespace leanemb::tiered
