// Tests of the RowCache itself (src/tiered/row_cache.h): its eviction policies, pins, prefetch
// and take, write-back, bulk access, accounting and error paths. Tables behind a cache:
// cache_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "table/table_testing.h"
#include "tiered/cache_testing.h"
#include "tiered/row_cache.h"
#include "tiered/sizes.h"

namespace leanemb {
namespace {

using tiered::testing_util::TempDir;

struct Fixture {
  RowLayout layout;
  std::unique_ptr<MemorySystem> mem;
  std::unique_ptr<tiered::RowCache> cache;
};

Fixture make_cache(int64_t rows, int64_t cap, CachePolicy policy, std::unique_ptr<tiered::RowStore> store = nullptr,
                   int prefetch_nice = 0, size_t distinct_min_ids = tiered::RowCacheOptions{}.distinct_min_ids,
                   int num_threads = 1, size_t host_budget_bytes = 0) {
  Fixture f;
  OptimizerOptions opt;
  opt.kind = OptimizerKind::kSgd;
  f.layout = make_row_layout(4, DType::kF32, opt).value();
  MemorySystemOptions mo;
  mo.device_budget_bytes = 8 << 20;
  mo.host_budget_bytes = host_budget_bytes;
  f.mem = MemorySystem::create(mo).value();
  if (!store) {
    tiered::RowStoreOptions so;
    so.num_rows = rows;
    so.row_bytes = f.layout.stride_bytes;
    store = tiered::make_row_store(so, f.mem->host()).value();
  }
  tiered::RowCacheOptions co;
  co.capacity_rows = cap;
  co.policy = policy;
  co.prefetch_nice = prefetch_nice;
  co.distinct_min_ids = distinct_min_ids;
  co.num_threads = num_threads;
  const size_t stride = f.layout.stride_bytes;
  auto c = tiered::RowCache::create(
      co, f.layout, std::move(store),
      [stride](int64_t row, uint8_t* fat) {  // called from several threads at once
        std::memset(fat, 0, stride);
        const float v = static_cast<float>(row);
        std::memcpy(fat, &v, 4);
      },
      f.mem->device(), f.mem->host(), f.mem.get());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  f.cache = std::move(c).value();
  return f;
}

bool resident(tiered::RowCache& c, int64_t row) {
  for (int64_t s = 0; s < c.capacity(); ++s)
    if (c.slot_row(s) == row) return true;
  return false;
}

void touch(tiered::RowCache& c, std::vector<int64_t> rows) {
  std::vector<int64_t> slots(rows.size());
  ASSERT_TRUE(c.acquire(rows, slots.data(), tiered::PinSet::kStep).ok());
  c.release(tiered::PinSet::kStep);
}

TEST(RowCache, LruEvictsLeastRecentlyUsed) {
  Fixture f = make_cache(100, 3, CachePolicy::kLru);
  touch(*f.cache, {1, 2, 3});
  touch(*f.cache, {1});
  touch(*f.cache, {4});  // evicts 2 (least recent)
  EXPECT_TRUE(resident(*f.cache, 1));
  EXPECT_FALSE(resident(*f.cache, 2));
  EXPECT_TRUE(resident(*f.cache, 3));
  EXPECT_TRUE(resident(*f.cache, 4));
  const auto st = f.cache->stats();
  EXPECT_EQ(st.lookups, 5u);
  EXPECT_EQ(st.misses, 4u);
  EXPECT_EQ(st.evictions, 1u);
}

TEST(RowCache, LfuEvictsLeastFrequentlyUsed) {
  Fixture f = make_cache(100, 3, CachePolicy::kLfu);
  touch(*f.cache, {1, 2, 3});
  touch(*f.cache, {1});
  touch(*f.cache, {1});
  touch(*f.cache, {3});
  touch(*f.cache, {2});
  touch(*f.cache, {2});  // freq: 1 -> 3, 2 -> 3, 3 -> 2
  touch(*f.cache, {4});  // evicts 3
  EXPECT_FALSE(resident(*f.cache, 3));
  EXPECT_TRUE(resident(*f.cache, 1) && resident(*f.cache, 2) && resident(*f.cache, 4));
}

TEST(RowCache, ClockGivesUsedRowsASecondChance) {
  Fixture f = make_cache(100, 3, CachePolicy::kClock);
  touch(*f.cache, {1, 2, 3});
  touch(*f.cache, {1, 2});  // 1 and 2 used again: marked
  touch(*f.cache, {4});     // the hand clears 1 and 2 and evicts 3 (fetched, never used again)
  EXPECT_FALSE(resident(*f.cache, 3));
  touch(*f.cache, {6});     // 1 and 2 lost their marks: the hand evicts 1
  EXPECT_FALSE(resident(*f.cache, 1));
  EXPECT_TRUE(resident(*f.cache, 2) && resident(*f.cache, 4) && resident(*f.cache, 6));
  const auto st = f.cache->stats();
  EXPECT_EQ(st.lookups, 7u);
  EXPECT_EQ(st.misses, 5u);
  EXPECT_EQ(st.evictions, 2u);
  EXPECT_EQ(tiered::parse_cache_policy("clock").value(), CachePolicy::kClock);
  EXPECT_EQ(tiered::cache_policy_name(CachePolicy::kClock), "clock");
}

// A prefetch whose pins were released can no longer be taken: its slots may have been given to
// other rows since (here a later acquire evicts every row it fetched).
TEST(RowCache, ReleasedPrefetchIsNotTaken) {
  Fixture f = make_cache(100, 4, CachePolicy::kLru);
  const std::vector<int64_t> x = {10, 11, 12, 13};
  ASSERT_TRUE(f.cache->start_prefetch(x).ok());
  ASSERT_TRUE(f.cache->wait_prefetch().ok());
  f.cache->release(tiered::PinSet::kPrefetch);
  touch(*f.cache, {20, 21, 22, 23});  // evicts 10..13
  std::vector<int64_t> slots(x.size(), -1);
  Result<bool> taken = f.cache->take_prefetched(x, slots.data());
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE(taken.value());
  EXPECT_EQ(f.cache->stats().prefetches_taken, 0u);
  // Not released: taken, with the slots that hold the rows.
  const std::vector<int64_t> y = {30, 31};
  ASSERT_TRUE(f.cache->start_prefetch(y).ok());
  ASSERT_TRUE(f.cache->wait_prefetch().ok());
  taken = f.cache->take_prefetched(y, slots.data());
  ASSERT_TRUE(taken.ok());
  EXPECT_TRUE(taken.value());
  EXPECT_EQ(f.cache->slot_row(slots[0]), 30);
  EXPECT_EQ(f.cache->slot_row(slots[1]), 31);
  EXPECT_EQ(f.cache->stats().prefetches_taken, 1u);
}

// A taken prefetch's rows are pinned by the step set, and only by it, whichever way the pins
// moved: the sets trading roles (the step set empty) or one slot at a time (the step holding
// rows of its own). Pinned rows are never victims; each release unpins exactly its set's rows.
TEST(RowCache, TakenPrefetchIsPinnedByTheStepSetOnly) {
  Fixture f = make_cache(100, 4, CachePolicy::kLru);
  std::vector<int64_t> slots(4, -1);
  auto take = [&](const std::vector<int64_t>& rows) {
    ASSERT_TRUE(f.cache->start_prefetch(rows).ok());
    ASSERT_TRUE(f.cache->wait_prefetch().ok());
    Result<bool> taken = f.cache->take_prefetched(rows, slots.data());
    ASSERT_TRUE(taken.ok() && taken.value());
  };
  auto acquire = [&](const std::vector<int64_t>& rows, tiered::PinSet set) {
    return f.cache->acquire(rows, slots.data(), set);
  };
  // Roles traded: 1 and 2 are the step's; a prefetch of 3 and 4 fills the cache.
  take({1, 2});
  ASSERT_TRUE(f.cache->start_prefetch(std::vector<int64_t>{3, 4}).ok());
  ASSERT_TRUE(f.cache->wait_prefetch().ok());
  // Releasing the prefetch set unpins 3 and 4 only: 5 and 6 take their slots, not 1's or 2's
  // (which LRU would pick first: never released, their keys are the oldest).
  f.cache->release(tiered::PinSet::kPrefetch);
  ASSERT_TRUE(acquire({5, 6}, tiered::PinSet::kStep).ok());
  EXPECT_TRUE(resident(*f.cache, 1) && resident(*f.cache, 2) && resident(*f.cache, 5) && resident(*f.cache, 6));
  EXPECT_FALSE(resident(*f.cache, 3) || resident(*f.cache, 4));
  // Everything is pinned by the step: no room for a prefetch.
  EXPECT_FALSE(acquire({7}, tiered::PinSet::kPrefetch).ok());
  f.cache->release(tiered::PinSet::kStep);  // 1, 2, 5 and 6 evictable again
  // One slot at a time: the step holds 1 when the prefetch of 2 and 7 is taken.
  ASSERT_TRUE(acquire({1}, tiered::PinSet::kStep).ok());
  take({2, 7});
  f.cache->release(tiered::PinSet::kPrefetch);  // nothing of the step's
  ASSERT_TRUE(acquire({8}, tiered::PinSet::kPrefetch).ok());  // the only unpinned row goes
  EXPECT_TRUE(resident(*f.cache, 1) && resident(*f.cache, 2) && resident(*f.cache, 7) && resident(*f.cache, 8));
  f.cache->release(tiered::PinSet::kStep);
  f.cache->release(tiered::PinSet::kPrefetch);
  touch(*f.cache, {20, 21, 22, 23});  // every slot is evictable
  for (int64_t r : {20, 21, 22, 23}) EXPECT_TRUE(resident(*f.cache, r)) << r;
  EXPECT_EQ(f.cache->stats().prefetches_taken, 2u);
}

// Drives two caches through the same steps: each step takes its prefetch (prefetched(step)) or
// acquires its ids, marks every dirty_every-th slot dirty and changes its bytes, starts the next
// step's prefetch when that one is prefetched, and releases. After every step both gave the same
// slots and counters; at the end every slot holds the same row and bytes.
void expect_twin_caches_agree(Fixture& a, Fixture& b, const std::function<std::vector<int64_t>()>& batch, int steps,
                              const std::function<bool(int)>& prefetched, size_t dirty_every) {
  std::vector<int64_t> next = batch();
  for (int step = 0; step < steps; ++step) {
    const std::vector<int64_t> ids = next;
    next = batch();
    std::vector<int64_t> sa(ids.size()), sb(ids.size());
    for (Fixture* f : {&a, &b}) {
      auto& out = f == &a ? sa : sb;
      if (prefetched(step)) {
        Result<bool> taken = f->cache->take_prefetched(ids, out.data());
        ASSERT_TRUE(taken.ok() && taken.value()) << "step " << step;
      } else {
        ASSERT_TRUE(f->cache->acquire(ids, out.data(), tiered::PinSet::kStep).ok()) << "step " << step;
      }
      // The step's update: its dirty rows' bytes change (written back when evicted).
      std::vector<int64_t> dirty;
      for (size_t i = 0; i < out.size(); i += dirty_every) dirty.push_back(out[i]);
      f->cache->mark_dirty(dirty);
      for (int64_t slot : dirty) {
        float v;
        uint8_t* p = f->cache->slots() + static_cast<size_t>(slot) * f->layout.stride_bytes + 4;
        std::memcpy(&v, p, 4);
        v += 1.0f;
        std::memcpy(p, &v, 4);
      }
      if (step + 1 < steps && prefetched(step + 1)) {
        ASSERT_TRUE(f->cache->start_prefetch(next).ok());
      }
      ASSERT_TRUE(f->cache->wait_prefetch().ok());
      f->cache->release(tiered::PinSet::kStep);
    }
    ASSERT_EQ(sa, sb) << "step " << step;
    const auto x = a.cache->stats(), y = b.cache->stats();
    ASSERT_EQ(x.lookups, y.lookups) << "step " << step;
    ASSERT_EQ(x.misses, y.misses) << "step " << step;
    ASSERT_EQ(x.evictions, y.evictions) << "step " << step;
    ASSERT_EQ(x.writebacks, y.writebacks) << "step " << step;
    ASSERT_EQ(x.prefetched_rows, y.prefetched_rows) << "step " << step;
    ASSERT_EQ(x.initialized_rows, y.initialized_rows) << "step " << step;
    ASSERT_EQ(x.bytes_read, y.bytes_read) << "step " << step;
  }
  const size_t stride = a.layout.stride_bytes;
  for (int64_t s = 0; s < a.cache->capacity(); ++s) {
    ASSERT_EQ(a.cache->slot_row(s), b.cache->slot_row(s)) << "slot " << s;
    ASSERT_EQ(std::memcmp(a.cache->slots() + static_cast<size_t>(s) * stride, b.cache->slots() + static_cast<size_t>(s) * stride,
                          stride), 0) << "slot " << s;
  }
}

// Large calls are reduced to their distinct rows first: every acquire and prefetch then returns
// the same slots, and the cache keeps the same rows, flags and counters, as the cache that
// probes every id (distinct_min_ids above every call), for each policy, through evictions,
// dirty write-backs and prefetches of steps of 20,000 skewed ids.
TEST(RowCache, DistinctRowsFirstLeaveTheCacheAsEveryIdDoes) {
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kClock}) {
    SCOPED_TRACE(tiered::cache_policy_name(policy));
    Fixture every = make_cache(50000, 16000, policy, nullptr, 0, SIZE_MAX);
    Fixture distinct = make_cache(50000, 16000, policy);
    std::mt19937_64 rng(77);
    auto batch = [&] {
      std::vector<int64_t> ids(20000);
      // 70% from 3000 hot rows, the rest over the whole table: about 8,600 distinct rows.
      for (auto& id : ids) id = static_cast<int64_t>(rng() % 10 < 7 ? rng() % 3000 : rng() % 50000);
      return ids;
    };
    expect_twin_caches_agree(every, distinct, batch, 12, [](int step) { return step % 3 != 0; }, 2);
    EXPECT_GT(every.cache->stats().evictions, 0u) << "the test must evict";
    EXPECT_GT(every.cache->stats().writebacks, 0u) << "the test must write back";
  }
}

