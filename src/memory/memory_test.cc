// Tests of the memory module: per-category accounting of TrackingAllocator, split allocations,
// budgets and the ResourceExhausted message, failure injection, and byte-size parsing/formatting.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "leanemb/memory.h"
#include "leanemb/memory_system.h"
#include "memory/accounted_resource.h"
#include <memory_resource>
#include <new>

namespace leanemb {
namespace {

constexpr size_t kKiB = 1024;

// Allocates or fails the test.
Allocation must_allocate(Allocator& a, size_t bytes, Category c, size_t alignment = 64) {
  auto r = a.allocate(bytes, c, alignment);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : Allocation();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Current bytes, peak bytes and allocation counts are kept per category and in total; the total
// peak is the peak of the sum, not the sum of the per-category peaks.
TEST(TrackingAllocatorTest, AccountsCurrentPeakAndCountPerCategory) {
  TrackingAllocator alloc;
  {
    Allocation w = must_allocate(alloc, 1000, Category::kWeights);
    Allocation g1 = must_allocate(alloc, 300, Category::kGradients);
    g1.reset();
    Allocation g2 = must_allocate(alloc, 200, Category::kGradients);
    MemoryStats s = alloc.memory_stats();
    EXPECT_EQ(s.tier, Tier::kHost);
    EXPECT_EQ(s[Category::kWeights].current_bytes, 1000u);
    EXPECT_EQ(s[Category::kWeights].num_allocs, 1u);
    EXPECT_EQ(s[Category::kGradients].current_bytes, 200u);
    EXPECT_EQ(s[Category::kGradients].peak_bytes, 300u);
    EXPECT_EQ(s[Category::kGradients].num_allocs, 2u);
    EXPECT_EQ(s[Category::kWorkspace].num_allocs, 0u);
    EXPECT_EQ(s.current_bytes, 1200u);
    EXPECT_EQ(s.peak_bytes, 1300u);
  }
  MemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s[Category::kWeights].current_bytes, 0u);
  EXPECT_EQ(s[Category::kWeights].peak_bytes, 1000u);
  EXPECT_EQ(s.peak_bytes, 1300u);
  alloc.reset_peaks();
  EXPECT_EQ(alloc.memory_stats().peak_bytes, 0u);
  EXPECT_EQ(alloc.memory_stats()[Category::kGradients].peak_bytes, 0u);
}

// allocate_parts makes one allocation of the summed size and charges each part to its category
// (repeated categories add up); freeing it returns every part.
TEST(TrackingAllocatorTest, AllocatePartsSplitsOneAllocationOverCategories) {
  TrackingAllocator alloc;
  const CategoryBytes parts[] = {{Category::kWeights, 100}, {Category::kOptimizerState, 300},
                                 {Category::kWeights, 28}};
  auto r = alloc.allocate_parts(parts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Allocation a = std::move(r).value();
  EXPECT_EQ(a.size_bytes(), 428u);
  MemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s[Category::kWeights].current_bytes, 128u);
  EXPECT_EQ(s[Category::kOptimizerState].current_bytes, 300u);
  EXPECT_EQ(s[Category::kWeights].num_allocs, 1u);
  EXPECT_EQ(s.current_bytes, 428u);
  a.reset();
  s = alloc.memory_stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s[Category::kOptimizerState].current_bytes, 0u);
}

// Requested alignment is honoured; zero bytes and bad alignments are InvalidArgument.
TEST(TrackingAllocatorTest, HonoursAlignmentAndRejectsBadRequests) {
  TrackingAllocator alloc;
  for (size_t align : {1u, 8u, 64u, 512u, 4096u}) {
    Allocation a = must_allocate(alloc, 100, Category::kWorkspace, align);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % align, 0u) << align;
  }
  EXPECT_EQ(alloc.allocate(0, Category::kWorkspace).status().code(), StatusCode::kInvalidArgument);
  for (size_t align : {0u, 3u, 48u, 8192u})
    EXPECT_EQ(alloc.allocate(16, Category::kWorkspace, align).status().code(), StatusCode::kInvalidArgument) << align;
  EXPECT_EQ(alloc.memory_stats().current_bytes, 0u);
}

