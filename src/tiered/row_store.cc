// Names of the store kinds and I/O engines, option checks, the host row store (and the file
// store's mapped layout, which is the host store over a file mapping) and the factory.
//
// Host store invariant: row r lives at base_ + r * row_bytes; its bytes are meaningful only
// once presence bit r is set (the buffer is never memset, so creating a 10^9-row store touches
// no page of it: the kernel backs pages on first write). base_ is a host allocation, or a
// MAP_SHARED mapping of the whole row file (mapped layout), whose blocks were allocated when it
// was opened (so a page's first write never fails for space: that would be SIGBUS).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/row_access.h"
#include "tiered/file_store.h"
#include "tiered/presence.h"
#include "tiered/row_store.h"
#include "tiered/store_util.h"
#include "core/enum_names.h"

namespace leanemb {

template <>
struct EnumNames<CachePolicy> {
  static constexpr std::string_view kWhat = "cache policy";
  static constexpr EnumName<CachePolicy> kNames[] = {
      {CachePolicy::kLru, "lru", ""}, {CachePolicy::kLfu, "lfu", ""}, {CachePolicy::kClock, "clock", ""}};
};

template <>
struct EnumNames<StoreKind> {
  static constexpr std::string_view kWhat = "row store kind";
  static constexpr EnumName<StoreKind> kNames[] = {{StoreKind::kHost, "host", ""}, {StoreKind::kFile, "file", ""}};
};

template <>
struct EnumNames<tiered::IoEngineKind> {
  static constexpr std::string_view kWhat = "I/O engine";
  static constexpr EnumName<tiered::IoEngineKind> kNames[] = {{tiered::IoEngineKind::kAuto, "auto", ""},
                                                              {tiered::IoEngineKind::kUring, "io_uring", "uring"},
                                                              {tiered::IoEngineKind::kThreads, "threads", ""}};
};

template <>
struct EnumNames<FileStoreLayout> {
  static constexpr std::string_view kWhat = "file store layout";
  static constexpr EnumName<FileStoreLayout> kNames[] = {{FileStoreLayout::kInPlace, "in_place", "inplace in-place"},
                                                         {FileStoreLayout::kLog, "log", ""},
                                                         {FileStoreLayout::kMapped, "mapped", "mmap"}};
};

std::string_view store_kind_name(StoreKind k) { return enum_name(k); }
Result<StoreKind> parse_store_kind(std::string_view s) { return parse_enum<StoreKind>(s); }
std::string_view file_store_layout_name(FileStoreLayout l) { return enum_name(l); }
Result<FileStoreLayout> parse_file_store_layout(std::string_view s) { return parse_enum<FileStoreLayout>(s); }
std::string_view cache_policy_name(CachePolicy p) { return enum_name(p); }
Result<CachePolicy> parse_cache_policy(std::string_view s) { return parse_enum<CachePolicy>(s); }

}  // namespace leanemb

namespace leanemb::tiered {

std::string_view io_engine_kind_name(IoEngineKind k) { return enum_name(k); }
Result<IoEngineKind> parse_io_engine_kind(std::string_view s) { return parse_enum<IoEngineKind>(s); }

Status run_ops_until_done(RowFileIo& io, std::vector<IoOp>& ops, const std::function<Status(size_t, IoOp*, bool*)>& settle) {
  std::vector<size_t> todo(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) todo[i] = i;
  std::vector<IoOp> batch;
  while (!todo.empty()) {
    batch.clear();
    for (size_t i : todo) batch.push_back(ops[i]);
    io.submit_and_wait(batch);
    std::vector<size_t> again_list;
    for (size_t t = 0; t < todo.size(); ++t) {
      IoOp& op = ops[todo[t]];
      op.result = batch[t].result;
      bool again = false;
      LEANEMB_RETURN_IF_ERROR(settle(todo[t], &op, &again));
      if (again) again_list.push_back(todo[t]);
    }
    todo.swap(again_list);
  }
  return Status();
}

Status check_rows_in_range(std::span<const int64_t> rows, int64_t num_rows, const char* what) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= num_rows) {
      return out_of_range(std::string(what) + ": row " + std::to_string(rows[i]) + " at position " +
                          std::to_string(i) + " is outside [0, " + std::to_string(num_rows) + ")");
    }
  }
  return Status();
}

Status check_range_in_table(int64_t begin, int64_t count, int64_t num_rows, const char* what) {
  if (begin < 0 || count < 0 || begin > num_rows || count > num_rows - begin)
    return out_of_range(std::string(what) + ": rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                        ") outside [0, " + std::to_string(num_rows) + ")");
  return Status();
}