// A fetch split over threads (the distinct rows' sort, the lookups in chunks, the copies and
// initializations of new rows) leaves the cache exactly as one thread does: the owner's fetches
// (acquire) always use the cache's threads, a prefetch uses them once the owner waits for it.
// Large enough for every split: over 16,384 distinct rows per call (two lookup chunks) and
// thousands of misses and dirty victims.
TEST(RowCache, FetchOverThreadsLeavesTheCacheAsOneThreadDoes) {
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kClock}) {
    SCOPED_TRACE(tiered::cache_policy_name(policy));
    Fixture one = make_cache(400000, 60000, policy, nullptr, 0, tiered::RowCacheOptions{}.distinct_min_ids, 1);
    Fixture two = make_cache(400000, 60000, policy, nullptr, 0, tiered::RowCacheOptions{}.distinct_min_ids, 2);
    std::mt19937_64 rng(78);
    auto batch = [&] {
      std::vector<int64_t> ids(50000);
      // Half from 10,000 hot rows, half over the whole table: about 23,000 distinct rows.
      for (auto& id : ids) id = static_cast<int64_t>(rng() % 2 == 0 ? rng() % 10000 : rng() % 400000);
      return ids;
    };
    expect_twin_caches_agree(one, two, batch, 10, [](int step) { return step % 2 == 1; }, 3);
    EXPECT_GT(one.cache->stats().writebacks, 10000u) << "the test must write back";
    EXPECT_GT(one.cache->stats().bytes_read, 0u) << "the test must read rows back";
  }
}

