// LEANEMB_MULTIVERSION marks a function that GCC compiles three times, for x86-64-v4 (AVX-512:
// Zen 4, Sapphire Rapids), x86-64-v3 (AVX2, FMA, F16C) and the baseline ISA, choosing at load
// time (ifunc) by CPU. `flatten` inlines every helper into each clone so the helpers get the
// clone's ISA too. The library's kernels do not use it: their builds go through isa.h's dispatch
// (kernels/isa_builds.h), which LEANEMB_ISA and set_isa_limit cap, so the tests run every build;
// a clone chosen by the loader cannot be capped. Only the roofline benchmark's loops use it.
#pragma once

// Not at -O0 (no __OPTIMIZE__): there `flatten` inlines nothing, and the AVX2 clone's calls into
// baseline-ISA helpers would pass 256-bit vectors with a different ABI (see vec8.h).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(LEANEMB_NO_MULTIVERSION) && \
    defined(__OPTIMIZE__)
#define LEANEMB_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define LEANEMB_MULTIVERSION
#endif

#include <algorithm>
#include <cstdint>

namespace leanemb::kernels {
// Contiguous share [begin, end) of n items for worker `tid` of `nt` (static schedule).
inline void static_chunk(int64_t n, int tid, int nt, int64_t* begin, int64_t* end) {
  const int64_t q = n / nt, r = n % nt;
  *begin = tid * q + std::min<int64_t>(tid, r);
  *end = *begin + q + (tid < r ? 1 : 0);
}
}  // namespace leanemb::kernels
