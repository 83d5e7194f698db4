// Small helpers shared by the row store backends (private to src/tiered): counters behind
// RowStoreStats, a stopwatch, range and option checks.
//
// Thread safety: StoreCounters is updated by concurrent read_rows / write_rows calls (relaxed
// atomics; a snapshot may mix counts from before and after a call in progress).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "leanemb/status.h"
#include "tiered/file_io.h"
#include "tiered/row_store.h"

namespace leanemb::tiered {

// OutOfRange naming the first bad row and its position ("read_rows: row 12 at position 3 ...").
Status check_rows_in_range(std::span<const int64_t> rows, int64_t num_rows, const char* what);
// OutOfRange unless 0 <= begin, 0 <= count and begin + count <= num_rows ("write_range: rows
// [b, e) outside [0, n)").
Status check_range_in_table(int64_t begin, int64_t count, int64_t num_rows, const char* what);
// InvalidArgument for bad RowStoreOptions (sizes, path, queue depth).
Status check_row_store_options(const RowStoreOptions& options);

// The file stores' driver of a batch of transfers: submits `ops` through `io`, then for each op
// (its `result` set) calls settle(i, &op, &again), which checks it and, for a short transfer,
// advances it past what moved and sets `again`; the ops to do again are resubmitted until none is
// left. settle's error stops the loop and is returned.
Status run_ops_until_done(RowFileIo& io, std::vector<IoOp>& ops, const std::function<Status(size_t, IoOp*, bool*)>& settle);

class StopWatch {
 public:
  StopWatch() : t0_(std::chrono::steady_clock::now()) {}
  uint64_t ns() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

class StoreCounters {
 public:
  void add_read(uint64_t rows, uint64_t bytes, uint64_t ops, uint64_t ns) {
    rows_read_.fetch_add(rows, std::memory_order_relaxed);
    bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
    read_ops_.fetch_add(ops, std::memory_order_relaxed);
    read_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  void add_write(uint64_t rows, uint64_t bytes, uint64_t ops, uint64_t ns) {
    rows_written_.fetch_add(rows, std::memory_order_relaxed);
    bytes_written_.fetch_add(bytes, std::memory_order_relaxed);
    write_ops_.fetch_add(ops, std::memory_order_relaxed);
    write_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  // The counting fields of RowStoreStats (the caller fills the sizes).
  RowStoreStats snapshot() const {
    RowStoreStats s;
    s.rows_read = rows_read_.load(std::memory_order_relaxed);
    s.rows_written = rows_written_.load(std::memory_order_relaxed);
    s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
    s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
    s.read_ops = read_ops_.load(std::memory_order_relaxed);
    s.write_ops = write_ops_.load(std::memory_order_relaxed);
    s.read_seconds = static_cast<double>(read_ns_.load(std::memory_order_relaxed)) * 1e-9;
    s.write_seconds = static_cast<double>(write_ns_.load(std::memory_order_relaxed)) * 1e-9;
    return s;
  }

 private:
  std::atomic<uint64_t> rows_read_{0}, rows_written_{0}, bytes_read_{0}, bytes_written_{0};
  std::atomic<uint64_t> read_ops_{0}, write_ops_{0}, read_ns_{0}, write_ns_{0};
};

}  // namespace leanemb::tiered
