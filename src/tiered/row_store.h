// RowStore: where a tiered table's fat rows live when they are not in the device-tier cache.
//
//   host  rows in RAM (one buffer from the host tier's allocator, category weights);
//   file  one file of fixed-size fat rows read and written with O_DIRECT so the page cache does
//         not grow RAM, many requests in flight at once through io_uring (or a small thread
//         pool where io_uring is unavailable), in one of two layouts (FileStoreLayout):
//         in_place  row r at byte r * row_bytes (packed): an access covers the aligned blocks
//                   that hold the row (a write reads, modifies and writes them back);
//         log       written rows are appended in large sequential writes; an index in RAM maps
//                   each row to its last record; segments of stale records are compacted and
//                   reused (src/tiered/log_store.cc).
//
// Rows are created lazily: a store starts with no row present; read_rows() reports, per row,
// whether it was ever written, and the caller (the row cache) initializes absent rows with the
// table's initializer, so a 10^7-row store is created instantly and its file stays sparse.
//
// The interface is batched and synchronous: one call moves many rows, and the caller overlaps it
// with compute by calling it from its own prefetch thread.
//
// Thread safety: read_rows and write_rows may be called from two threads at once as long as
// they do not touch the same row (the row cache guarantees this: a row being written back is
// never fetched in the same window). stats() may be called at any time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/linked_rows.h"
#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "leanemb/table_options.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {

// StoreKind (host | file), store_kind_name and parse_store_kind: leanemb/table_options.h.

// How the file store moves bytes (added to the original interface: benchmarks and tests pick one).
//   kAuto     io_uring, or the thread pool where io_uring_queue_init fails (seccomp, old kernel)
//   kUring    io_uring only (make_row_store fails with Unimplemented where it is unavailable)
//   kThreads  a small pool of threads calling pread / pwrite
enum class IoEngineKind : uint8_t { kAuto, kUring, kThreads };
std::string_view io_engine_kind_name(IoEngineKind k);          // "auto" | "io_uring" | "threads"
Result<IoEngineKind> parse_io_engine_kind(std::string_view s);  // errors: InvalidArgument

// kBulkTransferBytes, kBulkStagingBytes: tiered/sizes.h (file_store_bulk_bytes).

struct RowStoreOptions {
  StoreKind kind = StoreKind::kHost;
  int64_t num_rows = 0;
  size_t row_bytes = 0;        // one fat row (RowLayout::stride_bytes)
  std::string path;            // file: the table file (created or truncated)
  bool direct_io = true;       // file: O_DIRECT (falls back to buffered I/O, with a warning,
                               // where the file system refuses O_DIRECT, e.g. tmpfs)
  int queue_depth = 64;        // file: reads / writes in flight at once
  IoEngineKind io_engine = IoEngineKind::kAuto;  // file: see IoEngineKind (added)
  FileStoreLayout layout = FileStoreLayout::kInPlace;  // file: in place or a log (added)
};

struct RowStoreStats {
  uint64_t rows_read = 0, rows_written = 0;
  uint64_t bytes_read = 0, bytes_written = 0;  // bytes moved to / from the medium
  uint64_t read_ops = 0, write_ops = 0;        // I/O requests issued (file) or row copies (host)
  double read_seconds = 0, write_seconds = 0;  // wall time inside read_rows / write_rows
  size_t host_bytes = 0;       // RAM the store holds (rows for host; presence bitmap, buffers)
  size_t io_buffer_bytes = 0;  // of host_bytes: aligned staging buffers for direct I/O
  size_t disk_bytes = 0;       // file: the file's logical size (log: the segment files' bytes)
  // Added to the original interface:
  std::string_view io_engine = "memcpy";  // "memcpy" (host), "io_uring" or "threads" (file)
  bool direct_io = false;      // file: O_DIRECT is active (false after the buffered fallback)
  size_t block_bytes = 0;      // file: the alignment unit of an access (logical block size)
  // The log layout (zero otherwise): segments in the file, compaction passes, records they moved
  // (their bytes also counted in bytes_written, their writes in write_ops) and bytes they read
  // (also in bytes_read; not in read_ops, which counts read_rows' requests).
  std::string_view layout = "";  // "in_place" | "log" (file)
  uint64_t log_segments = 0, gc_passes = 0, gc_rows_moved = 0, gc_bytes_read = 0;  // log_segments: files
  uint64_t log_live_rows = 0;    // rows with a record (present rows)
};

