// FileRowStore: fat rows packed in one file (row r at byte r * row_bytes), moved with O_DIRECT
// through a RowFileIo engine (io_uring or a pread / pwrite pool).
//
// Invariants and the access plan (docs/tiered.md, "Row stores"):
// - The file is ftruncate'd (sparse) to num_rows * row_bytes rounded up to block_ bytes, so
//   every aligned access lies inside the file and a short read means the file was damaged.
// - A call sorts its distinct rows and cuts the blocks they cover into pieces: runs of whole
//   blocks, merged across rows that share or abut a block, at most slot_bytes_ long. A row may
//   span pieces; each piece copies the part of each row that lies inside it, so pieces are
//   independent and a piece is one I/O (plus a retry of its remainder if short).
// - Each piece is one job of RowFileIo::run_jobs on one staging slot (num_slots_ of them in
//   flight; a staging buffer from the host allocator, category io_buffers, 4096-aligned). Buffers
//   are made at creation and reused: one for writes (write_rows holds write_mu_), a pool for reads.
// - A write first reads the span of a piece's blocks that hold a written row the call does not
//   write (rmw_span), patches its rows in and writes the piece back. Writes are serialized
//   (write_mu_), so no presence bit changes while a write decides what to read, and two
//   read-modify-writes of one block never interleave; a concurrent reader of another row of
//   that block sees its own row's bytes unchanged in the old, new or a torn block.
// - Presence bits are set after a call's writes all succeeded; an absent row is never read.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "tiered/file_store.h"
#include "tiered/presence.h"
#include "tiered/sizes.h"
#include "tiered/store_util.h"

namespace leanemb::tiered {

namespace {

constexpr uint32_t kDefaultBlockBytes = 4096;
constexpr size_t kBufferAlign = 4096;
constexpr int kMaxThreads = 16;                         // thread-pool engine
constexpr int kMaxNoProgressTries = 8;                  // zero-byte transfers before giving up

uint64_t align_down(uint64_t x, uint64_t a) { return x / a * a; }
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string errno_text(int err) { return std::generic_category().message(err); }

// The access unit of an open file: its direct-I/O offset alignment (statx STATX_DIOALIGN, else
// 4096), raised to the file system's block size (st_blksize) when that is larger, up to 4096.
// A direct write smaller than the file system's block into a block not yet written (a hole of a
// sparse table file) makes ext4 drain every request in flight on the file and run the write
// synchronously (it may have to zero the rest of the block): 512-byte writes into a sparse file
// ran at 5.8k/s against 16.1k/s for 4 KiB ones on the test machine (fio, QD 64), and a table's
// write-backs land mostly in such holes.
// The direct-I/O offset alignment alone (statx STATX_DIOALIGN, else 4096): what a read needs.
uint32_t query_dio_align(int fd) {
  uint32_t block = kDefaultBlockBytes;
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) != 0 &&
      sx.stx_dio_offset_align > 0 && sx.stx_dio_offset_align <= kBufferAlign &&
      (sx.stx_dio_offset_align & (sx.stx_dio_offset_align - 1)) == 0) {
    block = sx.stx_dio_offset_align;
  }
#endif
  return block;
}

uint32_t query_block_bytes(int fd) {
  uint32_t block = query_dio_align(fd);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_blksize > 0 && static_cast<uint64_t>(st.st_blksize) <= kBufferAlign &&
      (st.st_blksize & (st.st_blksize - 1)) == 0 && static_cast<uint32_t>(st.st_blksize) > block) {
    block = static_cast<uint32_t>(st.st_blksize);
  }
  return block;
}

struct RowRef {
  int64_t row;
  size_t pos;  // index of the row in the caller's arrays
};

struct Piece {
  uint64_t offset = 0;  // bytes, block-aligned
  uint32_t len = 0;     // bytes, block multiple
  size_t first = 0;     // rows [first, last] of the sorted distinct rows intersect the piece
  size_t last = 0;
};

