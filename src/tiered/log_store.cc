// LogRowStore: the file store's log layout. Written rows are appended to a log of fixed-size
// segments in large sequential O_DIRECT writes; an index in RAM maps each row to the record that
// holds its last copy; segments whose records are mostly stale are compacted and reused.
//
// Invariants (docs/tiered.md, "Row stores", log layout):
// - Record n lives at byte (n / G) * group_bytes_ + (n % G) * row_bytes_, G = group_recs_
//   records per group: a group is one block of floor(block / row_bytes) records (no record
//   straddles a block), or the whole blocks of one row larger than a block. Segment s holds
//   records [s * seg_recs_, (s + 1) * seg_recs_), whole groups.
// - index_[row] is 0 (absent: never written) or record + 1. A row's record is the newest copy;
//   seg_live_[s] counts the records of s that the index points to. Only writers (write_mu_)
//   change the index, the segments and the append state.
// - The append buffer holds records [buf_rec0_, buf_rec0_ + buf_recs_) of the head segment
//   (buf_rec0_ group-aligned), not yet on disk; every other record the index points to is on
//   disk. The buffer is written when full, when the head segment is full (a sealed segment is
//   wholly on disk) and by flush() (which then skips to the next group: its free records stay
//   unused). A failed write keeps the buffer, and the next write_rows or flush retries it.
//   Readers copy buffered records under buf_mu_; the range changes only under it.
// - Reuse: compaction re-appends a victim segment's live records (the index then points to the
//   copies) and puts the victim on pending_. A reader holds reuse_mu_ shared from its index
//   lookups until its reads are done; pending segments become free only after reuse_mu_ was
//   taken exclusively once, so no read of a location can meet a segment written again after
//   the lookup.
// - Files: segment s is a file of its own (files_, log_segments.h), created empty when s becomes
//   the head, sealed when it stops being the head and unlinked when it becomes free, so a sealed
//   file never changes and link_rows() can hard-link it into a checkpoint.
// - Bound: the segments made stay within cap = ceil(2 x live records / seg_recs_) +
//   kLogSlackSegments. An append takes a free segment or makes one only while more than
//   kLogReserveSegments of the two kinds remain (compaction may take the rest); when it cannot,
//   at least cap - kLogReserveSegments >= 2 x live / seg_recs_ + 2 segments are sealed, so one of
//   them has fewer than half its records live, and each compaction frees more than it uses.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <vector>

#include "tiered/file_store.h"
#include "tiered/log_segments.h"
#include "tiered/sizes.h"
#include "tiered/store_util.h"