// A moved Allocation transfers ownership: the source is empty and the bytes are freed once.
TEST(TrackingAllocatorTest, MovedAllocationFreesExactlyOnce) {
  TrackingAllocator alloc;
  Allocation a = must_allocate(alloc, 256, Category::kActivations);
  void* p = a.data();
  Allocation b(std::move(a));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(b.data(), p);
  Allocation c = must_allocate(alloc, 64, Category::kActivations);
  c = std::move(b);  // frees c's old 64 bytes
  EXPECT_EQ(alloc.memory_stats().current_bytes, 256u);
  c.reset();
  c.reset();
  EXPECT_EQ(alloc.memory_stats().current_bytes, 0u);
}

// Over budget: ResourceExhausted naming the request, the budget and the bytes in use per
// category; nothing is charged. After a free the same request succeeds.
TEST(TrackingAllocatorTest, BudgetExhaustionNamesRequestBudgetAndCategoriesThenRetrySucceeds) {
  TrackingAllocator alloc({Tier::kHost, 1024 * kKiB});
  Allocation w = must_allocate(alloc, 600 * kKiB, Category::kWeights);
  Allocation st = must_allocate(alloc, 100 * kKiB, Category::kOptimizerState);
  auto r = alloc.allocate(400 * kKiB, Category::kGradients);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  const std::string& msg = r.status().message();
  EXPECT_TRUE(contains(msg, "requested 400.00 KiB (gradients 400.00 KiB)")) << msg;
  EXPECT_TRUE(contains(msg, "budget 1.00 MiB")) << msg;
  const std::string in_use = msg.substr(msg.find("in use"));
  EXPECT_TRUE(contains(in_use, "weights 600.00 KiB")) << msg;
  EXPECT_TRUE(contains(in_use, "optimizer_state 100.00 KiB")) << msg;
  EXPECT_FALSE(contains(in_use, "gradients")) << msg;  // requested, not in use
  MemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.num_failed_allocs, 1u);
  EXPECT_EQ(s.current_bytes, 700 * kKiB);
  EXPECT_EQ(s[Category::kGradients].num_allocs, 0u);
  EXPECT_EQ(s.budget_bytes, 1024 * kKiB);
  st.reset();
  Allocation g = must_allocate(alloc, 400 * kKiB, Category::kGradients);
  Allocation fill = must_allocate(alloc, 24 * kKiB, Category::kWorkspace);  // exactly fills the budget
  EXPECT_EQ(alloc.memory_stats().current_bytes, 1024 * kKiB);
  EXPECT_EQ(alloc.allocate(1, Category::kWorkspace).status().code(), StatusCode::kResourceExhausted);
}

// Requests too large to satisfy (near SIZE_MAX, where size arithmetic would wrap) fail with
// ResourceExhausted, with or without a budget, and charge nothing.
TEST(TrackingAllocatorTest, HugeRequestsFailWithoutWrappingAround) {
  for (size_t budget : {size_t{0}, size_t{1} << 20}) {
    TrackingAllocator alloc({Tier::kHost, budget});
    Allocation keep = must_allocate(alloc, 100, Category::kWeights);
    // SIZE_MAX / 2 + 1 only with a budget: unbudgeted it reaches the system allocator, which
    // under AddressSanitizer aborts instead of returning null.
    for (size_t huge : {SIZE_MAX, SIZE_MAX - 10, SIZE_MAX - 63, budget ? SIZE_MAX / 2 + 1 : SIZE_MAX - 1}) {
      auto r = alloc.allocate(huge, Category::kWeights);
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << "budget " << budget << " request " << huge;
    }
    EXPECT_EQ(alloc.memory_stats().current_bytes, 100u);
    EXPECT_EQ(alloc.memory_stats()[Category::kWeights].num_allocs, 1u);
    EXPECT_EQ(alloc.memory_stats().num_failed_allocs, 4u);
  }
}

