// Size functions of the tiered storage: what a row cache and its staging buffers allocate.
// The row cache allocates with exactly these, and the planner (src/plan) predicts with them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "leanemb/embedding.h"

namespace leanemb::tiered {

// The row stores' presence bitmap (host tier, category weights; src/tiered/presence.h): one bit
// per row in pages of 2^18 rows (32 KiB; a smaller table has one page of its size, in 64-bit
// words), made on a first write into them, plus a directory of one pointer per page.
inline constexpr int kPresencePageShift = 18;
inline size_t presence_num_pages(int64_t num_rows) {
  return num_rows > 0 ? static_cast<size_t>((num_rows + (int64_t{1} << kPresencePageShift) - 1) >> kPresencePageShift) : 0;
}
inline size_t presence_page_words(int64_t num_rows) {
  const int64_t rows = std::min<int64_t>(num_rows > 0 ? num_rows : 0, int64_t{1} << kPresencePageShift);
  return static_cast<size_t>((rows + 63) / 64);
}
// The most the bitmap holds (every page made): what the planner predicts.
inline size_t presence_bitmap_bytes(int64_t num_rows) {
  return presence_num_pages(num_rows) * (presence_page_words(num_rows) * 8 + sizeof(void*));
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

// A file row store's staging buffers (host tier, io_buffers; src/tiered/file_store.cc): one for
// writes and one for reads, made when the store opens, of num_slots slots (the requests in
// flight: queue_depth, at most 16 MiB of slots) of slot bytes (the blocks one row can touch);
// a second read buffer only while two reads overlap (prefetch), and transient bulk buffers of
// at most 8 MiB while a checkpoint is written or restored. `block_bytes` is the file system's
// direct-I/O alignment (file_store_block_bytes), 4096 without direct I/O.
inline constexpr size_t kFileStoreMaxStagingBytes = size_t{16} << 20;
inline size_t file_store_slot_bytes(size_t row_bytes, size_t block_bytes) {
  return (row_bytes + block_bytes - 1) / block_bytes * block_bytes + block_bytes;
}
inline size_t file_store_num_slots(size_t row_bytes, size_t block_bytes, int queue_depth) {
  const size_t by_budget = std::max<size_t>(1, kFileStoreMaxStagingBytes / file_store_slot_bytes(row_bytes, block_bytes));
  return std::min<size_t>(static_cast<size_t>(std::max(queue_depth, 1)), by_budget);
}
inline size_t file_store_staging_bytes(size_t row_bytes, size_t block_bytes, int queue_depth) {
  return 2 * file_store_num_slots(row_bytes, block_bytes, queue_depth) * file_store_slot_bytes(row_bytes, block_bytes);
}

// The log layout of the file store (src/tiered/log_store.cc, docs/tiered.md "Row stores").
// Records are rows packed floor(block / row_bytes) to a block (none straddles a block); a row
// larger than a block takes ceil(row_bytes / block) whole blocks. The file is cut into segments
// of log_segment_bytes: a sixteenth of the table's bytes rounded up to a power of two, within
// [1 MiB, 64 MiB], rounded up to whole record blocks. The file holds at most
// log_max_segments(...) segments: the bound on its size (compaction keeps the segments made
// within ceil(2 x live records / records per segment) + kLogSlackSegments).
inline constexpr size_t kLogAppendBytes = size_t{4} << 20;    // the append buffer, at most
inline constexpr size_t kLogGcReadBytes = size_t{1} << 20;    // compaction reads, at most
inline constexpr size_t kLogMinSegmentBytes = size_t{1} << 20;
inline constexpr size_t kLogMaxSegmentBytes = size_t{64} << 20;
inline constexpr uint64_t kLogSlackSegments = 4;   // >= kLogReserveSegments + 2 (the GC's bound)
inline constexpr uint64_t kLogReserveSegments = 2;  // free segments only compaction may take
inline constexpr int kLogIndexPageShift = 16;       // index entries per page: 2^16
inline constexpr size_t kLogSegmentInfoBytes = 8;   // per segment: live records (u32), state

// Records per block (0 when a row is larger than a block) and blocks per record group (one
// block of records, or the whole blocks of one large row).
inline size_t log_records_per_block(size_t row_bytes, size_t block_bytes) { return block_bytes / row_bytes; }
inline size_t log_group_bytes(size_t row_bytes, size_t block_bytes) {
  return row_bytes <= block_bytes ? block_bytes : (row_bytes + block_bytes - 1) / block_bytes * block_bytes;
}
inline size_t log_group_records(size_t row_bytes, size_t block_bytes) {
  return row_bytes <= block_bytes ? block_bytes / row_bytes : 1;
}
// `segment_bytes_override` > 0 (a test hook): that, rounded up to whole record groups.
inline uint64_t log_segment_bytes(int64_t num_rows, size_t row_bytes, size_t block_bytes,
                                  uint64_t segment_bytes_override = 0) {
  const uint64_t group = log_group_bytes(row_bytes, block_bytes);
  uint64_t seg = segment_bytes_override;
  if (seg == 0) {
    const uint64_t table = static_cast<uint64_t>(std::max<int64_t>(num_rows, 0)) * row_bytes / 16;
    seg = kLogMinSegmentBytes;
    while (seg < table && seg < kLogMaxSegmentBytes) seg *= 2;
  }
  return std::max<uint64_t>(1, (seg + group - 1) / group) * group;
}
inline uint64_t log_segment_records(uint64_t segment_bytes, size_t row_bytes, size_t block_bytes) {
  return segment_bytes / log_group_bytes(row_bytes, block_bytes) * log_group_records(row_bytes, block_bytes);
}
inline uint64_t log_max_segments(int64_t num_rows, uint64_t segment_records) {
  const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(num_rows, 0));
  return (2 * n + segment_records - 1) / segment_records + kLogSlackSegments;
}
// An index entry is a record number + 1 (0 = absent): 4 bytes when every record of the largest
// file fits, else 8.
inline size_t log_index_entry_bytes(int64_t num_rows, uint64_t segment_records) {
  return log_max_segments(num_rows, segment_records) * segment_records < (uint64_t{1} << 32) - 1 ? 4 : 8;
}
inline size_t log_index_page_entries(int64_t num_rows) {
  return static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(num_rows, 1), int64_t{1} << kLogIndexPageShift));
}
inline size_t log_index_num_pages(int64_t num_rows) {
  return num_rows > 0 ? static_cast<size_t>((num_rows + (int64_t{1} << kLogIndexPageShift) - 1) >> kLogIndexPageShift) : 0;
}
// The log store's RAM besides its buffers (host tier, category weights), every index page made
// (pages are made on the first write of one of their rows): the index pages, their directory
// (a pointer per page) and the segment table. What the planner predicts (it replaces the
// presence bitmap, which the log store does not keep).
inline size_t log_store_index_bytes(int64_t num_rows, size_t row_bytes, size_t block_bytes,
                                    uint64_t segment_bytes_override = 0) {
  const uint64_t recs = log_segment_records(log_segment_bytes(num_rows, row_bytes, block_bytes, segment_bytes_override),
                                            row_bytes, block_bytes);
  const size_t pages = log_index_num_pages(num_rows);
  return pages * (log_index_page_entries(num_rows) * log_index_entry_bytes(num_rows, recs) + sizeof(void*)) +
         static_cast<size_t>(log_max_segments(num_rows, recs)) * kLogSegmentInfoBytes;
}
// The log store's buffers (host tier, io_buffers, made when it opens): the append buffer (at
// most kLogAppendBytes, at most a segment, whole record groups), the compaction read buffer
// (at most kLogGcReadBytes, at most a segment) and one read staging buffer of num_slots slots
// of one record group (a second one only while two reads overlap).
inline size_t log_store_append_bytes(uint64_t segment_bytes, size_t row_bytes, size_t block_bytes) {
  const uint64_t group = log_group_bytes(row_bytes, block_bytes);
  return static_cast<size_t>(std::max<uint64_t>(1, std::min<uint64_t>(kLogAppendBytes, segment_bytes) / group) * group);
}
inline size_t log_store_num_slots(size_t row_bytes, size_t block_bytes, int queue_depth) {
  const size_t by_budget = std::max<size_t>(1, kFileStoreMaxStagingBytes / log_group_bytes(row_bytes, block_bytes));
  return std::min<size_t>(static_cast<size_t>(std::max(queue_depth, 1)), by_budget);
}
inline size_t log_store_staging_bytes(int64_t num_rows, size_t row_bytes, size_t block_bytes, int queue_depth,
                                      uint64_t segment_bytes_override = 0) {
  const uint64_t seg = log_segment_bytes(num_rows, row_bytes, block_bytes, segment_bytes_override);
  const size_t group = log_group_bytes(row_bytes, block_bytes);
  const size_t gc = static_cast<size_t>(std::max<uint64_t>(1, std::min<uint64_t>(kLogGcReadBytes, seg) / group) * group);
  return log_store_append_bytes(seg, row_bytes, block_bytes) + gc +
         log_store_num_slots(row_bytes, block_bytes, queue_depth) * group;
}
// The most bytes the log store's file holds (every segment the bound allows).
inline uint64_t log_store_max_file_bytes(int64_t num_rows, size_t row_bytes, size_t block_bytes,
                                         uint64_t segment_bytes_override = 0) {
  const uint64_t seg = log_segment_bytes(num_rows, row_bytes, block_bytes, segment_bytes_override);
  return log_max_segments(num_rows, log_segment_records(seg, row_bytes, block_bytes)) * seg;
}

