// The worker pool behind parallel_for (see parallel.h for the policy).
//
// Protocol (one job at a time, serialized by submit_mu_; all fields of the job are written by
// the caller before it opens the cursor with a release store, and read by workers only after an
// acquire load shows it open):
//   caller: wait until no worker is inside a job (in_job_ == 0); write the job; done_ = 0; open
//           cursor_ (generation, chunk 0); bump wake_ and futex-wake sleepers; claim chunks with
//           fetch_add on cursor_; wait until done_ == num_chunks; close cursor_.
//   worker: wait for wake_ to change (yield, then futex); in_job_++; if the cursor is open and
//           the worker's id is below the job's thread count, claim chunks until none are left,
//           counting each finished chunk in done_; in_job_--.
// A worker that claims after the last chunk gets an index >= num_chunks and touches nothing, so
// the caller may return as soon as done_ == num_chunks; the job's fields are only rewritten by
// the next caller after in_job_ has dropped to 0.
#include "core/parallel.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace leanemb {
namespace {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Yields the core until pred() holds or kYieldSpinMicros have passed; true when pred() held.
template <typename Pred>
bool yield_until(Pred&& pred) {
  if (pred()) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kYieldSpinMicros);
  do {
    sched_yield();
    if (pred()) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

constexpr uint64_t kClosed = uint64_t{1} << 31;  // chunk index of a closed cursor

thread_local bool t_in_job = false;  // inside a chunk: nested calls run serially

class Pool {
 public:
  void run(int64_t n, int64_t grain, ChunkFn body, int threads) {
    std::unique_lock<std::mutex> lock(submit_mu_, std::try_to_lock);
    const int64_t num_chunks = (n + grain - 1) / grain;
    if (!lock.owns_lock() || num_chunks > static_cast<int64_t>(kClosed / 2)) return serial(n, grain, body);
    ensure_workers(threads - 1);
    // seq_cst pairs with the worker's in_job_ increment and cursor load (store-buffer pattern).
    yield_until([&] { return in_job_.load(std::memory_order_seq_cst) == 0; });
    while (in_job_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    body_ = &body;
    n_ = n;
    grain_ = grain;
    num_chunks_ = num_chunks;
    threads_ = threads;
    done_.store(0, std::memory_order_relaxed);
    ++generation_;
    cursor_.store(generation_ << 32, std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&wake_);
    work(0);
    const uint32_t all = static_cast<uint32_t>(num_chunks);
    if (!yield_until([&] { return done_.load(std::memory_order_acquire) == all; })) {
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      for (uint32_t d = done_.load(std::memory_order_acquire); d != all; d = done_.load(std::memory_order_acquire))
        futex_wait(&done_, d);
      caller_sleeping_.store(false, std::memory_order_relaxed);
    }
    cursor_.store((generation_ << 32) | kClosed, std::memory_order_seq_cst);
  }

  static void serial(int64_t n, int64_t grain, ChunkFn body) {
    for (int64_t b = 0; b < n; b += grain) body(b, std::min(n, b + grain), 0);
  }

 private:
  // Claims and runs chunks of the open job as worker `id`.
  void work(int id) {
    t_in_job = true;
    for (;;) {
      const uint64_t idx = cursor_.fetch_add(1, std::memory_order_acq_rel) & 0xffffffffu;
      if (idx >= static_cast<uint64_t>(num_chunks_)) break;
      const int64_t b = static_cast<int64_t>(idx) * grain_;
      (*body_)(b, std::min(n_, b + grain_), id);
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == static_cast<uint32_t>(num_chunks_) &&
          caller_sleeping_.load(std::memory_order_seq_cst))
        futex_wake_all(&done_);
    }
    t_in_job = false;
  }

  void worker_main(int id) {
    pthread_setname_np(pthread_self(), "leanemb-pool");  // for profilers (perf -s comm, top -H)
    uint32_t seen = wake_.load(std::memory_order_acquire);
    for (;;) {
      if (!yield_until([&] { return wake_.load(std::memory_order_acquire) != seen; })) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (wake_.load(std::memory_order_acquire) == seen) futex_wait(&wake_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = wake_.load(std::memory_order_acquire);
      in_job_.fetch_add(1, std::memory_order_seq_cst);
      const uint64_t c = cursor_.load(std::memory_order_seq_cst);
      if ((c & kClosed) == 0 && id < threads_) work(id);
      in_job_.fetch_sub(1, std::memory_order_release);
    }
  }

  void ensure_workers(int count) {
    while (static_cast<int>(workers_) < count) {
      const int id = static_cast<int>(++workers_);
      std::thread([this, id] { worker_main(id); }).detach();
    }
  }

  std::mutex submit_mu_;
  size_t workers_ = 0;  // started workers (ids 1..workers_); guarded by submit_mu_
  // The job (written by the caller under submit_mu_, see the protocol above).
  const ChunkFn* body_ = nullptr;
  int64_t n_ = 0, grain_ = 1, num_chunks_ = 0;
  int threads_ = 1;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> cursor_{kClosed};  // generation << 32 | next chunk index (kClosed: closed)
  std::atomic<uint32_t> wake_{0};          // futex word: bumped once per job
  std::atomic<uint32_t> done_{0};          // futex word: finished chunks of the job
  std::atomic<int> sleepers_{0};           // workers in futex_wait on wake_
  std::atomic<int> in_job_{0};             // workers between seeing a job and leaving it
  std::atomic<bool> caller_sleeping_{false};
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: detached workers may outlive static destructors
  return *p;
}

}  // namespace

int parallel_threads(int max_threads) {
#ifdef _OPENMP
  return max_threads > 0 ? max_threads : omp_get_max_threads();
#else
  return max_threads > 0 ? max_threads : 1;
#endif
}

void parallel_for(int64_t n, int64_t grain, ChunkFn body, int max_threads) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = static_cast<int>(std::min<int64_t>(parallel_threads(max_threads), (n + grain - 1) / grain));
  bool nested = t_in_job;
#ifdef _OPENMP
  nested = nested || omp_in_parallel();
#endif
  if (threads <= 1 || nested) return Pool::serial(n, grain, body);
  pool().run(n, grain, body, threads);
}

}  // namespace leanemb