// inject_failure(k) fails exactly the k-th allocation from now; later ones succeed again.
TEST(TrackingAllocatorTest, InjectFailureOnceFailsOnlyTheKthAllocation) {
  TrackingAllocator alloc;
  alloc.inject_failure(2);
  std::vector<Allocation> keep;
  for (int i = 0; i < 6; ++i) {
    auto r = alloc.allocate(32, Category::kWorkspace);
    if (i == 2) {
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
      EXPECT_TRUE(contains(r.status().message(), "injected")) << r.status().message();
      EXPECT_TRUE(contains(r.status().message(), "requested 32 B")) << r.status().message();
    } else {
      ASSERT_TRUE(r.ok()) << "allocation " << i << ": " << r.status().to_string();
      keep.push_back(std::move(r).value());
    }
  }
  EXPECT_EQ(alloc.memory_stats().num_failed_allocs, 1u);
  EXPECT_EQ(alloc.memory_stats().current_bytes, 5 * 32u);
}

// inject_failure(k, always) fails every allocation from the k-th on; k < 0 turns it off.
TEST(TrackingAllocatorTest, InjectFailureAlwaysFailsFromKthOnUntilDisabled) {
  TrackingAllocator alloc;
  alloc.inject_failure(1, /*always=*/true);
  EXPECT_TRUE(alloc.allocate(8, Category::kWorkspace).ok());
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(alloc.allocate(8, Category::kWorkspace).ok()) << i;
  alloc.inject_failure(-1);
  EXPECT_TRUE(alloc.allocate(8, Category::kWorkspace).ok());
  alloc.inject_failure(0, /*always=*/true);  // counting restarts at each call
  EXPECT_FALSE(alloc.allocate(8, Category::kWorkspace).ok());
  EXPECT_EQ(alloc.memory_stats().num_failed_allocs, 5u);
  EXPECT_EQ(alloc.memory_stats().current_bytes, 0u);
}

// Concurrent allocate/free from several threads keeps the counters exact.
TEST(TrackingAllocatorTest, ConcurrentUseKeepsCountersExact) {
  TrackingAllocator alloc;
  constexpr int kThreads = 4, kIters = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&alloc, t] {
      for (int i = 0; i < kIters; ++i) {
        auto r = alloc.allocate(16 + static_cast<size_t>(t), Category::kRowCache);
        if (!r.ok()) std::abort();
      }
    });
  for (auto& th : threads) th.join();
  MemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s[Category::kRowCache].num_allocs, static_cast<uint64_t>(kThreads * kIters));
  EXPECT_GE(s[Category::kRowCache].peak_bytes, 16u);
  EXPECT_LE(s.peak_bytes, static_cast<size_t>(kThreads) * 19);
}

// The summary table and JSON name every category in use with its bytes.
TEST(MemoryStatsTest, SummaryAndJsonNameCategoriesInUse) {
  TrackingAllocator alloc({Tier::kHost, 1 << 20});
  Allocation w = must_allocate(alloc, 3 * kKiB, Category::kWeights);
  Allocation c = must_allocate(alloc, 1 * kKiB, Category::kCommBuffers);
  MemoryStats s = alloc.memory_stats();
  const std::string table = s.summary_table();
  EXPECT_TRUE(contains(table, "weights")) << table;
  EXPECT_TRUE(contains(table, "3.00 KiB")) << table;
  EXPECT_TRUE(contains(table, "comm_buffers")) << table;
  EXPECT_TRUE(contains(table, "75.0%")) << table;
  EXPECT_TRUE(contains(table, "budget 1.00 MiB")) << table;
  EXPECT_FALSE(contains(table, "gradients")) << table;
  const std::string json = s.to_json();
  EXPECT_TRUE(contains(json, "\"current_bytes\":4096")) << json;
  EXPECT_TRUE(contains(json, "\"weights\":{\"current_bytes\":3072,\"peak_bytes\":3072,\"num_allocs\":1}")) << json;
  EXPECT_EQ(tier_name(Tier::kDisk), "disk");
  EXPECT_EQ(category_name(Category::kIoBuffers), "io_buffers");
}

// An allocator destroyed while it still has bytes outstanding is a bug and aborts.
TEST(TrackingAllocatorDeathTest, DestroyingWithOutstandingBytesAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto* alloc = new TrackingAllocator();
        Allocation a = std::move(alloc->allocate(8, Category::kWorkspace)).value();
        delete alloc;
      },
      "outstanding");
}