namespace leanemb::tiered {

namespace {

constexpr size_t kBufferAlign = 4096;
constexpr int kMaxNoProgressTries = 8;
// Segments one compaction pass (one scan of the index) frees: at most 8, and at most
// kMaxPassBytes of them, so that the write_rows call that runs a pass reads at most 128 MiB
// (two 64 MiB segments of a large table).
constexpr size_t kMaxVictimsPerPass = 8;
constexpr uint64_t kMaxPassBytes = uint64_t{128} << 20;

std::string errno_text(int err) { return std::generic_category().message(err); }

// The row -> record index: entries of 4 or 8 bytes (record + 1, 0 = absent) in pages of
// log_index_page_entries made zeroed on the first write of one of their rows. Readers load
// entries (acquire) while the one writer prepares pages and stores entries (release).
class LogIndex {
 public:
  Status init(int64_t num_rows, size_t entry_bytes, Allocator* alloc) {
    alloc_ = alloc;
    wide_ = entry_bytes == 8;
    page_entries_ = log_index_page_entries(num_rows);
    const size_t pages = log_index_num_pages(num_rows);
    if (pages == 0) return Status();
    LEANEMB_ASSIGN_OR_RETURN(dir_alloc_, alloc->allocate(pages * sizeof(void*), Category::kWeights, 64));
    dir_ = dir_alloc_.as<std::atomic<uint8_t*>>();
    for (size_t p = 0; p < pages; ++p) dir_[p].store(nullptr, std::memory_order_relaxed);
    pages_.resize(pages);
    bytes_.store(dir_alloc_.size_bytes(), std::memory_order_relaxed);
    return Status();
  }
  uint64_t get(int64_t row) const {
    const uint8_t* p = dir_[static_cast<size_t>(row) >> kLogIndexPageShift].load(std::memory_order_acquire);
    if (p == nullptr) return 0;
    const size_t i = static_cast<size_t>(row) & ((size_t{1} << kLogIndexPageShift) - 1);
    if (wide_) return std::atomic_ref<const uint64_t>(reinterpret_cast<const uint64_t*>(p)[i]).load(std::memory_order_acquire);
    return std::atomic_ref<const uint32_t>(reinterpret_cast<const uint32_t*>(p)[i]).load(std::memory_order_acquire);
  }
  // REQUIRES: one writer. Errors: ResourceExhausted (the page).
  Status prepare(int64_t row) {
    const size_t pg = static_cast<size_t>(row) >> kLogIndexPageShift;
    if (dir_[pg].load(std::memory_order_relaxed) != nullptr) return Status();
    const size_t bytes = page_entries_ * (wide_ ? 8 : 4);
    LEANEMB_ASSIGN_OR_RETURN(pages_[pg], alloc_->allocate(bytes, Category::kWeights, 64));
    std::memset(pages_[pg].data(), 0, bytes);
    bytes_.fetch_add(pages_[pg].size_bytes(), std::memory_order_relaxed);
    dir_[pg].store(pages_[pg].as<uint8_t>(), std::memory_order_release);
    return Status();
  }
  // REQUIRES: prepare(row) succeeded; one writer.
  void set(int64_t row, uint64_t v) {
    uint8_t* p = dir_[static_cast<size_t>(row) >> kLogIndexPageShift].load(std::memory_order_relaxed);
    const size_t i = static_cast<size_t>(row) & ((size_t{1} << kLogIndexPageShift) - 1);
    if (wide_) {
      std::atomic_ref<uint64_t>(reinterpret_cast<uint64_t*>(p)[i]).store(v, std::memory_order_release);
    } else {
      std::atomic_ref<uint32_t>(reinterpret_cast<uint32_t*>(p)[i]).store(static_cast<uint32_t>(v), std::memory_order_release);
    }
  }
  // f(row, entry) for every row with an entry (the writer's scan: plain loads).
  template <typename F>
  void for_each(int64_t num_rows, F&& f) const {
    for (size_t pg = 0; pg < pages_.size(); ++pg) {
      if (pages_[pg].empty()) continue;
      const int64_t r0 = static_cast<int64_t>(pg << kLogIndexPageShift);
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(page_entries_), num_rows - r0);
      if (wide_) {
        const uint64_t* e = pages_[pg].as<uint64_t>();
        for (int64_t i = 0; i < n; ++i)
          if (e[i]) f(r0 + i, e[i]);
      } else {
        const uint32_t* e = pages_[pg].as<uint32_t>();
        for (int64_t i = 0; i < n; ++i)
          if (e[i]) f(r0 + i, uint64_t{e[i]});
      }
    }
  }
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  Allocator* alloc_ = nullptr;
  bool wide_ = false;
  size_t page_entries_ = 0;
  Allocation dir_alloc_;
  std::atomic<uint8_t*>* dir_ = nullptr;
  std::vector<Allocation> pages_;  // the writer's
  std::atomic<size_t> bytes_{0};
};

enum class SegState : uint32_t { kUnmade, kHead, kSealed, kPending, kFree };
struct SegInfo {
  uint32_t live = 0;  // records the index points to
  SegState state = SegState::kUnmade;
};
static_assert(sizeof(SegInfo) == kLogSegmentInfoBytes);

// One read request: an aligned span inside one record group, and the call's rows it carries.
struct ReadPiece {
  uint64_t offset = 0;  // in the log (segment s at s x segment bytes)
  uint64_t seg_begin = 0;  // the log offset of its segment's file
  int fd = -1;             // its segment's file
  uint32_t len = 0;
  size_t first = 0, last = 0;  // [first, last) of the call's sorted disk reads
};
struct DiskRead {
  uint64_t offset;  // the record's byte offset
  size_t pos;       // position in the call
};

class LogRowStore final : public RowStore {
 public:
  LogRowStore(const RowStoreOptions& o, Allocator* alloc, const RowFile& f, const FileStoreHooks& hooks)
      : file_(f), num_rows_(o.num_rows), row_bytes_(o.row_bytes), alloc_(alloc) {
    block_ = f.block;
    group_bytes_ = log_group_bytes(row_bytes_, block_);
    group_recs_ = log_group_records(row_bytes_, block_);
    seg_bytes_ = log_segment_bytes(num_rows_, row_bytes_, block_, hooks.log_segment_bytes);
    seg_recs_ = log_segment_records(seg_bytes_, row_bytes_, block_);
    max_segments_ = log_max_segments(num_rows_, seg_recs_);
    num_slots_ = log_store_num_slots(row_bytes_, block_, o.queue_depth);
  }
  ~LogRowStore() override {
    io_.reset();  // workers stop before the descriptors go
    ::close(file_.fd);
  }

