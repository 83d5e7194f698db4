// The file store's log layout with tiny segments (FileStoreHooks::log_segment_bytes), so that
// compaction runs after a few writes: every row reads back its last write through compaction,
// the file stays within its bound, reads run concurrently with compaction, and injected faults
// leave every row readable.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tiered/cache_testing.h"
#include "tiered/file_store.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {
namespace {

constexpr size_t kRowBytes = 136;       // 30 records per 4 KiB block
constexpr uint64_t kSegBytes = 4 * 4096;  // 120 records per segment

class LogStoreTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    dir_ = testing_util::make_scratch_dir("leanemb-store-log-");
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // A log store of `rows` rows with tiny segments; `fault` wraps its engine.
  void open(int64_t rows, bool fault = false) {
    RowStoreOptions o{StoreKind::kFile, rows, kRowBytes, dir_ + "/rows.bin", true, 8, GetParam()};
    o.layout = FileStoreLayout::kLog;
    FileStoreHooks hooks;
    hooks.log_segment_bytes = kSegBytes;
    if (fault) {
      hooks.wrap_io = [this](std::unique_ptr<RowFileIo> io, uint32_t block) {
        auto f = std::make_unique<FaultInjectionFileIo>(std::move(io), block);
        faults_ = f.get();
        return std::unique_ptr<RowFileIo>(std::move(f));
      };
    }
    auto s = make_file_row_store(o, nullptr, hooks);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store_ = std::move(s).value();
    num_rows_ = rows;
    expected_.assign(static_cast<size_t>(rows) * kRowBytes, 0);
    present_.assign(static_cast<size_t>(rows), 0);
  }
  // Writes `rows` with fresh bytes (seeded by `tag`); on success the expectation follows.
  Status write(const std::vector<int64_t>& rows, uint32_t tag) {
    std::vector<uint8_t> v(rows.size() * kRowBytes);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 131 + tag * 7 + rows[i / kRowBytes]);
    Status st = store_->write_rows(rows, v.data());
    if (st.ok()) {
      for (size_t i = 0; i < rows.size(); ++i) {
        std::memcpy(&expected_[static_cast<size_t>(rows[i]) * kRowBytes], &v[i * kRowBytes], kRowBytes);
        present_[static_cast<size_t>(rows[i])] = 1;
      }
    }
    return st;
  }
  // Every row reads back its last successful write (or absent), but rows in `except` (a failed
  // call's: old or new bytes).
  void expect_all_rows(const std::vector<int64_t>& except = {}) {
    std::vector<int64_t> all(static_cast<size_t>(num_rows_));
    for (int64_t r = 0; r < num_rows_; ++r) all[static_cast<size_t>(r)] = r;
    std::vector<uint8_t> out(all.size() * kRowBytes), present(all.size());
    ASSERT_TRUE(store_->read_rows(all, out.data(), present.data()).ok());
    for (size_t r = 0; r < all.size(); ++r) {
      if (std::find(except.begin(), except.end(), static_cast<int64_t>(r)) != except.end()) continue;
      ASSERT_EQ(present[r], present_[r]) << "row " << r;
      if (present[r]) {
        ASSERT_EQ(0, std::memcmp(&out[r * kRowBytes], &expected_[r * kRowBytes], kRowBytes)) << "row " << r;
      }
    }
  }
  // The file and the segments made stay within the bound of the live rows.
  void expect_within_bound() {
    const RowStoreStats s = store_->stats();
    const uint64_t recs = log_segment_records(kSegBytes, kRowBytes, s.block_bytes);
    const uint64_t bound = ((2 * s.log_live_rows + recs - 1) / recs + kLogSlackSegments) * kSegBytes;
    EXPECT_LE(s.disk_bytes, bound);
    uint64_t on_disk = 0, files = 0;
    for (const auto& e : std::filesystem::directory_iterator(log_store_dir(dir_ + "/rows.bin"))) {
      on_disk += e.file_size();
      ++files;
    }
    EXPECT_LE(on_disk, bound);
    EXPECT_EQ(on_disk, s.disk_bytes);
    EXPECT_EQ(files, s.log_segments);  // a freed segment's file is gone
  }

  std::string dir_;
  std::unique_ptr<RowStore> store_;
  FaultInjectionFileIo* faults_ = nullptr;
  int64_t num_rows_ = 0;
  std::vector<uint8_t> expected_, present_;
};