class FileRowStore final : public RowStore {
 public:
  FileRowStore(const RowStoreOptions& o, Allocator* alloc, int fd, bool direct, uint32_t block)
      : path_(o.path), num_rows_(o.num_rows), row_bytes_(o.row_bytes), alloc_(alloc), fd_(fd), direct_(direct),
        block_(block) {
    slot_bytes_ = file_store_slot_bytes(row_bytes_, block_);  // the most blocks one row can touch
    num_slots_ = file_store_num_slots(row_bytes_, block_, o.queue_depth);  // the planner's formula (tiered/sizes.h)
    file_bytes_ = align_up(static_cast<uint64_t>(num_rows_) * row_bytes_, block_);
  }
  ~FileRowStore() override {
    io_.reset();  // workers stop before the descriptor goes
    ::close(fd_);
  }

  Status init(const RowStoreOptions& o, const FileStoreHooks& hooks) {
    if (::ftruncate(fd_, static_cast<off_t>(file_bytes_)) != 0) return os_error("ftruncate of", errno);
    LEANEMB_ASSIGN_OR_RETURN(presence_, PresenceBitmap::create(num_rows_, alloc_));
    LEANEMB_ASSIGN_OR_RETURN(write_staging_, new_staging());
    LEANEMB_ASSIGN_OR_RETURN(Allocation first_read, new_staging());
    read_staging_.push_back(std::move(first_read));
    RowFile file;
    file.path = path_;
    file.fd = fd_;
    file.block = block_;
    LEANEMB_ASSIGN_OR_RETURN(io_, make_row_file_io(file, num_slots_, o.io_engine, hooks));
    return Status();
  }

  StoreKind kind() const override { return StoreKind::kFile; }
  int64_t num_rows() const override { return num_rows_; }
  size_t row_bytes() const override { return row_bytes_; }

  Status read_rows(std::span<const int64_t> rows, RowsAt<uint8_t> dst, uint8_t* present) override {
    LEANEMB_RETURN_IF_ERROR(check_rows_in_range(rows, num_rows_, "read_rows"));
    const StopWatch watch;
    std::vector<RowRef> refs;
    refs.reserve(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      present[i] = presence_.test(rows[i]) ? 1 : 0;
      if (present[i]) refs.push_back({rows[i], i});
    }
    std::sort(refs.begin(), refs.end(),
              [](const RowRef& a, const RowRef& b) { return a.row != b.row ? a.row < b.row : a.pos < b.pos; });
    // Distinct rows (first occurrence) and, for repeats, (position, position of the first).
    std::vector<RowRef> uniq;
    std::vector<std::pair<size_t, size_t>> repeats;
    for (const RowRef& r : refs) {
      if (!uniq.empty() && uniq.back().row == r.row) {
        repeats.emplace_back(r.pos, uniq.back().pos);
      } else {
        uniq.push_back(r);
      }
    }
    uint64_t ops = 0, bytes = 0;
    if (!uniq.empty()) {
      Allocation staging = acquire_read_staging();
      if (staging.empty()) return resource_exhausted("file row store '" + path_ + "': no read staging buffer");
      Status st = read_pieces(uniq, staging.as<uint8_t>(), dst, &ops, &bytes);
      release_read_staging(std::move(staging));
      LEANEMB_RETURN_IF_ERROR(st);
    }
    for (const auto& [pos, from] : repeats) std::memcpy(dst.row(pos, row_bytes_), dst.row(from, row_bytes_), row_bytes_);
    counters_.add_read(rows.size(), bytes, ops, watch.ns());
    return Status();
  }

  Status write_rows(std::span<const int64_t> rows, RowsAt<const uint8_t> src) override {
    LEANEMB_RETURN_IF_ERROR(check_rows_in_range(rows, num_rows_, "write_rows"));
    std::lock_guard<std::mutex> lock(write_mu_);
    const StopWatch watch;
    std::vector<RowRef> refs(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) refs[i] = {rows[i], i};
    std::sort(refs.begin(), refs.end(),
              [](const RowRef& a, const RowRef& b) { return a.row != b.row ? a.row < b.row : a.pos < b.pos; });
    // REQUIRES distinct rows; a repeated row keeps its last copy, as the host store does.
    std::vector<RowRef> uniq;
    for (const RowRef& r : refs) {
      if (!uniq.empty() && uniq.back().row == r.row) {
        uniq.back() = r;
      } else {
        uniq.push_back(r);
      }
    }
    for (const RowRef& r : uniq) LEANEMB_RETURN_IF_ERROR(presence_.prepare(r.row));
    const std::vector<Piece> pieces = make_pieces(uniq);
    WriteJobs jobs(this, pieces, uniq, src, write_staging_.as<uint8_t>());
    io_->run_jobs(jobs, num_slots_);
    LEANEMB_RETURN_IF_ERROR(jobs.status());
    const uint64_t ops = jobs.ops(), bytes = jobs.bytes();
    for (const RowRef& r : uniq) presence_.set(r.row);
    counters_.add_write(rows.size(), bytes, ops, watch.ns());
    return Status();
  }

