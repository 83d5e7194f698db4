// Tests of DeviceArena, the budgeted caching allocator of the device tier: accounting per
// category and per arena, coalescing, behaviour on and after OOM, the max_split_bytes rules,
// alignment, reserve_bytes, failure injection, a seeded random soak against an interval oracle,
// concurrent use (the `tsan` preset), and an EmbeddingCollection living on an arena.
#include "leanemb/device_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "leanemb/embedding.h"
#include "leanemb/memory.h"

namespace leanemb {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kGranuleForTest = 512;  // DeviceArena's size granularity

std::unique_ptr<DeviceArena> make_arena(size_t budget, size_t max_split = 0, size_t reserve = 0) {
  DeviceArenaOptions o;
  o.budget_bytes = budget;
  o.max_split_bytes = max_split;
  o.reserve_bytes = reserve;
  auto r = DeviceArena::create(o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Allocates or fails the test.
Allocation must_allocate(Allocator& a, size_t bytes, Category c = Category::kWorkspace, size_t alignment = 64) {
  auto r = a.allocate(bytes, c, alignment);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : Allocation();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// The start of the arena's region: a request for the whole budget on an empty arena gets it.
uintptr_t region_base(DeviceArena& arena) {
  Allocation all = must_allocate(arena, arena.arena_stats().budget_bytes);
  const uintptr_t base = addr(all.data());
  all.reset();
  arena.release_cached();
  return base;
}

// Fills a block with a byte derived from `tag`, and its first and last 8 bytes with the tag.
void fill(const Allocation& a, uint64_t tag) {
  auto* p = a.as<uint8_t>();
  std::memset(p, static_cast<int>(tag * 37 + 11) & 0xff, a.size_bytes());
  if (a.size_bytes() >= 16) {
    std::memcpy(p, &tag, 8);
    std::memcpy(p + a.size_bytes() - 8, &tag, 8);
  }
}

// True when the block still holds what fill(a, tag) wrote.
bool holds(const Allocation& a, uint64_t tag) {
  const auto* p = a.as<const uint8_t>();
  const size_t n = a.size_bytes();
  const uint8_t byte = static_cast<uint8_t>(tag * 37 + 11);
  std::vector<uint8_t> chunk(std::min(n, 64 * kKiB), byte);
  const size_t body_begin = n >= 16 ? 8 : 0, body_end = n >= 16 ? n - 8 : n;
  for (size_t i = body_begin; i < body_end; i += chunk.size()) {
    const size_t len = std::min(chunk.size(), body_end - i);
    if (std::memcmp(p + i, chunk.data(), len) != 0) return false;
  }
  if (n >= 16) {
    uint64_t head = 0, tail = 0;
    std::memcpy(&head, p, 8);
    std::memcpy(&tail, p + n - 8, 8);
    if (head != tag || tail != tag) return false;
  }
  return true;
}

// ---- accounting ---------------------------------------------------------------------------------

// memory_stats keeps requested bytes per category (device tier, the arena's budget); arena_stats
// counts 512-byte-rounded blocks, the segments holding them and the free space around them.
TEST(DeviceArenaTest, AccountsBytesPerCategoryAndInArenaStats) {
  auto arena = make_arena(64 * kMiB);
  ASSERT_NE(arena, nullptr);
  Allocation w = must_allocate(*arena, 1000, Category::kWeights);
  const CategoryBytes fat_parts[2] = {{Category::kWeights, 2000}, {Category::kOptimizerState, 1000}};
  auto fat = arena->allocate_parts(fat_parts);
  ASSERT_TRUE(fat.ok()) << fat.status().to_string();
  Allocation g = must_allocate(*arena, 300, Category::kGradients);
  MemoryStats m = arena->memory_stats();
  EXPECT_EQ(m.tier, Tier::kDevice);
  EXPECT_EQ(m.budget_bytes, 64 * kMiB);
  EXPECT_EQ(m[Category::kWeights].current_bytes, 3000u);
  EXPECT_EQ(m[Category::kWeights].num_allocs, 2u);
  EXPECT_EQ(m[Category::kOptimizerState].current_bytes, 1000u);
  EXPECT_EQ(m[Category::kGradients].current_bytes, 300u);
  EXPECT_EQ(m.current_bytes, 4300u);
  ArenaStats s = arena->arena_stats();
  EXPECT_EQ(s.budget_bytes, 64 * kMiB);
  EXPECT_EQ(s.allocated_bytes, 1024u + 3072u + 512u);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);  // one small segment
  EXPECT_EQ(s.cached_free_bytes, 2 * kMiB - s.allocated_bytes);
  EXPECT_EQ(s.total_free_bytes, 64 * kMiB - s.allocated_bytes);
  EXPECT_EQ(s.largest_free_bytes, 62 * kMiB);  // the unmapped rest of the region
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 - 62.0 * kMiB / static_cast<double>(s.total_free_bytes));
  EXPECT_EQ(s.num_segments, 1u);
  EXPECT_EQ(s.num_allocs, 3u);
  g.reset();
  m = arena->memory_stats();
  EXPECT_EQ(m[Category::kGradients].current_bytes, 0u);
  EXPECT_EQ(m[Category::kGradients].peak_bytes, 300u);
  EXPECT_EQ(m.peak_bytes, 4300u);
  w.reset();
  fat->reset();
  s = arena->arena_stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.num_frees, 3u);
  EXPECT_EQ(s.cached_free_bytes, 2 * kMiB);        // the segment stays cached
  EXPECT_EQ(s.largest_free_bytes, 64 * kMiB);      // ... but could be released for a request
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  EXPECT_EQ(arena->memory_stats().current_bytes, 0u);
  arena->reset_peaks();
  EXPECT_EQ(arena->memory_stats().peak_bytes, 0u);
}

// A freed block merges with free neighbours on both sides, so their joint space serves one
// request without a new segment; with everything freed and released the region is one block.
TEST(DeviceArenaTest, CoalescesFreedNeighboursBackToOneFreeBlock) {
  auto arena = make_arena(64 * kMiB);
  ASSERT_NE(arena, nullptr);
  Allocation a = must_allocate(*arena, 256 * kKiB), b = must_allocate(*arena, 256 * kKiB);
  Allocation c = must_allocate(*arena, 256 * kKiB), d = must_allocate(*arena, 256 * kKiB);
  Allocation big = must_allocate(*arena, 6 * kMiB);
  const void* a_ptr = a.data();
  const size_t reserved = arena->arena_stats().reserved_bytes;
  b.reset();  // no free neighbour
  a.reset();  // merges with the next block (b)
  c.reset();  // merges with the previous block (a + b); d stays allocated
  Allocation abc = must_allocate(*arena, 768 * kKiB);
  EXPECT_EQ(abc.data(), a_ptr);  // the best fit is exactly the coalesced hole
  EXPECT_EQ(arena->arena_stats().reserved_bytes, reserved);
  abc.reset();
  d.reset();
  big.reset();
  arena->release_cached();
  const ArenaStats s = arena->arena_stats();
  EXPECT_EQ(s.num_segments, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.largest_free_bytes, 64 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
}

// ---- out of memory ------------------------------------------------------------------------------

// A request that cannot fit fails with ResourceExhausted naming the request, the device budget,
// the categories in use, the cached free bytes and the largest free block; once memory is
// freed the same request succeeds (fully free cached segments are released for it).
TEST(DeviceArenaTest, FailedRequestIsExplainedAndSucceedsAfterFree) {
  auto arena = make_arena(64 * kMiB);
  ASSERT_NE(arena, nullptr);
  Allocation small = must_allocate(*arena, 1000, Category::kRowCache);
  Allocation half = must_allocate(*arena, 32 * kMiB, Category::kWeights);
  const size_t request = 64 * kMiB / 10 * 6;
  auto r = arena->allocate(request, Category::kActivations);
  ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  const ArenaStats s = arena->arena_stats();
  const std::string& msg = r.status().message();
  const std::vector<std::string> parts = {"requested " + format_bytes(request), "device budget 64.00 MiB",
                                          "weights 32.00 MiB", "row_cache 1000 B",
                                          "cached free " + format_bytes(s.cached_free_bytes),
                                          "largest free block " + format_bytes(s.largest_free_bytes)};
  for (const std::string& part : parts)
    EXPECT_TRUE(contains(msg, part)) << "missing '" << part << "' in: " << msg;
  EXPECT_EQ(s.largest_free_bytes, 30 * kMiB);
  EXPECT_EQ(s.num_failed_allocs, 1u);
  EXPECT_EQ(arena->memory_stats().num_failed_allocs, 1u);
  EXPECT_EQ(arena->memory_stats().current_bytes, 32 * kMiB + 1000);  // the failure charged nothing
  half.reset();
  Allocation retry = must_allocate(*arena, request, Category::kActivations);
  EXPECT_FALSE(retry.empty());
  EXPECT_GE(arena->arena_stats().num_segment_releases, 1u);
  EXPECT_LE(arena->arena_stats().reserved_bytes, 64 * kMiB);
}

// Requests beyond the budget (up to SIZE_MAX, where rounding would wrap) fail cleanly.
TEST(DeviceArenaTest, RequestLargerThanTheBudgetFailsWithoutWrapping) {
  auto arena = make_arena(8 * kMiB);
  ASSERT_NE(arena, nullptr);
  for (size_t bytes : {8 * kMiB + 1, SIZE_MAX - 100, SIZE_MAX}) {
    for (size_t alignment : {size_t{64}, size_t{4096}}) {
      auto r = arena->allocate(bytes, Category::kWorkspace, alignment);
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << bytes << " align " << alignment;
    }
  }
  const ArenaStats s = arena->arena_stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.num_failed_allocs, 6u);
}

// largest_free_bytes is a request that succeeds now, also when the largest free block is a
// small-pool remainder above the 1 MiB small-request limit (such a request goes to the large pool).
TEST(DeviceArenaTest, LargestFreeBytesIsARequestThatSucceeds) {
  auto arena = make_arena(4 * kMiB);
  ASSERT_NE(arena, nullptr);
  Allocation small = must_allocate(*arena, 512 * kKiB);  // a 2 MiB small segment, 1.5 MiB left free
  Allocation large = must_allocate(*arena, 2 * kMiB);    // the rest of the region
  const ArenaStats s = arena->arena_stats();
  EXPECT_EQ(s.largest_free_bytes, 1 * kMiB);
  auto r = arena->allocate(s.largest_free_bytes, Category::kWorkspace);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(arena->allocate(s.largest_free_bytes + kGranuleForTest, Category::kWorkspace).ok());
}

// ---- random soak --------------------------------------------------------------------------------

struct LiveBlock {
  Allocation a;
  uint64_t tag;
};

// Checks a new block against the region and the live blocks; records it. Empty string if fine.
std::string admit(std::map<uintptr_t, LiveBlock>& live, uintptr_t base, size_t budget, Allocation a, uint64_t tag,
                  size_t alignment) {
  const uintptr_t p = addr(a.data()), end = p + a.size_bytes();
  if (p < base || end > base + budget) return "block outside the region";
  if (p % alignment != 0) return "misaligned block";
  auto next = live.lower_bound(p);
  if (next != live.end() && next->first < end) return "overlaps the next live block";
  if (next != live.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.a.size_bytes() > p) return "overlaps the previous live block";
  }
  fill(a, tag);
  live.emplace(p, LiveBlock{std::move(a), tag});
  return {};
}

