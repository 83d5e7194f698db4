// Tests of the row cache's index (tiered/cache_index.h) on its own: the row -> slot map against a
// hash map under churn (rows above 2^32 included with int64 slot rows, rows below 2^31 with int32
// ones, long probe runs that saturate the distance field), the scan-based eviction order against
// a brute-force minimum for LRU and LFU, with and without renormalization of the 32-bit keys,
// CLOCK's victims against a model of second chance, and the index's bytes per slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "tiered/cache_index.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {
namespace {

constexpr int64_t kWideTable = int64_t{1} << 50;  // rows of tests that use rows above 2^32

struct OwnedIndex {
  std::vector<uint64_t> mem;
  CacheIndex ix;
  OwnedIndex(int64_t cap, CachePolicy p, uint32_t renormalize_at = 0xFFFFFFF0u, int64_t num_rows = kWideTable)
      : mem(row_cache_index_bytes(cap, num_rows, p) / 8 + 1) {
    ix.init(mem.data(), cap, num_rows, p, renormalize_at);
  }
};

// A row of `space` distinct values spread over 63 bits, with pairs equal in their low 32 bits.
int64_t wide_row(uint64_t k) { return static_cast<int64_t>((k >> 1) | ((k & 1) << 32) | ((k % 7) << 40)); }
// A row below 2^31 (int32 slot rows), spread over the whole range.
int64_t narrow_row(uint64_t k) { return static_cast<int64_t>((k * 0x9E3779B1u) & 0x7FFFFFFF); }

// find() agrees with a reference map while rows come and go (assign / unassign of random slots).
void check_map_under_churn(int64_t num_rows, int64_t (*row_of)(uint64_t)) {
  const int64_t cap = 1000;
  OwnedIndex o(cap, CachePolicy::kLru, 0xFFFFFFF0u, num_rows);
  CacheIndex& ix = o.ix;
  std::unordered_map<int64_t, int32_t> ref;
  std::vector<int64_t> slot_row(cap, -1);
  std::mt19937_64 rng(5);
  for (int it = 0; it < 200000; ++it) {
    const int32_t s = static_cast<int32_t>(rng() % cap);
    if (slot_row[s] >= 0) {
      ref.erase(slot_row[s]);
      ix.unassign(s);
      ix.clear(s);
      slot_row[s] = -1;
    }
    if (rng() % 4 != 0) {
      int64_t r;
      do r = row_of(rng() % 5000); while (ref.count(r));
      ix.assign(s, r, 1);
      ref[r] = s;
      slot_row[s] = r;
    }
    const int64_t q = row_of(rng() % 5000);
    const auto e = ref.find(q);
    ASSERT_EQ(ix.find(q), e == ref.end() ? -1 : e->second) << "row " << q << " at iteration " << it;
  }
  for (const auto& [r, s] : ref) {
    ASSERT_EQ(ix.find(r), s);
    ASSERT_EQ(ix.slot_row(s), r);
  }
}

TEST(CacheIndexTest, MapAgreesWithAReferenceUnderChurn) { check_map_under_churn(kWideTable, wide_row); }
TEST(CacheIndexTest, MapWithInt32SlotRowsAgreesWithAReferenceUnderChurn) {
  check_map_under_churn(int64_t{1} << 31, narrow_row);
}

// Slot rows are int32 up to tables of 2^31 rows (the largest row, 2^31 - 1, kept exactly) and
// int64 above; the kernels read whichever array is set.
TEST(CacheIndexTest, SlotRowsAreInt32UpTo2To31Rows) {
  const int64_t two31 = int64_t{1} << 31;
  OwnedIndex narrow(16, CachePolicy::kClock, 0xFFFFFFF0u, two31);
  narrow.ix.assign(3, two31 - 1, 1);
  ASSERT_NE(narrow.ix.slot_rows32(), nullptr);
  EXPECT_EQ(narrow.ix.slot_rows64(), nullptr);
  EXPECT_EQ(narrow.ix.slot_rows32()[3], two31 - 1);
  EXPECT_EQ(narrow.ix.slot_rows32()[4], -1);
  EXPECT_EQ(narrow.ix.find(two31 - 1), 3);
  OwnedIndex wide(16, CachePolicy::kClock, 0xFFFFFFF0u, two31 + 1);
  wide.ix.assign(5, two31, 1);
  EXPECT_EQ(wide.ix.slot_rows32(), nullptr);
  ASSERT_NE(wide.ix.slot_rows64(), nullptr);
  EXPECT_EQ(wide.ix.slot_rows64()[5], two31);
  EXPECT_EQ(wide.ix.find(two31), 5);
  EXPECT_EQ(row_cache_index_bytes(1000, two31 + 1, CachePolicy::kClock) - row_cache_index_bytes(1000, two31, CachePolicy::kClock),
            4u * 1000);
}

// Rows that all start their probe at one entry form a run far longer than the distance field
// holds (15): finds, inserts and deletions recompute the exact distance and stay correct.
TEST(CacheIndexTest, LongProbeRunsSaturateTheDistanceField) {
  const int64_t cap = 4000;
  OwnedIndex o(cap, CachePolicy::kLru);
  CacheIndex& ix = o.ix;
  std::vector<int64_t> same_home, next_home;
  const size_t h = ix.home_of(wide_row(1));
  for (uint64_t k = 0; same_home.size() < 40 || next_home.size() < 20; ++k) {
    const int64_t r = wide_row(k);
    if (ix.home_of(r) == h && same_home.size() < 40) same_home.push_back(r);
    if (ix.home_of(r) == (h + 1) % ix.map_entries() && next_home.size() < 20) next_home.push_back(r);
  }
  std::vector<int64_t> all = same_home;
  all.insert(all.end(), next_home.begin(), next_home.end());
  std::mt19937_64 rng(3);
  std::shuffle(all.begin(), all.end(), rng);
  for (size_t i = 0; i < all.size(); ++i) ix.assign(static_cast<int32_t>(i), all[i], 1);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(ix.find(all[i]), static_cast<int32_t>(i));
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t k = 0; k < order.size(); ++k) {
    ix.unassign(static_cast<int32_t>(order[k]));
    ASSERT_EQ(ix.find(all[order[k]]), -1);
    for (size_t j = k + 1; j < order.size(); ++j) ASSERT_EQ(ix.find(all[order[j]]), static_cast<int32_t>(order[j]));
    ix.clear(static_cast<int32_t>(order[k]));
  }
}