  Status write_range(int64_t begin, int64_t count, const uint8_t* src) override {
    LEANEMB_RETURN_IF_ERROR(check_range_in_table(begin, count, num_rows_, "write_range"));
    if (count == 0) return Status();
    std::lock_guard<std::mutex> lock(write_mu_);
    const StopWatch watch;
    LEANEMB_RETURN_IF_ERROR(presence_.prepare_range(begin, count));
    const uint64_t s = static_cast<uint64_t>(begin) * row_bytes_, e = static_cast<uint64_t>(begin + count) * row_bytes_;
    const uint64_t a = align_down(s, block_), b = align_up(e, block_);
    LEANEMB_ASSIGN_OR_RETURN(Allocation buf, bulk_buffer(count));
    uint8_t* stage = buf.as<uint8_t>();
    uint64_t ops = 0;
    std::vector<IoOp> io;
    auto row_at = [&](uint64_t offset) { return std::min<int64_t>(begin + count - 1, std::max<int64_t>(begin, static_cast<int64_t>(offset / row_bytes_))); };
    for (uint64_t g0 = a; g0 < b; g0 += buf.size_bytes()) {
      const uint64_t g1 = std::min<uint64_t>(b, g0 + buf.size_bytes());
      // Read-modify-write of the first and last block only where the range starts or ends
      // inside them (the bytes of neighbouring rows there are kept).
      io.clear();
      if (g0 == a && s > a) io.push_back({false, a, stage, block_, 0});
      if (g1 == b && e < b && !(b - block_ == a && s > a)) io.push_back({false, b - block_, stage + (b - block_ - g0), block_, 0});
      LEANEMB_RETURN_IF_ERROR(run_ops(io, [&](size_t i) { return row_at(io[i].offset); }));
      ops += io.size();
      const uint64_t lo = std::max(s, g0), hi = std::min(e, g1);
      std::memcpy(stage + (lo - g0), src + (lo - s), hi - lo);
      io.clear();
      for (uint64_t o = g0; o < g1; o += kBulkTransferBytes)
        io.push_back({true, o, stage + (o - g0), static_cast<uint32_t>(std::min<uint64_t>(kBulkTransferBytes, g1 - o)), 0});
      LEANEMB_RETURN_IF_ERROR(run_ops(io, [&](size_t i) { return row_at(io[i].offset); }));
      ops += io.size();
    }
    presence_.set_range(begin, count);
    counters_.add_write(static_cast<uint64_t>(count), b - a, ops, watch.ns());
    return Status();
  }

  Status read_range(int64_t begin, int64_t count, uint8_t* dst, uint8_t* present) override {
    LEANEMB_RETURN_IF_ERROR(check_range_in_table(begin, count, num_rows_, "read_range"));
    const StopWatch watch;
    int64_t first = -1, last = -1;  // the first and last present row
    for (int64_t i = 0; i < count; ++i) {
      present[i] = presence_.test(begin + i) ? 1 : 0;
      if (present[i]) {
        if (first < 0) first = i;
        last = i;
      }
    }
    uint64_t ops = 0, bytes = 0;
    // The staging buffer even when no row is present: a call's memory depends on its count only
    // (the planner's checkpoint phase), so the first checkpoint of a run already reaches it.
    Allocation buf;
    if (count > 0) {
      LEANEMB_ASSIGN_OR_RETURN(buf, bulk_buffer(count));
    }
    if (first >= 0) {
      const uint64_t s = static_cast<uint64_t>(begin + first) * row_bytes_;
      const uint64_t e = static_cast<uint64_t>(begin + last + 1) * row_bytes_;
      const uint64_t a = align_down(s, block_), b = align_up(e, block_);
      uint8_t* stage = buf.as<uint8_t>();
      const uint64_t base = static_cast<uint64_t>(begin) * row_bytes_;
      std::vector<IoOp> io;
      for (uint64_t g0 = a; g0 < b; g0 += buf.size_bytes()) {
        const uint64_t g1 = std::min<uint64_t>(b, g0 + buf.size_bytes());
        const uint64_t lo = std::max(s, g0), hi = std::min(e, g1);
        // Skip a stretch holding no present row (a sparse table read for a save).
        bool any = false;
        for (int64_t r = static_cast<int64_t>(lo / row_bytes_); r <= static_cast<int64_t>((hi - 1) / row_bytes_) && !any; ++r)
          any = present[r - begin] != 0;
        if (!any) continue;
        io.clear();
        for (uint64_t o = g0; o < g1; o += kBulkTransferBytes)
          io.push_back({false, o, stage + (o - g0), static_cast<uint32_t>(std::min<uint64_t>(kBulkTransferBytes, g1 - o)), 0});
        LEANEMB_RETURN_IF_ERROR(run_ops(io, [&](size_t i) { return static_cast<int64_t>(io[i].offset / row_bytes_); }));
        ops += io.size();
        bytes += g1 - g0;
        std::memcpy(dst + (lo - base), stage + (lo - g0), hi - lo);  // absent rows: unspecified bytes
      }
    }
    counters_.add_read(static_cast<uint64_t>(count), bytes, ops, watch.ns());
    return Status();
  }