// Under seeded random allocs and frees (log-uniform 1 KiB..8 MiB over 64 MiB), reserved and
// allocated bytes never exceed the budget, every block lies in the region, live blocks never
// overlap, and each block's contents survive until it is freed.
TEST(DeviceArenaTest, NeverExceedsBudgetNorOverlapsUnderRandomSoak) {
  const uint64_t seed = 20240611;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t budget = 64 * kMiB;
  auto arena = make_arena(budget);
  ASSERT_NE(arena, nullptr);
  const uintptr_t base = region_base(*arena);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(std::log(1024.0), std::log(8.0 * kMiB));
  const size_t alignments[] = {64, 512, 4096};
  std::map<uintptr_t, LiveBlock> live;
  size_t live_bytes = 0, failures = 0;
  uint64_t tag = 0;
  for (int op = 0; op < 3000; ++op) {
    const bool do_alloc = live.empty() || (live_bytes < 40 * kMiB && rng() % 100 < 60);
    if (do_alloc) {
      const auto bytes = static_cast<size_t>(std::exp(log_size(rng)));
      const size_t alignment = alignments[rng() % 3];
      auto r = arena->allocate(bytes, static_cast<Category>(rng() % kNumCategories), alignment);
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
        ++failures;
      } else {
        live_bytes += bytes;
        const std::string err = admit(live, base, budget, std::move(r).value(), ++tag, alignment);
        ASSERT_TRUE(err.empty()) << err << " at op " << op;
      }
    } else {
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(holds(it->second.a, it->second.tag)) << "block " << it->second.tag << " corrupted at op " << op;
      live_bytes -= it->second.a.size_bytes();
      live.erase(it);
    }
    const ArenaStats s = arena->arena_stats();
    if (op % 50 == 0 && s.largest_free_bytes > 0) {  // the largest free block is really usable
      ASSERT_TRUE(arena->allocate(s.largest_free_bytes, Category::kWorkspace).ok()) << "op " << op;
    }
    ASSERT_LE(s.reserved_bytes, budget) << "op " << op;
    ASSERT_LE(s.allocated_bytes, s.reserved_bytes) << "op " << op;
    ASSERT_GE(s.allocated_bytes, live_bytes) << "op " << op;
    ASSERT_EQ(arena->memory_stats().current_bytes, live_bytes) << "op " << op;
  }
  EXPECT_LT(failures, 300u);  // the soak exercises the allocator, not just its refusals
  for (auto& [p, b] : live) EXPECT_TRUE(holds(b.a, b.tag)) << "block " << b.tag;
  live.clear();
  arena->release_cached();
  EXPECT_EQ(arena->arena_stats().allocated_bytes, 0u);
  EXPECT_EQ(arena->arena_stats().largest_free_bytes, budget);
}