namespace {

// Rows per call of the default (batched) bulk forms.
constexpr int64_t kDefaultRangeBatch = 4096;

// rows = begin, begin + 1, ... (rows.size() of them)
void fill_rows(std::vector<int64_t>& rows, int64_t begin) {
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = begin + static_cast<int64_t>(i);
}

}  // namespace

Status RowStore::write_range(int64_t begin, int64_t count, const uint8_t* src) {
  LEANEMB_RETURN_IF_ERROR(check_range_in_table(begin, count, num_rows(), "write_range"));
  std::vector<int64_t> rows;
  for (int64_t c0 = 0; c0 < count; c0 += kDefaultRangeBatch) {
    rows.resize(static_cast<size_t>(std::min(kDefaultRangeBatch, count - c0)));
    fill_rows(rows, begin + c0);
    LEANEMB_RETURN_IF_ERROR(write_rows(rows, src + static_cast<size_t>(c0) * row_bytes()));
  }
  return Status();
}

Status RowStore::read_range(int64_t begin, int64_t count, uint8_t* dst, uint8_t* present) {
  LEANEMB_RETURN_IF_ERROR(check_range_in_table(begin, count, num_rows(), "read_range"));
  std::vector<int64_t> rows;
  for (int64_t c0 = 0; c0 < count; c0 += kDefaultRangeBatch) {
    rows.resize(static_cast<size_t>(std::min(kDefaultRangeBatch, count - c0)));
    fill_rows(rows, begin + c0);
    LEANEMB_RETURN_IF_ERROR(read_rows(rows, dst + static_cast<size_t>(c0) * row_bytes(), present + c0));
  }
  return Status();
}

Result<LinkedRows> RowStore::link_rows(const std::string&, const RowPlaceSink&) {
  return unimplemented(std::string("link_rows: the ") + (kind() == StoreKind::kHost ? "host" : "file") +
                       " store keeps no files to link (only the file store's log layout does)");
}

Status RowStore::adopt_links(const std::string&, const LinkedRows&, const RowPlaceSource&) {
  return unimplemented("adopt_links: only the file store's log layout takes linked files");
}

namespace {

constexpr size_t kRowsAhead = 8;  // rows prefetched ahead by the host store's copy loops

// A row file mapped whole (the mapped layout): unmapped and closed with the store.
struct MappedFile {
  std::string path;
  int fd = -1;
  uint8_t* base = nullptr;
  size_t bytes = 0;
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (base != nullptr) ::munmap(base, bytes);
    if (fd >= 0) ::close(fd);
  }
};

class HostRowStore final : public RowStore {
 public:
  HostRowStore(const RowStoreOptions& o, Allocation rows, PresenceBitmap presence)
      : num_rows_(o.num_rows), row_bytes_(o.row_bytes), rows_(std::move(rows)), base_(rows_.as<uint8_t>()),
        presence_(std::move(presence)) {}
  HostRowStore(const RowStoreOptions& o, std::unique_ptr<MappedFile> map, PresenceBitmap presence)
      : num_rows_(o.num_rows), row_bytes_(o.row_bytes), map_(std::move(map)), base_(map_->base), presence_(std::move(presence)) {}

  StoreKind kind() const override { return map_ ? StoreKind::kFile : StoreKind::kHost; }
  int64_t num_rows() const override { return num_rows_; }
  size_t row_bytes() const override { return row_bytes_; }

