// CacheIndex: the row -> slot map (Robin Hood, 32-bit entries), slot bookkeeping and the
// scan-based exact eviction order. The invariants are in cache_index.h.
#include "tiered/cache_index.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "kernels/kernels.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {

namespace {

constexpr int kDistBits = 4;           // probe distance field of a map entry (saturating)
constexpr size_t kHistBuckets = 4096;  // buckets of one histogram pass of a scan
constexpr uint8_t kMarkMask = 0xE0;    // flag bits 5..7: the mark
constexpr int kMarkShift = 5;
constexpr uint8_t kMarkOld = 1 << kMarkShift;  // mark 1: used by a call before the last demotion
constexpr int kFirstCallMark = 2, kCallMarks = 6;  // calls take marks 2..7
constexpr int64_t kScoutStepsMax = 256;  // CLOCK: slots the scout looks at per prefetch_victim()

}  // namespace

void demote_marks_reference(uint8_t* flags, int64_t n) {
  for (int64_t s = 0; s < n; ++s) {
    const uint8_t f = flags[s];
    flags[s] = static_cast<uint8_t>((f & ~kMarkMask) | ((f & kMarkMask) ? kMarkOld : 0));
  }
}

void demote_marks(uint8_t* flags, int64_t n) {
  // Per byte: bit 5 := bit 5 | bit 6 | bit 7 (shifts by 1 and 2 bring a byte's bits 6 and 7 to
  // its bit 5; what they carry in from the next byte lands on bits masked off), bits 6..7 := 0.
  static_assert(kMarkMask == 0xE0 && kMarkOld == 0x20, "demote_marks assumes the mark in bits 5..7");
  constexpr uint64_t kKeep = 0x1F1F1F1F1F1F1F1FULL, kOld = 0x2020202020202020ULL;
  int64_t s = 0;
  for (; s + 8 <= n; s += 8) {
    uint64_t x;
    std::memcpy(&x, flags + s, 8);
    x = (x & kKeep) | ((x | (x >> 1) | (x >> 2)) & kOld);
    std::memcpy(flags + s, &x, 8);
  }
  demote_marks_reference(flags + s, n - s);
}

void CacheIndex::init(void* mem, int64_t capacity, int64_t num_rows, CachePolicy policy, uint32_t renormalize_at) {
  policy_ = policy;
  cap_ = capacity;
  renormalize_at_ = renormalize_at;
  const size_t cap = static_cast<size_t>(capacity);
  m_ = row_cache_map_entries(capacity);
  cand_cap_ = row_cache_candidate_entries(capacity, policy);
  heap_cap_ = row_cache_heap_entries(capacity, policy);
  const bool narrow = row_cache_slot_row_bytes(num_rows) == 4;
  const size_t key_words = row_cache_slot_key_bytes(policy) / 4;  // u32 keys per slot
  uint8_t* p = static_cast<uint8_t*>(mem);
  auto carve = [&](auto*& dst, size_t count) {  // an array of `count` (none: null)
    using T = std::remove_reference_t<decltype(*dst)>;
    dst = count ? reinterpret_cast<T*>(p) : nullptr;
    p += count * sizeof(T);
  };
  // 8-byte arrays first, then 4-byte arrays, then bytes (sizes.h counts them in this order).
  carve(row64_, narrow ? 0 : cap);
  carve(cand_key_, cand_cap_);
  carve(heap_key_, heap_cap_);
  carve(row32_, narrow ? cap : 0);
  carve(key32_, key_words >= 1 ? cap : 0);
  carve(last_use_, key_words >= 2 ? cap : 0);
  carve(map_, m_);
  carve(cand_slot_, cand_cap_);
  carve(heap_slot_, heap_cap_);
  carve(flags_, (cap + 7) / 8 * 8);
  if (row32_) std::fill(row32_, row32_ + cap, int32_t{-1});
  if (row64_) std::fill(row64_, row64_ + cap, int64_t{-1});
  if (key32_) std::fill(key32_, key32_ + cap, 0u);
  if (last_use_) std::fill(last_use_, last_use_ + cap, 0u);
  std::fill(map_, map_ + m_, 0u);
  std::fill(flags_, flags_ + cap, uint8_t{0});
  // Entry bits: slot + 1 (values 1..cap), then the distance, then the tag.
  const int slot_bits = std::bit_width(static_cast<uint64_t>(cap));
  slot_mask_ = static_cast<uint32_t>((uint64_t{1} << slot_bits) - 1);
  const int dist_bits = std::min(kDistBits, 32 - slot_bits);
  dist_shift_ = slot_bits;
  dist_max_ = static_cast<uint32_t>((uint64_t{1} << dist_bits) - 1);
  tag_bits_ = 32 - slot_bits - dist_bits;
  tag_shift_ = 32 - tag_bits_;
  tag_mask_ = static_cast<uint32_t>((uint64_t{1} << tag_bits_) - 1);
  hist_.assign(policy == CachePolicy::kClock ? 0 : kHistBuckets, 0);  // CLOCK scans nothing
  cand_valid_ = false;
}