// The per-call scratch (distinct rows, lookups, the fetch's plan, pins) is io_buffers memory of
// the staging tier: counted, predicted by row_cache_scratch_bytes, and held to the tier's budget.
// A call whose scratch does not fit fails with ResourceExhausted before it changes anything.
TEST(RowCache, CallScratchIsAccountedAndABudgetTooSmallLeavesTheCacheUnchanged) {
  std::mt19937_64 rng(79);
  std::vector<int64_t> small(100), big(50000);
  for (auto& id : small) id = static_cast<int64_t>(rng() % 1000);
  for (auto& id : big) id = static_cast<int64_t>(rng() % 2 == 0 ? rng() % 10000 : rng() % 400000);
  const int64_t big_distinct = static_cast<int64_t>(std::set<int64_t>(big.begin(), big.end()).size());
  auto io_buffers = [](Fixture& f) { return f.mem->stats()[1][Category::kIoBuffers].current_bytes; };
  auto host_bytes = [](Fixture& f) { return f.mem->stats()[1].current_bytes; };
  std::vector<int64_t> slots(big.size());
  size_t after_small = 0;
  {  // no budget: what the small call leaves, and the big call's scratch counted
    Fixture f = make_cache(400000, 60000, CachePolicy::kLru);
    ASSERT_TRUE(f.cache->acquire(small, slots.data(), tiered::PinSet::kStep).ok());
    f.cache->release(tiered::PinSet::kStep);
    after_small = host_bytes(f);
    const size_t io_small = io_buffers(f);
    ASSERT_TRUE(f.cache->acquire(big, slots.data(), tiered::PinSet::kStep).ok());
    // The big call's arrays replace the small call's (row_cache_scratch_bytes is exact: the
    // fetch stages nothing else).
    const size_t small_scratch = tiered::row_cache_scratch_bytes(static_cast<int64_t>(small.size()), static_cast<int64_t>(small.size()));
    EXPECT_EQ(io_buffers(f) - io_small + small_scratch,
              tiered::row_cache_scratch_bytes(static_cast<int64_t>(big.size()), big_distinct))
        << "the big call's scratch must be counted in io_buffers";
  }
  // A budget that holds the small call but not the big call's scratch.
  Fixture f = make_cache(400000, 60000, CachePolicy::kLru, nullptr, 0, tiered::RowCacheOptions{}.distinct_min_ids, 1,
                         after_small + (1 << 20));
  ASSERT_TRUE(f.cache->acquire(small, slots.data(), tiered::PinSet::kStep).ok());
  std::vector<int64_t> small_slots(slots.begin(), slots.begin() + static_cast<std::ptrdiff_t>(small.size()));
  f.cache->release(tiered::PinSet::kStep);
  const auto before = f.cache->stats();
  std::vector<int64_t> rows_before(static_cast<size_t>(f.cache->capacity()));
  for (int64_t s = 0; s < f.cache->capacity(); ++s) rows_before[static_cast<size_t>(s)] = f.cache->slot_row(s);
  const Status st = f.cache->acquire(big, slots.data(), tiered::PinSet::kStep);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_TRUE(table_testing::contains(st.message(), "io_buffers")) << st.message();
  const auto after = f.cache->stats();
  EXPECT_EQ(after.lookups, before.lookups);
  EXPECT_EQ(after.misses, before.misses);
  for (int64_t s = 0; s < f.cache->capacity(); ++s)
    ASSERT_EQ(f.cache->slot_row(s), rows_before[static_cast<size_t>(s)]) << "slot " << s;
  // Nothing is left pinned: the small call again finds its rows where they were, and every slot
  // can still be evicted by a call that fits.
  ASSERT_TRUE(f.cache->acquire(small, slots.data(), tiered::PinSet::kStep).ok());
  EXPECT_EQ(std::vector<int64_t>(slots.begin(), slots.begin() + static_cast<std::ptrdiff_t>(small.size())), small_slots);
  f.cache->release(tiered::PinSet::kStep);
}