// The file store's bulk calls (write_range / read_range: checkpoint restore and save): transfers
// of at most kBulkTransferBytes, through a staging buffer (io_buffers, for the call only) of
// file_store_bulk_bytes: the block-aligned span `count` rows can cover wherever they start,
// at most kBulkStagingBytes (a block multiple). It depends on the call's row count only (not on
// which rows are present), so the planner predicts it exactly. Checkpoints move a table's rows
// kCheckpointChunkRows at a time (src/train/loop.cc; the planner's "checkpoint" phase).
inline constexpr size_t kBulkTransferBytes = size_t{1} << 20;
inline constexpr size_t kBulkStagingBytes = size_t{8} << 20;
inline constexpr int64_t kCheckpointChunkRows = 65536;
inline size_t file_store_bulk_bytes(int64_t count, size_t row_bytes, size_t block_bytes) {
  const size_t block = std::max<size_t>(block_bytes, 1);
  const size_t cap = std::max(kBulkStagingBytes, block) / block * block;
  const size_t span = (static_cast<size_t>(std::max<int64_t>(count, 0)) * row_bytes + block - 1) / block * block + block;
  return std::min(span, cap);
}

// Calls of at least this many ids are first reduced to their distinct rows
// (RowCacheOptions::distinct_min_ids).
inline constexpr size_t kRowCacheDistinctMinIds = 8192;