// Many overwrites of a few hundred rows: compaction runs again and again, every row reads back
// its last write (after flushes mid-group too), and the file stays within 2 x live + slack.
TEST_P(LogStoreTest, CompactionKeepsEveryRowsLastWriteWithinTheBound) {
  open(400);
  std::mt19937_64 rng(5);
  for (int round = 0; round < 120; ++round) {
    std::vector<int64_t> rows;
    std::vector<uint8_t> used(400, 0);
    const size_t count = 1 + rng() % 90;
    while (rows.size() < count) {
      // Skewed: most writes hit the first 100 rows, so old segments hold few live records.
      const int64_t r = static_cast<int64_t>(rng() % 4 ? rng() % 100 : rng() % 400);
      if (!used[static_cast<size_t>(r)]) rows.push_back(r), used[static_cast<size_t>(r)] = 1;
    }
    ASSERT_TRUE(write(rows, static_cast<uint32_t>(round)).ok());
    if (round % 7 == 3) {
      ASSERT_TRUE(store_->flush().ok());
    }
    if (round % 10 == 0) expect_all_rows();
    expect_within_bound();
  }
  expect_all_rows();
  const RowStoreStats s = store_->stats();
  EXPECT_GT(s.gc_passes, 5u);
  EXPECT_GT(s.gc_rows_moved, 0u);
  EXPECT_GT(s.gc_bytes_read, 0u);
}

// A reader reads rows written once (which compaction moves) while a writer rewrites others
// (which makes compaction run): the reader always sees their bytes.
TEST_P(LogStoreTest, ReadsRunConcurrentlyWithCompaction) {
  open(600);
  std::vector<int64_t> fixed, hot;
  for (int64_t r = 0; r < 600; ++r) (r % 3 == 0 ? fixed : hot).push_back(r);
  ASSERT_TRUE(write(fixed, 1).ok());
  std::vector<uint8_t> want(fixed.size() * kRowBytes);
  for (size_t i = 0; i < fixed.size(); ++i)
    std::memcpy(&want[i * kRowBytes], &expected_[static_cast<size_t>(fixed[i]) * kRowBytes], kRowBytes);
  std::atomic<bool> failed{false}, done{false};
  std::thread writer([&] {
    std::mt19937_64 rng(9);
    for (int v = 0; v < 300 && !failed; ++v) {
      std::vector<int64_t> some(hot.begin() + static_cast<long>(rng() % 100), hot.begin() + 100 + static_cast<long>(rng() % 300));
      std::vector<uint8_t> src(some.size() * kRowBytes, static_cast<uint8_t>(v));
      if (!store_->write_rows(some, src.data()).ok()) failed = true;
      if (v % 50 == 0 && !store_->flush().ok()) failed = true;
    }
    done = true;
  });
  std::vector<uint8_t> out(fixed.size() * kRowBytes), present(fixed.size());
  int reads = 0;
  while (!done && !failed) {
    if (!store_->read_rows(fixed, out.data(), present.data()).ok() || out != want) failed = true;
    ++reads;
  }
  writer.join();
  EXPECT_FALSE(failed);
  EXPECT_GT(reads, 0);
  EXPECT_GT(store_->stats().gc_rows_moved, 0u);
}

// A failed append write (EIO, ENOSPC, or a short write that never progresses) fails the call
// that wrote the buffer with the file named; every row still reads back its last write (the
// buffer keeps it), and the next call writes the buffer again.
TEST_P(LogStoreTest, FailedAppendKeepsRowsReadableAndIsRetried) {
  open(300, /*fault=*/true);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 300; r += 2) rows.push_back(r);
  ASSERT_TRUE(write(rows, 1).ok());
  for (const auto& [fault, err, code] : {std::tuple{IoFault::kWriteError, 5, StatusCode::kIoError},
                                         std::tuple{IoFault::kWriteError, 28, StatusCode::kResourceExhausted},
                                         std::tuple{IoFault::kShortWrite, 5, StatusCode::kIoError}}) {
    const std::vector<int64_t> some = {1, 2, 3, 77};
    faults_->arm(fault, 0, err, /*always=*/true);
    ASSERT_TRUE(write(some, 2).ok());  // buffered: nothing written yet
    const Status st = store_->flush();
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find("rows.bin"), std::string::npos) << st.message();
    expect_all_rows();
    faults_->disarm();
    ASSERT_TRUE(store_->flush().ok());
    expect_all_rows();
  }
  // A write error while the head segment fills (inside write_rows) fails that call the same way.
  faults_->arm(IoFault::kWriteError, 0, 5, /*always=*/true);
  Status st;
  for (uint32_t t = 10; st.ok() && t < 40; ++t) st = write(rows, t);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  faults_->disarm();
  expect_all_rows(rows);  // the failed call's rows may hold either bytes
  ASSERT_TRUE(write(rows, 50).ok());
  ASSERT_TRUE(store_->flush().ok());
  expect_all_rows();
}

