// IdMap implementation.
//
// Invariants:
// - A row r is live iff meta_[r].seq != 0; then table_ maps meta_[r].raw_id -> r and r is in
//   exactly one bucket list (buckets_[bucket_key(r)]), whose rows are in increasing seq order
//   (a row enters a list only at its tail, with a fresh seq). Free rows are either in free_
//   [0, num_free_) or >= next_unused_.
// - Since steps never go back, increasing seq is also non-decreasing last_seen: the head of a
//   list is its oldest row, so max-age expiry walks heads only.
// - Rows used by the current map() call have seq >= call_start_seq_ and sit at list tails, so a
//   list whose head is pinned is entirely pinned: pick_victim() looks at heads only.
#include "tiered/id_map.h"

#include "core/enum_names.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace leanemb {

template <>
struct EnumNames<EvictionPolicy> {
  static constexpr std::string_view kWhat = "eviction policy";
  static constexpr EnumName<EvictionPolicy> kNames[] = {{EvictionPolicy::kAge, "age", ""},
                                                        {EvictionPolicy::kLfu, "lfu", ""}};
};

std::string_view eviction_policy_name(EvictionPolicy p) { return enum_name(p); }
Result<EvictionPolicy> parse_eviction_policy(std::string_view s) { return parse_enum<EvictionPolicy>(s); }

}  // namespace leanemb