// Elements a fetch scratch array of n elements is grown to: the arrays are kept between calls,
// with 1/8 headroom so that slowly growing calls do not reallocate each time (at least 16).
inline size_t row_cache_scratch_elems(size_t n) { return std::max<size_t>(n + n / 8, 16); }

// One fetch call as the scratch sees it: n ids over u distinct rows; a call of at least
// kRowCacheDistinctMinIds ids is reduced to its distinct rows first, so the fetch works on r
// rows (u when reduced, else n). `distinct_bytes` is a Distinct's arrays for a reduced call
// (nothing otherwise): per id its distinct row (8), index (4) and sort keys (2 x 8), and per
// distinct row its slot (8).
struct FetchCallScratch {
  size_t n = 0, u = 0;
  bool reduced = false;
  size_t r = 0;
  FetchCallScratch(int64_t ids_per_call, int64_t rows_per_call)
      : n(static_cast<size_t>(std::max<int64_t>(ids_per_call, 0))),
        u(std::min(n, static_cast<size_t>(std::max<int64_t>(rows_per_call, 0)))),
        reduced(n >= kRowCacheDistinctMinIds),
        r(reduced ? u : n) {}
  size_t distinct_bytes() const {
    auto e = row_cache_scratch_elems;
    return reduced ? 8 * e(n) + 4 * e(n) + 8 * e(2 * n) + 8 * e(u) : 0;
  }
};

// The row cache's per-call scratch (io_buffers, kept between calls) for the owner's calls of
// `ids_per_call` ids over `rows_per_call` distinct rows: per row of what the fetch sees its
// lookups (fast path 4 B, fetch 4 B), the misses' positions (8), new rows (16), victims (16),
// write-back rows (8) and slots (4), rows read (8) and slots (4), presence (1) and pin (4); and
// the owner's Distinct (FetchCallScratch). A prefetch thread, when used, keeps more on top
// (row_cache_prefetch_scratch_bytes).
inline size_t row_cache_scratch_bytes(int64_t ids_per_call, int64_t rows_per_call) {
  const FetchCallScratch c(ids_per_call, rows_per_call);
  if (c.n == 0) return 0;
  // Each array grown on its own.
  return (4 + 4 + 8 + 16 + 16 + 8 + 4 + 8 + 4 + 1 + 4) * row_cache_scratch_elems(c.r) + c.distinct_bytes();
}