// A step's acquire right after start_prefetch: its fast path looks the rows up before the
// prefetch evicts some of them, fails (one row is missing) and waits for the prefetch; the fetch
// must then look the rows up again instead of reusing the stale lookups. Every slot returned
// holds its row, and no two rows share a slot.
TEST(RowCache, AcquireAfterAPrefetchChangedTheMapLooksTheRowsUpAgain) {
  for (int round = 0; round < 20; ++round) {
    Fixture f = make_cache(100000, 2000, CachePolicy::kLru);
    std::vector<int64_t> fill(2000), q, p;
    for (int64_t i = 0; i < 2000; ++i) fill[static_cast<size_t>(i)] = i;
    touch(*f.cache, fill);  // rows 0..1999 resident, 0 the least recently used
    for (int64_t i = 0; i < 500; ++i) q.push_back(i);  // the prefetch's first victims
    q.push_back(5000);                                 // missing: the fast path fails
    for (int64_t i = 10000; i < 11000; ++i) p.push_back(i);
    ASSERT_TRUE(f.cache->start_prefetch(p).ok());
    std::vector<int64_t> slots(q.size());
    ASSERT_TRUE(f.cache->acquire(q, slots.data(), tiered::PinSet::kStep).ok());
    std::set<int64_t> used;
    for (size_t i = 0; i < q.size(); ++i) {
      ASSERT_EQ(f.cache->slot_row(slots[i]), q[i]) << "round " << round << " row " << q[i];
      ASSERT_TRUE(used.insert(slots[i]).second) << "slot " << slots[i] << " twice";
    }
    f.cache->release(tiered::PinSet::kStep);
  }
}