// ---- map ------------------------------------------------------------------------------------

uint32_t CacheIndex::make_entry(uint32_t tag, int32_t slot, uint64_t dist) const {
  const uint32_t d = static_cast<uint32_t>(std::min<uint64_t>(dist, dist_max_));
  return (tag_bits_ ? tag << tag_shift_ : 0u) | (d << dist_shift_) | static_cast<uint32_t>(slot + 1);
}

uint64_t CacheIndex::entry_dist(uint32_t e, size_t i) const {
  const uint32_t d = (e >> dist_shift_) & dist_max_;
  if (d < dist_max_) return d;
  const size_t h = home(mix(slot_row(entry_slot(e))));
  return i >= h ? i - h : i + m_ - h;
}

template <typename Accept>
int32_t CacheIndex::probe(uint64_t h, Accept&& accept) const {
  const uint32_t tag = tag_of(h);
  size_t i = home(h);
  for (uint64_t d = 0;; ++d, i = next(i)) {
    const uint32_t e = map_[i];
    if (e == 0) return -1;
    // Robin Hood: entries of a probe run sit in order of home, so one that is closer to its
    // home than this probe is to ours means our row is not in the map.
    const uint32_t de = (e >> dist_shift_) & dist_max_;
    if (de < d && (de < dist_max_ || entry_dist(e, i) < d)) return -1;
    if (entry_tag(e) == tag && accept(entry_slot(e))) return entry_slot(e);
  }
}

int32_t CacheIndex::find(int64_t row) const {
  return probe(mix(row), [&](int32_t s) { return slot_row(s) == row; });
}

bool CacheIndex::find_batch(const int64_t* rows, int64_t n, int32_t* found, bool check_flags) const {
  constexpr int64_t kAhead = 16, kRing = 64;  // kRing > 2 x kAhead
  uint64_t hash[kRing];
  int32_t cand[kRing];
  auto stage1 = [&](int64_t j) {  // hash, prefetch the map line
    const uint64_t h = mix(rows[j]);
    hash[j & (kRing - 1)] = h;
    __builtin_prefetch(&map_[home(h)]);
  };
  auto stage2 = [&](int64_t j) {  // probe (first tag match, unverified), prefetch its row
    const int32_t c = probe(hash[j & (kRing - 1)], [](int32_t) { return true; });
    cand[j & (kRing - 1)] = c;
    if (c >= 0) {
      if (row32_) __builtin_prefetch(&row32_[c]);
      else __builtin_prefetch(&row64_[c]);
      if (check_flags) __builtin_prefetch(&flags_[c]);
    }
  };
  for (int64_t j = 0; j < std::min(n, 2 * kAhead); ++j) stage1(j);
  for (int64_t j = 0; j < std::min(n, kAhead); ++j) stage2(j);
  bool ready = true;
  for (int64_t i = 0; i < n; ++i) {
    if (i + 2 * kAhead < n) stage1(i + 2 * kAhead);
    if (i + kAhead < n) stage2(i + kAhead);
    const int32_t c = cand[i & (kRing - 1)];
    // A candidate whose row differs is a tag collision: the full probe decides (rare).
    const int32_t s = c < 0 ? -1 : slot_row(c) == rows[i] ? c : find(rows[i]);
    found[i] = s;
    if (check_flags) ready = ready && s >= 0 && !(flags_[s] & kInFlight);
  }
  return ready;
}