  Status flush() override {
    while (::fdatasync(fd_) != 0) {
      if (errno != EINTR) return os_error("fdatasync of", errno);
    }
    return Status();
  }

  RowStoreStats stats() const override {
    RowStoreStats s = counters_.snapshot();
    {
      std::lock_guard<std::mutex> lock(read_mu_);
      s.io_buffer_bytes = io_buffer_bytes_;
    }
    s.host_bytes = presence_.bytes() + s.io_buffer_bytes;
    s.disk_bytes = file_bytes_;
    s.io_engine = io_->engine_name();
    s.direct_io = direct_;
    s.block_bytes = block_;
    s.layout = "in_place";
    return s;
  }

 private:
  Status os_error(const char* what, int err) const {
    std::string msg = std::string(what) + " '" + path_ + "': " + errno_text(err);
    if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(msg));
    return io_error(std::move(msg));
  }

  Result<Allocation> new_staging() {
    LEANEMB_ASSIGN_OR_RETURN(Allocation a, alloc_->allocate(num_slots_ * slot_bytes_, Category::kIoBuffers, kBufferAlign));
    std::lock_guard<std::mutex> lock(read_mu_);
    io_buffer_bytes_ += a.size_bytes();
    return a;
  }
  // The staging buffer of one bulk call of `count` rows (file_store_bulk_bytes in sizes.h), from
  // the allocator (io_buffers) for the call only.
  Result<Allocation> bulk_buffer(int64_t count) const {
    return alloc_->allocate(file_store_bulk_bytes(count, row_bytes_, block_), Category::kIoBuffers, kBufferAlign);
  }
  // A read staging buffer from the pool (a new one when two reads run at once); empty when the
  // allocator refuses.
  Allocation acquire_read_staging() {
    {
      std::lock_guard<std::mutex> lock(read_mu_);
      if (!read_staging_.empty()) {
        Allocation a = std::move(read_staging_.back());
        read_staging_.pop_back();
        return a;
      }
    }
    auto a = new_staging();
    return a.ok() ? std::move(a).value() : Allocation();
  }
  void release_read_staging(Allocation a) {
    std::lock_guard<std::mutex> lock(read_mu_);
    read_staging_.push_back(std::move(a));
  }

  // Pieces over sorted distinct rows (see the invariant block).
  std::vector<Piece> make_pieces(const std::vector<RowRef>& uniq) const {
    std::vector<Piece> pieces;
    uint64_t p0 = 0, p1 = 0;  // the open piece [p0, p1), valid when `open`
    size_t first = 0;         // its first row
    bool open = false;
    auto close = [&](size_t last) { pieces.push_back({p0, static_cast<uint32_t>(p1 - p0), first, last}); };
    for (size_t j = 0; j < uniq.size(); ++j) {
      const uint64_t s = static_cast<uint64_t>(uniq[j].row) * row_bytes_;
      const uint64_t b0 = align_down(s, block_), b1 = align_up(s + row_bytes_, block_);
      if (open && b0 > p1) {
        close(j - 1);
        open = false;
      }
      if (!open) {
        p0 = b0;
        p1 = b0;
        first = j;
        open = true;
      }
      while (p1 < b1) {
        if (p1 - p0 == slot_bytes_) {  // full: row j continues in a new piece
          close(j);
          p0 = p1;
          first = j;
        }
        p1 = std::min<uint64_t>(b1, p0 + slot_bytes_);
      }
    }
    if (open) close(uniq.size() - 1);
    return pieces;
  }

  // Calls f(row ref, lo, hi, row_start) for the bytes [lo, hi) of each row inside piece p.
  template <typename F>
  void for_each_part(const Piece& p, const std::vector<RowRef>& uniq, F&& f) const {
    for (size_t j = p.first; j <= p.last; ++j) {
      const uint64_t rs = static_cast<uint64_t>(uniq[j].row) * row_bytes_;
      const uint64_t lo = std::max<uint64_t>(rs, p.offset);
      const uint64_t hi = std::min<uint64_t>(rs + row_bytes_, p.offset + p.len);
      if (lo < hi) f(uniq[j], lo, hi, rs);
    }
  }
  // The bytes of piece p a write must read before patching its rows in: the span from the first
  // to the last block holding a byte of a present row that the call does not write (the other
  // bytes of the piece belong to the call's rows, to rows never written, which are never read,
  // or to no row). {offset, 0}: nothing to read. Writers are serialized (write_mu_), so no row's
  // presence changes meanwhile.
  std::pair<uint64_t, uint32_t> rmw_span(const Piece& p, const std::vector<RowRef>& uniq) const {
    uint64_t lo = 0, hi = 0;
    bool any = false;
    size_t j = p.first;
    const uint64_t end = p.offset + p.len;
    for (uint64_t b0 = p.offset; b0 < end; b0 += block_) {
      const int64_t r_lo = static_cast<int64_t>(b0 / row_bytes_);
      const int64_t r_hi = std::min<int64_t>(num_rows_ - 1, static_cast<int64_t>((b0 + block_ - 1) / row_bytes_));
      bool need = false;
      for (int64_t r = r_lo; r <= r_hi && !need; ++r) {
        while (j <= p.last && uniq[j].row < r) ++j;
        if (j <= p.last && uniq[j].row == r) continue;  // written by this call
        need = presence_.test(r);
      }
      if (!need) continue;
      if (!any) lo = b0;
      hi = b0 + block_;
      any = true;
    }
    return {any ? lo : p.offset, static_cast<uint32_t>(any ? hi - lo : 0)};
  }

  // The result of `op` (one transfer of a job): kDone when it moved all its bytes; kAgain with
  // `op` advanced past the whole blocks it moved (direct I/O needs aligned offsets; the staging
  // buffer still holds the bytes) when it was short; kFailed with *error set. Errors name the
  // file, `row` (a row of the job's piece) and the offset.
  enum class OpOutcome { kDone, kAgain, kFailed };
  OpOutcome settle(IoOp* op, int64_t row, int* no_progress, Status* error) const {
    const int64_t res = op->result;
    if (res == static_cast<int64_t>(op->len)) return OpOutcome::kDone;
    if (res < 0 && res != -EINTR && res != -EAGAIN) {
      *error = op_error(*op, row, static_cast<int>(-res));
      return OpOutcome::kFailed;
    }
    if (res == 0 && !op->write) {
      *error = data_loss("short read of '" + path_ + "' at offset " + std::to_string(op->offset) + " (row " +
                         std::to_string(row) + "): the file ends early");
      return OpOutcome::kFailed;
    }
    const uint64_t advance = res > 0 ? align_down(static_cast<uint64_t>(res), block_) : 0;
    if (advance == 0 && ++*no_progress >= kMaxNoProgressTries) {
      *error = io_error(std::string(op->write ? "short write to '" : "short read of '") + path_ + "' at offset " +
                        std::to_string(op->offset) + " (row " + std::to_string(row) + "): no progress after " +
                        std::to_string(kMaxNoProgressTries) + " tries");
      return OpOutcome::kFailed;
    }
    op->offset += advance;
    op->buf += advance;
    op->len -= static_cast<uint32_t>(advance);
    op->result = 0;
    return OpOutcome::kAgain;
  }

  // What ReadJobs and WriteJobs share: the pieces, the call's rows, the staging slots, the first
  // error (which stops new jobs) and each job's count of transfers that made no progress.
  struct PieceJobs : IoJobs {
    PieceJobs(const FileRowStore* st, const std::vector<Piece>& ps, const std::vector<RowRef>& u, uint8_t* sl)
        : store(st), pieces(ps), uniq(u), slots(sl), no_progress(ps.size(), 0) {}
    size_t num_jobs() const override { return pieces.size(); }
    bool aborted() const override { return !error.ok(); }
    Status status() const { return error; }
    uint8_t* slot_of(size_t slot) const { return slots + slot * store->slot_bytes_; }
    int64_t row_of(size_t job) const { return uniq[pieces[job].first].row; }
    // Settles `op`: true when the job issues `op` again (the rest of a short transfer). Once the
    // call has failed, no job issues anything more (the requests in flight finish), as a call
    // that stops at its first error: a write whose read-modify-write read completed is dropped.
    bool retry(size_t job, IoOp* op, bool* done) {
      Status e;
      const OpOutcome o = store->settle(op, row_of(job), &no_progress[job], &e);
      *done = o == OpOutcome::kDone && error.ok();
      if (o == OpOutcome::kFailed && error.ok()) error = std::move(e);
      return o == OpOutcome::kAgain && error.ok();
    }
    const FileRowStore* store;
    const std::vector<Piece>& pieces;
    const std::vector<RowRef>& uniq;
    uint8_t* slots;
    std::vector<int> no_progress;
    Status error;
  };

  // One read of each piece into its slot, then the piece's parts of the call's rows to `dst`.
  struct ReadJobs final : PieceJobs {
    ReadJobs(const FileRowStore* st, const std::vector<Piece>& ps, const std::vector<RowRef>& u, RowsAt<uint8_t> d,
             uint8_t* sl)
        : PieceJobs(st, ps, u, sl), dst(d) {}
    IoOp start(size_t job, size_t slot) override {
      return IoOp{false, pieces[job].offset, slot_of(slot), pieces[job].len, 0};
    }
    bool next(size_t job, size_t slot, IoOp* op) override {
      bool done = false;
      if (retry(job, op, &done)) return true;
      if (!done) return false;
      const Piece& p = pieces[job];
      const uint8_t* base = slot_of(slot);
      const size_t rb = store->row_bytes_;
      store->for_each_part(p, uniq, [&](const RowRef& r, uint64_t lo, uint64_t hi, uint64_t row_start) {
        std::memcpy(dst.row(r.pos, rb) + (lo - row_start), base + (lo - p.offset), hi - lo);
      });
      return false;
    }
    RowsAt<uint8_t> dst;
  };

  // Each piece: the read of its rmw_span (when not empty), the call's rows patched in, the write
  // of the whole piece.
  struct WriteJobs final : PieceJobs {
    WriteJobs(const FileRowStore* st, const std::vector<Piece>& ps, const std::vector<RowRef>& u,
              RowsAt<const uint8_t> s, uint8_t* sl)
        : PieceJobs(st, ps, u, sl), src(s), writing(ps.size(), 0) {}
    IoOp start(size_t job, size_t slot) override {
      const Piece& p = pieces[job];
      const auto [off, len] = store->rmw_span(p, uniq);
      if (len == 0) return write_op(job, slot);
      ++reads;
      return IoOp{false, off, slot_of(slot) + (off - p.offset), len, 0};
    }
    bool next(size_t job, size_t slot, IoOp* op) override {
      bool done = false;
      if (retry(job, op, &done)) return true;
      if (!done || writing[job]) return false;
      *op = write_op(job, slot);
      return true;
    }
    IoOp write_op(size_t job, size_t slot) {
      const Piece& p = pieces[job];
      uint8_t* base = slot_of(slot);
      const size_t rb = store->row_bytes_;
      store->for_each_part(p, uniq, [&](const RowRef& r, uint64_t lo, uint64_t hi, uint64_t row_start) {
        std::memcpy(base + (lo - p.offset), src.row(r.pos, rb) + (lo - row_start), hi - lo);
      });
      writing[job] = 1;
      return IoOp{true, p.offset, base, p.len, 0};
    }
    uint64_t ops() const { return reads + pieces.size(); }  // write_ops also counts the RMW reads
    uint64_t bytes() const {
      uint64_t b = 0;
      for (const Piece& p : pieces) b += p.len;
      return b;
    }
    RowsAt<const uint8_t> src;
    std::vector<uint8_t> writing;  // the job's write is issued
    uint64_t reads = 0;
  };

  Status read_pieces(const std::vector<RowRef>& uniq, uint8_t* slots, RowsAt<uint8_t> dst, uint64_t* ops, uint64_t* bytes) {
    const std::vector<Piece> pieces = make_pieces(uniq);
    ReadJobs jobs(this, pieces, uniq, dst, slots);
    io_->run_jobs(jobs, num_slots_);
    *ops += pieces.size();
    for (const Piece& p : pieces) *bytes += p.len;
    return jobs.status();
  }

  // Runs ops until each has moved all its bytes: a short transfer is retried from the last
  // whole block it completed (direct I/O needs aligned offsets; the staging buffer still holds
  // the bytes). Errors name the file, the first row of the piece and the offset.
  // `row_of(i)`: a row of op i, for messages.
  template <typename RowOf>
  Status run_ops(std::vector<IoOp>& ops, RowOf row_of) {
    std::vector<int> no_progress(ops.size(), 0);
    return run_ops_until_done(*io_, ops, [&](size_t i, IoOp* op, bool* again) {
      Status error;
      *again = settle(op, row_of(i), &no_progress[i], &error) == OpOutcome::kAgain;
      return error;
    });
  }

  Status op_error(const IoOp& op, int64_t row, int err) const {
    std::string msg = std::string(op.write ? "write of row " : "read of row ") + std::to_string(row) +
                      (op.write ? " to '" : " from '") + path_ + "' at offset " + std::to_string(op.offset) + ": " +
                      errno_text(err);
    if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(msg));
    return io_error(std::move(msg));
  }

  std::string path_;
  int64_t num_rows_;
  size_t row_bytes_;
  Allocator* alloc_;
  int fd_;
  bool direct_;
  uint32_t block_;
  size_t slot_bytes_ = 0;
  size_t num_slots_ = 1;
  uint64_t file_bytes_ = 0;
  PresenceBitmap presence_;
  std::unique_ptr<RowFileIo> io_;
  std::mutex write_mu_;
  Allocation write_staging_;  // guarded by write_mu_
  mutable std::mutex read_mu_;
  std::vector<Allocation> read_staging_;  // guarded by read_mu_
  size_t io_buffer_bytes_ = 0;             // guarded by read_mu_
  StoreCounters counters_;
};

}  // namespace