// A model of the cache's use of the index: batches of rows acquired (touched, pinned), some
// held over to the next batch (a prefetch's pins), then released; every victim the index picks
// must be the brute-force minimum (key, slot) over the evictable slots, with keys counted in
// 64 bits by the model.
// CLOCK: the model keeps its own hand and reference bits (set when a call counts or fetches a
// row, cleared when the hand passes the slot while it is evictable), so the marks' demotion every
// sixth call must keep the index's reference bits.
void check_eviction_order(CachePolicy policy, uint32_t renormalize_at, uint64_t seed) {
  const int64_t cap = 300;  // 64 candidates per scan: many rescans
  OwnedIndex o(cap, policy, renormalize_at);
  CacheIndex& ix = o.ix;
  std::vector<uint64_t> freq(cap, 0), last(cap, 0), stamp(cap, 0);
  std::vector<char> referenced(cap, 0);
  int64_t hand = 0;
  auto clock_victim = [&]() -> int32_t {  // second chance, two laps at most
    bool seen = false;
    for (int64_t n = 0; n < 2 * cap; ++n) {
      if (n == cap && !seen) return -1;
      const int32_t c = static_cast<int32_t>(hand);
      hand = (hand + 1) % cap;
      if (!ix.evictable(c)) continue;
      seen = true;
      if (referenced[c]) {
        referenced[c] = 0;
        continue;
      }
      return c;
    }
    return -1;
  };
  std::vector<int32_t> held;  // pinned by the "prefetch" set across one batch
  uint64_t tick = 0, next_stamp = 0;
  std::mt19937_64 rng(seed);
  auto model_key = [&](int32_t s) { return policy == CachePolicy::kLru ? stamp[s] : (freq[s] << 32 | last[s]); };
  auto release = [&](int32_t s, uint8_t bit) {
    ix.flags(s) &= static_cast<uint8_t>(~bit);
    if (ix.evictable(s)) {
      stamp[s] = ++next_stamp;
      ix.make_evictable(s);
    }
  };
  for (int step = 0; step < 3000; ++step) {
    const uint32_t t = ix.begin_call();
    ++tick;
    std::vector<int32_t> pinned;
    const int n = 1 + static_cast<int>(rng() % 80);
    for (int i = 0; i < n; ++i) {
      const int64_t row = wide_row(rng() % (rng() % 2 ? 400 : 4000));
      int32_t s = ix.find(row);
      if (s >= 0) {
        if (ix.touch(s, t)) {
          ++freq[s];
          last[s] = tick;
          referenced[s] = 1;
        }
      } else {
        s = ix.take_free();
        if (s < 0) {
          int32_t want = -1;
          if (policy == CachePolicy::kClock) {
            if (rng() % 2) ix.prefetch_victim(8, true);  // the scout changes nothing
            want = clock_victim();
          } else {
            for (int32_t c = 0; c < cap; ++c)
              if (ix.evictable(c) && (want < 0 || model_key(c) < model_key(want))) want = c;
          }
          s = ix.pop_victim();
          ASSERT_EQ(s, want) << "step " << step;
          if (s < 0) break;  // everything pinned: the batch stops here
          ix.unassign(s);
        }
        ix.assign(s, row, t);
        freq[s] = 1;
        last[s] = tick;
        referenced[s] = policy != CachePolicy::kClock;  // CLOCK: fetched rows start unmarked
      }
      if (!(ix.flags(s) & CacheIndex::kPinStep)) {
        ix.flags(s) |= CacheIndex::kPinStep;
        pinned.push_back(s);
      }
    }
    for (int32_t s : pinned) ix.flags(s) &= static_cast<uint8_t>(~CacheIndex::kInFlight);
    for (int32_t s : held) release(s, CacheIndex::kPinPrefetch);
    held.clear();
    for (int32_t s : pinned) {
      if (rng() % 8 == 0) {  // keep a few pinned through the next batch
        ix.flags(s) |= CacheIndex::kPinPrefetch;
        held.push_back(s);
      }
      release(s, CacheIndex::kPinStep);
    }
  }
}