// ---- slots ----------------------------------------------------------------------------------

uint32_t CacheIndex::begin_call() {
  ++calls_;
  mark_ = static_cast<uint8_t>(kFirstCallMark + calls_ % kCallMarks);
  if (mark_ == kFirstCallMark) demote_marks(flags_, cap_);  // the marks wrap: the last six calls' marks become "used before"
  if (policy_ == CachePolicy::kLfu && tick_ >= renormalize_at_) renormalize(last_use_, &tick_);
  scout_dist_ = 0;
  scout_lead_ = 0;
  return ++tick_;
}

bool CacheIndex::touch(int32_t s, uint32_t tick) {
  uint8_t& f = flags_[s];
  if ((f >> kMarkShift) == mark_) return false;
  f = static_cast<uint8_t>((f & ~kMarkMask) | (mark_ << kMarkShift));
  if (policy_ == CachePolicy::kLfu) {
    if (key32_[s] != UINT32_MAX) ++key32_[s];
    last_use_[s] = tick;
  }
  return true;
}

int32_t CacheIndex::take_free() {
  if (!freed_.empty()) {
    const int32_t s = freed_.back();
    freed_.pop_back();
    return s;
  }
  return next_unused_ < cap_ ? static_cast<int32_t>(next_unused_++) : -1;
}

void CacheIndex::map_insert(int64_t row, int32_t s) {
  const uint64_t h = mix(row);
  uint32_t tag = tag_of(h);
  int32_t slot = s;
  size_t i = home(h);
  for (uint64_t d = 0;; ++d, i = next(i)) {
    const uint32_t e = map_[i];
    if (e == 0) {
      map_[i] = make_entry(tag, slot, d);
      return;
    }
    const uint64_t de = entry_dist(e, i);
    if (de < d) {  // Robin Hood: the entry closer to its home moves on
      map_[i] = make_entry(tag, slot, d);
      tag = entry_tag(e);
      slot = entry_slot(e);
      d = de;
    }
  }
}

void CacheIndex::assign(int32_t s, int64_t row, uint32_t tick) {
  set_row(s, row);
  map_insert(row, s);
  // CLOCK: a fetched row starts without a mark, so it is referenced only once a later call uses
  // it again (rows seen once leave at the hand's next pass; fewer misses on Zipf traffic).
  const uint8_t mark = policy_ == CachePolicy::kClock ? 0 : mark_;
  flags_[s] = static_cast<uint8_t>(kResident | kInFlight | (mark << kMarkShift));
  if (key32_) key32_[s] = policy_ == CachePolicy::kLfu ? 1u : 0u;
  if (last_use_) last_use_[s] = tick;
}

void CacheIndex::unassign(int32_t s) {
  const uint64_t h = mix(slot_row(s));
  size_t i = home(h);
  while (entry_slot(map_[i]) != s) i = next(i);
  // Backward-shift deletion: the entries after the hole move back one place while they are not
  // at their home.
  for (;;) {
    const size_t j = next(i);
    const uint32_t e = map_[j];
    if (e == 0) break;
    const uint64_t de = entry_dist(e, j);
    if (de == 0) break;
    map_[i] = make_entry(entry_tag(e), entry_slot(e), de - 1);
    i = j;
  }
  map_[i] = 0;
}

