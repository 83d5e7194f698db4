// Tests of parallel_for: every item once, worker ids in range, results independent of the thread
// count, nested and concurrent calls, slow workers, and the grain helper. Also run under TSan
// (the pool's synchronization is plain atomics and futexes, which TSan sees).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace leanemb {
namespace {

// Each item is visited exactly once, by a worker id below the thread count, in whole chunks.
TEST(ParallelForTest, VisitsEveryItemOnceInChunksOfTheGrain) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t n : {0, 1, 7, 64, 1000})
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<bool> bad{false};
        parallel_for(n, grain, [&](int64_t b, int64_t e, int w) {
          if (w < 0 || w >= threads || b % grain != 0 || e - b > grain || e > n) bad = true;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        }, threads);
        EXPECT_FALSE(bad) << threads << " " << n << " " << grain;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
      }
}

// Per-chunk results combined in chunk order are the same bits for 1, 2 and 4 threads.
TEST(ParallelForTest, ChunkResultsDoNotDependOnThreadCount) {
  const int64_t n = 100000, grain = 1000;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(static_cast<float>(i)) * 1e3f;
  std::vector<float> sums[3];
  int k = 0;
  for (int threads : {1, 2, 4}) {
    std::vector<float> partial(static_cast<size_t>(n / grain));
    parallel_for(n, grain, [&](int64_t b, int64_t e, int) {
      float s = 0;
      for (int64_t i = b; i < e; ++i) s += x[static_cast<size_t>(i)];
      partial[static_cast<size_t>(b / grain)] = s;
    }, threads);
    sums[k++] = partial;
  }
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sums[0], sums[2]);
}

// A parallel_for inside a chunk runs serially on that thread and still covers its range.
TEST(ParallelForTest, NestedCallsRunSeriallyAndComplete) {
  std::atomic<int64_t> total{0};
  parallel_for(8, 1, [&](int64_t, int64_t, int) {
    const std::thread::id me = std::this_thread::get_id();
    parallel_for(100, 10, [&](int64_t b, int64_t e, int w) {
      EXPECT_EQ(w, 0);
      EXPECT_EQ(std::this_thread::get_id(), me);
      total += e - b;
    }, 4);
  }, 2);
  EXPECT_EQ(total.load(), 800);
}

// Several threads submitting at once all get complete, correct results (one runs on the pool,
// the others serially).
TEST(ParallelForTest, ConcurrentCallersAllComplete) {
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<int> v(997, 0);
        parallel_for(997, 16, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) v[static_cast<size_t>(i)] = static_cast<int>(i) + c;
        }, 2);
        for (int i = 0; i < 997; ++i) wrong += v[static_cast<size_t>(i)] != i + c;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A chunk that takes long (a descheduled worker) is waited for; many back-to-back small jobs and
// jobs after the workers went to sleep complete too.
TEST(ParallelForTest, SlowChunksAndSleepingWorkersAreHandled) {
  std::atomic<int64_t> total{0};
  parallel_for(4, 1, [&](int64_t b, int64_t e, int) {
    if (b == 3) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    total += e - b;
  }, 2);
  EXPECT_EQ(total.load(), 4);
  for (int rep = 0; rep < 2000; ++rep) parallel_for(2, 1, [&](int64_t b, int64_t e, int) { total += e - b; }, 2);
  EXPECT_EQ(total.load(), 4004);
  std::this_thread::sleep_for(std::chrono::microseconds(3 * kYieldSpinMicros));  // workers now sleep
  parallel_for(64, 1, [&](int64_t b, int64_t e, int) { total += e - b; }, 2);
  EXPECT_EQ(total.load(), 4068);
}

// grain_for gives chunks of about the target work and at least one item.
TEST(ParallelForTest, GrainForTargetsTheChunkWork) {
  EXPECT_EQ(grain_for(1), kChunkWork);
  EXPECT_EQ(grain_for(16), kChunkWork / 16);
  EXPECT_EQ(grain_for(kChunkWork * 4), 1);
  EXPECT_EQ(grain_for(0), kChunkWork);
  EXPECT_EQ(parallel_threads(3), 3);
}

}  // namespace
}  // namespace leanemb