// ---- max_split_bytes ----------------------------------------------------------------------------

struct SplitProbe {
  const void* cached_ptr;   // where the freed cached block was
  const void* request_ptr;  // where the probe request landed
  ArenaStats before, after;
};

// Caches one freed block of `cached` bytes, then allocates `request` bytes.
SplitProbe probe(size_t max_split, size_t cached, size_t request) {
  auto arena = make_arena(96 * kMiB, max_split);
  if (!arena) return {};
  Allocation c = must_allocate(*arena, cached);
  SplitProbe p{c.data(), nullptr, {}, {}};
  c.reset();
  p.before = arena->arena_stats();
  Allocation r = must_allocate(*arena, request);
  p.request_ptr = r.data();
  p.after = arena->arena_stats();
  return p;
}

// With max_split_bytes set, a request below it never takes a cached block larger than it: a
// new segment is carved instead (without the limit the cached block is reused).
TEST(DeviceArenaMaxSplitTest, RequestBelowMaxSplitNeverTakesALargerCachedBlock) {
  const SplitProbe limited = probe(4 * kMiB, 12 * kMiB, 2 * kMiB);
  const uintptr_t cached = addr(limited.cached_ptr), got = addr(limited.request_ptr);
  EXPECT_TRUE(got + 2 * kMiB <= cached || got >= cached + 12 * kMiB) << "landed inside the cached block";
  EXPECT_GT(limited.after.reserved_bytes, limited.before.reserved_bytes);
  const SplitProbe unlimited = probe(0, 12 * kMiB, 2 * kMiB);
  EXPECT_EQ(unlimited.request_ptr, unlimited.cached_ptr);
  EXPECT_EQ(unlimited.after.reserved_bytes, unlimited.before.reserved_bytes);
}