TEST(CacheIndexTest, LruVictimsAreTheBruteForceMinimum) { check_eviction_order(CachePolicy::kLru, 0xFFFFFFF0u, 1); }
TEST(CacheIndexTest, LfuVictimsAreTheBruteForceMinimum) { check_eviction_order(CachePolicy::kLfu, 0xFFFFFFF0u, 2); }
TEST(CacheIndexTest, ClockVictimsAreSecondChancePicks) {
  check_eviction_order(CachePolicy::kClock, 0xFFFFFFF0u, 5);
  check_eviction_order(CachePolicy::kClock, 0xFFFFFFF0u, 6);
}

// Second chance on a cache of 3: fetched rows start unmarked (the hand takes the first one it
// meets); a row used again by a later call is marked and survives the hand's next pass.
TEST(CacheIndexTest, ClockGivesUsedRowsASecondChance) {
  OwnedIndex o(3, CachePolicy::kClock, 0xFFFFFFF0u, 1000);
  CacheIndex& ix = o.ix;
  uint32_t t = ix.begin_call();
  for (int32_t s = 0; s < 3; ++s) {
    ix.assign(s, 10 + s, t);
    ix.flags(s) &= static_cast<uint8_t>(~CacheIndex::kInFlight);
  }
  t = ix.begin_call();
  EXPECT_EQ(ix.pop_victim(), 0);  // none used since fetched: row 10, at the hand, goes
  ix.unassign(0);
  ix.assign(0, 13, t);
  ix.flags(0) &= static_cast<uint8_t>(~CacheIndex::kInFlight);
  t = ix.begin_call();
  EXPECT_TRUE(ix.touch(1, t));  // row 11 used again
  EXPECT_FALSE(ix.touch(1, t));  // counted once per call
  EXPECT_EQ(ix.pop_victim(), 2);  // row 11 keeps its slot, row 12 (unused since) goes
  ix.flags(1) |= CacheIndex::kPinStep;
  ix.flags(0) |= CacheIndex::kPinStep;
  EXPECT_EQ(ix.pop_victim(), 2);  // pinned slots are passed over
  ix.flags(2) |= CacheIndex::kPinStep;
  EXPECT_EQ(ix.pop_victim(), -1);  // every slot pinned
}
// Stamps / ticks renormalized every few hundred values: the order is unchanged.
TEST(CacheIndexTest, RenormalizedKeysKeepTheOrder) {
  check_eviction_order(CachePolicy::kLru, 500, 3);
  check_eviction_order(CachePolicy::kLfu, 100, 4);
}

// The index of a large cache, nothing per table row: for tables of at most 2^31 rows 10 bytes
// per slot for CLOCK (4 row, 1 flags, 5 map: 40-byte rows cost 1.25x their bytes), 14.75 for LRU,
// 19.1 for LFU; 4 more with int64 slot rows; at most 24 for any.
// The word-at-a-time demotion equals the byte-at-a-time reference for every flag byte value,
// at every start offset and length around the 8-byte words.
TEST(CacheIndexTest, DemoteMarksMatchesTheReference) {
  std::vector<uint8_t> all(256 + 40);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i * 37 + 11);
  for (int64_t off = 0; off < 9; ++off)
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{15}, int64_t{17}, int64_t{256}}) {
      std::vector<uint8_t> a = all, b = all;
      demote_marks(a.data() + off, n);
      demote_marks_reference(b.data() + off, n);
      ASSERT_EQ(a, b) << "offset " << off << " length " << n;
    }
  // Every byte value: the mark (bits 5..7) becomes 1 when set, the low bits stay.
  std::vector<uint8_t> v(256);
  for (int i = 0; i < 256; ++i) v[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  demote_marks(v.data(), 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], (i & 0x1F) | ((i & 0xE0) ? 0x20 : 0)) << i;
}

TEST(CacheIndexTest, IndexBytesPerSlot) {
  for (int64_t cap : {int64_t{100000}, int64_t{2000000}}) {
    const int64_t rows = 10 * cap;
    const size_t c = static_cast<size_t>(cap);
    EXPECT_EQ(row_cache_index_bytes(cap, rows, CachePolicy::kClock), c * 10);
    EXPECT_EQ(row_cache_index_bytes(cap, rows, CachePolicy::kLru), c * 59 / 4);    // 14.75
    EXPECT_EQ(row_cache_index_bytes(cap, rows, CachePolicy::kLfu), c * 153 / 8);   // 19.125
    for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kClock}) {
      EXPECT_EQ(row_cache_index_bytes(cap, kWideTable, p), row_cache_index_bytes(cap, rows, p) + 4 * c);
      EXPECT_LE(row_cache_index_bytes(cap, kWideTable, p), c * 24);
    }
  }
}

}  // namespace
}  // namespace leanemb::tiered
