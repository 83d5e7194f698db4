// The two RowFileIo engines (io_uring, pread/pwrite thread pool) and the fault-injecting
// wrapper. Engines only issue and reap; short transfers and errors are the row store's to
// handle (file_store.cc), so the fault wrapper exercises exactly the store's retry paths.
#include "tiered/file_io.h"

#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <condition_variable>
#include <deque>
#include <system_error>
#include <thread>
#include <vector>

namespace leanemb::tiered {

namespace {

// One read or write with EINTR retried; the raw count or -errno (no short-transfer retry).
int64_t do_sync_op(int engine_fd, const IoOp& op) {
  const int fd = op.fd >= 0 ? op.fd : engine_fd;
  for (;;) {
    const ssize_t n = op.write ? ::pwrite(fd, op.buf, op.len, static_cast<off_t>(op.offset))
                               : ::pread(fd, op.buf, op.len, static_cast<off_t>(op.offset));
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

// ---- io_uring -------------------------------------------------------------------------------
class UringFileIo final : public RowFileIo {
 public:
  struct Ring {
    io_uring ring{};
    bool live = false;
    ~Ring() {
      if (live) io_uring_queue_exit(&ring);
    }
  };

  UringFileIo(int fd, int queue_depth, std::unique_ptr<Ring> first) : fd_(fd), qd_(queue_depth) {
    free_.push_back(std::move(first));
  }

  static Result<std::unique_ptr<Ring>> new_ring(int queue_depth) {
    auto r = std::make_unique<Ring>();
    const int rc = io_uring_queue_init(static_cast<unsigned>(queue_depth), &r->ring, 0);
    if (rc < 0) {
      return unimplemented("io_uring_queue_init failed: " + std::generic_category().message(-rc));
    }
    r->live = true;
    return r;
  }

  std::string_view engine_name() const override { return "io_uring"; }

  void run_jobs(IoJobs& jobs, size_t slots) override {
    std::unique_ptr<Ring> ring = acquire();
    if (ring == nullptr) {  // no ring now (memlock limit): every op synchronously
      run_jobs_sync(jobs, slots);
      return;
    }
    const bool healthy = stream(&ring->ring, jobs, std::min<size_t>(slots, static_cast<size_t>(qd_)));
    if (healthy) {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(std::move(ring));
    }
  }

  void submit_and_wait(std::span<IoOp> ops) override {
    std::unique_ptr<Ring> ring = acquire();
    if (ring == nullptr) {  // no ring could be created now (memlock limit): do it synchronously
      for (IoOp& op : ops) op.result = do_sync_op(fd_, op);
      return;
    }
    const bool healthy = run(&ring->ring, ops);
    if (healthy) {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(std::move(ring));
    }
  }

 private:
  std::unique_ptr<Ring> acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        auto r = std::move(free_.back());
        free_.pop_back();
        return r;
      }
    }
    auto r = new_ring(qd_);
    return r.ok() ? std::move(r).value() : nullptr;
  }

  // Keeps up to qd_ ops in flight until all have completed. Returns false when the ring had a
  // hard submission error (the ops it could not issue get that error; the ring is dropped).
  bool run(io_uring* ring, std::span<IoOp> ops) {
    const size_t n = ops.size();
    size_t next = 0, in_flight = 0, done = 0;
    int hard_error = 0;
    constexpr int64_t kPending = INT64_MIN;
    for (IoOp& op : ops) op.result = kPending;
    while (done < n) {
      size_t queued = 0;
      while (hard_error == 0 && next < n && in_flight + queued < static_cast<size_t>(qd_)) {
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        if (sqe == nullptr) break;
        IoOp& op = ops[next];
        if (op.write) {
          io_uring_prep_write(sqe, op.fd >= 0 ? op.fd : fd_, op.buf, op.len, op.offset);
        } else {
          io_uring_prep_read(sqe, op.fd >= 0 ? op.fd : fd_, op.buf, op.len, op.offset);
        }
        io_uring_sqe_set_data64(sqe, next);
        ++next;
        ++queued;
      }
      if (queued > 0) {
        int rc;
        do {
          rc = io_uring_submit(ring);
        } while (rc == -EINTR);
        if (rc < 0) {
          // Unsubmittable: fail the ops not yet issued and drain what is in flight.
          hard_error = -rc;
          for (size_t i = next - queued; i < n; ++i) ops[i].result = rc;
          done += n - (next - queued);
          next = n;
        } else {
          in_flight += queued;
        }
      }
      if (in_flight == 0) continue;
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {  // cannot reap: give up on this ring (ops in flight keep their buffers busy)
        for (IoOp& op : ops) {
          if (op.result == kPending) op.result = rc;
        }
        return false;
      }
      unsigned head;
      unsigned count = 0;
      io_uring_for_each_cqe(ring, head, cqe) {
        ops[io_uring_cqe_get_data64(cqe)].result = cqe->res;
        ++count;
      }
      io_uring_cq_advance(ring, count);
      in_flight -= count;
      done += count;
    }
    return hard_error == 0;
  }

