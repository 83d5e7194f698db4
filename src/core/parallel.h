// parallel_for: the one worker pool of the training hot path (CTR and text models alike), with
// one wait policy that does not depend on the machine being idle.
//
// Why not an OpenMP parallel region: libgomp's join waits for every thread of the team, so a
// worker that wakes late (a sleeping thread on an idle VM core takes tens of microseconds to
// wake) or that shares its core with another process stalls every region; and its waiting is
// fixed when the library loads (spinning, which collapses when the machine is oversubscribed, or
// sleeping, which pays the wake-up on every region). Here:
//   * work is split into chunks of a fixed size (a function of n and grain only, never of the
//     thread count) that threads claim one at a time; the caller works too, and returns when
//     every chunk is done: a worker that has not started yet never delays it, and a slow worker
//     takes fewer chunks (no static halves that wait for the slowest thread);
//   * a waiting thread yields its core (sched_yield) for up to kYieldSpinMicros, then sleeps on
//     a futex. On an idle machine the yield returns at once, so a region that follows within
//     that window starts without a wake-up; on a busy machine the other process runs instead;
//   * small loops run on the caller alone: parallel_for uses more threads only when there are
//     at least two chunks, and callers size `grain` so that a chunk is worth a hand-off (a few
//     microseconds of work).
// One job runs at a time; a call made while another thread's job runs, or from inside a job or
// an OpenMP region, runs serially on its caller (results are the same: see below).
//
// Determinism: the chunks and what each computes do not depend on the thread count or on which
// thread runs them, so a body whose chunks write disjoint outputs (or per-worker scratch that is
// combined in a fixed order) gives bit-identical results for any thread count.
//
// Thread counts: max_threads <= 0 means omp_get_max_threads() (OMP_NUM_THREADS,
// omp_set_num_threads), so the existing thread options keep their meaning. Workers are started on
// first use and live until the process exits.
//
// Thread safety: parallel_for may be called from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace leanemb {

// How long a waiting thread yields before it sleeps (see above).
inline constexpr int64_t kYieldSpinMicros = 200;

// A non-owning reference to a callable body(begin, end, worker) (worker in [0, threads): 0 is the
// caller; use it to index per-thread scratch).
class ChunkFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ChunkFn>>>
  ChunkFn(F&& f)  // NOLINT: implicit on purpose, like absl::FunctionRef
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t b, int64_t e, int w) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e, w); }) {}
  void operator()(int64_t begin, int64_t end, int worker) const { call_(obj_, begin, end, worker); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t, int);
};

// Calls body(begin, end, worker) for the chunks [c * grain, min(n, (c + 1) * grain)) of [0, n),
// on up to max_threads threads (the caller included), and returns when all are done.
// REQUIRES: n >= 0, grain >= 1.
void parallel_for(int64_t n, int64_t grain, ChunkFn body, int max_threads = 0);

// The thread count parallel_for(…, max_threads) uses at most: max_threads, or
// omp_get_max_threads() for max_threads <= 0.
int parallel_threads(int max_threads = 0);

// A grain that gives chunks of about `target` work units when each item costs `item_cost` units
// (at least 1 item). Callers measure work in element operations; kChunkWork suits loops whose
// unit is about a nanosecond.
inline constexpr int64_t kChunkWork = int64_t{1} << 14;
inline int64_t grain_for(int64_t item_cost, int64_t target = kChunkWork) {
  const int64_t c = std::max<int64_t>(item_cost, 1);
  return c >= target ? 1 : (target + c - 1) / c;
}

}  // namespace leanemb