  Status init(const RowStoreOptions& o, const FileStoreHooks& hooks) {
    LEANEMB_RETURN_IF_ERROR(index_.init(num_rows_, log_index_entry_bytes(num_rows_, seg_recs_), alloc_));
    LEANEMB_ASSIGN_OR_RETURN(seg_alloc_, alloc_->allocate(max_segments_ * sizeof(SegInfo), Category::kWeights, 64));
    segs_ = seg_alloc_.as<SegInfo>();
    for (uint64_t s = 0; s < max_segments_; ++s) segs_[s] = SegInfo{};
    const uint64_t gc_bytes = std::max<uint64_t>(1, std::min<uint64_t>(kLogGcReadBytes, seg_bytes_) / group_bytes_) * group_bytes_;
    LEANEMB_ASSIGN_OR_RETURN(buf_, new_buffer(log_store_append_bytes(seg_bytes_, row_bytes_, block_)));
    LEANEMB_ASSIGN_OR_RETURN(gc_buf_, new_buffer(gc_bytes));
    LEANEMB_ASSIGN_OR_RETURN(Allocation first_read, new_buffer(num_slots_ * group_bytes_));
    read_staging_.push_back(std::move(first_read));
    buf_cap_recs_ = buf_.size_bytes() / group_bytes_ * group_recs_;
    LEANEMB_RETURN_IF_ERROR(files_.open(log_store_dir(file_.path), file_.direct, max_segments_));
    LEANEMB_ASSIGN_OR_RETURN(io_, make_row_file_io(file_, num_slots_, o.io_engine, hooks));
    return Status();
  }

  StoreKind kind() const override { return StoreKind::kFile; }
  int64_t num_rows() const override { return num_rows_; }
  size_t row_bytes() const override { return row_bytes_; }

  Status read_rows(std::span<const int64_t> rows, RowsAt<uint8_t> dst, uint8_t* present) override;
  Status write_rows(std::span<const int64_t> rows, RowsAt<const uint8_t> src) override;
  Status flush() override;
  RowStoreStats stats() const override;
  bool links_rows(const std::string& into_dir) const override { return into_dir.empty() || same_file_system(files_.dir(), into_dir); }
  Result<LinkedRows> link_rows(const std::string& dir, const RowPlaceSink& sink) override;
  Status adopt_links(const std::string& dir, const LinkedRows& linked, const RowPlaceSource& source) override;

 private:
  uint64_t rec_offset(uint64_t rec) const {
    return rec / group_recs_ * group_bytes_ + rec % group_recs_ * row_bytes_;
  }
  Status os_error(const char* what, int err) const {
    std::string msg = std::string(what) + " '" + file_.path + "': " + errno_text(err);
    if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(msg));
    return io_error(std::move(msg));
  }
  Result<Allocation> new_buffer(size_t bytes) {
    LEANEMB_ASSIGN_OR_RETURN(Allocation a, alloc_->allocate(bytes, Category::kIoBuffers, kBufferAlign));
    io_buffer_bytes_.fetch_add(a.size_bytes(), std::memory_order_relaxed);
    return a;
  }
  Allocation acquire_read_staging();
  void release_read_staging(Allocation a);

  // Writer side (write_mu_ held).
  Status append(int64_t row, const uint8_t* bytes);
  Status write_buffer();
  Status next_head(bool for_compaction);
  void seal_head();
  // The ops that move [off, off + len) of the log from / to `buf` (one segment's file).
  void add_ops(std::vector<IoOp>& ops, bool write, uint64_t off, uint64_t len, uint8_t* buf) const;
  Status compact();
  std::vector<uint32_t> choose_victims() const;
  Status relocate(const std::vector<std::pair<uint64_t, int64_t>>& moves);
  void promote_pending();
  uint64_t segment_cap() const {
    const uint64_t live = live_rows_.load(std::memory_order_relaxed);
    return std::min<uint64_t>(max_segments_, (2 * live + seg_recs_ - 1) / seg_recs_ + kLogSlackSegments);
  }
  // Segments that may still be made (the bound for the live rows so far).
  uint64_t growable() const {
    const uint64_t made = segments_made_.load(std::memory_order_relaxed), cap = segment_cap();
    return made < cap ? cap - made : 0;
  }

  // Reader side.
  Status read_disk(std::vector<DiskRead>& reads, RowsAt<uint8_t> dst, uint64_t* ops, uint64_t* bytes);
  Status run_ops(std::vector<IoOp>& ops);
  Status settle(IoOp* op, int* no_progress, bool* again) const;

  RowFile file_;
  int64_t num_rows_;
  size_t row_bytes_;
  Allocator* alloc_;
  uint32_t block_ = 4096;
  size_t group_bytes_ = 0, group_recs_ = 1;
  uint64_t seg_bytes_ = 0, seg_recs_ = 0, max_segments_ = 0;
  size_t num_slots_ = 1;
  std::unique_ptr<RowFileIo> io_;
  LogIndex index_;
  Allocation seg_alloc_;
  SegInfo* segs_ = nullptr;  // [max_segments_], the writer's

  std::mutex write_mu_;  // write_rows, flush, compaction
  uint64_t head_ = 0;          // the segment being appended (valid when has_head_)
  bool has_head_ = false;
  bool compacting_ = false;    // a compaction pass is appending
  uint64_t head_next_ = 0;     // next record index inside the head
  std::vector<uint32_t> free_, pending_;
  SegmentFiles files_;         // a file per segment (log_segments.h)
  Allocation gc_buf_;

  mutable std::mutex buf_mu_;  // the append range (and readers' copies out of it)
  Allocation buf_;
  uint64_t buf_rec0_ = 0, buf_recs_ = 0, buf_cap_recs_ = 0;