  // Jobs one op at a time on this thread (the engine's fallback when the ring is unusable).
  void run_jobs_sync(IoJobs& jobs, size_t slots) {
    (void)slots;  // one job at a time uses slot 0
    for (size_t j = 0; j < jobs.num_jobs() && !jobs.aborted(); ++j) finish_sync(jobs, j, 0, jobs.start(j, 0));
  }
  void finish_sync(IoJobs& jobs, size_t job, size_t slot, IoOp op) {
    do {
      op.result = do_sync_op(fd_, op);
    } while (jobs.next(job, slot, &op));
  }

  // Streams the jobs through `ring`: a job's next op is issued as soon as its last one completes
  // and a finished job's slot is given to the next job at once, with up to `slots` ops in
  // flight. Returns false when the ring failed (submission or reaping error): the jobs then
  // finish synchronously and the ring is dropped.
  bool stream(io_uring* ring, IoJobs& jobs, size_t slots) {
    const size_t n = jobs.num_jobs();
    std::vector<IoOp> op_of(slots);
    std::vector<size_t> job_of(slots);
    std::vector<size_t> free_slots;
    std::vector<size_t> queued;  // slots whose op is prepared but not yet submitted
    for (size_t s = slots; s-- > 0;) free_slots.push_back(s);
    std::vector<size_t> done;    // slots whose op completed in this reap
    size_t next_job = 0, in_flight = 0;
    auto prep = [&](size_t slot) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);  // never null: in flight + queued <= slots <= qd_
      const IoOp& op = op_of[slot];
      if (op.write) {
        io_uring_prep_write(sqe, op.fd >= 0 ? op.fd : fd_, op.buf, op.len, op.offset);
      } else {
        io_uring_prep_read(sqe, op.fd >= 0 ? op.fd : fd_, op.buf, op.len, op.offset);
      }
      io_uring_sqe_set_data64(sqe, slot);
      queued.push_back(slot);
    };
    // After a ring failure: the prepared ops and every job not yet started finish synchronously.
    auto fail_over = [&] {
      for (size_t slot : queued) finish_sync(jobs, job_of[slot], slot, op_of[slot]);
      queued.clear();
      const size_t slot = free_slots.empty() ? 0 : free_slots.back();  // every op has finished
      for (; next_job < n && !jobs.aborted(); ++next_job) finish_sync(jobs, next_job, slot, jobs.start(next_job, slot));
      return false;
    };
    for (;;) {
      while (!free_slots.empty() && next_job < n && !jobs.aborted()) {
        const size_t slot = free_slots.back();
        free_slots.pop_back();
        job_of[slot] = next_job;
        op_of[slot] = jobs.start(next_job, slot);
        ++next_job;
        prep(slot);
      }
      if (!queued.empty()) {
        int rc;
        do {
          rc = io_uring_submit(ring);
        } while (rc == -EINTR);
        if (rc < 0) {
          // Ops in flight still complete into their buffers: reap them before failing over.
          drain(ring, &in_flight, jobs, job_of, op_of);
          return fail_over();
        }
        in_flight += queued.size();
        queued.clear();
      }
      if (in_flight == 0) return true;
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        // Cannot reap: the ops in flight are lost to this ring (their buffers may stay busy), so
        // their jobs fail with EIO rather than retry into those buffers.
        std::vector<bool> idle(slots, false);
        for (size_t slot : free_slots) idle[slot] = true;
        for (size_t slot = 0; slot < slots; ++slot) {
          if (idle[slot]) continue;
          op_of[slot].result = -EIO;
          while (jobs.next(job_of[slot], slot, &op_of[slot])) op_of[slot].result = -EIO;
        }
        return fail_over();
      }
      unsigned head;
      unsigned count = 0;
      done.clear();
      io_uring_for_each_cqe(ring, head, cqe) {
        const size_t slot = io_uring_cqe_get_data64(cqe);
        op_of[slot].result = cqe->res;
        done.push_back(slot);
        ++count;
      }
      io_uring_cq_advance(ring, count);
      in_flight -= count;
      for (size_t slot : done) {
        if (jobs.next(job_of[slot], slot, &op_of[slot])) {
          prep(slot);
        } else {
          free_slots.push_back(slot);
        }
      }
    }
  }
  // Waits for every op in flight (their results go to their jobs, whose follow-ups run
  // synchronously).
  void drain(io_uring* ring, size_t* in_flight, IoJobs& jobs, const std::vector<size_t>& job_of, std::vector<IoOp>& op_of) {
    while (*in_flight > 0) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) return;
      const size_t slot = io_uring_cqe_get_data64(cqe);
      op_of[slot].result = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      --*in_flight;
      if (jobs.next(job_of[slot], slot, &op_of[slot])) finish_sync(jobs, job_of[slot], slot, op_of[slot]);
    }
  }

  int fd_;
  int qd_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Ring>> free_;
};