  Status read_rows(std::span<const int64_t> rows, RowsAt<uint8_t> dst, uint8_t* present) override {
    LEANEMB_RETURN_IF_ERROR(check_rows_in_range(rows, num_rows_, "read_rows"));
    const StopWatch watch;
    const uint8_t* base = base_;
    uint64_t copied = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      // Rows are random in a buffer of gigabytes: fetch a few ahead so the copies overlap (only
      // rows that were written: most misses of a young table are rows never written).
      // The destination too when the caller's rows are scattered (a cache's slots).
      if (i + kRowsAhead < rows.size() && presence_.test(rows[i + kRowsAhead])) {
        kernels::prefetch_span<0, 0>(base + static_cast<size_t>(rows[i + kRowsAhead]) * row_bytes_, row_bytes_);
        if (dst.slots) kernels::prefetch_span<1, 0>(dst.row(i + kRowsAhead, row_bytes_), row_bytes_);
      }
      const int64_t r = rows[i];
      present[i] = presence_.test(r) ? 1 : 0;
      if (present[i]) {
        std::memcpy(dst.row(i, row_bytes_), base + static_cast<size_t>(r) * row_bytes_, row_bytes_);
        ++copied;
      }
    }
    counters_.add_read(rows.size(), copied * row_bytes_, copied, watch.ns());
    return Status();
  }

  Status write_rows(std::span<const int64_t> rows, RowsAt<const uint8_t> src) override {
    LEANEMB_RETURN_IF_ERROR(check_rows_in_range(rows, num_rows_, "write_rows"));
    std::lock_guard<std::mutex> lock(write_mu_);  // write_rows calls are serialized
    const StopWatch watch;
    for (int64_t r : rows) LEANEMB_RETURN_IF_ERROR(presence_.prepare(r));
    uint8_t* base = base_;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + kRowsAhead < rows.size()) {
        kernels::prefetch_span<1, 0>(base + static_cast<size_t>(rows[i + kRowsAhead]) * row_bytes_, row_bytes_);
        if (src.slots) kernels::prefetch_span<0, 0>(src.row(i + kRowsAhead, row_bytes_), row_bytes_);
      }
      std::memcpy(base + static_cast<size_t>(rows[i]) * row_bytes_, src.row(i, row_bytes_), row_bytes_);
      presence_.set(rows[i]);
    }
    counters_.add_write(rows.size(), rows.size() * row_bytes_, rows.size(), watch.ns());
    return Status();
  }

  Status write_range(int64_t begin, int64_t count, const uint8_t* src) override {
    LEANEMB_RETURN_IF_ERROR(check_range_in_table(begin, count, num_rows_, "write_range"));
    std::lock_guard<std::mutex> lock(write_mu_);
    const StopWatch watch;
    LEANEMB_RETURN_IF_ERROR(presence_.prepare_range(begin, count));
    const size_t bytes = static_cast<size_t>(count) * row_bytes_;
    if (bytes) std::memcpy(base_ + static_cast<size_t>(begin) * row_bytes_, src, bytes);
    presence_.set_range(begin, count);
    counters_.add_write(static_cast<uint64_t>(count), bytes, static_cast<uint64_t>(count), watch.ns());
    return Status();
  }

  Status read_range(int64_t begin, int64_t count, uint8_t* dst, uint8_t* present) override {
    LEANEMB_RETURN_IF_ERROR(check_range_in_table(begin, count, num_rows_, "read_range"));
    const StopWatch watch;
    const uint8_t* base = base_ + static_cast<size_t>(begin) * row_bytes_;
    uint64_t copied = 0;
    // Runs of present rows, one copy each (absent rows' bytes stay unspecified).
    for (int64_t i = 0; i < count;) {
      present[i] = presence_.test(begin + i) ? 1 : 0;
      if (!present[i]) {
        ++i;
        continue;
      }
      int64_t j = i + 1;
      while (j < count && presence_.test(begin + j)) present[j++] = 1;
      std::memcpy(dst + static_cast<size_t>(i) * row_bytes_, base + static_cast<size_t>(i) * row_bytes_,
                  static_cast<size_t>(j - i) * row_bytes_);
      copied += static_cast<uint64_t>(j - i);
      i = j;
    }
    counters_.add_read(static_cast<uint64_t>(count), copied * row_bytes_, copied, watch.ns());
    return Status();
  }

  // Mapped: the dirty pages written and the file synced (msync + fsync); host: nothing to do.
  Status flush() override {
    if (!map_) return Status();
    std::lock_guard<std::mutex> lock(write_mu_);
    if (map_->bytes > 0 && ::msync(map_->base, map_->bytes, MS_SYNC) != 0)
      return io_error("msync of row file '" + map_->path + "': " + std::strerror(errno));
    if (::fsync(map_->fd) != 0) return io_error("fsync of row file '" + map_->path + "': " + std::strerror(errno));
    return Status();
  }

  RowStoreStats stats() const override {
    RowStoreStats s = counters_.snapshot();
    // A mapping's pages are the page cache's, in no allocator: not host_bytes.
    s.host_bytes = rows_.size_bytes() + presence_.bytes();
    s.io_engine = "memcpy";
    if (map_) {
      s.io_engine = "mmap";
      s.layout = "mapped";
      s.disk_bytes = map_->bytes;
      s.block_bytes = 4096;
    }
    return s;
  }

 private:
  int64_t num_rows_;
  size_t row_bytes_;
  Allocation rows_;                  // host
  std::unique_ptr<MappedFile> map_;  // mapped
  uint8_t* base_;
  PresenceBitmap presence_;
  std::mutex write_mu_;
  StoreCounters counters_;
};

}  // namespace