TEST(RowCache, PinnedRowsAreNeverEvictedAndOverflowIsAnError) {
  Fixture f = make_cache(100, 3, CachePolicy::kLru);
  std::vector<int64_t> slots(3);
  ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{1, 2}, slots.data(), tiered::PinSet::kStep).ok());
  ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{3}, slots.data(), tiered::PinSet::kPrefetch).ok());
  const Status s = f.cache->acquire(std::vector<int64_t>{4}, slots.data(), tiered::PinSet::kStep);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_TRUE(table_testing::contains(s.message(), "cannot hold")) << s.message();
  for (int64_t r : {1, 2, 3}) EXPECT_TRUE(resident(*f.cache, r));
  f.cache->release(tiered::PinSet::kStep);
  ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{4}, slots.data(), tiered::PinSet::kStep).ok());
  EXPECT_TRUE(resident(*f.cache, 3));  // still pinned by the prefetch set
  EXPECT_TRUE(resident(*f.cache, 4));
}

TEST(RowCache, DirtyRowsAreWrittenBackAndReadAgain) {
  Fixture f = make_cache(100, 2, CachePolicy::kLru);
  std::vector<int64_t> slots(2);
  ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{7, 8}, slots.data(), tiered::PinSet::kStep).ok());
  const float v = 123.5f;
  std::memcpy(f.cache->slots() + static_cast<size_t>(slots[0]) * f.layout.stride_bytes, &v, 4);
  f.cache->mark_dirty(std::vector<int64_t>{slots[0]});
  f.cache->release(tiered::PinSet::kStep);
  touch(*f.cache, {9, 10});  // evicts both; only row 7 is dirty
  auto st = f.cache->stats();
  EXPECT_EQ(st.writebacks, 1u);
  EXPECT_EQ(f.cache->store()->stats().rows_written, 1u);
  std::vector<uint8_t> fat(f.layout.stride_bytes);
  ASSERT_TRUE(f.cache->read_row(7, fat.data()).ok());
  float got;
  std::memcpy(&got, fat.data(), 4);
  EXPECT_EQ(got, 123.5f);
  ASSERT_TRUE(f.cache->read_row(8, fat.data()).ok());  // clean, never stored: initialized again
  std::memcpy(&got, fat.data(), 4);
  EXPECT_EQ(got, 8.0f);
  // Transfers: one row each way (the clean initialized rows never crossed).
  EXPECT_EQ(f.mem->transfers().device_to_host(), f.layout.stride_bytes);
}

TEST(RowCache, PrefetchedRowsAreHitsAndAccountedAsIoBuffers) {
  Fixture f = make_cache(1000, 64, CachePolicy::kLru);
  std::vector<int64_t> next(40);
  for (int i = 0; i < 40; ++i) next[i] = 500 + i;
  ASSERT_TRUE(f.cache->start_prefetch(next).ok());
  ASSERT_TRUE(f.cache->wait_prefetch().ok());
  const double waited = f.cache->stats().exposed_seconds;  // wait_prefetch's own wait
  std::vector<int64_t> slots(40);
  ASSERT_TRUE(f.cache->acquire(next, slots.data(), tiered::PinSet::kStep).ok());
  const auto st = f.cache->stats();
  EXPECT_EQ(st.prefetched_rows, 40u);
  EXPECT_EQ(st.misses, 40u);
  EXPECT_EQ(st.lookups, 40u);
  EXPECT_EQ(st.exposed_seconds, waited);  // the step's acquire took the fast path: no wait
  const auto dev = f.mem->stats()[0];
  const auto sz = tiered::row_cache_sizes(64, 1000, f.layout.stride_bytes, CachePolicy::kLru);
  EXPECT_EQ(dev[Category::kRowCache].current_bytes, sz.device_bytes());
  EXPECT_GT(f.mem->stats()[1][Category::kIoBuffers].current_bytes, 0u);
}

