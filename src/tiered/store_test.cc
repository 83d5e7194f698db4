// Row store backends against an in-memory reference; file store faults through
// FaultInjectionFileIo (wrapping the io_uring and the thread-pool engine alike).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tiered/cache_testing.h"
#include "tiered/file_store.h"
#include "tiered/row_store.h"
#include "tiered/sizes.h"
#include "leanemb/memory.h"

namespace leanemb::tiered {
namespace {

// A fresh directory under /tmp (not tmpfs here: O_DIRECT is exercised), removed at the end.
class TempDir {
 public:
  TempDir() {
    path_ = testing_util::make_scratch_dir("leanemb-store-");
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Which backend a parameterized test runs on.
// The kLog* ones are the file store's log layout; kMapped its mapped layout.
enum class Backend { kHost, kFileUring, kFileThreads, kFileBuffered, kLogUring, kLogThreads, kLogBuffered, kMapped };
std::string backend_name(Backend b) {
  switch (b) {
    case Backend::kHost: return "host";
    case Backend::kFileUring: return "file_uring";
    case Backend::kFileThreads: return "file_threads";
    case Backend::kFileBuffered: return "file_buffered";
    case Backend::kLogUring: return "log_uring";
    case Backend::kLogThreads: return "log_threads";
    case Backend::kLogBuffered: return "log_buffered";
    case Backend::kMapped: return "mapped";
  }
  return "?";
}
bool is_log(Backend b) { return b == Backend::kLogUring || b == Backend::kLogThreads || b == Backend::kLogBuffered; }
bool is_buffered(Backend b) { return b == Backend::kFileBuffered || b == Backend::kLogBuffered; }

RowStoreOptions options_for(Backend b, const TempDir& dir, int64_t num_rows, size_t row_bytes) {
  RowStoreOptions o;
  o.kind = b == Backend::kHost ? StoreKind::kHost : StoreKind::kFile;
  o.num_rows = num_rows;
  o.row_bytes = row_bytes;
  o.path = dir.file("rows.bin");
  o.queue_depth = 8;  // small, so that calls span several groups of pieces
  o.io_engine = b == Backend::kFileUring || b == Backend::kLogUring ? IoEngineKind::kUring : IoEngineKind::kThreads;
  o.direct_io = !is_buffered(b);
  o.layout = is_log(b) ? FileStoreLayout::kLog : b == Backend::kMapped ? FileStoreLayout::kMapped : FileStoreLayout::kInPlace;
  return o;
}

// The expected state of a store: bytes and presence of every row.
struct Reference {
  Reference(int64_t n, size_t rb) : row_bytes(rb), rows(static_cast<size_t>(n) * rb), present(static_cast<size_t>(n)) {}
  void write(std::span<const int64_t> ids, const uint8_t* src) {
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(&rows[static_cast<size_t>(ids[i]) * row_bytes], src + i * row_bytes, row_bytes);
      present[static_cast<size_t>(ids[i])] = 1;
    }
  }
  size_t row_bytes;
  std::vector<uint8_t> rows;
  std::vector<uint8_t> present;
};

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Distinct rows: a few runs of adjacent rows (they share blocks) plus scattered ones.
std::vector<int64_t> random_distinct_rows(std::mt19937_64& rng, int64_t num_rows, size_t max_count) {
  std::vector<uint8_t> used(static_cast<size_t>(num_rows), 0);
  std::vector<int64_t> rows;
  const size_t target = 1 + rng() % max_count;
  while (rows.size() < target) {
    int64_t r = static_cast<int64_t>(rng() % static_cast<uint64_t>(num_rows));
    const int64_t run = (rng() % 2) ? 1 + static_cast<int64_t>(rng() % 6) : 1;
    for (int64_t k = 0; k < run && r + k < num_rows && rows.size() < target; ++k) {
      if (!used[static_cast<size_t>(r + k)]) {
        used[static_cast<size_t>(r + k)] = 1;
        rows.push_back(r + k);
      }
    }
  }
  std::shuffle(rows.begin(), rows.end(), rng);
  return rows;
}

// Reads `ids` and checks presence and bytes against the reference.
void expect_matches(RowStore* store, const Reference& ref, std::span<const int64_t> ids) {
  std::vector<uint8_t> out(ids.size() * ref.row_bytes, 0xEE);
  std::vector<uint8_t> present(ids.size(), 0xEE);
  ASSERT_TRUE(store->read_rows(ids, out.data(), present.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t r = static_cast<size_t>(ids[i]);
    ASSERT_EQ(present[i], ref.present[r]) << "row " << r;
    if (present[i]) {
      ASSERT_EQ(0, std::memcmp(&out[i * ref.row_bytes], &ref.rows[r * ref.row_bytes], ref.row_bytes))
          << "row " << r << " at position " << i;
    }
  }
}

std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

class RowStoreTest : public ::testing::TestWithParam<Backend> {};

// Random batches (adjacent rows, repeats on read) over row sizes around and across block sizes
// read back exactly what the reference holds.
TEST_P(RowStoreTest, RandomRoundTripsMatchReference) {
  for (size_t row_bytes : {8u, 264u, 1000u, 4096u, 5000u, 8200u}) {
    SCOPED_TRACE("row_bytes " + std::to_string(row_bytes));
    TempDir dir;
    const int64_t n = 300;
    auto store = make_row_store(options_for(GetParam(), dir, n, row_bytes), nullptr);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    Reference ref(n, row_bytes);
    std::mt19937_64 rng(row_bytes);
    for (int iter = 0; iter < 25; ++iter) {
      const auto rows = random_distinct_rows(rng, n, 40);
      const auto src = random_bytes(rng, rows.size() * row_bytes);
      ASSERT_TRUE((*store)->write_rows(rows, src.data()).ok());
      ref.write(rows, src.data());
      std::vector<int64_t> reads;
      for (int k = 0; k < 30; ++k) reads.push_back(static_cast<int64_t>(rng() % n));
      reads.push_back(reads[0]);  // a repeat
      expect_matches(store->get(), ref, reads);
    }
    expect_matches(store->get(), ref, all_rows(n));
  }
}

// A fresh store holds no row; a written row is present; the last store is not needed to decide.
TEST_P(RowStoreTest, PresenceIsSetOnlyByWrites) {
  TempDir dir;
  auto store = make_row_store(options_for(GetParam(), dir, 100, 264), nullptr);
  ASSERT_TRUE(store.ok());
  Reference ref(100, 264);
  expect_matches(store->get(), ref, all_rows(100));
  EXPECT_EQ((*store)->stats().read_ops, 0u);  // absent rows are never read from the medium
  const std::vector<int64_t> rows = {7, 8, 99};
  std::vector<uint8_t> src(3 * 264, 0x5A);
  ASSERT_TRUE((*store)->write_rows(rows, src.data()).ok());
  ref.write(rows, src.data());
  expect_matches(store->get(), ref, all_rows(100));
}

// Bulk ranges (write_range / read_range) agree with the reference over row sizes across block
// sizes, ranges starting and ending inside blocks, a range longer than one staging buffer, and
// reads of ranges with absent rows (present flags as read_rows gives them).
TEST_P(RowStoreTest, BulkRangesMatchReference) {
  for (size_t row_bytes : {40u, 1000u, 4096u, 5000u}) {
    SCOPED_TRACE("row_bytes " + std::to_string(row_bytes));
    TempDir dir;
    // A range of more than kBulkStagingBytes for the smallest rows: several staging rounds.
    const int64_t n = row_bytes == 40 ? static_cast<int64_t>(kBulkStagingBytes / 40 * 5 / 4) : 3000;
    auto store = make_row_store(options_for(GetParam(), dir, n, row_bytes), nullptr);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    Reference ref(n, row_bytes);
    std::mt19937_64 rng(row_bytes + 7);
    const auto scattered = random_distinct_rows(rng, n, 50);
    const auto src0 = random_bytes(rng, scattered.size() * row_bytes);
    ASSERT_TRUE((*store)->write_rows(scattered, src0.data()).ok());
    ref.write(scattered, src0.data());
    const int64_t ranges[][2] = {{3, n / 2}, {n / 3, 7}, {n - 5, 5}, {0, 1}, {n / 2 + 1, n / 2 - 1}};
    for (const auto& rg : ranges) {
      const auto src = random_bytes(rng, static_cast<size_t>(rg[1]) * row_bytes);
      ASSERT_TRUE((*store)->write_range(rg[0], rg[1], src.data()).ok());
      std::vector<int64_t> ids(static_cast<size_t>(rg[1]));
      for (int64_t i = 0; i < rg[1]; ++i) ids[static_cast<size_t>(i)] = rg[0] + i;
      ref.write(ids, src.data());
    }
    expect_matches(store->get(), ref, all_rows(n));
    for (const int64_t* rg : {ranges[0], ranges[4]}) {  // reads spanning absent stretches too
      const int64_t b = std::max<int64_t>(0, rg[0] - 100), c = std::min<int64_t>(n - b, rg[1] + 200);
      std::vector<uint8_t> out(static_cast<size_t>(c) * row_bytes), present(static_cast<size_t>(c), 9);
      ASSERT_TRUE((*store)->read_range(b, c, out.data(), present.data()).ok());
      for (int64_t i = 0; i < c; ++i) {
        const size_t r = static_cast<size_t>(b + i);
        ASSERT_EQ(present[static_cast<size_t>(i)], ref.present[r]) << "row " << r;
        if (ref.present[r]) {
          ASSERT_EQ(0, std::memcmp(&out[static_cast<size_t>(i) * row_bytes], &ref.rows[r * row_bytes], row_bytes)) << "row " << r;
        }
      }
    }
  }
}

// A bulk write moves whole blocks in few requests: a range of 1 MiB of 40-byte rows takes a few
// large writes (plus at most two block reads), not one request per row.
TEST_P(RowStoreTest, BulkWriteUsesFewLargeRequests) {
  if (GetParam() == Backend::kHost || GetParam() == Backend::kMapped) GTEST_SKIP() << "the host store copies rows";
  TempDir dir;
  const int64_t n = (int64_t{1} << 20) / 40 + 1000;
  auto store = make_row_store(options_for(GetParam(), dir, n, 40), nullptr);
  ASSERT_TRUE(store.ok());
  std::vector<uint8_t> src(static_cast<size_t>(n - 10) * 40, 0x3C);
  ASSERT_TRUE((*store)->write_range(5, n - 10, src.data()).ok());
  EXPECT_LE((*store)->stats().write_ops, 2 + (src.size() + kBulkTransferBytes - 1) / kBulkTransferBytes + 1);
  std::vector<uint8_t> out(src.size()), present(static_cast<size_t>(n - 10));
  ASSERT_TRUE((*store)->read_range(5, n - 10, out.data(), present.data()).ok());
  EXPECT_EQ(out, src);
  EXPECT_EQ(std::count(present.begin(), present.end(), 1), n - 10);
}

// A bulk call's staging (io_buffers above the store's persistent buffers) is exactly
// file_store_bulk_bytes of its row count, whichever rows are present: the planner's checkpoint
// phase (plan/memory_model.cc) predicts it from the count alone. The log layout stages nothing
// beyond its buffers (its bulk calls are batches of read_rows / write_rows).
TEST_P(RowStoreTest, BulkStagingIsTheSizeFunctionOfTheCount) {
  if (GetParam() == Backend::kHost || GetParam() == Backend::kMapped) GTEST_SKIP() << "the host store copies rows without staging";
  TempDir dir;
  TrackingAllocator alloc;
  const size_t rb = 40;
  const int64_t n = 300000;  // 11.4 MiB: a full-range call is capped at kBulkStagingBytes
  auto store = make_row_store(options_for(GetParam(), dir, n, rb), &alloc);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const size_t block = (*store)->stats().block_bytes;
  const size_t persistent = alloc.memory_stats()[Category::kIoBuffers].current_bytes;
  std::vector<uint8_t> rows(static_cast<size_t>(n) * rb, 0x5A), present(static_cast<size_t>(n));
  // (begin, count): unaligned starts, a few rows, a chunk, the whole table; written, then read
  // back (all present), then read where only one row in the range is present.
  for (const auto& [begin, count] : {std::pair<int64_t, int64_t>{3, 7}, {101, 65536}, {0, n}, {77777, 1000}}) {
    alloc.reset_peaks();
    ASSERT_TRUE((*store)->write_range(begin, count, rows.data()).ok());
    const size_t expect = is_log(GetParam()) ? 0 : file_store_bulk_bytes(count, rb, block);
    EXPECT_EQ(alloc.memory_stats()[Category::kIoBuffers].peak_bytes - persistent, expect) << "write " << begin << "+" << count;
    alloc.reset_peaks();
    ASSERT_TRUE((*store)->read_range(begin, count, rows.data(), present.data()).ok());
    EXPECT_EQ(alloc.memory_stats()[Category::kIoBuffers].peak_bytes - persistent, expect) << "read " << begin << "+" << count;
  }
  EXPECT_EQ(file_store_bulk_bytes(n, rb, block), kBulkStagingBytes);
  if (is_log(GetParam())) return;
  // A sparse range (a fresh store, one present row at the range's end) stages the count's span
  // too, not the span of the present rows.
  RowStoreOptions o = options_for(GetParam(), dir, n, rb);
  o.path = dir.file("sparse.bin");
  auto sparse = make_row_store(o, &alloc);
  ASSERT_TRUE(sparse.ok()) << sparse.status().to_string();
  const int64_t last[1] = {n - 1};
  ASSERT_TRUE((*sparse)->write_rows(last, rows.data()).ok());
  const size_t both = alloc.memory_stats()[Category::kIoBuffers].current_bytes;
  alloc.reset_peaks();
  ASSERT_TRUE((*sparse)->read_range(n - 70000, 70000, rows.data(), present.data()).ok());
  EXPECT_EQ(std::count(present.begin(), present.begin() + 70000, 1), 1);
  EXPECT_EQ(alloc.memory_stats()[Category::kIoBuffers].peak_bytes - both, file_store_bulk_bytes(70000, rb, block));
  // No present row at all: the same staging (a run's first checkpoint reaches the planned peak).
  alloc.reset_peaks();
  ASSERT_TRUE((*sparse)->read_range(0, 5000, rows.data(), present.data()).ok());
  EXPECT_EQ(std::count(present.begin(), present.begin() + 5000, 1), 0);
  EXPECT_EQ(alloc.memory_stats()[Category::kIoBuffers].peak_bytes - both, file_store_bulk_bytes(5000, rb, block));
}

// Rows outside [0, num_rows) are OutOfRange with the row and position in the message.
TEST_P(RowStoreTest, RejectsRowsOutOfRange) {
  TempDir dir;
  auto store = make_row_store(options_for(GetParam(), dir, 10, 16), nullptr);
  ASSERT_TRUE(store.ok());
  std::vector<uint8_t> buf(32), present(2);
  const std::vector<int64_t> bad = {1, 10};
  Status st = (*store)->read_rows(bad, buf.data(), present.data());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("row 10 at position 1"), std::string::npos) << st.message();
  EXPECT_EQ((*store)->write_rows(std::vector<int64_t>{-1}, buf.data()).code(), StatusCode::kOutOfRange);
  st = (*store)->write_range(9, 2, buf.data());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("rows [9, 11)"), std::string::npos) << st.message();
  EXPECT_EQ((*store)->read_range(-1, 1, buf.data(), present.data()).code(), StatusCode::kOutOfRange);
}

// Counters count rows per call and bytes per present row (host) or per block moved (file).
TEST_P(RowStoreTest, StatsCountRowsBytesAndOps) {
  TempDir dir;
  auto store = make_row_store(options_for(GetParam(), dir, 64, 4096), nullptr);
  ASSERT_TRUE(store.ok());
  std::vector<uint8_t> buf(4 * 4096, 1), present(4);
  ASSERT_TRUE((*store)->write_rows(std::vector<int64_t>{1, 5}, buf.data()).ok());
  if (is_log(GetParam())) {
    ASSERT_TRUE((*store)->flush().ok());  // the rows leave the append buffer
  }
  ASSERT_TRUE((*store)->read_rows(std::vector<int64_t>{1, 5, 5, 9}, buf.data(), present.data()).ok());
  const RowStoreStats s = (*store)->stats();
  EXPECT_EQ(s.rows_written, 2u);
  EXPECT_EQ(s.rows_read, 4u);
  if (is_log(GetParam())) {
    const size_t block = s.block_bytes;
    EXPECT_EQ(s.bytes_written, 2u * 4096);  // one sequential write of both records
    EXPECT_EQ(s.write_ops, 1u);
    EXPECT_EQ(s.bytes_read, 2u * 4096);
    EXPECT_EQ(s.read_ops, 2u);
    EXPECT_EQ(s.layout, "log");
    EXPECT_EQ(s.log_live_rows, 2u);
    EXPECT_EQ(s.log_segments, 1u);         // one segment file,
    EXPECT_EQ(s.disk_bytes, 2u * 4096);    // of the two records written
    EXPECT_LE(s.disk_bytes, log_segment_bytes(64, 4096, block));
    EXPECT_EQ(s.io_buffer_bytes, log_store_staging_bytes(64, 4096, block, 8));
    EXPECT_EQ(s.host_bytes, s.io_buffer_bytes + log_store_index_bytes(64, 4096, block));  // every index page made
    return;
  }
  EXPECT_GE(s.bytes_written, 2u * 4096);
  EXPECT_GE(s.write_ops, 2u);
  if (GetParam() == Backend::kHost) {
    EXPECT_EQ(s.bytes_read, 3u * 4096);  // rows 1, 5, 5 (row 9 is absent)
    EXPECT_EQ(s.host_bytes, 64u * 4096 + 8 + 8);  // rows, presence directory and its one page
  } else if (GetParam() == Backend::kMapped) {
    EXPECT_EQ(s.bytes_read, 3u * 4096);  // copies, as the host store's
    EXPECT_EQ(s.host_bytes, 8u + 8);  // the presence bitmap: the mapping's pages are the page cache's
    EXPECT_EQ(s.disk_bytes, 64u * 4096);
    EXPECT_EQ(s.layout, "mapped");
    EXPECT_EQ(s.io_engine, "mmap");
    EXPECT_EQ((*store)->kind(), StoreKind::kFile);
  } else {
    EXPECT_EQ(s.bytes_read, 2u * 4096);  // one aligned access per distinct present row
    EXPECT_EQ(s.read_ops, 2u);
    EXPECT_EQ(s.disk_bytes, 64u * 4096);
    EXPECT_GT(s.io_buffer_bytes, 0u);
    EXPECT_EQ(s.host_bytes, s.io_buffer_bytes + 8 + 8);
    EXPECT_EQ(s.direct_io, !is_buffered(GetParam()));
    EXPECT_EQ(s.io_engine, GetParam() == Backend::kFileUring ? "io_uring" : "threads");
  }
}

// One thread rewrites even rows while another reads odd rows of the same blocks: the readers
// always see their rows' bytes exactly (a write's read-modify-write keeps its neighbours).
TEST_P(RowStoreTest, ConcurrentReadsAndWritesOfDisjointRowsInSharedBlocks) {
  TempDir dir;
  const int64_t n = 64;
  const size_t rb = 264;  // 15 rows per 4 KiB block, rows straddle block boundaries
  auto store = make_row_store(options_for(GetParam(), dir, n, rb), nullptr);
  ASSERT_TRUE(store.ok());
  std::vector<int64_t> odd, even;
  for (int64_t r = 0; r < n; ++r) (r % 2 ? odd : even).push_back(r);
  std::vector<uint8_t> odd_bytes(odd.size() * rb);
  for (size_t i = 0; i < odd_bytes.size(); ++i) odd_bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_TRUE((*store)->write_rows(odd, odd_bytes.data()).ok());
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    std::vector<uint8_t> src(even.size() * rb);
    for (int v = 0; v < 150 && !failed; ++v) {
      std::fill(src.begin(), src.end(), static_cast<uint8_t>(v));
      if (!(*store)->write_rows(even, src.data()).ok()) failed = true;
    }
  });
  std::vector<uint8_t> out(odd.size() * rb), present(odd.size());
  for (int k = 0; k < 150 && !failed; ++k) {
    if (!(*store)->read_rows(odd, out.data(), present.data()).ok() || out != odd_bytes) failed = true;
  }
  writer.join();
  EXPECT_FALSE(failed);
}