// Where the rows of a read_rows / write_rows call are in the caller's memory: row i of the call
// at base + (slots ? slots[i] : i) * stride. A plain pointer converts to a packed buffer
// (slots null, stride 0 = the store's row_bytes()); the row cache passes its slots and the slot
// of each row, so rows move between the store and their slots with no staging copy.
template <typename Byte>
struct RowsAt {
  Byte* base = nullptr;
  const int32_t* slots = nullptr;
  size_t stride = 0;
  RowsAt(Byte* packed) : base(packed) {}  // NOLINT: implicit on purpose (a packed buffer)
  RowsAt(Byte* b, const int32_t* s, size_t st) : base(b), slots(s), stride(st) {}
  // Row i's bytes, for rows of row_bytes bytes (the stride when none is given).
  Byte* row(size_t i, size_t row_bytes) const {
    return base + (slots ? static_cast<size_t>(slots[i]) : i) * (stride ? stride : row_bytes);
  }
};

// Linked rows (LinkedRows, RowPlace, RowPlaceSink, RowPlaceSource): leanemb/linked_rows.h.

class RowStore {
 public:
  virtual ~RowStore() = default;
  virtual StoreKind kind() const = 0;
  virtual int64_t num_rows() const = 0;
  virtual size_t row_bytes() const = 0;

  // For i < rows.size(): copies row rows[i] into dst.row(i) and sets present[i] to 1 if the row
  // was ever written, else leaves those bytes unspecified and sets present[i] to 0. Rows need
  // not be sorted or distinct. Errors: OutOfRange (bad row), IoError / DataLoss (short read); on
  // error the contents of dst's rows are unspecified.
  virtual Status read_rows(std::span<const int64_t> rows, RowsAt<uint8_t> dst, uint8_t* present) = 0;
  // For i < rows.size(): stores src.row(i) as row rows[i] (rows distinct). Calls of write_rows
  // are serialized against each other. On error (IoError, ResourceExhausted for ENOSPC, a short
  // write that cannot be completed) the call returns it and the store stays usable: rows outside
  // the call are unchanged; rows of the call may hold old, new or torn bytes, so the caller keeps
  // its copies (the row cache keeps them dirty and reports the error) and a later successful
  // write_rows of those rows repairs them.
  virtual Status write_rows(std::span<const int64_t> rows, RowsAt<const uint8_t> src) = 0;
  // Bulk forms for contiguous rows (restoring and saving whole tables). write_range stores rows
  // [begin, begin + count) from src [count, row_bytes()] exactly as write_rows of those rows would
  // (same errors, same guarantees after an error); read_range reads them into dst [count,
  // row_bytes()] with present[count] exactly as read_rows would. The file store moves them in
  // large aligned transfers (up to kBulkTransferBytes each, several in flight; a write reads
  // only the first and last block first, when the range starts or ends inside them; a read
  // skips stretches with no present row). The default implementation calls read_rows /
  // write_rows in batches. Errors: OutOfRange when [begin, begin + count) is outside the table
  // (nothing done); the store's errors otherwise.
  virtual Status write_range(int64_t begin, int64_t count, const uint8_t* src);
  virtual Status read_range(int64_t begin, int64_t count, uint8_t* dst, uint8_t* present);
  // Makes every written row durable (fsync for file; no-op for host).
  virtual Status flush() = 0;
  // Links instead of copies (the log layout; the other stores: Unimplemented). link_rows makes
  // every written row durable, seals the file being appended (the next write starts another),
  // hard-links into the existing directory `dir` each file that holds a row's newest copy, and
  // gives `sink` every written row's place, in ascending row order. The linked files never
  // change again, whatever the store does next, and stay on disk as long as their links do.
  // Errors: IoError, ResourceExhausted, and `sink`'s.
  // link_rows is implemented, and its links can go into directory `into_dir` (empty: anywhere
  // the store's files are: one file system).
  virtual bool links_rows(const std::string& /*into_dir*/ = {}) const { return false; }
  virtual Result<LinkedRows> link_rows(const std::string& dir, const RowPlaceSink& sink);
  // The reverse, into a store with no row written yet: the files of `linked` (in `dir`) become
  // the store's, hard-linked (no byte copied), and each place from `source` a row's copy.
  // Errors: FailedPrecondition (rows were written, or `linked` has another layout: copy the rows
  // instead), DataLoss (a file of another size, a place outside its file or given twice),
  // NotFound / IoError (a file). After an error the store's rows are unspecified: drop it.
  virtual Status adopt_links(const std::string& dir, const LinkedRows& linked, const RowPlaceSource& source);
  virtual RowStoreStats stats() const = 0;
};

// `host_alloc` holds the host store's rows (category weights) and the file store's staging
// buffers (category io_buffers); it must outlive the store. Null: default_host_allocator().
Result<std::unique_ptr<RowStore>> make_row_store(const RowStoreOptions& options, Allocator* host_alloc);

// The block size a file store in directory `dir` would use: the direct-I/O alignment of a probe
// file created there (and removed), 4096 when direct I/O is refused or the probe fails. The
// planner sizes a file store's staging with it (tiered/sizes.h).
uint32_t file_store_block_bytes(const std::string& dir);

}  // namespace leanemb::tiered
