#include <cstring>
#include <utility>

#include "kernels/kernels.h"

namespace leanemb::kernels {

void radix_sort_row_src(uint64_t* keys, uint64_t* scratch, int64_t n, int row_bits) {
  constexpr int kDigitBits = 11;
  constexpr int kBuckets = 1 << kDigitBits;
  uint64_t* src = keys;
  uint64_t* dst = scratch;
  int passes = 0;
  for (int shift = 0; shift < row_bits; shift += kDigitBits, ++passes) {
    int64_t count[kBuckets] = {0};
    const int s = 32 + shift;
    for (int64_t i = 0; i < n; ++i) ++count[(src[i] >> s) & (kBuckets - 1)];
    int64_t sum = 0;
    for (int b = 0; b < kBuckets; ++b) {
      const int64_t c = count[b];
      count[b] = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; ++i) dst[count[(src[i] >> s) & (kBuckets - 1)]++] = src[i];
    std::swap(src, dst);
  }
  if (passes % 2 == 1) std::memcpy(keys, src, static_cast<size_t>(n) * sizeof(uint64_t));
}

}  // namespace leanemb::kernels