// A cached block larger than max_split_bytes is never split: a request at or above the limit
// takes it whole (without the limit the same request splits it).
TEST(DeviceArenaMaxSplitTest, CachedBlockAboveMaxSplitIsTakenWhole) {
  const SplitProbe limited = probe(4 * kMiB, 12 * kMiB, 8 * kMiB);
  EXPECT_EQ(limited.request_ptr, limited.cached_ptr);
  EXPECT_EQ(limited.after.reserved_bytes, limited.before.reserved_bytes);
  EXPECT_EQ(limited.after.allocated_bytes, 12 * kMiB);
  EXPECT_EQ(limited.after.cached_free_bytes, 0u);
  const SplitProbe unlimited = probe(0, 12 * kMiB, 8 * kMiB);
  EXPECT_EQ(unlimited.after.allocated_bytes, 8 * kMiB);
  EXPECT_EQ(unlimited.after.cached_free_bytes, 4 * kMiB);
}

// A request at or above max_split_bytes does not take a cached block 20 MiB or more larger
// than itself (PyTorch's oversize rule); a new segment is carved.
TEST(DeviceArenaMaxSplitTest, OversizeRequestSkipsFarLargerCachedBlock) {
  const SplitProbe p = probe(4 * kMiB, 40 * kMiB, 12 * kMiB);
  EXPECT_NE(p.request_ptr, p.cached_ptr);
  EXPECT_EQ(p.after.reserved_bytes, p.before.reserved_bytes + 12 * kMiB);
}