Result<std::unique_ptr<RowFileIo>> make_row_file_io(const RowFile& file, size_t slots, IoEngineKind engine,
                                                     const FileStoreHooks& hooks) {
  std::unique_ptr<RowFileIo> io;
  if (engine != IoEngineKind::kThreads) {
    auto uring = make_uring_file_io(file.fd, static_cast<int>(slots));
    if (uring.ok()) {
      io = std::move(uring).value();
    } else if (engine == IoEngineKind::kUring) {
      return unimplemented("file row store '" + file.path + "': " + uring.status().message());
    }
  }
  if (io == nullptr) io = make_thread_pool_file_io(file.fd, std::min<int>(static_cast<int>(slots), kMaxThreads));
  if (hooks.wrap_io) io = hooks.wrap_io(std::move(io), file.block);
  return io;
}

uint32_t file_store_block_bytes(const std::string& dir) {
  std::string path = dir.empty() ? std::string(".") : dir;
  path += "/.leanemb-block-probe-XXXXXX";
  const int tmp = ::mkstemp(path.data());
  if (tmp < 0) return kDefaultBlockBytes;
  ::close(tmp);
  const int fd = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  const uint32_t block = fd >= 0 ? query_block_bytes(fd) : kDefaultBlockBytes;
  if (fd >= 0) ::close(fd);
  ::unlink(path.c_str());
  return block;
}