  std::shared_mutex reuse_mu_;  // readers shared; taken exclusively before pending segments are reused

  mutable std::mutex read_mu_;
  std::vector<Allocation> read_staging_;  // guarded by read_mu_
  std::atomic<size_t> io_buffer_bytes_{0};
  std::atomic<uint64_t> live_rows_{0}, segments_made_{0}, gc_passes_{0}, gc_rows_moved_{0}, gc_bytes_read_{0};
  StoreCounters counters_;
};

// ---- writes -------------------------------------------------------------------------------

Status LogRowStore::write_rows(std::span<const int64_t> rows, RowsAt<const uint8_t> src) {
  LEANEMB_RETURN_IF_ERROR(check_rows_in_range(rows, num_rows_, "write_rows"));
  std::lock_guard<std::mutex> lock(write_mu_);
  const StopWatch watch;
  Status st;
  for (size_t i = 0; i < rows.size() && st.ok(); ++i) st = append(rows[i], src.row(i, row_bytes_));
  // The buffer's writes were counted as they happened (write_buffer); the call adds its rows.
  counters_.add_write(st.ok() ? rows.size() : 0, 0, 0, watch.ns());
  return st;
}

// Appends one record of `row` (a repeated row in one call keeps its last copy: the later record
// wins the index).
Status LogRowStore::append(int64_t row, const uint8_t* bytes) {
  if (buf_recs_ == buf_cap_recs_ || (has_head_ && head_next_ == seg_recs_ && buf_recs_ > 0))
    LEANEMB_RETURN_IF_ERROR(write_buffer());
  if (!has_head_ || head_next_ == seg_recs_) LEANEMB_RETURN_IF_ERROR(next_head(compacting_));
  LEANEMB_RETURN_IF_ERROR(index_.prepare(row));
  const uint64_t rec = head_ * seg_recs_ + head_next_;
  {
    std::lock_guard<std::mutex> lock(buf_mu_);
    if (buf_recs_ == 0) buf_rec0_ = rec;  // group-aligned (see the invariant block)
    std::memcpy(buf_.as<uint8_t>() + (rec_offset(rec) - rec_offset(buf_rec0_)), bytes, row_bytes_);
    buf_recs_ = rec - buf_rec0_ + 1;
  }
  const uint64_t old = index_.get(row);
  if (old != 0) {
    --segs_[(old - 1) / seg_recs_].live;
  } else {
    live_rows_.fetch_add(1, std::memory_order_relaxed);
  }
  index_.set(row, rec + 1);
  ++segs_[head_].live;
  ++head_next_;
  if (buf_recs_ == buf_cap_recs_ || head_next_ == seg_recs_) {
    // Written now; on failure the next append or flush retries it (the record is served from
    // the buffer meanwhile).
    return write_buffer();
  }
  return Status();
}

// Writes the buffered records' groups at their place in the head segment.
Status LogRowStore::write_buffer() {
  if (buf_recs_ == 0) return Status();
  const uint64_t off = rec_offset(buf_rec0_);
  const uint64_t len = (buf_recs_ + group_recs_ - 1) / group_recs_ * group_bytes_;
  std::vector<IoOp> ops;
  add_ops(ops, true, off, len, buf_.as<uint8_t>());
  const size_t n = ops.size();
  LEANEMB_RETURN_IF_ERROR(run_ops(ops));
  files_.wrote(static_cast<uint32_t>(head_), off - head_ * seg_bytes_, buf_.as<uint8_t>(), len);
  counters_.add_write(0, len, n, 0);
  std::lock_guard<std::mutex> lock(buf_mu_);
  buf_recs_ = 0;
  return Status();
}

// Seals the head (its records are on disk) and makes another segment the head: a free one, else
// a new one within the bound, as long as more than kLogReserveSegments of them remain (any for
// compaction); else compaction frees some.
Status LogRowStore::next_head(bool for_compaction) {
  LEANEMB_CHECK(buf_recs_ == 0, "log store: the head changes with records in the buffer");
  seal_head();
  const uint64_t keep = for_compaction ? 0 : kLogReserveSegments;
  for (uint64_t tries = 0;; ++tries) {
    if (free_.size() + growable() <= keep && !pending_.empty()) promote_pending();
    if (free_.size() + growable() > keep) {
      if (!free_.empty()) {
        head_ = free_.back();
        free_.pop_back();
      } else {
        head_ = segments_made_.load(std::memory_order_relaxed);
        segments_made_.store(head_ + 1, std::memory_order_relaxed);
      }
      if (const Status st = files_.create(static_cast<uint32_t>(head_)); !st.ok()) {
        segs_[head_].state = SegState::kFree;  // the slot stays free for a later try
        free_.push_back(static_cast<uint32_t>(head_));
        return st;
      }
      break;
    }
    if (for_compaction || tries > max_segments_)
      return internal_error("log store '" + file_.path + "': no segment free for compaction (bound broken)");
    LEANEMB_RETURN_IF_ERROR(compact());
    if (has_head_ && head_next_ < seg_recs_) return Status();  // the compaction's head has room
    seal_head();
  }
  segs_[head_].state = SegState::kHead;
  segs_[head_].live = 0;
  has_head_ = true;
  head_next_ = 0;
  return Status();
}