// What a prefetch thread keeps on top (io_buffers, kept between calls) for prefetches of
// `ids_per_call` ids over `rows_per_call` distinct rows: the copy of the ids it was given
// (RowCache::start_prefetch: 1/4 headroom, at least 64), the slot of every id (8 B), its pin
// set (4 B per row of what the fetch sees) and its own Distinct. The fetch's other arrays are
// the owner's (one fetch at a time).
inline size_t row_cache_prefetch_scratch_bytes(int64_t ids_per_call, int64_t rows_per_call) {
  const FetchCallScratch c(ids_per_call, rows_per_call);
  if (c.n == 0) return 0;
  auto e = row_cache_scratch_elems;
  return std::max<size_t>(c.n + c.n / 4, 64) * 8 + 8 * e(c.n) + 4 * e(c.r) + c.distinct_bytes();
}

struct RowCacheSizes {
  size_t slot_bytes = 0;     // row_cache: capacity fat rows
  size_t index_bytes = 0;    // row_cache: per-slot row, flags and policy key; row -> slot map;
                             // eviction candidates (row_cache_index_bytes)
  size_t device_bytes() const { return slot_bytes + index_bytes; }
};

// Entries of the row -> slot map (32-bit each): 1.25 x capacity rounded up (load <= 0.8), >= 16.
inline size_t row_cache_map_entries(int64_t capacity_rows) {
  const size_t cap = static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0);
  return std::max<size_t>(16, cap + (cap + 3) / 4);
}

// Eviction candidates one scan selects (capacity / 16, at least 64; none for CLOCK, which
// scans nothing), and the LFU overflow heap (half that; none for LRU and CLOCK). 12 bytes each
// (key, slot).
inline size_t row_cache_candidate_entries(int64_t capacity_rows, CachePolicy policy) {
  if (policy == CachePolicy::kClock) return 0;
  return std::max<size_t>(64, static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0) / 16);
}
inline size_t row_cache_heap_entries(int64_t capacity_rows, CachePolicy policy) {
  return policy == CachePolicy::kLfu ? row_cache_candidate_entries(capacity_rows, policy) / 2 : 0;
}

// A slot's table row is an int32 when every row of the table fits (num_rows <= 2^31: rows up
// to 2^31 - 1, and -1 for a free slot), else an int64.
inline constexpr int64_t kRowCacheNarrowRowsMax = int64_t{1} << 31;
inline size_t row_cache_slot_row_bytes(int64_t num_rows) { return num_rows <= kRowCacheNarrowRowsMax ? 4 : 8; }
// The policy's per-slot key: LRU a release stamp (4 B), LFU a frequency and a last use (8 B),
// CLOCK none (its reference bit is the flag byte's mark).
inline size_t row_cache_slot_key_bytes(CachePolicy policy) {
  return policy == CachePolicy::kLfu ? 8 : policy == CachePolicy::kLru ? 4 : 0;
}

// Per slot: row (int32 or int64), flags (1 B) and the policy's key. src/tiered/cache_index.h
// lays the arrays out in this order: 8-byte arrays, then 4-byte arrays, then the flags.
inline constexpr size_t kRowCacheCandidateBytes = 8 + 4;
inline size_t row_cache_slot_index_bytes(int64_t num_rows, CachePolicy policy) {
  return row_cache_slot_row_bytes(num_rows) + 1 + row_cache_slot_key_bytes(policy);
}

// The index's bytes of a cache of `capacity_rows` slots over a table of `num_rows` rows. Per
// slot on large caches, for tables of at most 2^31 rows: CLOCK 10 B (row 4, flags 1, map 5),
// LRU 14.75 B, LFU 19.1 B; tables of more rows: 4 B more.
inline size_t row_cache_index_bytes(int64_t capacity_rows, int64_t num_rows, CachePolicy policy) {
  const size_t cap = static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0);
  const size_t flags = (cap + 7) / 8 * 8;
  return cap * (row_cache_slot_index_bytes(num_rows, policy) - 1) + flags + row_cache_map_entries(capacity_rows) * 4 +
         (row_cache_candidate_entries(capacity_rows, policy) + row_cache_heap_entries(capacity_rows, policy)) *
             kRowCacheCandidateBytes;
}

// The device-tier bytes of a cache of `capacity_rows` slots of `row_bytes` over a table of
// `num_rows` rows (the width of the slots' rows). Rows move between the store and the slots
// directly (RowStore's RowsAt), so a fetch has no staging buffers.
inline RowCacheSizes row_cache_sizes(int64_t capacity_rows, int64_t num_rows, size_t row_bytes, CachePolicy policy) {
  RowCacheSizes s;
  const size_t cap = static_cast<size_t>(capacity_rows > 0 ? capacity_rows : 0);
  s.slot_bytes = cap * row_bytes;
  s.index_bytes = row_cache_index_bytes(capacity_rows, num_rows, policy);
  return s;
}

}  // namespace leanemb::tiered