// A short write is completed by the retry; a read error is IoError and the store reads fine
// afterwards; a compaction whose read fails leaves every row readable and a later write works.
TEST_P(LogStoreTest, ShortWritesAndReadErrors) {
  open(300, /*fault=*/true);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 300; ++r) rows.push_back(r);
  faults_->arm(IoFault::kShortWrite, 0);
  ASSERT_TRUE(write(rows, 1).ok());
  ASSERT_TRUE(store_->flush().ok());
  EXPECT_EQ(faults_->num_injected(), 1u);
  expect_all_rows();
  std::vector<uint8_t> out(rows.size() * kRowBytes), present(rows.size());
  faults_->arm(IoFault::kReadError, 0, 5);
  const Status st = store_->read_rows(rows, out.data(), present.data());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("rows.bin"), std::string::npos) << st.message();
  faults_->disarm();
  expect_all_rows();
  // Rewrites until a compaction reads (and its read fails).
  faults_->arm(IoFault::kReadError, 0, 5, /*always=*/true);
  Status w;
  for (uint32_t t = 2; w.ok() && t < 60; ++t) w = write(std::vector<int64_t>(rows.begin(), rows.begin() + 150), t);
  EXPECT_EQ(w.code(), StatusCode::kIoError) << "no compaction read failed";
  faults_->disarm();
  expect_all_rows(std::vector<int64_t>(rows.begin(), rows.begin() + 150));
  ASSERT_TRUE(write(rows, 99).ok());
  expect_all_rows();
}

// Absent rows are answered from the index: no read reaches the file.
TEST_P(LogStoreTest, ReadOfNeverWrittenRowDoesNotReadTheFile) {
  open(50, /*fault=*/true);
  std::vector<uint8_t> out(3 * kRowBytes), present(3, 9);
  ASSERT_TRUE(store_->read_rows(std::vector<int64_t>{0, 5, 49}, out.data(), present.data()).ok());
  EXPECT_EQ(present, (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_EQ(faults_->num_reads(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, LogStoreTest, ::testing::Values(IoEngineKind::kUring, IoEngineKind::kThreads),
                         [](const auto& info) { return std::string(info.param == IoEngineKind::kUring ? "io_uring" : "threads"); });

// The size functions: segments of whole record groups, the index width, the bound.
TEST(LogStoreSizesTest, SegmentsIndexAndBound) {
  EXPECT_EQ(log_group_records(136, 4096), 30u);
  EXPECT_EQ(log_group_bytes(5000, 4096), 8192u);
  EXPECT_EQ(log_group_records(5000, 4096), 1u);
  EXPECT_EQ(log_segment_bytes(1000, 136, 4096), kLogMinSegmentBytes);
  EXPECT_EQ(log_segment_bytes(100000000, 136, 4096), kLogMaxSegmentBytes);
  const uint64_t recs = log_segment_records(kLogMaxSegmentBytes, 136, 4096);
  EXPECT_EQ(recs, 16384u * 30);
  EXPECT_EQ(log_index_entry_bytes(100000000, recs), 4u);
  EXPECT_EQ(log_index_entry_bytes(int64_t{3} << 30, recs), 8u);
  EXPECT_EQ(log_store_max_file_bytes(100000000, 136, 4096), log_max_segments(100000000, recs) * kLogMaxSegmentBytes);
  EXPECT_EQ(log_segment_bytes(10, 136, 4096, 5000), 8192u);  // the override, in whole groups
}

}  // namespace
}  // namespace leanemb::tiered