INSTANTIATE_TEST_SUITE_P(Backends, RowStoreTest,
                         ::testing::Values(Backend::kHost, Backend::kFileUring, Backend::kFileThreads,
                                           Backend::kFileBuffered, Backend::kLogUring, Backend::kLogThreads,
                                           Backend::kLogBuffered, Backend::kMapped),
                         [](const auto& info) { return backend_name(info.param); });

// The mapped layout: row r at byte r * row_bytes of the file once flushed (the same bytes a
// pread sees), the file's blocks allocated at open (no hole left for a page's first write), and
// a reopened file's bytes ignored (no row present). (The lock against a second process is the
// other layouts' code: store_io_test's FileStoreFile.)
TEST(MappedStoreTest, RowsLiveInPlaceInTheFileAndAReopenedFileHasNoRow) {
  TempDir dir;
  const size_t rb = 24;
  const int64_t n = 1000;
  RowStoreOptions o = options_for(Backend::kMapped, dir, n, rb);
  std::vector<uint8_t> src(3 * rb);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::vector<int64_t> rows = {999, 0, 431};
  {
    auto store = make_row_store(o, nullptr);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    ASSERT_TRUE((*store)->write_rows(rows, src.data()).ok());
    ASSERT_TRUE((*store)->flush().ok());
    const int fd = ::open(o.path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(static_cast<size_t>(st.st_size), n * rb);
    EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, n * rb);  // allocated, not sparse
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<uint8_t> got(rb);
      ASSERT_EQ(::pread(fd, got.data(), rb, static_cast<off_t>(rows[i]) * static_cast<off_t>(rb)), static_cast<ssize_t>(rb));
      EXPECT_EQ(0, std::memcmp(got.data(), &src[i * rb], rb)) << "row " << rows[i];
    }
    ::close(fd);
  }
  auto again = make_row_store(o, nullptr);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  std::vector<uint8_t> out(3 * rb), present(3, 9);
  ASSERT_TRUE((*again)->read_rows(rows, out.data(), present.data()).ok());
  EXPECT_EQ(present, std::vector<uint8_t>(3, 0));
}

