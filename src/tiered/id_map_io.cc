// IdMap::serialize / deserialize (docs/tiered.md, "Dynamic tables (IdMap)", has the layout).
// Little-endian fixed-width fields, then an XXH3-64 of everything before it. deserialize()
// checks the checksum first, then every structural invariant of id_map.cc, so no corrupt
// input can build a map that later breaks an invariant (LEANEMB_CHECK) or reads out of bounds.
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "tiered/id_map.h"

namespace leanemb::tiered {

namespace {

constexpr char kMagic[8] = {'L', 'E', 'I', 'D', 'M', 'A', 'P', '\0'};
constexpr uint32_t kVersion = 1;
static_assert(std::endian::native == std::endian::little, "the id map format is little-endian");

Status corrupt(const std::string& what) { return data_loss("id map checkpoint is corrupt: " + what); }

}  // namespace

std::vector<uint8_t> IdMap::serialize() const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.raw(kMagic, 8);
  w.u64(kVersion);
  const IdMapOptions& o = options_;
  w.i64(o.capacity_rows);
  w.u64(o.min_count);
  w.u64(o.bloom_counters);
  w.u64(o.bloom_hashes);
  w.u64(o.bloom_counter_bits);
  w.u64(static_cast<uint64_t>(o.eviction));
  w.i64(o.max_age_steps);
  w.u64(o.seed);
  w.u64(o.readmit_filter_bits);
  const IdMapCounters& c = counters_;
  for (int64_t v : {c.admitted, c.readmitted, c.rejected_min_count, c.rejected_capacity, c.evicted, c.expired,
                    c.live_rows}) {
    w.i64(v);
  }
  w.u64(seq_);
  w.i64(last_step_);
  w.i64(next_unused_);
  // Live rows in use order, so that deserialize rebuilds every list by appending at tails.
  std::vector<int64_t> live;
  for (int64_t r = 0; r < next_unused_; ++r) {
    if (meta_[r].seq != 0) live.push_back(r);
  }
  std::sort(live.begin(), live.end(), [&](int64_t a, int64_t b) { return meta_[a].seq < meta_[b].seq; });
  w.i64(static_cast<int64_t>(live.size()));
  for (int64_t r : live) {
    w.i64(r);
    w.i64(meta_[r].raw_id);
    w.i64(meta_[r].last_seen);
    w.u64(meta_[r].freq);
    w.u64(meta_[r].seq);
  }
  w.i64(num_free_);
  for (int64_t i = 0; i < num_free_; ++i) w.i64(free_[i]);
  w.u64(bloom_mem_.size_bytes());
  if (bloom_ != nullptr) w.raw(bloom_, bloom_mem_.size_bytes());
  w.u64(readmit_bits_);
  w.raw(readmit_, readmit_bits_ / 8);
  w.u64(XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<IdMap> IdMap::deserialize(std::span<const uint8_t> bytes, Allocator* alloc) {
  if (bytes.size() < 24) return corrupt("only " + std::to_string(bytes.size()) + " bytes");
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (XXH3_64bits(bytes.data(), bytes.size() - 8) != stored) return corrupt("checksum mismatch");
  ByteReader r(bytes.first(bytes.size() - 8));
  char magic[8];
  uint64_t version = 0;
  if (!r.raw(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return corrupt("bad magic");
  if (!r.u64(&version) || version != kVersion) return corrupt("unsupported version " + std::to_string(version));
  IdMapOptions o;
  uint64_t min_count = 0, hashes = 0, bits = 0, eviction = 0;
  bool ok = r.i64(&o.capacity_rows) && r.u64(&min_count) && r.u64(&o.bloom_counters) && r.u64(&hashes) &&
            r.u64(&bits) && r.u64(&eviction) && r.i64(&o.max_age_steps) && r.u64(&o.seed) &&
            r.u64(&o.readmit_filter_bits);
  if (!ok) return corrupt("truncated options");
  if (min_count > 255 || hashes > 16 || bits > 8 || eviction > 1) return corrupt("options out of range");
  o.min_count = static_cast<uint32_t>(min_count);
  o.bloom_hashes = static_cast<uint32_t>(hashes);
  o.bloom_counter_bits = static_cast<uint32_t>(bits);
  o.eviction = static_cast<EvictionPolicy>(eviction);
  auto created = IdMap::create(o, alloc);
  if (!created.ok()) {
    if (created.status().code() == StatusCode::kInvalidArgument) return corrupt(created.status().message());
    return created.status();
  }
  IdMap m = std::move(created).value();
  IdMapCounters& c = m.counters_;
  for (int64_t* v : {&c.admitted, &c.readmitted, &c.rejected_min_count, &c.rejected_capacity, &c.evicted, &c.expired,
                     &c.live_rows}) {
    if (!r.i64(v)) return corrupt("truncated counters");
  }
  int64_t num_live = 0;
  if (!r.u64(&m.seq_) || !r.i64(&m.last_step_) || !r.i64(&m.next_unused_) || !r.i64(&num_live)) {
    return corrupt("truncated state");
  }
  const int64_t cap = o.capacity_rows;
  if (m.next_unused_ < 0 || m.next_unused_ > cap) return corrupt("next_unused out of range");
  if (num_live < 0 || num_live > m.next_unused_ || num_live != c.live_rows) return corrupt("bad live row count");
  uint64_t prev_seq = 0;
  for (int64_t i = 0; i < m.next_unused_; ++i) m.meta_[i].seq = 0;
  for (int64_t i = 0; i < num_live; ++i) {
    int64_t row = 0;
    RowMeta meta{};
    if (!r.i64(&row) || !r.i64(&meta.raw_id) || !r.i64(&meta.last_seen) || !r.u64(&meta.freq) || !r.u64(&meta.seq)) {
      return corrupt("truncated row table");
    }
    if (row < 0 || row >= m.next_unused_ || m.meta_[row].seq != 0) return corrupt("bad or repeated row " + std::to_string(row));
    if (meta.seq <= prev_seq || meta.seq > m.seq_ || meta.freq == 0 || meta.last_seen > m.last_step_) {
      return corrupt("bad use order of row " + std::to_string(row));
    }
    if (m.find(meta.raw_id) >= 0) return corrupt("raw id " + std::to_string(meta.raw_id) + " has two rows");
    prev_seq = meta.seq;
    meta.prev = meta.next = -1;
    m.meta_[row] = meta;
    m.table_insert(meta.raw_id, row);
    m.link_tail(row);
  }
  if (!r.i64(&m.num_free_) || m.num_free_ != m.next_unused_ - num_live) return corrupt("bad free row count");
  for (int64_t i = 0; i < m.num_free_; ++i) {
    int64_t row = 0;
    if (!r.i64(&row)) return corrupt("truncated free rows");
    if (row < 0 || row >= m.next_unused_ || m.meta_[row].seq != 0) return corrupt("bad free row " + std::to_string(row));
    m.meta_[row].seq = UINT64_MAX;  // marks "listed as free" until the loop ends
    m.free_[i] = row;
  }
  for (int64_t i = 0; i < m.num_free_; ++i) m.meta_[m.free_[i]].seq = 0;
  uint64_t bloom_bytes = 0, readmit_bits = 0;
  if (!r.u64(&bloom_bytes) || bloom_bytes != m.bloom_mem_.size_bytes() ||
      (bloom_bytes > 0 && !r.raw(m.bloom_, bloom_bytes))) {
    return corrupt("bad admission filter");
  }
  if (!r.u64(&readmit_bits) || readmit_bits != m.readmit_bits_ || !r.raw(m.readmit_, readmit_bits / 8)) {
    return corrupt("bad re-admission filter");
  }
  if (r.left() != 0) return corrupt(std::to_string(r.left()) + " trailing bytes");
  return m;
}

}  // namespace leanemb::tiered
