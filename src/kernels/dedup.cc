#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernels.h"

namespace leanemb::kernels {

// The digit width: as few passes as digits of at most kMaxDigitBits allow, the bits spread
// evenly over them (24-bit rows: two passes of 12 bits, not three of 11). Measured on a Zen 4
// host: 2^18 keys of 24-bit rows sort in 0.81 ms with two 12-bit passes against 1.23 ms with
// three 11-bit ones; at 21 bits (two passes either way) 11- and 12-bit digits tie. Wider digits
// than 12 bits scatter into more lines than the L1 cache holds.
int radix_digit_bits(int row_bits) {
  constexpr int kMaxDigitBits = 12;
  if (row_bits <= 0) return 1;
  const int passes = (row_bits + kMaxDigitBits - 1) / kMaxDigitBits;
  return (row_bits + passes - 1) / passes;
}

namespace {

// The sort with a digit width fixed at compile time (kDigitBits > 0: the common widths, 11 and 12
// bits, whose shifts and masks the compiler folds) or given at run time (kDigitBits == 0).
template <int kDigitBits>
void radix_sort_impl(uint64_t* keys, uint64_t* scratch, int64_t n, int row_bits, int num_threads, int run_digit_bits) {
  constexpr int kMaxBuckets = 1 << (kDigitBits > 0 ? kDigitBits : 12);
  const int digit_bits = kDigitBits > 0 ? kDigitBits : run_digit_bits;
  const int buckets = 1 << digit_bits;
  const uint64_t mask = static_cast<uint64_t>(buckets - 1);
  constexpr int64_t kMinPerPart = int64_t{1} << 15;  // below this, one part: a region costs more than it saves
  const int parts = static_cast<int>(std::clamp<int64_t>(n / kMinPerPart, 1, std::max(1, parallel_threads(num_threads))));
  // count[p * buckets + b]: part p's keys in bucket b, then (after the prefix) where part p's
  // first key of bucket b goes. Parts are contiguous ranges in order, and a bucket's keys are
  // placed part by part, each part's in its own order: the sort stays stable.
  // One part (most calls): the counts on the stack, as before the split; no allocation per call.
  int64_t one_part[kMaxBuckets];
  std::vector<int64_t> many_parts(parts > 1 ? static_cast<size_t>(parts) * buckets : 0);
  int64_t* const count = parts > 1 ? many_parts.data() : one_part;
  auto part_range = [&](int p, int64_t* b, int64_t* e) {
    *b = n * p / parts;
    *e = n * (p + 1) / parts;
  };
  uint64_t* src = keys;
  uint64_t* dst = scratch;
  int passes = 0;
  for (int shift = 0; shift < row_bits; shift += digit_bits, ++passes) {
    const int s = 32 + shift;
    // Four interleaved sub-counts: a skewed stream puts runs of equal digits next to each other,
    // and one counter per digit would chain every increment of a run through memory. 32 bits
    // suffice: a key's low half numbers it, so n < 2^32.
    auto histogram = [&](int p) {
      int64_t* c = count + static_cast<size_t>(p) * buckets;
      uint32_t sub[4][kMaxBuckets];
      for (auto& q : sub) std::fill(q, q + buckets, 0u);
      int64_t b, e;
      part_range(p, &b, &e);
      int64_t i = b;
      for (; i + 4 <= e; i += 4) {
        ++sub[0][(src[i] >> s) & mask];
        ++sub[1][(src[i + 1] >> s) & mask];
        ++sub[2][(src[i + 2] >> s) & mask];
        ++sub[3][(src[i + 3] >> s) & mask];
      }
      for (; i < e; ++i) ++sub[0][(src[i] >> s) & mask];
      for (int d = 0; d < buckets; ++d)
        c[d] = static_cast<int64_t>(sub[0][d]) + sub[1][d] + sub[2][d] + sub[3][d];
    };
    auto scatter = [&](int p) {
      int64_t* c = count + static_cast<size_t>(p) * buckets;
      int64_t b, e;
      part_range(p, &b, &e);
      for (int64_t i = b; i < e; ++i) dst[c[(src[i] >> s) & mask]++] = src[i];
    };
    if (parts == 1) histogram(0);
    else parallel_for(parts, 1, [&](int64_t p0, int64_t p1, int) { for (int64_t p = p0; p < p1; ++p) histogram(static_cast<int>(p)); }, parts);
    int64_t sum = 0;
    for (int b = 0; b < buckets; ++b)
      for (int p = 0; p < parts; ++p) {
        int64_t& c = count[static_cast<size_t>(p) * buckets + b];
        const int64_t k = c;
        c = sum;
        sum += k;
      }
    if (parts == 1) scatter(0);
    else parallel_for(parts, 1, [&](int64_t p0, int64_t p1, int) { for (int64_t p = p0; p < p1; ++p) scatter(static_cast<int>(p)); }, parts);
    std::swap(src, dst);
  }
  if (passes % 2 == 1) std::memcpy(keys, src, static_cast<size_t>(n) * sizeof(uint64_t));
}

}  // namespace

void radix_sort_row_src(uint64_t* keys, uint64_t* scratch, int64_t n, int row_bits, int num_threads) {
  const int d = radix_digit_bits(row_bits);
  if (d == 12) radix_sort_impl<12>(keys, scratch, n, row_bits, num_threads, d);
  else if (d == 11) radix_sort_impl<11>(keys, scratch, n, row_bits, num_threads, d);
  else radix_sort_impl<0>(keys, scratch, n, row_bits, num_threads, d);
}

int64_t unique_first_occurrence(const int64_t* rows, int64_t n, int64_t* uniq, uint32_t* inv, uint64_t* keys) {
  if (n == 0) return 0;
  // Open addressing with linear probing over `cap` entries of keys (row << 32 | index + 1; 0 is
  // empty), at most half full: n / 2 entries first (room for n / 4 distinct rows), rebuilt twice
  // as large from uniq when half full, never beyond the scratch's 2n entries (which hold n).
  const size_t limit = static_cast<size_t>(2 * n);
  size_t cap = std::min(limit, std::max<size_t>(4096, static_cast<size_t>(n) / 2));
  auto home = [&](uint64_t row) {
    return static_cast<size_t>((static_cast<unsigned __int128>(row * 0x9e3779b97f4a7c15ull) * cap) >> 64);
  };
  std::memset(keys, 0, cap * sizeof(uint64_t));
  int64_t u = 0;
  constexpr int64_t kAhead = 16;
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&keys[home(static_cast<uint64_t>(rows[i + kAhead]))]);
    const uint64_t row = static_cast<uint64_t>(rows[i]);
    size_t h = home(row);
    for (;;) {
      const uint64_t e = keys[h];
      if (e == 0) {
        keys[h] = row << 32 | static_cast<uint64_t>(u + 1);
        uniq[u] = rows[i];
        inv[i] = static_cast<uint32_t>(u++);
        break;
      }
      if (e >> 32 == row) {
        inv[i] = static_cast<uint32_t>(e) - 1;
        break;
      }
      h = h + 1 == cap ? 0 : h + 1;
    }
    if (static_cast<size_t>(u) * 2 > cap && cap < limit) {
      cap = std::min(limit, cap * 2);
      std::memset(keys, 0, cap * sizeof(uint64_t));
      for (int64_t j = 0; j < u; ++j) {
        const uint64_t r = static_cast<uint64_t>(uniq[j]);
        size_t g = home(r);
        while (keys[g] != 0) g = g + 1 == cap ? 0 : g + 1;
        keys[g] = r << 32 | static_cast<uint64_t>(j + 1);
      }
    }
  }
  return u;
}

}  // namespace leanemb::kernels