// Bad options are InvalidArgument; names parse both ways.
TEST(RowStoreOptionsTest, RejectsBadOptionsAndParsesNames) {
  RowStoreOptions o;
  o.row_bytes = 0;
  o.num_rows = 1;
  EXPECT_EQ(make_row_store(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o.row_bytes = 8;
  o.kind = StoreKind::kFile;
  EXPECT_EQ(make_row_store(o, nullptr).status().code(), StatusCode::kInvalidArgument);  // no path
  o.path = "/nonexistent-dir-leanemb/rows.bin";
  EXPECT_EQ(make_row_store(o, nullptr).status().code(), StatusCode::kNotFound);
  o.queue_depth = 0;
  EXPECT_EQ(make_row_store(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*parse_store_kind("file"), StoreKind::kFile);
  EXPECT_EQ(store_kind_name(*parse_store_kind("host")), "host");
  EXPECT_FALSE(parse_store_kind("ssd").ok());
  EXPECT_EQ(*parse_io_engine_kind("threads"), IoEngineKind::kThreads);
  EXPECT_FALSE(parse_io_engine_kind("aio").ok());
  EXPECT_EQ(*parse_file_store_layout("log"), FileStoreLayout::kLog);
  EXPECT_EQ(file_store_layout_name(*parse_file_store_layout("in_place")), "in_place");
  EXPECT_FALSE(parse_file_store_layout("lsm").ok());
  EXPECT_EQ(*parse_file_store_layout("mmap"), FileStoreLayout::kMapped);
  EXPECT_EQ(file_store_layout_name(FileStoreLayout::kMapped), "mapped");
}

// A huge host store costs no row pages until rows are written (lazy allocation).
TEST(HostStoreTest, CreationTouchesNoRowPages) {
  auto rss_bytes = [] {
    std::ifstream f("/proc/self/statm");
    size_t size = 0, resident = 0;
    f >> size >> resident;
    return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  };
  const size_t before = rss_bytes();
  auto store = make_row_store({StoreKind::kHost, int64_t{1} << 22, 1024, "", true, 64, IoEngineKind::kAuto}, nullptr);
  ASSERT_TRUE(store.ok());  // 4 GiB of rows
  EXPECT_LT(rss_bytes() - before, size_t{64} << 20);
  // Rows (virtual) and the presence bitmap's directory: its 16 pages are made on first write.
  EXPECT_EQ((*store)->stats().host_bytes, (size_t{1} << 32) + 16 * 8);
}

// The row file is created sparse: its logical size is the table, its allocated blocks ~0.
TEST(FileStoreTest, FileIsCreatedSparse) {
  TempDir dir;
  RowStoreOptions o{StoreKind::kFile, int64_t{1} << 20, 1024, dir.file("big.bin"), true, 64, IoEngineKind::kAuto};
  auto store = make_row_store(o, nullptr);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  struct stat st {};
  ASSERT_EQ(::stat(o.path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), size_t{1} << 30);
  EXPECT_LT(static_cast<size_t>(st.st_blocks) * 512, size_t{1} << 20);
  EXPECT_TRUE((*store)->flush().ok());
}

}  // namespace
}  // namespace leanemb::tiered