// The head's records are all on disk (the buffer is empty): its file is sealed, never written
// again.
void LogRowStore::seal_head() {
  if (!has_head_) return;
  segs_[head_].state = SegState::kSealed;
  files_.seal(static_cast<uint32_t>(head_));
  has_head_ = false;
}

void LogRowStore::add_ops(std::vector<IoOp>& ops, bool write, uint64_t off, uint64_t len, uint8_t* buf) const {
  const uint64_t seg = off / seg_bytes_;
  const int fd = files_.fd(static_cast<uint32_t>(seg));
  for (uint64_t o = 0; o < len; o += kBulkTransferBytes) {
    IoOp op{write, off + o - seg * seg_bytes_, buf + o, static_cast<uint32_t>(std::min<uint64_t>(kBulkTransferBytes, len - o)), 0};
    op.fd = fd;
    ops.push_back(op);
  }
}

// Free segments become reusable once no reader can hold a location in them: every reader that
// looked one up before the index moved away holds reuse_mu_ shared until its reads are done.
void LogRowStore::promote_pending() {
  { std::unique_lock<std::shared_mutex> quiesce(reuse_mu_); }
  for (uint32_t s : pending_) {
    segs_[s].state = SegState::kFree;
    files_.drop(s);  // a checkpoint's link keeps its bytes; the store's name goes
  }
  free_.insert(free_.end(), pending_.begin(), pending_.end());
  pending_.clear();
}

// Sealed segments by fewest live records, while the victims average at most half live (each
// frees more than it uses), at most kMaxVictimsPerPass and kMaxPassBytes, within the room of
// the free segments and those the bound still allows.
std::vector<uint32_t> LogRowStore::choose_victims() const {
  std::vector<std::pair<uint32_t, uint32_t>> sealed;  // (live, segment)
  const uint64_t made = segments_made_.load(std::memory_order_relaxed);
  for (uint64_t s = 0; s < made; ++s)
    if (segs_[s].state == SegState::kSealed) sealed.emplace_back(segs_[s].live, static_cast<uint32_t>(s));
  std::sort(sealed.begin(), sealed.end());
  std::vector<uint32_t> victims;
  uint64_t live = 0;
  const uint64_t room = (free_.size() + growable()) * seg_recs_;
  const size_t most = static_cast<size_t>(std::clamp<uint64_t>(kMaxPassBytes / seg_bytes_, 1, kMaxVictimsPerPass));
  for (const auto& [l, s] : sealed) {
    if (victims.size() == most) break;
    if (2 * (live + l) > (victims.size() + 1) * seg_recs_ || live + l > room) break;
    victims.push_back(s);
    live += l;
  }
  return victims;
}

// One compaction pass: one scan of the index finds the victims' live records, which are read
// (in order, kLogGcReadBytes at a time) and appended again; the victims then wait for reuse.
Status LogRowStore::compact() {
  const std::vector<uint32_t> victims = choose_victims();
  if (victims.empty())
    return internal_error("log store '" + file_.path + "': no segment to compact within the bound");
  std::vector<uint8_t> is_victim(max_segments_, 0);
  for (uint32_t v : victims) is_victim[v] = 1;
  std::vector<std::pair<uint64_t, int64_t>> moves;  // (record, row)
  index_.for_each(num_rows_, [&](int64_t row, uint64_t e) {
    if (is_victim[(e - 1) / seg_recs_]) moves.emplace_back(e - 1, row);
  });
  std::sort(moves.begin(), moves.end());
  compacting_ = true;  // its appends may take the reserve
  const Status st = relocate(moves);
  compacting_ = false;
  LEANEMB_RETURN_IF_ERROR(st);
  for (uint32_t v : victims) {
    LEANEMB_CHECK(segs_[v].live == 0, "log store: a compacted segment still has live records");
    segs_[v].state = SegState::kPending;
    pending_.push_back(v);
  }
  gc_passes_.fetch_add(1, std::memory_order_relaxed);
  return Status();
}