namespace leanemb::tiered {

namespace {
constexpr uint64_t kTableSalt = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kReadmitSalt = 0xC2B2AE3D27D4EB4Full;
constexpr size_t kBucketNodeBytes = 64;  // estimate of one std::map node (held_bytes)
constexpr uint32_t kReadmitHashes = 4;
}  // namespace

static Status check_options(const IdMapOptions& o) {
  auto bad = [](const std::string& m) { return invalid_argument("id map: " + m); };
  if (o.capacity_rows <= 0 || o.capacity_rows > (int64_t{1} << 40)) return bad("capacity_rows must be in [1, 2^40]");
  if (o.bloom_counter_bits != 4 && o.bloom_counter_bits != 8) return bad("bloom_counter_bits must be 4 or 8");
  const uint32_t max_count = o.bloom_counter_bits == 4 ? 15 : 255;
  if (o.min_count < 1 || o.min_count > max_count) {
    return bad("min_count " + std::to_string(o.min_count) + " outside [1, " + std::to_string(max_count) + "] for " +
               std::to_string(o.bloom_counter_bits) + "-bit counters");
  }
  if (o.min_count > 1 && (o.bloom_counters == 0 || o.bloom_counters > (uint64_t{1} << 40)))
    return bad("bloom_counters must be in [1, 2^40]");
  if (o.bloom_hashes < 1 || o.bloom_hashes > 16) return bad("bloom_hashes must be in [1, 16]");
  if (o.eviction != EvictionPolicy::kAge && o.eviction != EvictionPolicy::kLfu) return bad("unknown eviction policy");
  if (o.max_age_steps < 0) return bad("max_age_steps must be >= 0");
  if (o.readmit_filter_bits > (uint64_t{1} << 43)) return bad("readmit_filter_bits too large");
  return Status();
}

Result<IdMap> IdMap::create(const IdMapOptions& options, Allocator* alloc) {
  LEANEMB_RETURN_IF_ERROR(check_options(options));
  IdMap m;
  m.options_ = options;
  LEANEMB_RETURN_IF_ERROR(m.allocate(alloc));
  return m;
}

namespace {
// The sizes of IdMap::allocate's arrays, one definition for allocate and allocated_bytes.
struct IdMapSizes {
  uint64_t table_slots, readmit_bits, bloom_bytes;
};
IdMapSizes id_map_sizes(const IdMapOptions& o) {
  const auto cap = static_cast<uint64_t>(o.capacity_rows);
  IdMapSizes z;
  z.table_slots = std::bit_ceil(2 * cap);
  z.readmit_bits = ((o.readmit_filter_bits ? o.readmit_filter_bits : 16 * cap) + 63) / 64 * 64;
  z.bloom_bytes = o.min_count > 1 ? (o.bloom_counter_bits == 8 ? o.bloom_counters : (o.bloom_counters + 1) / 2) : 0;
  return z;
}
}  // namespace

size_t IdMap::allocated_bytes(const IdMapOptions& o) {
  const auto cap = static_cast<uint64_t>(o.capacity_rows);
  const IdMapSizes z = id_map_sizes(o);
  return cap * sizeof(RowMeta) + z.table_slots * sizeof(Slot) + cap * sizeof(int64_t) + z.readmit_bits / 8 + z.bloom_bytes;
}

Status IdMap::allocate(Allocator* alloc) {
  if (alloc == nullptr) alloc = default_host_allocator();
  const auto cap = static_cast<uint64_t>(options_.capacity_rows);
  const IdMapSizes z = id_map_sizes(options_);
  table_slots_ = z.table_slots;
  readmit_bits_ = z.readmit_bits;
  constexpr Category kCat = Category::kRowCache;
  LEANEMB_ASSIGN_OR_RETURN(meta_mem_, alloc->allocate(cap * sizeof(RowMeta), kCat));
  LEANEMB_ASSIGN_OR_RETURN(table_mem_, alloc->allocate(table_slots_ * sizeof(Slot), kCat));
  LEANEMB_ASSIGN_OR_RETURN(free_mem_, alloc->allocate(cap * sizeof(int64_t), kCat));
  LEANEMB_ASSIGN_OR_RETURN(readmit_mem_, alloc->allocate(readmit_bits_ / 8, kCat));
  if (z.bloom_bytes > 0) {
    const uint64_t bytes = z.bloom_bytes;
    LEANEMB_ASSIGN_OR_RETURN(bloom_mem_, alloc->allocate(bytes, kCat));
    bloom_ = bloom_mem_.as<uint8_t>();
    std::memset(bloom_, 0, bytes);
  }
  meta_ = meta_mem_.as<RowMeta>();
  table_ = table_mem_.as<Slot>();
  free_ = free_mem_.as<int64_t>();
  readmit_ = readmit_mem_.as<uint64_t>();
  for (uint64_t i = 0; i < table_slots_; ++i) table_[i] = {0, -1};
  std::memset(readmit_, 0, readmit_bits_ / 8);
  // meta_ rows >= next_unused_ are never read; rows below it are always initialized.
  return Status();
}

size_t IdMap::held_bytes() const {
  return meta_mem_.size_bytes() + table_mem_.size_bytes() + free_mem_.size_bytes() + bloom_mem_.size_bytes() +
         readmit_mem_.size_bytes() + buckets_.size() * kBucketNodeBytes;
}

uint64_t IdMap::hash(int64_t id, uint64_t salt) const {
  return XXH3_64bits_withSeed(&id, sizeof(id), options_.seed ^ salt);
}

// ---- hash table: linear probing, backward-shift deletion ----------------------------------
int64_t IdMap::table_find_slot(int64_t id) const {
  const uint64_t mask = table_slots_ - 1;
  for (uint64_t i = hash(id, kTableSalt) & mask;; i = (i + 1) & mask) {
    if (table_[i].row < 0) return -1;
    if (table_[i].id == id) return static_cast<int64_t>(i);
  }
}

int64_t IdMap::find(int64_t raw_id) const {
  const int64_t s = table_find_slot(raw_id);
  return s < 0 ? -1 : table_[s].row;
}

int64_t IdMap::raw_id_of(int64_t row) const {
  if (row < 0 || row >= options_.capacity_rows || meta_[row].seq == 0) return -1;
  return meta_[row].raw_id;
}

void IdMap::table_insert(int64_t id, int64_t row) {
  const uint64_t mask = table_slots_ - 1;
  uint64_t i = hash(id, kTableSalt) & mask;
  while (table_[i].row >= 0) i = (i + 1) & mask;
  table_[i] = {id, row};
}

void IdMap::table_erase(int64_t id) {
  const uint64_t mask = table_slots_ - 1;
  int64_t s = table_find_slot(id);
  LEANEMB_CHECK(s >= 0, "id map: erasing an id that has no row");
  uint64_t hole = static_cast<uint64_t>(s);
  for (uint64_t j = (hole + 1) & mask; table_[j].row >= 0; j = (j + 1) & mask) {
    const uint64_t home = hash(table_[j].id, kTableSalt) & mask;
    // Move j into the hole unless its home lies cyclically in (hole, j].
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = {0, -1};
}

// ---- filters --------------------------------------------------------------------------------
bool IdMap::admit_sighting(int64_t id) {
  if (options_.min_count <= 1) return true;
  XXH128_hash_t h = XXH3_128bits_withSeed(&id, sizeof(id), options_.seed);
  const uint64_t h2 = h.high64 | 1;
  const uint32_t max = options_.bloom_counter_bits == 4 ? 15 : 255;
  uint32_t count = max;
  for (uint32_t k = 0; k < options_.bloom_hashes; ++k) {
    const uint64_t c = (h.low64 + k * h2) % options_.bloom_counters;
    uint32_t v;
    if (options_.bloom_counter_bits == 8) {
      v = bloom_[c];
      if (v < max) bloom_[c] = static_cast<uint8_t>(++v);
    } else {
      const int shift = (c & 1) ? 4 : 0;
      uint8_t& byte = bloom_[c >> 1];
      v = (byte >> shift) & 15u;
      if (v < max) {
        ++v;
        byte = static_cast<uint8_t>((byte & ~(15u << shift)) | (v << shift));
      }
    }
    count = std::min(count, v);
  }
  return count >= options_.min_count;
}

uint32_t IdMap::sightings(int64_t raw_id) const {
  if (options_.min_count <= 1) return 0;
  XXH128_hash_t h = XXH3_128bits_withSeed(&raw_id, sizeof(raw_id), options_.seed);
  const uint64_t h2 = h.high64 | 1;
  uint32_t count = 255;
  for (uint32_t k = 0; k < options_.bloom_hashes; ++k) {
    const uint64_t c = (h.low64 + k * h2) % options_.bloom_counters;
    const uint32_t v = options_.bloom_counter_bits == 8 ? bloom_[c] : (bloom_[c >> 1] >> ((c & 1) ? 4 : 0)) & 15u;
    count = std::min(count, v);
  }
  return count;
}

bool IdMap::readmit_test(int64_t id) const {
  const uint64_t h = hash(id, kReadmitSalt), h2 = (h >> 32) | 1;
  for (uint32_t k = 0; k < kReadmitHashes; ++k) {
    const uint64_t b = (h + k * h2) % readmit_bits_;
    if (!((readmit_[b >> 6] >> (b & 63)) & 1u)) return false;
  }
  return true;
}

void IdMap::readmit_add(int64_t id) {
  const uint64_t h = hash(id, kReadmitSalt), h2 = (h >> 32) | 1;
  for (uint32_t k = 0; k < kReadmitHashes; ++k) {
    const uint64_t b = (h + k * h2) % readmit_bits_;
    readmit_[b >> 6] |= uint64_t{1} << (b & 63);
  }
}

// ---- use-order lists ------------------------------------------------------------------------
uint64_t IdMap::bucket_key(int64_t row) const {
  return options_.eviction == EvictionPolicy::kLfu ? meta_[row].freq : 0;
}

void IdMap::link_tail(int64_t row) {
  Bucket& b = buckets_[bucket_key(row)];
  meta_[row].prev = b.tail;
  meta_[row].next = -1;
  if (b.tail >= 0) {
    meta_[b.tail].next = row;
  } else {
    b.head = row;
  }
  b.tail = row;
}

void IdMap::unlink(int64_t row) {
  auto it = buckets_.find(bucket_key(row));
  LEANEMB_CHECK(it != buckets_.end(), "id map: row not in its bucket");
  Bucket& b = it->second;
  RowMeta& m = meta_[row];
  if (m.prev >= 0) meta_[m.prev].next = m.next; else b.head = m.next;
  if (m.next >= 0) meta_[m.next].prev = m.prev; else b.tail = m.prev;
  if (b.head < 0) buckets_.erase(it);
}

int64_t IdMap::pick_victim() const {
  for (const auto& [key, b] : buckets_) {
    if (meta_[b.head].seq < call_start_seq_) return b.head;
  }
  return -1;
}

void IdMap::drop_row(int64_t row) {
  unlink(row);
  table_erase(meta_[row].raw_id);
  readmit_add(meta_[row].raw_id);
  meta_[row].seq = 0;
  --counters_.live_rows;
}

// ---- the calls ------------------------------------------------------------------------------
Status IdMap::map(std::span<const int64_t> raw_ids, int64_t step, std::span<int64_t> rows_out, MapReport* report) {
  if (rows_out.size() != raw_ids.size()) {
    return invalid_argument("id map: rows_out has " + std::to_string(rows_out.size()) + " entries for " +
                            std::to_string(raw_ids.size()) + " ids");
  }
  if (step < last_step_) {
    return invalid_argument("id map: step " + std::to_string(step) + " is before the last step " +
                            std::to_string(last_step_));
  }
  MapReport local;
  MapReport& rep = report ? *report : local;
  rep.clear();
  last_step_ = step;
  call_start_seq_ = seq_ + 1;
  for (size_t i = 0; i < raw_ids.size(); ++i) {
    const int64_t id = raw_ids[i];
    int64_t row = find(id);
    if (row >= 0) {  // a use: move to the tail of its (next) bucket
      unlink(row);
      RowMeta& m = meta_[row];
      ++m.freq;
      m.last_seen = step;
      m.seq = ++seq_;
      link_tail(row);
      rows_out[i] = row;
      continue;
    }
    if (!admit_sighting(id)) {
      ++rep.rejected_min_count;
      rows_out[i] = -1;
      continue;
    }
    if (num_free_ > 0) {
      row = free_[--num_free_];
    } else if (next_unused_ < options_.capacity_rows) {
      row = next_unused_++;
    } else {
      row = pick_victim();
      if (row < 0) {
        ++rep.rejected_capacity;
        rows_out[i] = -1;
        continue;
      }
      rep.evicted.push_back({row, meta_[row].raw_id});
      drop_row(row);
      ++counters_.evicted;
    }
    const bool again = readmit_test(id);
    meta_[row] = {id, step, 1, ++seq_, -1, -1};
    table_insert(id, row);
    link_tail(row);
    ++counters_.live_rows;
    rep.assigned.push_back({row, id});
    ++rep.admitted;
    if (again) ++rep.readmitted;
    rows_out[i] = row;
  }
  counters_.admitted += rep.admitted;
  counters_.readmitted += rep.readmitted;
  counters_.rejected_min_count += rep.rejected_min_count;
  counters_.rejected_capacity += rep.rejected_capacity;
  return Status();
}

Status IdMap::end_step(int64_t step, MapReport* report) {
  if (step < last_step_) {
    return invalid_argument("id map: end_step(" + std::to_string(step) + ") is before the last step " +
                            std::to_string(last_step_));
  }
  MapReport local;
  MapReport& rep = report ? *report : local;
  rep.clear();
  last_step_ = step;
  if (options_.max_age_steps <= 0) return Status();
  std::vector<int64_t> expired;
  for (const auto& [key, b] : buckets_) {
    for (int64_t r = b.head; r >= 0 && step - meta_[r].last_seen > options_.max_age_steps; r = meta_[r].next) {
      expired.push_back(r);
    }
  }
  for (int64_t r : expired) {
    rep.evicted.push_back({r, meta_[r].raw_id});
    drop_row(r);
    free_[num_free_++] = r;
  }
  rep.expired = static_cast<int64_t>(expired.size());
  counters_.expired += rep.expired;
  return Status();
}

}  // namespace leanemb::tiered
