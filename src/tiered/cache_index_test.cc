// Tests of the row cache's index (tiered/cache_index.h) on its own: the row -> slot map against a
// hash map under churn (rows above 2^32 included, long probe runs that saturate the distance
// field), and the scan-based eviction order against a brute-force minimum for both policies,
// with and without renormalization of the 32-bit keys.
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

struct OwnedIndex {
  std::vector<uint64_t> mem;
  CacheIndex ix;
  OwnedIndex(int64_t cap, CachePolicy p, uint32_t renormalize_at = 0xFFFFFFF0u)
      : mem(row_cache_index_bytes(cap, p) / 8 + 1) {
    ix.init(mem.data(), cap, p, renormalize_at);
  }
};

// A row of `space` distinct values spread over 63 bits, with pairs equal in their low 32 bits.
int64_t wide_row(uint64_t k) { return static_cast<int64_t>((k >> 1) | ((k & 1) << 32) | ((k % 7) << 40)); }

// find() agrees with a reference map while rows come and go (assign / unassign of random slots).
TEST(CacheIndexTest, MapAgreesWithAReferenceUnderChurn) {
  const int64_t cap = 1000;
  OwnedIndex o(cap, CachePolicy::kLru);
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
      do r = wide_row(rng() % 5000); while (ref.count(r));
      ix.assign(s, r, 1);
      ref[r] = s;
      slot_row[s] = r;
    }
    const int64_t q = wide_row(rng() % 5000);
    const auto e = ref.find(q);
    ASSERT_EQ(ix.find(q), e == ref.end() ? -1 : e->second) << "row " << q << " at iteration " << it;
  }
  for (const auto& [r, s] : ref) ASSERT_EQ(ix.find(r), s);
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
void check_eviction_order(CachePolicy policy, uint32_t renormalize_at, uint64_t seed) {
  const int64_t cap = 300;  // 64 candidates per scan: many rescans
  OwnedIndex o(cap, policy, renormalize_at);
  CacheIndex& ix = o.ix;
  std::vector<uint64_t> freq(cap, 0), last(cap, 0), stamp(cap, 0);
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
        }
      } else {
        s = ix.take_free();
        if (s < 0) {
          int32_t want = -1;
          for (int32_t c = 0; c < cap; ++c)
            if (ix.evictable(c) && (want < 0 || model_key(c) < model_key(want))) want = c;
          s = ix.pop_victim();
          ASSERT_EQ(s, want) << "step " << step;
          if (s < 0) break;  // everything pinned: the batch stops here
          ix.unassign(s);
        }
        ix.assign(s, row, t);
        freq[s] = 1;
        last[s] = tick;
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
// Stamps / ticks renormalized every few hundred values: the order is unchanged.
TEST(CacheIndexTest, RenormalizedKeysKeepTheOrder) {
  check_eviction_order(CachePolicy::kLru, 500, 3);
  check_eviction_order(CachePolicy::kLfu, 100, 4);
}

// The index of a large cache: at most 24 bytes per slot (19 for LRU), nothing per table row.
TEST(CacheIndexTest, IndexBytesPerSlot) {
  for (int64_t cap : {int64_t{100000}, int64_t{2000000}}) {
    EXPECT_LE(row_cache_index_bytes(cap, CachePolicy::kLru), static_cast<size_t>(cap) * 19);
    EXPECT_LE(row_cache_index_bytes(cap, CachePolicy::kLfu), static_cast<size_t>(cap) * 24);
  }
}

}  // namespace
}  // namespace leanemb::tiered
