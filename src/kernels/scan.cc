// Order-free scans over a step's inputs: the largest |gradient| (the non-finite check and the
// fused update's overflow bound) and the count of ids outside a table. Plain loops that GCC
// vectorizes in each build (isa_builds.h, LEANEMB_ISA_KERNEL); no early exit, so they run at
// memory speed.
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/isa_builds.h"

namespace leanemb::kernels {

namespace {

inline uint32_t max_abs_bits_impl(const float* x, int64_t n) {
  // |x| < 2^31 as bits, so a signed max is exact and needs no unsigned compare (SSE2 has none).
  int32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    const int32_t a = static_cast<int32_t>(u & 0x7fffffffu);
    m = a > m ? a : m;
  }
  return static_cast<uint32_t>(m);
}

inline int64_t count_outside_impl(const int64_t* v, int64_t n, int64_t bound) {
  // One unsigned compare finds both v < 0 and v >= bound (bound >= 0).
  const uint64_t b = static_cast<uint64_t>(bound);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += static_cast<uint64_t>(v[i]) >= b ? 1 : 0;
  return bad;
}

}  // namespace

LEANEMB_ISA_KERNEL(uint32_t, max_abs_bits, (const float* x, int64_t n), (x, n))
LEANEMB_ISA_KERNEL(int64_t, count_outside, (const int64_t* v, int64_t n, int64_t bound), (v, n, bound))

}  // namespace leanemb::kernels