namespace {

// One store per table file. Two stores sharing a file (two runs, or two tables of one process
// given the same path) would overwrite each other's rows silently. Two locks:
// - an open-file-description lock over [0, kPidMarker): it belongs to this open() of the file,
//   so it refuses a second store in the same process as well as in another one, and it goes
//   only when the store closes its descriptor;
// - a classic record lock on the one byte at kPidMarker: its holder's pid can be read with
//   F_GETLK (an OFD lock's holder has none), so the refusal can name the other process. (A
//   classic lock is dropped when any descriptor of the file in its process closes, so it only
//   names; the OFD lock excludes.)
// On failure fd is closed.
constexpr off_t kPidMarker = std::numeric_limits<off_t>::max() - 1;

Status lock_row_file(int fd, const std::string& path) {
  struct flock range {};
  range.l_type = F_WRLCK;
  range.l_whence = SEEK_SET;
  range.l_len = kPidMarker;
  if (::fcntl(fd, F_OFD_SETLK, &range) != 0) {
    const int err = errno;
    if (err != EACCES && err != EAGAIN) {
      ::close(fd);
      return io_error("lock of row file '" + path + "': " + errno_text(err));
    }
    struct flock who {};
    who.l_type = F_WRLCK;
    who.l_whence = SEEK_SET;
    who.l_start = kPidMarker;
    who.l_len = 1;
    const bool other = ::fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK;
    ::close(fd);
    if (!other) {  // our own classic lock never conflicts with us: the holder is this process
      return failed_precondition("row file '" + path + "' is already open in this process (pid " +
                                 std::to_string(::getpid()) +
                                 "): two tables or stores cannot share a file store (give each its own path)");
    }
    return failed_precondition("row file '" + path + "' is in use by another process (pid " +
                               std::to_string(who.l_pid) +
                               "): two runs cannot share a file store (give each its own embedding.store_dir)");
  }
  struct flock marker {};
  marker.l_type = F_WRLCK;
  marker.l_whence = SEEK_SET;
  marker.l_start = kPidMarker;
  marker.l_len = 1;
  // Best effort: without it a refusal names no pid (the OFD lock above still excludes).
  (void)::fcntl(fd, F_SETLK, &marker);
  return Status();
}

}  // namespace