// Requests below max_split_bytes can use the whole budget: their segments are not larger than
// the limit, so no remainder is stranded where only large requests could use it.
TEST(DeviceArenaMaxSplitTest, RequestsBelowMaxSplitCanFillTheBudget) {
  auto arena = make_arena(64 * kMiB, 4 * kMiB);
  ASSERT_NE(arena, nullptr);
  std::vector<Allocation> blocks;
  for (int i = 0; i < 32; ++i) {
    auto r = arena->allocate(2 * kMiB, Category::kActivations);
    ASSERT_TRUE(r.ok()) << "block " << i << ": " << r.status().to_string();
    blocks.push_back(std::move(r).value());
  }
  EXPECT_EQ(arena->arena_stats().allocated_bytes, 64 * kMiB);
}

// ---- alignment, reserve, injection, create ----------------------------------------------------

// Alignments up to 4096 are honoured even when the block found starts off alignment, and such
// blocks are freed back in full (the region coalesces to one block again).
TEST(DeviceArenaTest, HonoursAlignmentUpTo4096AndFreesAlignedBlocks) {
  auto arena = make_arena(16 * kMiB);
  ASSERT_NE(arena, nullptr);
  for (size_t alignment : {size_t{512}, size_t{1024}, size_t{2048}, size_t{4096}}) {
    Allocation pad = must_allocate(*arena, 512);  // pushes the next block off alignment
    Allocation a = must_allocate(*arena, 5000, Category::kIoBuffers, alignment);
    EXPECT_EQ(addr(a.data()) % alignment, 0u) << alignment;
    std::memset(a.data(), 0x5a, a.size_bytes());
    Allocation big = must_allocate(*arena, 3 * kMiB, Category::kIoBuffers, alignment);
    EXPECT_EQ(addr(big.data()) % alignment, 0u) << alignment;
    a.reset();
    big.reset();
    pad.reset();
    EXPECT_EQ(arena->memory_stats().current_bytes, 0u);
    EXPECT_EQ(arena->arena_stats().allocated_bytes, 0u);
  }
  arena->release_cached();
  EXPECT_EQ(arena->arena_stats().largest_free_bytes, 16 * kMiB);
}

