// Size functions of the tiered storage: what a row cache and its staging buffers allocate.
// The row cache allocates with exactly these, and the planner (src/plan) predicts with them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leanemb::tiered {

// The row stores' presence bitmap (host tier, category weights): one bit per row, in 64-bit words.
inline size_t presence_bitmap_bytes(int64_t num_rows) {
  return static_cast<size_t>(num_rows > 0 ? (num_rows + 63) / 64 : 0) * 8;
}

// Whether a table of `num_rows` gets a row cache under a collection-wide setting: tables smaller
// than `min_rows` stay resident (a small table's cache could not hold one batch's rows, and it
// would save nothing). The trainer builds tables and the planner predicts them with this rule.
inline bool cache_applies(int64_t num_rows, double fraction, int64_t min_rows) {
  return fraction > 0.0 && fraction < 1.0 && num_rows >= min_rows;
}

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
  size_t index_bytes = 0;    // row_cache: per-slot metadata and the row -> slot hash map
  size_t staging_bytes = 0;  // io_buffers: one fetch's rows read plus victims written back
  size_t device_bytes() const { return slot_bytes + index_bytes; }
};

// Entries of the open-addressing row -> slot map: the power of two >= 2 x capacity.
inline size_t row_cache_map_entries(int64_t capacity_rows) {
  size_t m = 16;
  while (m < 2 * static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0)) m *= 2;
  return m;
}

// Entries of the LRU release ring: 2 x capacity + 16 (compacted when full).
inline size_t row_cache_queue_entries(int64_t capacity_rows) {
  return 2 * static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0) + 16;
}

// Per slot: row (int64), a 24-byte metadata record (last use, frequency, heap position or LRU
// version, pin / in-flight flags, dirty, padding) and a heap entry (int32); per map entry: row
// (uint32) and slot (int32); per ring entry: slot (int32) and version (uint32).
inline constexpr size_t kRowCacheSlotIndexBytes = 8 + 24 + 4;
inline constexpr size_t kRowCacheMapEntryBytes = 4 + 4;
inline constexpr size_t kRowCacheQueueEntryBytes = 4 + 4;

// `max_rows_per_step`: the most distinct rows one fetch of this table moves (bounded by the
// batch's ids of the table); the staging buffers hold that many rows in and out, and grow on
// demand if a step needs more.
inline RowCacheSizes row_cache_sizes(int64_t capacity_rows, size_t row_bytes, int64_t max_rows_per_step) {
  RowCacheSizes s;
  const size_t cap = static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0);
  s.slot_bytes = cap * row_bytes;
  s.index_bytes = cap * kRowCacheSlotIndexBytes + row_cache_map_entries(capacity_rows) * kRowCacheMapEntryBytes +
                  row_cache_queue_entries(capacity_rows) * kRowCacheQueueEntryBytes;
  const size_t per_step = static_cast<size_t>(max_rows_per_step > 0 ? max_rows_per_step : 0) * row_bytes;
  s.staging_bytes = 2 * per_step;
  return s;
}

}  // namespace leanemb::tiered
