// File store under injected I/O faults (FaultInjectionFileIo wraps the real engine, io_uring or
// the thread pool): clean errors naming the file, other rows unchanged, the store stays usable
// and a retried write_rows restores every row exactly.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tiered/cache_testing.h"
#include "tiered/file_store.h"

namespace leanemb::tiered {
namespace {

class FaultFixture : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  static constexpr int64_t kRows = 200;
  static constexpr size_t kRowBytes = 1000;  // rows straddle blocks: writes read-modify-write

  void SetUp() override {
    dir_ = testing_util::make_scratch_dir("leanemb-store-f-");
    RowStoreOptions o{StoreKind::kFile, kRows, kRowBytes, dir_ + "/rows.bin", true, 4, GetParam()};
    FileStoreHooks hooks;
    hooks.wrap_io = [this](std::unique_ptr<RowFileIo> io, uint32_t block) {
      auto f = std::make_unique<FaultInjectionFileIo>(std::move(io), block);
      faults_ = f.get();
      return std::unique_ptr<RowFileIo>(std::move(f));
    };
    auto s = make_file_row_store(o, nullptr, hooks);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store_ = std::move(s).value();
    expected_.assign(kRows * kRowBytes, 0);
    std::mt19937_64 rng(1);
    for (auto& b : expected_) b = static_cast<uint8_t>(rng());
    std::vector<int64_t> all(kRows);
    for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
    ASSERT_TRUE(store_->write_rows(all, expected_.data()).ok());
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Every row reads back as expected_, except rows in `except` (they may hold anything).
  void expect_rows_intact(const std::vector<int64_t>& except = {}) {
    std::vector<int64_t> all(kRows);
    for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
    std::vector<uint8_t> out(kRows * kRowBytes), present(kRows);
    ASSERT_TRUE(store_->read_rows(all, out.data(), present.data()).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      if (std::find(except.begin(), except.end(), r) != except.end()) continue;
      ASSERT_EQ(0, std::memcmp(&out[r * kRowBytes], &expected_[r * kRowBytes], kRowBytes)) << "row " << r;
    }
  }

  // New bytes for `rows` (also stored into expected_ once the write succeeds: `commit`).
  std::vector<uint8_t> new_bytes(const std::vector<int64_t>& rows, uint8_t seed) {
    std::vector<uint8_t> v(rows.size() * kRowBytes);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
    return v;
  }
  void commit(const std::vector<int64_t>& rows, const std::vector<uint8_t>& v) {
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(&expected_[static_cast<size_t>(rows[i]) * kRowBytes], &v[i * kRowBytes], kRowBytes);
  }

  std::string dir_;
  std::unique_ptr<RowStore> store_;
  FaultInjectionFileIo* faults_ = nullptr;
  std::vector<uint8_t> expected_;
};

const std::vector<int64_t> kBatch = {3, 4, 5, 40, 41, 120, 199};  // several pieces, shared blocks

// A write that transfers only half its bytes is completed by the store's retry.
TEST_P(FaultFixture, ShortWriteIsRetriedToCompletion) {
  const auto v = new_bytes(kBatch, 1);
  faults_->arm(IoFault::kShortWrite, 0);
  ASSERT_TRUE(store_->write_rows(kBatch, v.data()).ok());
  EXPECT_EQ(faults_->num_injected(), 1u);
  commit(kBatch, v);
  expect_rows_intact();
}

// EIO on the k-th write, for every k of one call: IoError naming the file and a row, rows
// outside the call unchanged, and a retry restores every row.
TEST_P(FaultFixture, WriteErrorSweepLeavesOtherRowsAndRetryRepairs) {
  for (uint64_t k = 0;; ++k) {
    SCOPED_TRACE("fault at write " + std::to_string(k));
    const auto v = new_bytes(kBatch, static_cast<uint8_t>(k + 2));
    const uint64_t injected = faults_->num_injected();
    faults_->arm(IoFault::kWriteError, k, EIO);
    Status st = store_->write_rows(kBatch, v.data());
    faults_->disarm();
    if (faults_->num_injected() == injected) {  // k is past the call's last write: done
      ASSERT_TRUE(st.ok());
      commit(kBatch, v);
      ASSERT_GE(k, 2u);
      break;
    }
    ASSERT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
    EXPECT_NE(st.message().find(dir_ + "/rows.bin"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("row "), std::string::npos) << st.message();
    expect_rows_intact(kBatch);
    ASSERT_TRUE(store_->write_rows(kBatch, v.data()).ok());
    commit(kBatch, v);
    expect_rows_intact();
  }
}

// The same sweep for a bulk write of a range that starts and ends inside blocks: EIO at every
// request of the call gives IoError, rows outside the range keep their bytes (the first and last
// blocks' neighbours too), and a retry restores the range.
TEST_P(FaultFixture, BulkWriteErrorSweepLeavesNeighboursAndRetryRepairs) {
  std::vector<int64_t> range;
  for (int64_t r = 13; r < 150; ++r) range.push_back(r);
  for (uint64_t k = 0;; ++k) {
    SCOPED_TRACE("fault at write " + std::to_string(k));
    const auto v = new_bytes(range, static_cast<uint8_t>(k + 40));
    const uint64_t injected = faults_->num_injected();
    faults_->arm(IoFault::kWriteError, k, EIO);
    Status st = store_->write_range(13, 137, v.data());
    faults_->disarm();
    if (faults_->num_injected() == injected) {
      ASSERT_TRUE(st.ok());
      commit(range, v);
      expect_rows_intact();
      break;
    }
    ASSERT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
    EXPECT_NE(st.message().find("rows.bin"), std::string::npos) << st.message();
    expect_rows_intact(range);
    ASSERT_TRUE(store_->write_range(13, 137, v.data()).ok());
    commit(range, v);
    expect_rows_intact();
  }
  // The read of a range fails cleanly too.
  std::vector<uint8_t> out(range.size() * kRowBytes), present(range.size());
  faults_->arm(IoFault::kReadError, 0, EIO);
  EXPECT_EQ(store_->read_range(13, 137, out.data(), present.data()).code(), StatusCode::kIoError);
  faults_->disarm();
}

// ENOSPC is ResourceExhausted (freeing space and retrying can work).
TEST_P(FaultFixture, NoSpaceIsResourceExhausted) {
  const auto v = new_bytes(kBatch, 9);
  faults_->arm(IoFault::kWriteError, 1, ENOSPC);
  Status st = store_->write_rows(kBatch, v.data());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_NE(st.message().find("rows.bin"), std::string::npos);
  faults_->disarm();
  expect_rows_intact(kBatch);
  ASSERT_TRUE(store_->write_rows(kBatch, v.data()).ok());
  commit(kBatch, v);
  expect_rows_intact();
}

// A write that never makes progress fails with IoError instead of looping.
TEST_P(FaultFixture, PersistentZeroByteWritesFail) {
  faults_->arm(IoFault::kShortWrite, 0, EIO, /*always=*/true);
  const std::vector<int64_t> one = {7};  // one block: half of it rounds down to 0 bytes
  const auto v = new_bytes(one, 3);
  Status st = store_->write_rows(one, v.data());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("no progress"), std::string::npos) << st.message();
  faults_->disarm();
  expect_rows_intact({7});
}

// EIO on a read is IoError naming the file; the store reads fine afterwards. The RMW read of a
// write fails the same way and changes nothing.
TEST_P(FaultFixture, ReadErrorIsIoErrorAndStoreStaysUsable) {
  std::vector<uint8_t> out(kBatch.size() * kRowBytes), present(kBatch.size());
  faults_->arm(IoFault::kReadError, 1, EIO);
  Status st = store_->read_rows(kBatch, out.data(), present.data());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("rows.bin"), std::string::npos) << st.message();
  faults_->arm(IoFault::kReadError, 0, EIO);
  const auto v = new_bytes(kBatch, 4);
  EXPECT_EQ(store_->write_rows(kBatch, v.data()).code(), StatusCode::kIoError);
  faults_->disarm();
  // The failed write's own rows may hold old or new bytes (pieces that needed no read were
  // written while the read failed: the pieces stream); every other row is intact, and a retry
  // repairs the call's rows.
  expect_rows_intact(kBatch);
  ASSERT_TRUE(store_->write_rows(kBatch, v.data()).ok());
  commit(kBatch, v);
  expect_rows_intact();
}

// Absent rows are answered from the presence bitmap: no read reaches the file.
TEST_P(FaultFixture, ReadOfNeverWrittenRowDoesNotReadTheFile) {
  RowStoreOptions o{StoreKind::kFile, 10, 64, dir_ + "/empty.bin", true, 4, GetParam()};
  FaultInjectionFileIo* f = nullptr;
  FileStoreHooks hooks;
  hooks.wrap_io = [&](std::unique_ptr<RowFileIo> io, uint32_t block) {
    auto w = std::make_unique<FaultInjectionFileIo>(std::move(io), block);
    f = w.get();
    return std::unique_ptr<RowFileIo>(std::move(w));
  };
  auto s = make_file_row_store(o, nullptr, hooks);
  ASSERT_TRUE(s.ok());
  std::vector<uint8_t> out(3 * 64), present(3, 9);
  ASSERT_TRUE((*s)->read_rows(std::vector<int64_t>{0, 5, 9}, out.data(), present.data()).ok());
  EXPECT_EQ(present, (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_EQ(f->num_reads(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, FaultFixture, ::testing::Values(IoEngineKind::kUring, IoEngineKind::kThreads),
                         [](const auto& info) { return std::string(info.param == IoEngineKind::kUring ? "io_uring" : "threads"); });

}  // namespace
}  // namespace leanemb::tiered