void CacheIndex::restore(int32_t s, int64_t row, bool dirty) {
  // The slot's key stays as the aborted fetch set it (a victim restored by a rollback counts as
  // used by that call), as the cache always did.
  set_row(s, row);
  map_insert(row, s);
  flags_[s] = static_cast<uint8_t>(kResident | (dirty ? kDirty : 0));
}

void CacheIndex::clear(int32_t s) {
  set_row(s, -1);
  flags_[s] = 0;
}

// ---- eviction -------------------------------------------------------------------------------

void CacheIndex::make_evictable(int32_t s) {
  if (policy_ == CachePolicy::kClock) return;  // the hand finds it
  if (policy_ == CachePolicy::kLru) {
    if (stamp_ >= renormalize_at_) renormalize(key32_, &stamp_);
    key32_[s] = stamp_++;
  }
  if (!cand_valid_) return;
  const uint64_t k = key(s);
  if (!below_threshold(k, s)) return;
  if (heap_n_ == heap_cap_) {
    cand_valid_ = false;  // no room to keep the invariant: the next victim rescans
    return;
  }
  heap_push(k, s);
}

int32_t CacheIndex::pop_victim() {
  if (policy_ == CachePolicy::kClock) return clock_victim();
  bool scanned = false;
  for (;;) {
    if (!cand_valid_) {
      rescan();
      scanned = true;
    }
    const bool have_cand = cand_head_ < cand_n_, have_heap = heap_n_ > 0;
    if (!have_cand && !have_heap) {
      if (scanned) return -1;
      cand_valid_ = false;
      continue;
    }
    uint64_t k;
    int32_t s;
    const bool from_cand = have_cand && (!have_heap || cand_key_[cand_head_] < heap_key_[0] ||
                                         (cand_key_[cand_head_] == heap_key_[0] && cand_slot_[cand_head_] < heap_slot_[0]));
    if (from_cand) {
      k = cand_key_[cand_head_];
      s = static_cast<int32_t>(cand_slot_[cand_head_]);
      ++cand_head_;
    } else {
      k = heap_key_[0];
      s = static_cast<int32_t>(heap_slot_[0]);
      heap_pop();
    }
    if (evictable(s) && key(s) == k) return s;
  }
}

void CacheIndex::prefetch_victim(size_t ahead, bool bucket) const {
  if (policy_ == CachePolicy::kClock) {
    if (bucket) clock_scout(ahead);
    return;
  }
  if (!cand_valid_ || cand_head_ + ahead >= cand_n_) return;
  const int32_t s = static_cast<int32_t>(cand_slot_[cand_head_ + ahead]);
  if (!bucket) {
    prefetch_meta(s);
    if (row32_) __builtin_prefetch(&row32_[s]);
    else __builtin_prefetch(&row64_[s]);
  } else if (slot_row(s) >= 0) {
    prefetch_row(slot_row(s));
  }
}

int32_t CacheIndex::clock_victim() {
  bool seen = false;  // an evictable slot in this lap
  for (int64_t n = 0; n < 2 * cap_; ++n) {
    if (n == cap_ && !seen) return -1;  // a whole lap without one: every slot is pinned or free
    const int32_t s = static_cast<int32_t>(hand_);
    hand_ = hand_ + 1 == cap_ ? 0 : hand_ + 1;
    const bool scouted = scout_dist_ > 0;  // the scout looked at s
    if (scouted) --scout_dist_;
    if (scout_dist_ == 0) scout_lead_ = 0;
    if (!evictable(s)) continue;
    seen = true;
    uint8_t& f = flags_[s];
    if (f & kMarkMask) {  // used since the hand last passed: a second chance
      f &= static_cast<uint8_t>(~kMarkMask);
      continue;
    }
    if (scouted && scout_lead_ > 0) --scout_lead_;
    return s;
  }
  return -1;
}

