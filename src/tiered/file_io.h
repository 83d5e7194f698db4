// RowFileIo: the low-level I/O under the file row store, behind an interface so that tests can
// inject faults (short writes, EIO, ENOSPC) without a broken disk (the style of ckpt/Env and
// FaultInjectionEnv, at the level of single positioned reads and writes).
//
// An IoOp is one positioned read or write of `len` bytes at `offset` into / from `buf`. For
// O_DIRECT files, offset, len and buf are aligned by the caller. submit_and_wait() issues a
// batch (with at most the engine's queue depth in flight) and waits for all of it; each op's
// `result` is then the byte count transferred (possibly short: the caller retries the rest) or
// -errno. Engines do not retry; the row store does.
//
// Engines: io_uring (make_uring_file_io; fails where io_uring_queue_init is refused) and a
// pread / pwrite thread pool (make_thread_pool_file_io). FaultInjectionFileIo wraps either.
//
// Ownership: an engine does not own the file descriptor (its own, or an op's IoOp::fd). Thread safety: submit_and_wait may be
// called from several threads at once (the io_uring engine keeps a pool of rings, one per
// concurrent caller; the thread pool shares its workers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

#include "leanemb/status.h"

namespace leanemb::tiered {

struct IoOp {
  bool write = false;
  uint64_t offset = 0;  // bytes from the start of the file
  uint8_t* buf = nullptr;
  uint32_t len = 0;     // > 0
  int64_t result = 0;   // out: bytes transferred (<= len) or -errno
  int fd = -1;          // the file: -1 is the engine's own (the log store's segments pass theirs)
};

// A stream of jobs for RowFileIo::run_jobs. A job is a chain of ops that uses one staging slot
// (an index in [0, slots)) from its first op to its last: a read; a read-modify-write (reads, then
// the write); any of them followed by the retry of a short transfer. The engine starts jobs in
// index order while a slot is free and fewer than its queue depth of ops are in flight, and calls
// next() on the caller's thread as each op completes, so the queue stays full across jobs instead
// of draining at the end of every batch.
class IoJobs {
 public:
  virtual ~IoJobs() = default;
  virtual size_t num_jobs() const = 0;
  // The first op of `job`, which owns staging slot `slot` until next() returns false.
  virtual IoOp start(size_t job, size_t slot) = 0;
  // `op` (the job's op that just completed, with its result) becomes the job's next op: returns
  // true to issue it, false when the job is finished (done, or failed: the caller keeps the error).
  virtual bool next(size_t job, size_t slot, IoOp* op) = 0;
  // True once the caller wants no more jobs started (after an error); ops in flight still finish.
  virtual bool aborted() const = 0;
};

class RowFileIo {
 public:
  virtual ~RowFileIo() = default;
  virtual std::string_view engine_name() const = 0;  // "io_uring" | "threads"
  // Issues every op and waits for all of them; sets each op's result.
  virtual void submit_and_wait(std::span<IoOp> ops) = 0;
  // Runs every job of `jobs` (until aborted()) with at most `slots` jobs at once; returns when
  // none is in flight. The default runs waves of the jobs' current ops through submit_and_wait
  // (the thread pool and the fault wrapper use it: same jobs, same results, a barrier per wave);
  // the io_uring engine streams them.
  virtual void run_jobs(IoJobs& jobs, size_t slots);
};

// io_uring with `queue_depth` entries per ring. Errors: Unimplemented when io_uring_queue_init
// fails (the message has its errno text).
Result<std::unique_ptr<RowFileIo>> make_uring_file_io(int fd, int queue_depth);
// `num_threads` workers calling pread / pwrite (EINTR retried inside).
std::unique_ptr<RowFileIo> make_thread_pool_file_io(int fd, int num_threads);

// What FaultInjectionFileIo does to the op it picks.
enum class IoFault : uint8_t {
  kNone,
  kShortWrite,  // the write transfers only part of its bytes (half, rounded down to the
                // alignment; 0 bytes when that is 0) and reports that count
  kWriteError,  // the write transfers nothing and fails with `err` (EIO, ENOSPC, ...)
  kReadError,   // the read transfers nothing and fails with `err`
};

// Test wrapper: counts reads and writes separately (from 0, over its lifetime) and injects
// `fault` into write number k (kShortWrite, kWriteError) or read number k (kReadError); with
// `always` into every later one of that kind too. Thread safety: like the wrapped engine.
class FaultInjectionFileIo final : public RowFileIo {
 public:
  FaultInjectionFileIo(std::unique_ptr<RowFileIo> inner, uint32_t alignment)
      : inner_(std::move(inner)), alignment_(alignment) {}
  std::string_view engine_name() const override { return inner_->engine_name(); }
  void submit_and_wait(std::span<IoOp> ops) override;

  // Arms a fault at op number `k` of its kind, counted from now. Replaces an armed fault.
  void arm(IoFault fault, uint64_t k, int err = 5 /* EIO */, bool always = false);
  void disarm();
  uint64_t num_reads() const;
  uint64_t num_writes() const;
  uint64_t num_injected() const;

 private:
  std::unique_ptr<RowFileIo> inner_;
  uint32_t alignment_;
  mutable std::mutex mu_;
  IoFault fault_ = IoFault::kNone;
  uint64_t target_ = 0;  // absolute index in the reads or writes counter
  int err_ = 5;
  bool always_ = false;
  uint64_t reads_ = 0, writes_ = 0, injected_ = 0;
};

}  // namespace leanemb::tiered