// Reads the records of `moves` (sorted by record) window by window and appends them again.
Status LogRowStore::relocate(const std::vector<std::pair<uint64_t, int64_t>>& moves) {
  const uint64_t window = gc_buf_.size_bytes();
  for (size_t i = 0; i < moves.size();) {
    const uint64_t seg = moves[i].first / seg_recs_;
    const uint64_t w0 = rec_offset(moves[i].first) / group_bytes_ * group_bytes_;
    const uint64_t seg_end = (seg + 1) * seg_bytes_;
    size_t j = i;
    uint64_t w1 = w0;
    while (j < moves.size() && moves[j].first / seg_recs_ == seg) {
      const uint64_t g1 = (rec_offset(moves[j].first) / group_bytes_ + 1) * group_bytes_;
      if (g1 - w0 > window || g1 > seg_end) break;
      w1 = g1;
      ++j;
    }
    std::vector<IoOp> ops;
    add_ops(ops, false, w0, w1 - w0, gc_buf_.as<uint8_t>());
    LEANEMB_RETURN_IF_ERROR(run_ops(ops));
    counters_.add_read(0, w1 - w0, 0, 0);  // bytes only: read_ops and read_seconds are read_rows'
    gc_bytes_read_.fetch_add(w1 - w0, std::memory_order_relaxed);
    for (; i < j; ++i) {
      const auto [rec, row] = moves[i];
      LEANEMB_RETURN_IF_ERROR(append(row, gc_buf_.as<uint8_t>() + (rec_offset(rec) - w0)));
      gc_rows_moved_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return Status();
}

Status LogRowStore::flush() {
  std::lock_guard<std::mutex> lock(write_mu_);
  const bool had = buf_recs_ > 0;
  LEANEMB_RETURN_IF_ERROR(write_buffer());
  // The rest of the written head's last group stays unused: the next append starts a group.
  if (had) head_next_ = std::min(seg_recs_, (head_next_ + group_recs_ - 1) / group_recs_ * group_recs_);
  return files_.sync();
}

// ---- links (checkpoints that keep the rows by hard links) ----------------------------------

Result<LinkedRows> LogRowStore::link_rows(const std::string& dir, const RowPlaceSink& sink) {
  std::lock_guard<std::mutex> lock(write_mu_);
  LEANEMB_RETURN_IF_ERROR(write_buffer());
  if (has_head_ && head_next_ > 0) seal_head();  // an empty head has nothing to link
  LEANEMB_RETURN_IF_ERROR(files_.sync());
  LinkedRows out;
  out.row_bytes = row_bytes_;
  out.block_bytes = block_;
  out.segment_bytes = seg_bytes_;
  std::vector<uint32_t> file_of(max_segments_, UINT32_MAX);
  const uint64_t made = segments_made_.load(std::memory_order_relaxed);
  for (uint64_t s = 0; s < made; ++s) {
    if (segs_[s].live == 0) continue;
    LEANEMB_RETURN_IF_ERROR(files_.link(static_cast<uint32_t>(s), dir));
    const SegmentFileInfo fi = files_.info(static_cast<uint32_t>(s));
    file_of[s] = static_cast<uint32_t>(out.files.size());
    out.files.push_back({fi.name, fi.bytes, fi.hash});
  }
  if (!out.files.empty()) {  // the links are durable before the caller publishes them
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return io_error("open of '" + dir + "': " + errno_text(errno));
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    if (rc != 0) return io_error("fsync of '" + dir + "': " + errno_text(err));
  }
  std::vector<RowPlace> chunk;
  constexpr size_t kChunk = size_t{1} << 16;
  chunk.reserve(kChunk);
  Status st;
  index_.for_each(num_rows_, [&](int64_t row, uint64_t e) {
    if (!st.ok()) return;
    const uint64_t rec = e - 1, seg = rec / seg_recs_;
    chunk.push_back({row, file_of[seg], rec_offset(rec) - seg * seg_bytes_});
    ++out.rows;
    if (chunk.size() == kChunk) {
      st = sink(chunk);
      chunk.clear();
    }
  });
  if (st.ok() && !chunk.empty()) st = sink(chunk);
  LEANEMB_RETURN_IF_ERROR(st);
  return out;
}

Status LogRowStore::adopt_links(const std::string& dir, const LinkedRows& linked, const RowPlaceSource& source) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const std::string what = "log store '" + file_.path + "': adopting the links in '" + dir + "'";
  if (live_rows_.load(std::memory_order_relaxed) != 0 || segments_made_.load(std::memory_order_relaxed) != 0)
    return failed_precondition(what + ": the store has rows already");
  if (linked.row_bytes != row_bytes_ || linked.block_bytes != block_ || linked.segment_bytes != seg_bytes_ ||
      linked.files.size() > max_segments_) {
    return failed_precondition(what + ": their layout (row " + std::to_string(linked.row_bytes) + " B, block " +
                               std::to_string(linked.block_bytes) + " B, segment " + std::to_string(linked.segment_bytes) +
                               " B, " + std::to_string(linked.files.size()) + " files) is not this store's");
  }
  for (size_t f = 0; f < linked.files.size(); ++f) {
    const LinkedRowFile& lf = linked.files[f];
    if (lf.bytes > seg_bytes_) return data_loss(what + ": file '" + lf.name + "' is larger than a segment");
    LEANEMB_RETURN_IF_ERROR(files_.adopt(static_cast<uint32_t>(f), dir + "/" + lf.name, {lf.name, lf.bytes, lf.hash}));
    segs_[f] = SegInfo{0, SegState::kSealed};
  }
  segments_made_.store(linked.files.size(), std::memory_order_relaxed);
  for (;;) {
    LEANEMB_ASSIGN_OR_RETURN(const std::span<const RowPlace> chunk, source());
    if (chunk.empty()) break;
    for (const RowPlace& p : chunk) {
      const uint64_t within = p.offset % group_bytes_, k = within / row_bytes_;
      if (p.row < 0 || p.row >= num_rows_ || p.file >= linked.files.size() || within % row_bytes_ != 0 ||
          k >= group_recs_ || p.offset + row_bytes_ > linked.files[p.file].bytes) {
        return data_loss(what + ": row " + std::to_string(p.row) + " at offset " + std::to_string(p.offset) + " of file " +
                         std::to_string(p.file) + " is outside the table or its file");
      }
      LEANEMB_RETURN_IF_ERROR(index_.prepare(p.row));
      if (index_.get(p.row) != 0) return data_loss(what + ": row " + std::to_string(p.row) + " is given twice");
      index_.set(p.row, p.file * seg_recs_ + p.offset / group_bytes_ * group_recs_ + k + 1);
      ++segs_[p.file].live;
      live_rows_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return files_.sync();
}

// ---- reads --------------------------------------------------------------------------------

Status LogRowStore::read_rows(std::span<const int64_t> rows, RowsAt<uint8_t> dst, uint8_t* present) {
  LEANEMB_RETURN_IF_ERROR(check_rows_in_range(rows, num_rows_, "read_rows"));
  const StopWatch watch;
  std::shared_lock<std::shared_mutex> reuse(reuse_mu_);  // until the reads are done
  std::vector<uint64_t> recs(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint64_t e = index_.get(rows[i]);
    present[i] = e != 0 ? 1 : 0;
    recs[i] = e;
  }
  std::vector<DiskRead> reads;
  {
    std::lock_guard<std::mutex> lock(buf_mu_);
    const uint8_t* buf = buf_.as<uint8_t>();
    for (size_t i = 0; i < rows.size(); ++i) {
      if (recs[i] == 0) continue;
      const uint64_t rec = recs[i] - 1;
      if (rec >= buf_rec0_ && rec < buf_rec0_ + buf_recs_) {
        std::memcpy(dst.row(i, row_bytes_), buf + (rec_offset(rec) - rec_offset(buf_rec0_)), row_bytes_);
      } else {
        reads.push_back({rec_offset(rec), i});
      }
    }
  }
  uint64_t ops = 0, bytes = 0;
  if (!reads.empty()) LEANEMB_RETURN_IF_ERROR(read_disk(reads, dst, &ops, &bytes));
  counters_.add_read(rows.size(), bytes, ops, watch.ns());
  return Status();
}

// A job per piece: the aligned span of a group that holds the call's records there.
struct LogReadJobs final : IoJobs {
  LogReadJobs(const std::vector<ReadPiece>& p, const std::vector<DiskRead>& r, RowsAt<uint8_t> d, uint8_t* sl,
              size_t slot_bytes, size_t rb)
      : pieces(p), reads(r), dst(d), slots(sl), slot_bytes(slot_bytes), row_bytes(rb), no_progress(p.size(), 0) {}
  size_t num_jobs() const override { return pieces.size(); }
  bool aborted() const override { return !error.ok(); }
  IoOp start(size_t job, size_t slot) override {
    IoOp op{false, pieces[job].offset - pieces[job].seg_begin, slots + slot * slot_bytes, pieces[job].len, 0};
    op.fd = pieces[job].fd;
    return op;
  }
  bool next(size_t job, size_t slot, IoOp* op) override;
  std::function<Status(IoOp*, int*, bool*)> settle;
  const std::vector<ReadPiece>& pieces;
  const std::vector<DiskRead>& reads;
  RowsAt<uint8_t> dst;
  uint8_t* slots;
  size_t slot_bytes, row_bytes;
  std::vector<int> no_progress;
  Status error;
};

bool LogReadJobs::next(size_t job, size_t slot, IoOp* op) {
  bool again = false;
  Status e = settle(op, &no_progress[job], &again);
  if (!e.ok()) {
    if (error.ok()) error = std::move(e);
    return false;
  }
  if (again) return error.ok();
  if (!error.ok()) return false;
  const ReadPiece& p = pieces[job];
  const uint8_t* base = slots + slot * slot_bytes;
  for (size_t k = p.first; k < p.last; ++k)
    std::memcpy(dst.row(reads[k].pos, row_bytes), base + (reads[k].offset - p.offset), row_bytes);
  return false;
}

Status LogRowStore::read_disk(std::vector<DiskRead>& reads, RowsAt<uint8_t> dst, uint64_t* ops, uint64_t* bytes) {
  std::sort(reads.begin(), reads.end(),
            [](const DiskRead& a, const DiskRead& b) { return a.offset != b.offset ? a.offset < b.offset : a.pos < b.pos; });
  const uint64_t a = file_.read_align;
  std::vector<ReadPiece> pieces;
  for (size_t k = 0; k < reads.size(); ++k) {
    const uint64_t s = reads[k].offset / a * a, e = (reads[k].offset + row_bytes_ + a - 1) / a * a;
    ReadPiece* last = pieces.empty() ? nullptr : &pieces.back();
    // Merge with the open piece when inside the same group and overlapping or abutting it.
    if (last && s / group_bytes_ == last->offset / group_bytes_ && s <= last->offset + last->len) {
      last->len = static_cast<uint32_t>(std::max<uint64_t>(last->offset + last->len, e) - last->offset);
      last->last = k + 1;
    } else {
      const uint64_t seg = s / seg_bytes_;
      pieces.push_back({s, seg * seg_bytes_, files_.fd(static_cast<uint32_t>(seg)), static_cast<uint32_t>(e - s), k, k + 1});
    }
  }
  Allocation staging = acquire_read_staging();
  if (staging.empty()) return resource_exhausted("log store '" + file_.path + "': no read staging buffer");
  LogReadJobs jobs(pieces, reads, dst, staging.as<uint8_t>(), group_bytes_, row_bytes_);
  jobs.settle = [this](IoOp* op, int* np, bool* again) { return settle(op, np, again); };
  io_->run_jobs(jobs, num_slots_);
  release_read_staging(std::move(staging));
  *ops += pieces.size();
  for (const ReadPiece& p : pieces) *bytes += p.len;
  return jobs.error;
}

// The result of one transfer: OK and *again = false when it moved all its bytes; OK and
// *again = true with `op` advanced past the whole aligned units it moved when short; an error
// (naming the file and offset) otherwise.
Status LogRowStore::settle(IoOp* op, int* no_progress, bool* again) const {
  *again = false;
  const int64_t res = op->result;
  if (res == static_cast<int64_t>(op->len)) return Status();
  const std::string where = "'" + file_.path + "' at offset " + std::to_string(op->offset);
  if (res < 0 && res != -EINTR && res != -EAGAIN) {
    const int err = static_cast<int>(-res);
    std::string msg = std::string(op->write ? "log write to " : "log read of ") + where + ": " + errno_text(err);
    if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(msg));
    return io_error(std::move(msg));
  }
  if (res == 0 && !op->write) return data_loss("short read of " + where + ": the file ends early");
  const uint64_t unit = op->write ? block_ : file_.read_align;
  const uint64_t advance = res > 0 ? static_cast<uint64_t>(res) / unit * unit : 0;
  if (advance == 0 && ++*no_progress >= kMaxNoProgressTries)
    return io_error(std::string(op->write ? "short write to " : "short read of ") + where + ": no progress after " +
                    std::to_string(kMaxNoProgressTries) + " tries");
  op->offset += advance;
  op->buf += advance;
  op->len -= static_cast<uint32_t>(advance);
  op->result = 0;
  *again = true;
  return Status();
}

// Runs `ops` until each moved all its bytes (short transfers retried from the last whole unit).
Status LogRowStore::run_ops(std::vector<IoOp>& ops) {
  std::vector<int> no_progress(ops.size(), 0);
  return run_ops_until_done(*io_, ops, [&](size_t i, IoOp* op, bool* again) { return settle(op, &no_progress[i], again); });
}

Allocation LogRowStore::acquire_read_staging() {
  {
    std::lock_guard<std::mutex> lock(read_mu_);
    if (!read_staging_.empty()) {
      Allocation a = std::move(read_staging_.back());
      read_staging_.pop_back();
      return a;
    }
  }
  auto a = new_buffer(num_slots_ * group_bytes_);
  return a.ok() ? std::move(a).value() : Allocation();
}

void LogRowStore::release_read_staging(Allocation a) {
  std::lock_guard<std::mutex> lock(read_mu_);
  read_staging_.push_back(std::move(a));
}

RowStoreStats LogRowStore::stats() const {
  RowStoreStats s = counters_.snapshot();
  s.io_buffer_bytes = io_buffer_bytes_.load(std::memory_order_relaxed);
  s.host_bytes = index_.bytes() + seg_alloc_.size_bytes() + s.io_buffer_bytes;
  s.disk_bytes = files_.disk_bytes();
  s.io_engine = io_->engine_name();
  s.direct_io = file_.direct;
  s.block_bytes = block_;
  s.layout = "log";
  s.log_segments = files_.num_files();
  s.gc_passes = gc_passes_.load(std::memory_order_relaxed);
  s.gc_rows_moved = gc_rows_moved_.load(std::memory_order_relaxed);
  s.gc_bytes_read = gc_bytes_read_.load(std::memory_order_relaxed);
  s.log_live_rows = live_rows_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace

Result<std::unique_ptr<RowStore>> make_log_row_store(const RowStoreOptions& options, Allocator* host_alloc,
                                                     const RowFile& file, const FileStoreHooks& hooks) {
  auto store = std::make_unique<LogRowStore>(options, host_alloc, file, hooks);
  LEANEMB_RETURN_IF_ERROR(store->init(options, hooks));
  return std::unique_ptr<RowStore>(std::move(store));
}

}  // namespace leanemb::tiered