// reserve_bytes carves one segment at create; later allocations are served from it without
// growing the reserved bytes.
TEST(DeviceArenaTest, ReserveCarvesASegmentThatLaterAllocationsUse) {
  auto arena = make_arena(64 * kMiB, 0, 32 * kMiB);
  ASSERT_NE(arena, nullptr);
  ArenaStats s = arena->arena_stats();
  EXPECT_EQ(s.reserved_bytes, 32 * kMiB);
  EXPECT_EQ(s.num_segments, 1u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.cached_free_bytes, 32 * kMiB);
  Allocation a = must_allocate(*arena, 8 * kMiB, Category::kWeights);
  Allocation b = must_allocate(*arena, 20 * kMiB, Category::kOptimizerState);
  s = arena->arena_stats();
  EXPECT_EQ(s.reserved_bytes, 32 * kMiB);
  EXPECT_EQ(s.num_segments, 1u);
  EXPECT_EQ(s.allocated_bytes, 28 * kMiB);
  auto small = make_arena(8 * kMiB, 0, 64 * kKiB);  // a small-pool reserve
  ASSERT_NE(small, nullptr);
  Allocation c = must_allocate(*small, 1000);
  EXPECT_EQ(small->arena_stats().reserved_bytes, 64 * kKiB);
}

// inject_failure(k) fails allocation k (counted from the call); with `always`, every one from k
// on; k < 0 turns injection off. Failures are named and change nothing.
TEST(DeviceArenaTest, InjectedFailuresFailChosenAllocations) {
  auto arena = make_arena(8 * kMiB);
  ASSERT_NE(arena, nullptr);
  auto try_alloc = [&] { return arena->allocate(4096, Category::kWorkspace); };
  arena->inject_failure(1);
  auto a0 = try_alloc(), a1 = try_alloc(), a2 = try_alloc();
  EXPECT_TRUE(a0.ok());
  ASSERT_EQ(a1.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(a1.status().message(), "injected")) << a1.status().message();
  EXPECT_TRUE(a2.ok());
  arena->inject_failure(1, /*always=*/true);
  auto b0 = try_alloc(), b1 = try_alloc(), b2 = try_alloc();
  EXPECT_TRUE(b0.ok());
  EXPECT_FALSE(b1.ok());
  EXPECT_FALSE(b2.ok());
  arena->inject_failure(-1);
  EXPECT_TRUE(try_alloc().ok());
  EXPECT_EQ(arena->arena_stats().num_failed_allocs, 3u);
  EXPECT_EQ(arena->memory_stats().current_bytes, 3 * 4096u);
}

// create rejects a zero budget, a budget below one 512-byte granule and a reserve above the
// budget with InvalidArgument.
TEST(DeviceArenaTest, CreateRejectsBadOptions) {
  const std::pair<size_t, size_t> cases[] = {{0, 0}, {100, 0}, {8 * kMiB, 8 * kMiB + 1}};  // (budget, reserve)
  for (auto [budget, reserve] : cases) {
    DeviceArenaOptions o;
    o.budget_bytes = budget;
    o.reserve_bytes = reserve;
    EXPECT_EQ(DeviceArena::create(o).status().code(), StatusCode::kInvalidArgument) << budget << " " << reserve;
  }
}

// ---- threads ------------------------------------------------------------------------------------