// Looks ahead of the hand for the slots it will evict (evictable, no mark), prefetching their
// rows' map lines, until `ahead` are known (at most kScoutStepsMax slots per call, at most one
// lap ahead). A prediction can be wrong (a slot pinned or used after the scout passed it): it
// costs a useless prefetch.
void CacheIndex::clock_scout(size_t ahead) const {
  for (int64_t steps = 0; scout_lead_ < ahead && scout_dist_ < cap_ && steps < kScoutStepsMax; ++steps) {
    int64_t s = hand_ + scout_dist_;
    if (s >= cap_) s -= cap_;
    ++scout_dist_;
    const int32_t slot = static_cast<int32_t>(s);
    if (!evictable(slot) || (flags_[slot] & kMarkMask)) continue;
    ++scout_lead_;
    prefetch_row(slot_row(slot));
  }
}

// Selects the smallest (key, slot) of the evictable slots, at most cand_cap_ of them: keys below
// a cut (found by histogram passes that narrow a key range until the keys below the cut fill at
// least a quarter of the batch, or the range is one key) and, when the cut is one key with more
// slots than room, the first of its slots in slot order.
void CacheIndex::sort_candidates() {
  if (cand_n_ < 2) return;
  uint64_t kmin = UINT64_MAX, kmax = 0;
  for (size_t i = 0; i < cand_n_; ++i) {
    kmin = std::min(kmin, cand_key_[i]);
    kmax = std::max(kmax, cand_key_[i]);
  }
  if (kmax == kmin) return;  // one key: slot order already
  const int64_t n = static_cast<int64_t>(cand_n_);
  if (kmax - kmin < (uint64_t{1} << 32)) {
    // The candidates were collected in slot order, so a stable sort by key gives (key, slot)
    // order: the dedup's radix sort of (key - kmin) << 32 | slot (transient: 16 B per candidate).
    std::vector<uint64_t> packed(cand_n_), scratch(cand_n_);
    for (size_t i = 0; i < cand_n_; ++i) packed[i] = (cand_key_[i] - kmin) << 32 | cand_slot_[i];
    kernels::radix_sort_row_src(packed.data(), scratch.data(), n, std::bit_width(kmax - kmin));
    for (size_t i = 0; i < cand_n_; ++i) {
      cand_key_[i] = kmin + (packed[i] >> 32);
      cand_slot_[i] = static_cast<uint32_t>(packed[i]);
    }
    return;
  }
  struct Entry {
    uint64_t key;
    uint32_t slot;
  };
  std::vector<Entry> sorted(cand_n_);  // transient: 16 B per candidate
  for (size_t i = 0; i < cand_n_; ++i) sorted[i] = {cand_key_[i], cand_slot_[i]};
  std::sort(sorted.begin(), sorted.end(),
            [](const Entry& a, const Entry& b) { return a.key != b.key ? a.key < b.key : a.slot < b.slot; });
  for (size_t i = 0; i < cand_n_; ++i) {
    cand_key_[i] = sorted[i].key;
    cand_slot_[i] = sorted[i].slot;
  }
}

