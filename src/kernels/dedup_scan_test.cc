// Tests of the dedup's kernels (the radix sort of (row, position) keys, the distinct rows in
// first-occurrence order) and of the scans (max |x| over bit patterns, the ids' bounds check),
// each against a plain reference: std::stable_sort, an ordered hash map, scalar loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <unordered_map>
#include <vector>

#include "core/half.h"
#include "kernels/isa_testing.h"
#include "kernels/kernels.h"

namespace leanemb::kernels {
namespace {

// ---- dedup radix sort ----------------------------------------------------------------------------

// radix_sort_row_src sorts by the row part exactly like std::stable_sort (equal rows keep their
// input order, whatever their low 32 bits) for 0-32 row bits (every digit width and pass
// count the sort picks), with many duplicates, n = 0..5000.
TEST(RadixSortTest, SortsLikeStableSortOnRowPart) {
  std::mt19937_64 rng(8);
  for (int row_bits : {0, 1, 5, 11, 12, 13, 16, 21, 22, 23, 24, 25, 31, 32}) {
    for (int64_t n : {0, 1, 2, 1000, 5000}) {
      const uint64_t max_row = row_bits == 0 ? 0 : (row_bits == 32 ? 0xffffffffull : (1ull << row_bits) - 1);
      // Few distinct rows for many duplicates; include the extremes 0 and max_row.
      std::vector<uint64_t> distinct = {0, max_row};
      for (int i = 0; i < 40; ++i) distinct.push_back(rng() & max_row);
      std::vector<uint64_t> keys(n), scratch(std::max<int64_t>(n, 1));
      keys.reserve(1);  // non-null data() even for n = 0
      for (int64_t i = 0; i < n; ++i)
        keys[i] = (distinct[rng() % distinct.size()] << 32) | static_cast<uint32_t>(rng());
      std::vector<uint64_t> want = keys;
      std::stable_sort(want.begin(), want.end(), [](uint64_t a, uint64_t b) { return (a >> 32) < (b >> 32); });
      radix_sort_row_src(keys.data(), scratch.data(), n, row_bits);
      ASSERT_EQ(keys, want) << "row_bits " << row_bits << " n " << n;
    }
  }
}

// Calls large enough to be split over threads (two and three parts, uneven part sizes) give
// std::stable_sort's order too.
TEST(RadixSortTest, SplitOverThreadsSortsLikeStableSort) {
  std::mt19937_64 rng(9);
  for (int row_bits : {11, 21, 24, 32}) {
    for (int64_t n : {int64_t{65536}, int64_t{100003}, int64_t{200001}}) {
      const uint64_t max_row = row_bits == 32 ? 0xffffffffull : (1ull << row_bits) - 1;
      std::vector<uint64_t> keys0(static_cast<size_t>(n)), scratch(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) keys0[static_cast<size_t>(i)] = ((rng() % 5000 * 7919) & max_row) << 32 | static_cast<uint64_t>(i);
      std::vector<uint64_t> want = keys0;
      std::stable_sort(want.begin(), want.end(), [](uint64_t a, uint64_t b) { return (a >> 32) < (b >> 32); });
      for (int threads : {1, 2, 3}) {
        std::vector<uint64_t> keys = keys0;
        radix_sort_row_src(keys.data(), scratch.data(), n, row_bits, threads);
        ASSERT_EQ(keys, want) << "row_bits " << row_bits << " n " << n << " threads " << threads;
      }
    }
  }
}

// The digit width: at most 12 bits, the fewest passes that cover the row bits.
TEST(RadixSortTest, DigitWidthTakesTheFewestPassesOfAtMost12Bits) {
  EXPECT_EQ(radix_digit_bits(24), 12);
  EXPECT_EQ(radix_digit_bits(21), 11);
  EXPECT_EQ(radix_digit_bits(32), 11);
  for (int bits = 1; bits <= 32; ++bits) {
    const int d = radix_digit_bits(bits);
    const int passes = (bits + d - 1) / d;
    EXPECT_LE(d, 12) << bits;
    EXPECT_EQ(passes, (bits + 11) / 12) << bits;
  }
}

// unique_first_occurrence gives the distinct rows in first-occurrence order and each position's
// index among them, exactly as a hash map filled in order does: rows 0 and 2^row_bits - 1,
// heavy repeats and all-distinct inputs (70,001 distinct ids rebuild the hash set three times).
TEST(UniqueFirstOccurrenceTest, MatchesAnOrderedHashMap) {
  std::mt19937_64 rng(10);
  for (int row_bits : {1, 11, 24, 32}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{977}, int64_t{70001}}) {
      const uint64_t max_row = row_bits == 32 ? 0xffffffffull : (1ull << row_bits) - 1;
      for (int spread : {3, 1000, 0}) {  // 0: every row drawn from the whole range
        std::vector<int64_t> rows(static_cast<size_t>(n));
        for (auto& r : rows)
          r = static_cast<int64_t>(spread == 0 ? rng() & max_row : (rng() % spread == 0 ? max_row : (rng() % spread) & max_row));
        std::vector<int64_t> want_uniq;
        std::vector<uint32_t> want_inv(rows.size());
        std::unordered_map<int64_t, uint32_t> seen;
        for (size_t i = 0; i < rows.size(); ++i) {
          auto [it, fresh] = seen.emplace(rows[i], static_cast<uint32_t>(want_uniq.size()));
          if (fresh) want_uniq.push_back(rows[i]);
          want_inv[i] = it->second;
        }
        std::vector<int64_t> uniq(rows.size() + 1, -7);
        std::vector<uint32_t> inv(rows.size() + 1);
        std::vector<uint64_t> keys(2 * rows.size() + 1);
        {
          std::fill(uniq.begin(), uniq.end(), -7);
          const int64_t u = unique_first_occurrence(rows.data(), n, uniq.data(), inv.data(), keys.data());
          ASSERT_EQ(u, static_cast<int64_t>(want_uniq.size())) << "row_bits " << row_bits << " n " << n;
          std::vector<int64_t> got_uniq(uniq.begin(), uniq.begin() + u);
          std::vector<uint32_t> got_inv(inv.begin(), inv.begin() + n);
          ASSERT_EQ(got_uniq, want_uniq) << "row_bits " << row_bits << " n " << n << " spread " << spread;
          ASSERT_EQ(got_inv, want_inv) << "row_bits " << row_bits << " n " << n << " spread " << spread;
        }
      }
    }
  }
}