// Four threads allocating, writing and freeing at once keep every block private and the
// accounting exact (run under the `tsan` preset for data races).
TEST(DeviceArenaTest, ConcurrentAllocAndFreeFromFourThreadsKeepsAccounting) {
  auto arena = make_arena(64 * kMiB);
  ASSERT_NE(arena, nullptr);
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      std::vector<std::pair<Allocation, uint64_t>> held;
      for (int op = 0; op < 400; ++op) {
        if (held.size() < 8 && rng() % 2 == 0) {
          auto r = arena->allocate(512 + rng() % (256 * kKiB), static_cast<Category>(t));
          if (!r.ok()) { ++failures[t]; continue; }
          const uint64_t tag = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(op);
          fill(r.value(), tag);
          held.emplace_back(std::move(r).value(), tag);
        } else if (!held.empty()) {
          const size_t i = rng() % held.size();
          if (!holds(held[i].first, held[i].second)) ++failures[t];
          held.erase(held.begin() + static_cast<long>(i));
        }
        if (op % 50 == 0) (void)arena->arena_stats();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
  const ArenaStats s = arena->arena_stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_EQ(arena->memory_stats().current_bytes, 0u);
}

// ---- EmbeddingCollection on an arena ------------------------------------------------------------

CollectionOptions one_table(int64_t rows) {
  CollectionOptions o;
  TableOptions t;
  t.name = "emb";
  t.num_rows = rows;
  t.dim = 16;
  t.optimizer.kind = OptimizerKind::kAdagrad;
  t.optimizer.learning_rate = 0.1f;
  t.optimizer.eps = default_eps(OptimizerKind::kAdagrad);
  o.tables = {t};
  o.features = {{"f", 0, PoolingMode::kSum}};
  // One thread: libgomp is not TSan-instrumented, so its barriers read as races under `tsan`.
  o.num_threads = 1;
  return o;
}

// A collection created on a DeviceArena trains, and its memory_stats are the arena's (device
// tier, the arena's budget, tables charged as weights and optimizer state).
TEST(DeviceArenaEmbeddingTest, CollectionTrainsOnTheArenaAndReportsItsStats) {
  auto arena = make_arena(16 * kMiB);
  ASSERT_NE(arena, nullptr);
  auto created = EmbeddingCollection::create(one_table(1000), arena.get());
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  auto& c = *created;
  const std::vector<int64_t> ids = {1, 5, 5, 999, 0, 7}, offsets = {0, 2, 4, 6};
  SparseBatch batch{3, {FeatureInput{ids, offsets, {}}}};
  std::vector<float> out(3 * 16), grad(3 * 16, 0.5f);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(c->forward(batch, out).ok());
    auto r = c->backward_update(batch, grad);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->unique_rows, 5);
  }
  EXPECT_EQ(c->step(), 3);
  const MemoryStats cs = c->memory_stats(), as = arena->memory_stats();
  EXPECT_EQ(cs.tier, Tier::kDevice);
  EXPECT_EQ(cs.budget_bytes, 16 * kMiB);
  EXPECT_EQ(cs.current_bytes, as.current_bytes);
  EXPECT_EQ(cs[Category::kWeights].current_bytes, 1000u * 16 * 4);
  EXPECT_GT(cs[Category::kOptimizerState].current_bytes, 0u);
  EXPECT_GE(arena->arena_stats().allocated_bytes, cs.current_bytes);
  c.reset();
  EXPECT_EQ(arena->arena_stats().allocated_bytes, 0u);
}

// A device budget too small for a table fails create with ResourceExhausted naming the table
// and the device budget, and leaves nothing allocated.
TEST(DeviceArenaEmbeddingTest, BudgetTooSmallForATableFailsCreateNamingIt) {
  auto arena = make_arena(256 * kKiB);  // the table needs 10000 x 128 B
  ASSERT_NE(arena, nullptr);
  auto r = EmbeddingCollection::create(one_table(10000), arena.get());
  ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(r.status().message(), "table 'emb'")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "device budget 256.00 KiB")) << r.status().message();
  EXPECT_EQ(arena->arena_stats().allocated_bytes, 0u);
}

}  // namespace
}  // namespace leanemb