// ---- byte sizes ----------------------------------------------------------------------------------

// parse_bytes reads bare numbers as bytes and binary / decimal units (with optional space).
TEST(ByteSizeTest, ParseAcceptsBinaryAndDecimalUnits) {
  const std::pair<const char*, size_t> cases[] = {
      {"0", 0},
      {"4096", 4096},
      {"4096B", 4096},
      {"2KiB", 2048},
      {"2 KiB", 2048},
      {"512MiB", 512ull << 20},
      {"32GiB", 32ull << 30},
      {"1TiB", 1ull << 40},
      {"1.5GB", 1500000000},
      {"3KB", 3000},
      {"7MB", 7000000},
      {"2TB", 2000000000000ull},
      {"0.5KiB", 512},
  };
  for (const auto& [text, want] : cases) {
    auto r = parse_bytes(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().to_string();
    EXPECT_EQ(*r, want) << text;
  }
}

// parse_bytes rejects empty, non-numeric, signed, malformed numbers, unknown units and overflow.
TEST(ByteSizeTest, ParseRejectsMalformedInput) {
  for (const char* bad : {"", " ", "abc", "MiB", "-5", "+5", "12XB", "1.2.3", "1..2", ".", "5 MiBs", "1e3",
                          "99999999999TiB", "0x10"}) {
    auto r = parse_bytes(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' parsed as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

// format_bytes prints whole bytes below 1 KiB and two decimals in the largest fitting unit;
// parsing the text gives the value back for exact multiples.
TEST(ByteSizeTest, FormatUsesLargestUnitAndParsesBack) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(12ull << 20), "12.00 MiB");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(1ull << 50), "1024.00 TiB");
  for (size_t x : {size_t{1024}, size_t{3} << 20, size_t{5} << 30, size_t{1536}})
    EXPECT_EQ(parse_bytes(format_bytes(x)).value(), x) << x;
}


// ---- MemorySystem: placement, tiers, workspace ------------------------------------------------

// Placement strings set the named categories and keep the defaults for the rest; bad entries
// and categories that must stay on the device are rejected with a message naming them.
TEST(PlacementParseTest, ParsesEntriesAndRejectsBadOnes) {
  auto p = parse_placement("optimizer_state=host, weights=device");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p.value()[Category::kOptimizerState], Tier::kHost);
  EXPECT_EQ(p.value()[Category::kWeights], Tier::kDevice);
  EXPECT_EQ(p.value()[Category::kIoBuffers], Tier::kHost);  // default
  EXPECT_EQ(parse_placement("").value().to_string(), Placement{}.to_string());
  const std::pair<const char*, const char*> bad[] = {
      {"weights", "category=tier"},          {"weigths=host", "unknown memory category 'weigths'"},
      {"weights=hbm", "unknown tier 'hbm'"}, {"gradients=host", "gradients must stay on the device"},
      {"workspace=host", "workspace must stay on the device"}};
  for (const auto& [text, why] : bad) {
    auto r = parse_placement(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

// A device budget makes the device tier a DeviceArena of exactly that size; each category goes
// to the allocator of its tier; the summary names tiers, categories, transfers and placement.
TEST(MemorySystemTest, RoutesCategoriesToTiersAndSummarizes) {
  MemorySystemOptions o;
  o.device_budget_bytes = 8 << 20;
  o.host_budget_bytes = 4 << 20;
  o.placement[Category::kOptimizerState] = Tier::kHost;
  auto m = std::move(MemorySystem::create(o)).value();
  ASSERT_NE(m->arena(), nullptr);
  EXPECT_EQ(m->allocator_for(Category::kWeights), m->device());
  EXPECT_EQ(m->allocator_for(Category::kOptimizerState), m->host());
  auto w = m->allocator_for(Category::kWeights)->allocate(1 << 20, Category::kWeights);
  auto st = m->allocator_for(Category::kOptimizerState)->allocate(3 << 20, Category::kOptimizerState);
  ASSERT_TRUE(w.ok() && st.ok());
  auto over = m->host()->allocate(2 << 20, Category::kOptimizerState);  // 5 MiB > 4 MiB host budget
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  m->record_transfer(Tier::kHost, Tier::kDevice, 1000);
  m->record_transfer(Tier::kDevice, Tier::kHost, 24);
  m->record_transfer(Tier::kHost, Tier::kHost, 7);  // not a transfer
  EXPECT_EQ(m->transfers().host_to_device(), 1000u);
  EXPECT_EQ(m->transfers().device_to_host(), 24u);
  const auto stats = m->stats();
  EXPECT_EQ(stats[0][Category::kWeights].current_bytes, size_t{1} << 20);
  EXPECT_EQ(stats[1][Category::kOptimizerState].current_bytes, size_t{3} << 20);
  EXPECT_TRUE(stats[0].caching);
  const std::string sum = m->memory_summary();
  for (const char* part : {"tier: device", "tier: host", "optimizer_state", "cached free", "host->device 1000 B",
                           "placement        optimizer_state=host"})
    EXPECT_NE(sum.find(part), std::string::npos) << part << "\n" << sum;
  const std::string json = m->to_json();
  for (const char* part : {"\"optimizer_state\":\"host\"", "\"host_to_device\":1000", "\"fragmentation\""})
    EXPECT_NE(json.find(part), std::string::npos) << part << "\n" << json;
  m->reset_transfers();
  EXPECT_EQ(m->transfers().host_to_device(), 0u);
}

// Options that need a device budget, or a placement on disk, are refused.
TEST(MemorySystemTest, CreateRejectsInconsistentOptions) {
  MemorySystemOptions o;
  o.reserve_bytes = 1 << 20;
  EXPECT_EQ(MemorySystem::create(o).status().code(), StatusCode::kInvalidArgument);
  MemorySystemOptions d;
  d.placement[Category::kWeights] = Tier::kDisk;
  EXPECT_EQ(MemorySystem::create(d).status().code(), StatusCode::kInvalidArgument);
}

// Buffers taken from a Workspace are returned when it goes out of scope.
TEST(WorkspaceTest, ReturnsEveryBufferAtScopeExit) {
  TrackingAllocator alloc;
  {
    Workspace ws(&alloc);
    auto a = ws.take<float>(1000);
    auto b = ws.take<int64_t>(10);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a.value().size(), 1000u);
    a.value()[999] = 1.0f;
    EXPECT_EQ(alloc.memory_stats()[Category::kWorkspace].current_bytes, 4080u);
    EXPECT_EQ(ws.bytes(), 4080u);
  }
  EXPECT_EQ(alloc.memory_stats().current_bytes, 0u);
  EXPECT_EQ(alloc.memory_stats()[Category::kWorkspace].peak_bytes, 4080u);
  alloc.inject_failure(0);
  Workspace ws(&alloc, Category::kActivations);
  EXPECT_EQ(ws.take<float>(10).status().code(), StatusCode::kResourceExhausted);
}

// std::pmr containers over AccountedResource are counted in their category while alive, return
// to zero when freed, and a refused allocation (budget) throws std::bad_alloc.
TEST(AccountedResourceTest, PmrContainersAreCountedAndBudgeted) {
  TrackingAllocator alloc({Tier::kHost, 1 << 20});
  AccountedResource res(&alloc, Category::kCommBuffers);
  {
    std::pmr::vector<uint8_t> a(&res);
    std::pmr::vector<std::pmr::vector<float>> nested(&res);
    a.resize(100000);
    nested.resize(3);
    nested[2].resize(1000);  // inner vectors use the outer's resource
    const MemoryStats st = alloc.memory_stats();
    EXPECT_GE(st[Category::kCommBuffers].current_bytes, 100000u + 4000u);
    EXPECT_EQ(st[Category::kCommBuffers].current_bytes, st.current_bytes);
    EXPECT_THROW(a.resize(2 << 20), std::bad_alloc);  // over the 1 MiB budget
    EXPECT_EQ(a.size(), 100000u);                     // unchanged
  }
  EXPECT_EQ(alloc.memory_stats()[Category::kCommBuffers].current_bytes, 0u);
}

}  // namespace
}  // namespace leanemb