// The scans against plain scalar loops, in every build the CPU runs: every length up to 70
// (vector bodies and tails), a non-finite value or an out-of-range id at every position, and
// the edge values.
TEST(ScanTest, MaxAbsBitsAndCountOutsideMatchScalarLoops) {
  for_each_isa([] {
    std::mt19937 g(3);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    auto ref_max = [](const std::vector<float>& v) {
      uint32_t m = 0;
      for (float x : v) m = std::max(m, f32_bits(x) & 0x7fffffffu);
      return m;
    };
    for (int n = 0; n <= 70; ++n) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = nd(g);
      const uint32_t m = max_abs_bits(v.data(), n);
      EXPECT_EQ(m, ref_max(v)) << n;
      float as_float;
      std::memcpy(&as_float, &m, 4);
      float want = 0.0f;
      for (float x : v) want = std::max(want, std::fabs(x));
      EXPECT_EQ(as_float, want) << n;
      for (int i = 0; i < n; ++i) {
        for (float bad : {INFINITY, -INFINITY, std::nanf(""), -std::nanf("")}) {
          std::vector<float> w = v;
          w[static_cast<size_t>(i)] = bad;
          EXPECT_GE(max_abs_bits(w.data(), n), 0x7f800000u) << n << " at " << i;
        }
        std::vector<float> w = v;
        w[static_cast<size_t>(i)] = -FLT_MAX;
        EXPECT_EQ(max_abs_bits(w.data(), n), 0x7f7fffffu) << n << " at " << i;
      }
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i % 17;
      EXPECT_EQ(count_outside(ids.data(), n, 17), 0) << n;
      for (int i = 0; i < n; ++i)
        for (int64_t bad : {int64_t{-1}, int64_t{17}, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
          std::vector<int64_t> w = ids;
          w[static_cast<size_t>(i)] = bad;
          w[static_cast<size_t>(n - 1 - i)] = bad;
          EXPECT_EQ(count_outside(w.data(), n, 17), i == n - 1 - i ? 1 : 2) << n << " at " << i;
        }
      EXPECT_EQ(count_outside(ids.data(), n, 0), n);
    }
  });
}

}  // namespace
}  // namespace leanemb::kernels