// A store whose writes fail on demand: the cache must keep the rows.
class FailingStore : public tiered::RowStore {
 public:
  FailingStore(int64_t rows, size_t bytes) : rows_(rows), bytes_(bytes), data_(static_cast<size_t>(rows) * bytes), present_(static_cast<size_t>(rows)) {}
  StoreKind kind() const override { return StoreKind::kHost; }
  int64_t num_rows() const override { return rows_; }
  size_t row_bytes() const override { return bytes_; }
  Status read_rows(std::span<const int64_t> rows, tiered::RowsAt<uint8_t> dst, uint8_t* present) override {
    if (fail_reads) return Status(StatusCode::kIoError, "injected read error");
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(dst.row(i, bytes_), data_.data() + static_cast<size_t>(rows[i]) * bytes_, bytes_);
      present[i] = present_[static_cast<size_t>(rows[i])];
    }
    return Status();
  }
  Status write_rows(std::span<const int64_t> rows, tiered::RowsAt<const uint8_t> src) override {
    if (fail_writes) return Status(StatusCode::kResourceExhausted, "injected ENOSPC");
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(data_.data() + static_cast<size_t>(rows[i]) * bytes_, src.row(i, bytes_), bytes_);
      present_[static_cast<size_t>(rows[i])] = 1;
    }
    rows_written += rows.size();
    return Status();
  }
  Status flush() override { return Status(); }
  tiered::RowStoreStats stats() const override { return {}; }
  bool fail_writes = false, fail_reads = false;
  uint64_t rows_written = 0;

 private:
  int64_t rows_;
  size_t bytes_;
  std::vector<uint8_t> data_;
  std::vector<uint8_t> present_;
};

// A FailingStore of 100 rows of make_cache's layout; *raw points to it.
std::unique_ptr<tiered::RowStore> failing_store(FailingStore** raw) {
  OptimizerOptions opt;
  auto owned = std::make_unique<FailingStore>(100, make_row_layout(4, DType::kF32, opt).value().stride_bytes);
  *raw = owned.get();
  return owned;
}

TEST(RowCache, FailedWriteBackKeepsTheDirtyRows) {
  FailingStore* store = nullptr;
  Fixture f = make_cache(100, 2, CachePolicy::kLru, failing_store(&store));
  const size_t stride = f.layout.stride_bytes;
  std::vector<int64_t> slots(2);
  ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{1, 2}, slots.data(), tiered::PinSet::kStep).ok());
  const float v[2] = {11.0f, 22.0f};
  for (int i = 0; i < 2; ++i) std::memcpy(f.cache->slots() + static_cast<size_t>(slots[i]) * stride, &v[i], 4);
  f.cache->mark_dirty(slots);
  f.cache->release(tiered::PinSet::kStep);
  store->fail_writes = true;
  const Status s = f.cache->acquire(std::vector<int64_t>{3}, slots.data(), tiered::PinSet::kStep);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  f.cache->release(tiered::PinSet::kStep);
  EXPECT_TRUE(resident(*f.cache, 1) && resident(*f.cache, 2));
  EXPECT_FALSE(resident(*f.cache, 3));
  store->fail_writes = false;
  store->fail_reads = true;  // the write-back succeeds, the read of row 3 fails
  EXPECT_EQ(f.cache->acquire(std::vector<int64_t>{3}, slots.data(), tiered::PinSet::kStep).code(), StatusCode::kIoError);
  f.cache->release(tiered::PinSet::kStep);
  store->fail_reads = false;
  std::vector<uint8_t> fat(stride);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(f.cache->read_row(1 + i, fat.data()).ok());
    float got;
    std::memcpy(&got, fat.data(), 4);
    EXPECT_EQ(got, v[i]) << "row " << 1 + i;
  }
  touch(*f.cache, {3, 4});  // the cache is usable again
  EXPECT_TRUE(resident(*f.cache, 3));
}