Result<std::unique_ptr<RowStore>> make_file_row_store(const RowStoreOptions& options, Allocator* host_alloc,
                                                      const FileStoreHooks& hooks) {
  if (host_alloc == nullptr) host_alloc = default_host_allocator();
  LEANEMB_RETURN_IF_ERROR(check_row_store_options(options));
  if (options.kind != StoreKind::kFile) return invalid_argument("make_file_row_store: kind is not file");
  // No O_TRUNC: a file left by an earlier run is reused as it is (its bytes are never read: a
  // store starts with no row present) and only resized by init(). Truncating it would free every
  // block it holds, and on a file system mounted with `discard` that is one synchronous discard
  // per extent: minutes for the millions of scattered extents of a large table's file.
  const int flags = O_RDWR | O_CREAT | O_CLOEXEC;
  // The mapped layout goes through the page cache by design.
  bool direct = options.direct_io && options.layout != FileStoreLayout::kMapped;
  int fd = direct ? ::open(options.path.c_str(), flags | O_DIRECT, 0644) : -1;
  if (direct && fd < 0 && errno == EINVAL) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr, "leanemb: warning: O_DIRECT refused for '%s' (file system without direct I/O, e.g. "
                           "tmpfs); row files use buffered I/O\n", options.path.c_str());
    });
    direct = false;
  }
  if (!direct) fd = ::open(options.path.c_str(), flags, 0644);
  if (fd < 0) {
    const int err = errno;
    std::string msg = "open of row file '" + options.path + "': " + errno_text(err);
    if (err == ENOENT) return not_found(std::move(msg));
    if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(msg));
    return io_error(std::move(msg));
  }
  LEANEMB_RETURN_IF_ERROR(lock_row_file(fd, options.path));
  const uint32_t block = direct ? query_block_bytes(fd) : kDefaultBlockBytes;
  if (options.layout == FileStoreLayout::kMapped) {
    RowFile file;
    file.path = options.path;
    file.fd = fd;
    return make_mapped_row_store(options, host_alloc, file);
  }
  if (options.layout == FileStoreLayout::kLog) {
    RowFile file;
    file.path = options.path;
    file.fd = fd;
    file.direct = direct;
    file.block = block;
    file.read_align = direct ? std::min(block, query_dio_align(fd)) : block;
    return make_log_row_store(options, host_alloc, file, hooks);
  }
  auto store = std::make_unique<FileRowStore>(options, host_alloc, fd, direct, block);
  LEANEMB_RETURN_IF_ERROR(store->init(options, hooks));
  return std::unique_ptr<RowStore>(std::move(store));
}

}  // namespace leanemb::tiered