void CacheIndex::rescan() {
  cand_n_ = cand_head_ = heap_n_ = 0;
  cand_valid_ = true;
  thr_key_ = 0;
  thr_slot_ = -1;  // nothing is below: with no evictable slot, none is selected
  uint64_t lo = UINT64_MAX, hi = 0;
  size_t n = 0;
  for (int32_t s = 0; s < cap_; ++s) {
    if (!evictable(s)) continue;
    const uint64_t k = key(s);
    lo = std::min(lo, k);
    hi = std::max(hi, k);
    ++n;
  }
  if (n == 0) return;
  uint64_t cut = hi;          // select keys < cut ...
  bool all = n <= cand_cap_;  // ... or every evictable slot
  size_t ties = 0;            // ... plus this many slots of key `cut`
  size_t below = 0;           // evictable slots with key < lo
  while (!all) {
    const uint64_t range = hi - lo;
    const int shift = range < kHistBuckets ? 0 : std::bit_width(range) - 12;
    const size_t nb = static_cast<size_t>(range >> shift) + 1;
    std::fill(hist_.begin(), hist_.begin() + static_cast<std::ptrdiff_t>(nb), 0u);
    for (int32_t s = 0; s < cap_; ++s) {
      if (!evictable(s)) continue;
      const uint64_t k = key(s);
      if (k >= lo && k <= hi) ++hist_[(k - lo) >> shift];
    }
    size_t j = 0, cum = below;
    while (j < nb && cum + hist_[j] <= cand_cap_) cum += hist_[j++];
    if ((j > 0 && cum >= cand_cap_ / 4) || j == nb) {
      cut = lo + (static_cast<uint64_t>(j) << shift);
      break;
    }
    if (shift == 0) {  // bucket j is the single key lo + j
      cut = lo + j;
      ties = cand_cap_ - cum;
      break;
    }
    below = cum;
    lo += static_cast<uint64_t>(j) << shift;
    hi = std::min(hi, lo + ((uint64_t{1} << shift) - 1));
  }
  for (int32_t s = 0; s < cap_ && cand_n_ < cand_cap_; ++s) {
    if (!evictable(s)) continue;
    const uint64_t k = key(s);
    if (all || k < cut || (k == cut && ties > 0)) {
      if (!all && k == cut) --ties;
      cand_key_[cand_n_] = k;
      cand_slot_[cand_n_] = static_cast<uint32_t>(s);
      ++cand_n_;
    }
  }
  sort_candidates();
  if (cand_n_ > 0) {
    // T = the largest selected (key, slot). With a cut at a bucket boundary every slot of a key
    // below the cut is in, so T covers all slots of the last key.
    thr_key_ = cand_key_[cand_n_ - 1];
    thr_slot_ = !all && thr_key_ < cut ? INT64_MAX : static_cast<int64_t>(cand_slot_[cand_n_ - 1]);
  }
}

void CacheIndex::heap_push(uint64_t k, int32_t s) {
  size_t i = heap_n_++;
  heap_key_[i] = k;
  heap_slot_[i] = static_cast<uint32_t>(s);
  while (i > 0) {
    const size_t p = (i - 1) / 2;
    if (!heap_less(i, p)) break;
    std::swap(heap_key_[i], heap_key_[p]);
    std::swap(heap_slot_[i], heap_slot_[p]);
    i = p;
  }
}

void CacheIndex::heap_pop() {
  --heap_n_;
  heap_key_[0] = heap_key_[heap_n_];
  heap_slot_[0] = heap_slot_[heap_n_];
  for (size_t i = 0;;) {
    size_t c = 2 * i + 1;
    if (c >= heap_n_) break;
    if (c + 1 < heap_n_ && heap_less(c + 1, c)) ++c;
    if (!heap_less(c, i)) break;
    std::swap(heap_key_[i], heap_key_[c]);
    std::swap(heap_slot_[i], heap_slot_[c]);
    i = c;
  }
}

// Replaces values[s] of the resident slots by their dense rank from 1 (equal values keep equal
// ranks, order is kept) and sets *counter past the largest. Transient memory: 8 B per slot.
void CacheIndex::renormalize(uint32_t* values, uint32_t* counter) {
  std::vector<uint32_t> order;
  order.reserve(static_cast<size_t>(cap_));
  for (int32_t s = 0; s < cap_; ++s)
    if (slot_row(s) >= 0) order.push_back(static_cast<uint32_t>(s));
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return values[a] < values[b]; });
  uint32_t rank = 0, prev = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const uint32_t v = values[order[i]];
    if (i == 0 || v != prev) ++rank;
    prev = v;
    values[order[i]] = rank;
  }
  *counter = rank + 1;
  cand_valid_ = false;
}

}  // namespace leanemb::tiered