// A bulk write (a restore) into a full cache gives the resident rows of its range the same
// bytes, clean; a failed one leaves them as they were and dirty, so their bytes go back to the
// store on eviction.
TEST(RowCache, BulkWriteKeepsResidentRowsConsistent) {
  FailingStore* store = nullptr;
  Fixture f = make_cache(100, 10, CachePolicy::kLru, failing_store(&store));
  const size_t stride = f.layout.stride_bytes;
  auto first_float = [&](int64_t row) {
    std::vector<uint8_t> fat(stride);
    EXPECT_TRUE(f.cache->read_row(row, fat.data()).ok());
    float v;
    std::memcpy(&v, fat.data(), 4);
    return v;
  };
  auto rows_with = [&](float base) {
    std::vector<uint8_t> src(50 * stride, 0);
    for (int i = 0; i < 50; ++i) {
      const float v = base + static_cast<float>(i);
      std::memcpy(src.data() + static_cast<size_t>(i) * stride, &v, 4);
    }
    return src;
  };
  std::vector<int64_t> slots(5);
  ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{5, 6, 7, 8, 9}, slots.data(), tiered::PinSet::kStep).ok());
  f.cache->mark_dirty(slots);
  f.cache->release(tiered::PinSet::kStep);
  touch(*f.cache, {90, 91, 92, 93, 94});  // full: no free slot to place restored rows in
  ASSERT_TRUE(f.cache->write_rows(0, 50, rows_with(1000.0f).data()).ok());
  EXPECT_EQ(f.cache->stats().placed_rows, 0u);
  std::vector<uint8_t> all(100 * stride);
  ASSERT_TRUE(f.cache->read_rows(0, 100, all.data()).ok());
  for (int64_t r = 0; r < 100; ++r) {
    float v;
    std::memcpy(&v, all.data() + static_cast<size_t>(r) * stride, 4);
    EXPECT_EQ(v, r < 50 ? 1000.0f + static_cast<float>(r) : static_cast<float>(r)) << "row " << r;
  }
  touch(*f.cache, {60, 61, 62, 63, 64, 65, 66, 67, 68, 69});  // evicts 5..9: clean, no write-back
  EXPECT_EQ(f.cache->stats().writebacks, 0u);
  EXPECT_EQ(first_float(5), 1005.0f);
  touch(*f.cache, {5, 6});
  store->fail_writes = true;
  EXPECT_EQ(f.cache->write_rows(0, 50, rows_with(2000.0f).data()).code(), StatusCode::kResourceExhausted);
  store->fail_writes = false;
  touch(*f.cache, {70, 71, 72, 73, 74, 75, 76, 77, 78, 79});  // evicts 5 and 6: dirty now
  EXPECT_EQ(f.cache->stats().writebacks, 2u);
  EXPECT_EQ(first_float(5), 1005.0f);
  EXPECT_EQ(first_float(6), 1006.0f);
}

// A bulk write into a cache with free slots places the range's first rows in them (the rows not
// resident take free slots; every row of that prefix gets its bytes, dirty) and writes only the
// rest to the store: a restore warms a fresh cache. The placed rows reach the store when evicted.
TEST(RowCache, BulkWritePlacesRowsInFreeSlotsFirst) {
  FailingStore* store = nullptr;
  Fixture f = make_cache(100, 10, CachePolicy::kLru, failing_store(&store));
  const size_t stride = f.layout.stride_bytes;
  touch(*f.cache, {3});  // resident and clean: 9 free slots
  std::vector<uint8_t> src(20 * stride, 0);
  for (int i = 0; i < 20; ++i) {
    const float v = 500.0f + static_cast<float>(i);
    std::memcpy(src.data() + static_cast<size_t>(i) * stride, &v, 4);
  }
  ASSERT_TRUE(f.cache->write_rows(0, 20, src.data()).ok());  // rows 0..9 (3 was resident) placed
  tiered::CacheStats st = f.cache->stats();
  EXPECT_EQ(st.placed_rows, 10u);
  EXPECT_EQ(st.resident_rows, 10);
  EXPECT_EQ(store->rows_written, 10u);  // rows 10..19 only
  for (int64_t r = 0; r < 10; ++r) EXPECT_TRUE(resident(*f.cache, r)) << r;
  std::vector<uint8_t> all(20 * stride);
  ASSERT_TRUE(f.cache->read_rows(0, 20, all.data()).ok());
  EXPECT_EQ(all, src);
  touch(*f.cache, {40, 41, 42, 43, 44, 45, 46, 47, 48, 49});  // evicts 0..9: dirty, written back
  st = f.cache->stats();
  EXPECT_EQ(st.writebacks, 10u);
  EXPECT_EQ(store->rows_written, 20u);
  ASSERT_TRUE(f.cache->read_rows(0, 20, all.data()).ok());
  EXPECT_EQ(all, src);
}