// ---- thread pool ----------------------------------------------------------------------------
class ThreadPoolFileIo final : public RowFileIo {
 public:
  ThreadPoolFileIo(int fd, int num_threads) : fd_(fd) {
    for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadPoolFileIo() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  std::string_view engine_name() const override { return "threads"; }

  void submit_and_wait(std::span<IoOp> ops) override {
    if (ops.empty()) return;
    Batch batch;
    batch.remaining = ops.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (IoOp& op : ops) queue_.push_back({&op, &batch});
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lock(mu_);
    batch.done_cv.wait(lock, [&] { return batch.remaining == 0; });
  }

 private:
  struct Batch {
    size_t remaining = 0;  // guarded by mu_
    std::condition_variable done_cv;
  };
  struct Item {
    IoOp* op;
    Batch* batch;
  };

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_
      const Item item = queue_.front();
      queue_.pop_front();
      lock.unlock();
      item.op->result = do_sync_op(fd_, *item.op);
      lock.lock();
      if (--item.batch->remaining == 0) item.batch->done_cv.notify_all();
    }
  }

  int fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

// ---- the default: waves over submit_and_wait ----------------------------------------------
void RowFileIo::run_jobs(IoJobs& jobs, size_t slots) {
  struct Active {
    size_t job, slot;
  };
  std::vector<size_t> free_slots;
  for (size_t s = slots; s-- > 0;) free_slots.push_back(s);
  std::vector<Active> active;
  std::vector<IoOp> ops;
  size_t next_job = 0;
  const size_t n = jobs.num_jobs();
  for (;;) {
    while (!free_slots.empty() && next_job < n && !jobs.aborted()) {
      const size_t slot = free_slots.back();
      free_slots.pop_back();
      active.push_back({next_job, slot});
      ops.push_back(jobs.start(next_job, slot));
      ++next_job;
    }
    if (active.empty()) return;
    submit_and_wait(ops);
    size_t k = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      if (jobs.next(active[i].job, active[i].slot, &ops[i])) {
        active[k] = active[i];
        ops[k] = ops[i];
        ++k;
      } else {
        free_slots.push_back(active[i].slot);
      }
    }
    active.resize(k);
    ops.resize(k);
  }
}

Result<std::unique_ptr<RowFileIo>> make_uring_file_io(int fd, int queue_depth) {
  LEANEMB_ASSIGN_OR_RETURN(auto ring, UringFileIo::new_ring(queue_depth));
  return std::unique_ptr<RowFileIo>(new UringFileIo(fd, queue_depth, std::move(ring)));
}

std::unique_ptr<RowFileIo> make_thread_pool_file_io(int fd, int num_threads) {
  return std::make_unique<ThreadPoolFileIo>(fd, num_threads < 1 ? 1 : num_threads);
}

// ---- fault injection ------------------------------------------------------------------------
void FaultInjectionFileIo::arm(IoFault fault, uint64_t k, int err, bool always) {
  std::lock_guard<std::mutex> lock(mu_);
  fault_ = fault;
  target_ = (fault == IoFault::kReadError ? reads_ : writes_) + k;
  err_ = err;
  always_ = always;
}

void FaultInjectionFileIo::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  fault_ = IoFault::kNone;
}

uint64_t FaultInjectionFileIo::num_reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}
uint64_t FaultInjectionFileIo::num_writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_;
}
uint64_t FaultInjectionFileIo::num_injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

void FaultInjectionFileIo::submit_and_wait(std::span<IoOp> ops) {
  // Decide each op's fate under the lock, run the untouched (or shortened) ones through the
  // wrapped engine as one batch, then copy their results back.
  std::vector<IoOp> pass;
  std::vector<size_t> pass_index;
  pass.reserve(ops.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < ops.size(); ++i) {
      IoOp& op = ops[i];
      const uint64_t index = op.write ? writes_++ : reads_++;
      const bool kind_matches = op.write ? (fault_ == IoFault::kShortWrite || fault_ == IoFault::kWriteError)
                                         : fault_ == IoFault::kReadError;
      const bool hit = kind_matches && (index == target_ || (always_ && index > target_));
      if (!hit) {
        pass.push_back(op);
        pass_index.push_back(i);
        continue;
      }
      ++injected_;
      if (fault_ == IoFault::kShortWrite) {
        const uint32_t part = op.len / 2 / alignment_ * alignment_;
        if (part == 0) {
          op.result = 0;
        } else {
          IoOp shortened = op;
          shortened.len = part;
          pass.push_back(shortened);
          pass_index.push_back(i);
        }
      } else {
        op.result = -err_;
      }
    }
  }
  if (!pass.empty()) inner_->submit_and_wait(pass);
  for (size_t j = 0; j < pass.size(); ++j) ops[pass_index[j]].result = pass[j].result;
}

}  // namespace leanemb::tiered