Result<std::unique_ptr<RowStore>> make_mapped_row_store(const RowStoreOptions& options, Allocator* host_alloc,
                                                        const RowFile& file) {
  auto map = std::make_unique<MappedFile>();
  map->path = file.path;
  map->fd = file.fd;  // closed by map from here on
  map->bytes = static_cast<size_t>(options.num_rows) * options.row_bytes;
  struct stat st {};
  if (::fstat(map->fd, &st) != 0) return io_error("stat of row file '" + file.path + "': " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) > map->bytes && ::ftruncate(map->fd, static_cast<off_t>(map->bytes)) != 0)
    return io_error("resize of row file '" + file.path + "': " + std::strerror(errno));
  if (map->bytes > 0) {
    // Every block allocated now: a page's first write through the mapping then never needs
    // space (on a full disk it would be SIGBUS in a step, not an error here).
    if (const int err = ::posix_fallocate(map->fd, 0, static_cast<off_t>(map->bytes)); err != 0) {
      std::string msg = "allocating the " + std::to_string(map->bytes) + " bytes of mapped row file '" + file.path +
                        "': " + std::strerror(err);
      return err == ENOSPC || err == EDQUOT ? resource_exhausted(std::move(msg)) : io_error(std::move(msg));
    }
    void* p = ::mmap(nullptr, map->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, map->fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      std::string msg = "mmap of row file '" + file.path + "' (" + std::to_string(map->bytes) + " bytes): " + std::strerror(err);
      return err == ENOMEM ? resource_exhausted(std::move(msg)) : io_error(std::move(msg));
    }
    map->base = static_cast<uint8_t*>(p);
  }
  LEANEMB_ASSIGN_OR_RETURN(auto presence, PresenceBitmap::create(options.num_rows, host_alloc));
  return std::unique_ptr<RowStore>(new HostRowStore(options, std::move(map), std::move(presence)));
}

Status check_row_store_options(const RowStoreOptions& o) {
  if (o.kind != StoreKind::kHost && o.kind != StoreKind::kFile)
    return invalid_argument("row store: unknown kind code " + std::to_string(static_cast<int>(o.kind)));
  if (o.num_rows < 0) return invalid_argument("row store: num_rows " + std::to_string(o.num_rows) + " < 0");
  if (o.row_bytes == 0) return invalid_argument("row store: row_bytes must be > 0");
  if (o.row_bytes > (size_t{1} << 30)) {
    return invalid_argument("row store: row_bytes " + std::to_string(o.row_bytes) + " > 1 GiB");
  }
  const uint64_t n = static_cast<uint64_t>(o.num_rows);
  if (n != 0 && o.row_bytes > (uint64_t{1} << 62) / n) {
    return invalid_argument("row store: num_rows * row_bytes overflows");
  }
  if (o.kind == StoreKind::kFile) {
    if (o.path.empty()) return invalid_argument("file row store: path is empty");
    if (o.layout != FileStoreLayout::kInPlace && o.layout != FileStoreLayout::kLog && o.layout != FileStoreLayout::kMapped)
      return invalid_argument("file row store: unknown layout code " + std::to_string(static_cast<int>(o.layout)));
    if (o.queue_depth < 1 || o.queue_depth > 4096) {
      return invalid_argument("file row store: queue_depth " + std::to_string(o.queue_depth) +
                              " outside [1, 4096]");
    }
  }
  return Status();
}

Result<std::unique_ptr<RowStore>> make_row_store(const RowStoreOptions& options, Allocator* host_alloc) {
  if (host_alloc == nullptr) host_alloc = default_host_allocator();
  LEANEMB_RETURN_IF_ERROR(check_row_store_options(options));
  if (options.kind == StoreKind::kFile) return make_file_row_store(options, host_alloc);
  Allocation rows;
  const size_t bytes = static_cast<size_t>(options.num_rows) * options.row_bytes;
  if (bytes > 0) {
    // Not memset: pages are backed on first write (see the invariant above).
    LEANEMB_ASSIGN_OR_RETURN(rows, host_alloc->allocate(bytes, Category::kWeights, 64));
  }
  LEANEMB_ASSIGN_OR_RETURN(auto presence, PresenceBitmap::create(options.num_rows, host_alloc));
  return std::unique_ptr<RowStore>(new HostRowStore(options, std::move(rows), std::move(presence)));
}

}  // namespace leanemb::tiered