// A table of 2^33 rows over a sparse file store (in place, or a log with 8-byte index entries):
// rows at and above 2^32 (some equal in their low 32 bits to rows below) are distinct rows; what
// is written reads back after eviction, from the store, and through the bulk forms at the end of
// the table.
void rows_above_2_to_32(FileStoreLayout layout) {
  TempDir dir;
  const int64_t n = int64_t{1} << 33, two32 = int64_t{1} << 32;
  OptimizerOptions opt;
  opt.kind = OptimizerKind::kSgd;
  const size_t stride = make_row_layout(4, DType::kF32, opt).value().stride_bytes;
  tiered::RowStoreOptions so;
  so.kind = StoreKind::kFile;
  so.num_rows = n;
  so.row_bytes = stride;
  so.path = dir.file("wide.rows");
  so.layout = layout;
  auto store = tiered::make_row_store(so, nullptr);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  Fixture f = make_cache(n, 4, CachePolicy::kLru, std::move(store).value());
  auto pattern = [&](int64_t row, uint8_t* fat) {  // the row number twice, then its complement
    std::memset(fat, 0, stride);
    const int64_t w[2] = {row, ~row};
    std::memcpy(fat, w, 16);
  };
  const std::vector<int64_t> rows = {7, two32 + 7, n - 1, two32 - 1, two32, 3 * (two32 / 2) + 5};
  std::vector<int64_t> pair(2);
  ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{7, two32 + 7}, pair.data(), tiered::PinSet::kStep).ok());
  EXPECT_NE(pair[0], pair[1]);
  f.cache->release(tiered::PinSet::kStep);
  for (int64_t r : rows) {  // 6 rows through 4 slots: evictions write back
    std::vector<int64_t> slot(1);
    ASSERT_TRUE(f.cache->acquire(std::vector<int64_t>{r}, slot.data(), tiered::PinSet::kStep).ok());
    pattern(r, f.cache->slots() + static_cast<size_t>(slot[0]) * stride);
    f.cache->mark_dirty(slot);
    f.cache->release(tiered::PinSet::kStep);
  }
  ASSERT_TRUE(f.cache->flush().ok());
  std::vector<uint8_t> want(stride), got(stride);
  for (int64_t r : rows) {
    pattern(r, want.data());
    ASSERT_TRUE(f.cache->read_row(r, got.data()).ok());
    EXPECT_EQ(got, want) << "row " << r;
  }
  std::vector<uint8_t> from_store(rows.size() * stride), present(rows.size());
  ASSERT_TRUE(f.cache->store()->read_rows(rows, from_store.data(), present.data()).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    pattern(rows[i], want.data());
    EXPECT_TRUE(present[i]) << "row " << rows[i];
    EXPECT_TRUE(std::equal(want.begin(), want.end(), from_store.begin() + static_cast<std::ptrdiff_t>(i * stride)));
  }
  const int64_t k = 1000, b = n - k;
  std::vector<uint8_t> src(k * stride), back(k * stride);
  for (int64_t i = 0; i < k; ++i) pattern(b + i, src.data() + static_cast<size_t>(i) * stride);
  ASSERT_TRUE(f.cache->write_rows(b, k, src.data()).ok());
  ASSERT_TRUE(f.cache->read_rows(b, k, back.data()).ok());
  EXPECT_EQ(back, src);
}
TEST(RowCache, RowsAbove2To32OnASparseFileStoreOf2To33Rows) { rows_above_2_to_32(FileStoreLayout::kInPlace); }
TEST(RowCache, RowsAbove2To32OnALogStoreOf2To33Rows) { rows_above_2_to_32(FileStoreLayout::kLog); }

// The index's bytes are in the stats and in row_cache, the size function's, lean per slot
// (CLOCK: 10 B, the 1.3x of a 40-byte row's cache with room to spare).
TEST(RowCache, IndexBytesAreReportedAndAccounted) {
  for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kLfu, CachePolicy::kClock}) {
    Fixture f = make_cache(1000000, 100000, p);
    const auto st = f.cache->stats();
    EXPECT_EQ(st.index_bytes, tiered::row_cache_index_bytes(100000, 1000000, p));
    EXPECT_LE(st.index_bytes, (p == CachePolicy::kClock ? 10u : 24u) * 100000);
    EXPECT_EQ(f.mem->stats()[0][Category::kRowCache].current_bytes, st.index_bytes + 100000 * f.layout.stride_bytes);
    EXPECT_NE(f.cache->slot_rows32(), nullptr);  // a table of 1e6 rows: 4-byte slot rows
    EXPECT_EQ(f.cache->slot_rows64(), nullptr);
  }
}

// Nice values of this process's threads (field 19 of /proc/self/task/TID/stat).
std::vector<int> thread_nice_values() {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 19 && rest >> field; ++i)
      if (i == 19) out.push_back(std::stoi(field));
  }
  return out;
}

// The prefetch thread runs at the configured nice value (the default of TableCacheOptions is 19;
// RowCacheOptions' 0 keeps the caller's priority).
TEST(RowCache, PrefetchThreadRunsAtItsNiceValue) {
  // Three steps below the process's own priority: lowering a priority needs no privilege.
  const int target = getpriority(PRIO_PROCESS, 0) + 3;
  if (target > 19) GTEST_SKIP() << "the process already runs at nice " << target - 3;
  const std::vector<int> before = thread_nice_values();
  ASSERT_EQ(std::count(before.begin(), before.end(), target), 0);
  Fixture f = make_cache(100, 10, CachePolicy::kLru, nullptr, target);
  const std::vector<int64_t> rows = {1, 2, 3};
  ASSERT_TRUE(f.cache->start_prefetch(rows).ok());
  ASSERT_TRUE(f.cache->wait_prefetch().ok());  // the thread has run, so it has set its priority
  const std::vector<int> after = thread_nice_values();
  EXPECT_EQ(std::count(after.begin(), after.end(), target), 1);
  EXPECT_EQ(TableCacheOptions{}.prefetch_nice, 19);
}

}  // namespace
}  // namespace leanemb
