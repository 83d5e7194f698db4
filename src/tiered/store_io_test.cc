// The file store's I/O path: job streams (RowFileIo::run_jobs, streamed by io_uring, in waves by
// the thread pool) and the read-modify-write that reads only blocks holding rows it must keep.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "leanemb/disk_probe.h"
#include "tiered/cache_testing.h"
#include "tiered/file_store.h"

namespace leanemb::tiered {
namespace {

std::string temp_dir(const char* tag) {
  return testing_util::make_scratch_dir(std::string("leanemb-storeio-") + tag + "-");
}

// Jobs of two ops on one block each: read block b, add 1 to each of its bytes, write it back.
// The chain (a read whose completion issues a write into the same slot) and the slot recycling
// are what run_jobs adds to submit_and_wait.
class IncrementJobs final : public IoJobs {
 public:
  IncrementJobs(std::vector<uint64_t> blocks, uint8_t* slots, uint32_t block)
      : blocks_(std::move(blocks)), slots_(slots), block_(block), phase_(blocks_.size(), 0) {}
  size_t num_jobs() const override { return blocks_.size(); }
  IoOp start(size_t job, size_t slot) override {
    return IoOp{false, blocks_[job] * block_, slots_ + slot * block_, block_, 0};
  }
  bool next(size_t job, size_t slot, IoOp* op) override {
    EXPECT_EQ(op->result, static_cast<int64_t>(block_));
    (void)slot;
    if (phase_[job]++ == 1) return false;
    for (uint32_t i = 0; i < block_; ++i) ++op->buf[i];
    op->write = true;
    op->result = 0;
    return true;
  }
  bool aborted() const override { return false; }

 private:
  std::vector<uint64_t> blocks_;
  uint8_t* slots_;
  uint32_t block_;
  std::vector<int> phase_;
};

class RunJobsTest : public ::testing::TestWithParam<IoEngineKind> {};

TEST_P(RunJobsTest, ChainsOfReadThenWriteCompleteInEverySlot) {
  const std::string dir = temp_dir("jobs");
  const std::string path = dir + "/f.bin";
  constexpr uint32_t kBlock = 4096;
  constexpr uint64_t kBlocks = 64;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> init(kBlocks * kBlock);
  for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<uint8_t>(i * 7 + i / kBlock);
  void* mem = nullptr;
  ASSERT_EQ(::posix_memalign(&mem, 4096, init.size()), 0);
  std::memcpy(mem, init.data(), init.size());
  ASSERT_EQ(::pwrite(fd, mem, init.size(), 0), static_cast<ssize_t>(init.size()));
  std::free(mem);
  std::unique_ptr<RowFileIo> io;
  if (GetParam() == IoEngineKind::kUring) {
    auto u = make_uring_file_io(fd, 4);
    if (!u.ok()) GTEST_SKIP() << u.status().to_string();
    io = std::move(u).value();
  } else {
    io = make_thread_pool_file_io(fd, 3);
  }
  // Blocks 0..63, some twice (in different jobs, far apart: the second sees the first's write).
  std::vector<uint64_t> blocks;
  for (uint64_t b = 0; b < kBlocks; ++b) blocks.push_back((b * 37) % kBlocks);
  for (uint64_t b = 0; b < 8; ++b) blocks.push_back(b * 5);
  constexpr size_t kSlots = 3;
  void* slots = nullptr;
  ASSERT_EQ(::posix_memalign(&slots, 4096, kSlots * kBlock), 0);
  IncrementJobs jobs(blocks, static_cast<uint8_t*>(slots), kBlock);
  io->run_jobs(jobs, kSlots);
  std::free(slots);
  std::vector<uint8_t> expect = init;
  for (uint64_t b : blocks)
    for (uint32_t i = 0; i < kBlock; ++i) ++expect[b * kBlock + i];
  void* back = nullptr;
  ASSERT_EQ(::posix_memalign(&back, 4096, init.size()), 0);
  ASSERT_EQ(::pread(fd, back, init.size(), 0), static_cast<ssize_t>(init.size()));
  EXPECT_EQ(0, std::memcmp(back, expect.data(), expect.size()));
  std::free(back);
  io.reset();
  ::close(fd);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Engines, RunJobsTest, ::testing::Values(IoEngineKind::kUring, IoEngineKind::kThreads),
                         [](const auto& info) { return std::string(io_engine_kind_name(info.param)) == "io_uring" ? std::string("uring") : std::string("threads"); });

// A write reads a block first only when the block holds a row that was written before and that
// the call does not write: rows never written are never read, so their bytes need no keeping.
class RmwTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  static constexpr int64_t kRows = 1000;
  static constexpr size_t kRowBytes = 136;  // 4096 / 136: about 30 rows per block, some straddle

  void SetUp() override {
    dir_ = temp_dir("rmw");
    RowStoreOptions o{StoreKind::kFile, kRows, kRowBytes, dir_ + "/rows.bin", true, 8, GetParam()};
    FileStoreHooks hooks;
    hooks.wrap_io = [this](std::unique_ptr<RowFileIo> io, uint32_t block) {
      block_ = block;
      auto f = std::make_unique<FaultInjectionFileIo>(std::move(io), block);
      counter_ = f.get();
      return std::unique_ptr<RowFileIo>(std::move(f));
    };
    auto s = make_file_row_store(o, nullptr, hooks);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Writes `rows` with bytes from `seed`; returns the reads the call issued.
  uint64_t write(const std::vector<int64_t>& rows, uint8_t seed) {
    std::vector<uint8_t> v(rows.size() * kRowBytes);
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t k = 0; k < kRowBytes; ++k) v[i * kRowBytes + k] = static_cast<uint8_t>(rows[i] * 3 + k + seed);
    const uint64_t before = counter_->num_reads();
    EXPECT_TRUE(store_->write_rows(rows, v.data()).ok());
    for (size_t i = 0; i < rows.size(); ++i)
      expected_[rows[i]] = std::vector<uint8_t>(v.begin() + i * kRowBytes, v.begin() + (i + 1) * kRowBytes);
    return counter_->num_reads() - before;
  }
  void expect_rows() {
    for (const auto& [row, bytes] : expected_) {
      std::vector<uint8_t> out(kRowBytes);
      uint8_t present = 0;
      const int64_t r = row;
      ASSERT_TRUE(store_->read_rows(std::span<const int64_t>(&r, 1), out.data(), &present).ok());
      ASSERT_EQ(present, 1) << "row " << row;
      ASSERT_EQ(out, bytes) << "row " << row;
    }
  }
  // The first row of the block after the one holding row r's first byte.
  int64_t first_row_past_block_of(int64_t r) const {
    const uint64_t next_block = (static_cast<uint64_t>(r) * kRowBytes / block_ + 1) * block_;
    return static_cast<int64_t>((next_block + kRowBytes - 1) / kRowBytes);
  }

  std::string dir_;
  std::unique_ptr<RowStore> store_;
  FaultInjectionFileIo* counter_ = nullptr;
  uint32_t block_ = 4096;
  std::map<int64_t, std::vector<uint8_t>> expected_;
};

TEST_P(RmwTest, ReadsOnlyBlocksHoldingOtherWrittenRows) {
  // Row 1 alone in an empty store: nothing to keep, no read (the old store read its block).
  EXPECT_EQ(write({1}, 1), 0u);
  // Row 2 shares row 1's block: that block is read so row 1 survives.
  EXPECT_EQ(write({2}, 2), 1u);
  // Rows 1 and 2 rewritten together, with nothing else written in their block: no read.
  EXPECT_EQ(write({1, 2}, 3), 0u);
  // A row in a block of its own again: no read; rows in two far blocks next to written rows:
  // one read each.
  const int64_t far = first_row_past_block_of(500);
  EXPECT_EQ(write({far}, 4), 0u);
  EXPECT_EQ(write({3, far + 1}, 5), 2u);
  expect_rows();
  // Every row of the table: only the blocks (pieces) holding rows written before are read, and
  // every row then reads back.
  std::vector<int64_t> all;
  for (int64_t r = 0; r < kRows; ++r) all.push_back(r);
  EXPECT_EQ(write(all, 6), 0u);  // the call covers every block entirely
  expect_rows();
  EXPECT_GT(write({7}, 7), 0u);  // now its neighbours are written: the block is read
  expect_rows();
}

TEST_P(RmwTest, MatchesAHostStoreUnderRandomWrites) {
  std::mt19937_64 rng(5);
  for (int call = 0; call < 60; ++call) {
    std::vector<int64_t> rows;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const int64_t r = static_cast<int64_t>(rng() % kRows);
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    }
    write(rows, static_cast<uint8_t>(call));
  }
  expect_rows();
}

INSTANTIATE_TEST_SUITE_P(Engines, RmwTest, ::testing::Values(IoEngineKind::kUring, IoEngineKind::kThreads),
                         [](const auto& info) { return std::string(io_engine_kind_name(info.param)) == "io_uring" ? std::string("uring") : std::string("threads"); });

// A table file left by an earlier store is reused, not truncated (truncating frees every block:
// one synchronous discard per extent on a file system mounted with `discard`): its blocks stay
// allocated, and no row of it is present in the new store.
TEST(FileStoreFile, ReopenedFileKeepsItsBlocksAndStartsWithNoRowPresent) {
  const std::string dir = temp_dir("reuse");
  const std::string path = dir + "/rows.bin";
  RowStoreOptions o{StoreKind::kFile, 4096, 136, path, true, 8, IoEngineKind::kAuto};
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 4096; r += 3) rows.push_back(r);
  std::vector<uint8_t> v(rows.size() * 136, 0x5a);
  {
    auto s = make_file_row_store(o, nullptr);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_TRUE(s.value()->write_rows(rows, v.data()).ok());
    ASSERT_TRUE(s.value()->flush().ok());
  }
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ASSERT_GT(before.st_blocks, 0);
  auto s = make_file_row_store(o, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_blocks, before.st_blocks);  // nothing freed
  std::vector<uint8_t> out(rows.size() * 136), present(rows.size(), 7);
  ASSERT_TRUE(s.value()->read_rows(rows, out.data(), present.data()).ok());
  for (uint8_t p : present) ASSERT_EQ(p, 0);
  // A different size: the file is resized (here grown) and works.
  RowStoreOptions bigger = o;
  bigger.num_rows = 10000;
  s.value().reset();
  auto b = make_file_row_store(bigger, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const int64_t last = 9999;
  std::vector<uint8_t> row(136, 0x33), back(136);
  uint8_t here = 0;
  ASSERT_TRUE(b.value()->write_rows(std::span<const int64_t>(&last, 1), row.data()).ok());
  ASSERT_TRUE(b.value()->read_rows(std::span<const int64_t>(&last, 1), back.data(), &here).ok());
  EXPECT_EQ(here, 1);
  EXPECT_EQ(back, row);
  b.value().reset();
  std::filesystem::remove_all(dir);
}

// A table file is locked by the process whose store uses it: a second process gets
// FailedPrecondition naming the holder's pid (two runs sharing a store would corrupt each
// other's rows); the lock goes with the store. The child processes only try to open the file
// (the refusal comes before the store starts any thread; the second try uses io_uring), so the
// test runs under ThreadSanitizer too.
TEST(FileStoreFile, SecondProcessIsRefusedNamingTheHolder) {
  const std::string dir = temp_dir("lock");
  const std::string path = dir + "/rows.bin";
  RowStoreOptions o{StoreKind::kFile, 1000, 64, path, true, 4, IoEngineKind::kUring};
  // Opens the store in a child process; returns its status code and message.
  auto try_in_child = [&](std::string* message) {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      auto s = make_file_row_store(o, nullptr);
      const std::string m = std::to_string(static_cast<int>(s.ok() ? StatusCode::kOk : s.status().code())) + " " +
                            (s.ok() ? std::string() : s.status().message());
      const bool sent = ::write(out[1], m.data(), m.size()) == static_cast<ssize_t>(m.size());
      ::_exit(sent ? 0 : 1);
    }
    ::close(out[1]);
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    ::close(out[0]);
    int st = 0;
    EXPECT_EQ(::waitpid(child, &st, 0), child);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const size_t sp = got.find(' ');
    *message = sp == std::string::npos ? got : got.substr(sp + 1);
    return std::atoi(got.c_str());
  };
  auto held = make_file_row_store(o, nullptr);
  if (!held.ok() && held.status().code() == StatusCode::kUnimplemented) GTEST_SKIP() << held.status().to_string();
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  std::string message;
  EXPECT_EQ(try_in_child(&message), static_cast<int>(StatusCode::kFailedPrecondition)) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("pid " + std::to_string(::getpid())), std::string::npos) << message;
  held.value().reset();  // the lock goes with the store
  EXPECT_EQ(try_in_child(&message), static_cast<int>(StatusCode::kOk)) << message;
  std::filesystem::remove_all(dir);
}

// The same file twice in one process (two tables given one path): the second store is refused
// too, and closing it leaves the first store's lock in place (a POSIX record lock alone would
// have let it in, and its close would have dropped the first store's lock).
TEST(FileStoreFile, SecondStoreInTheSameProcessIsRefused) {
  const std::string dir = temp_dir("lock_same");
  const std::string path = dir + "/rows.bin";
  for (FileStoreLayout layout : {FileStoreLayout::kInPlace, FileStoreLayout::kLog, FileStoreLayout::kMapped}) {
    RowStoreOptions o{StoreKind::kFile, 1000, 64, path, true, 4, IoEngineKind::kThreads};
    o.layout = layout;
    auto first = make_file_row_store(o, nullptr);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    for (int attempt = 0; attempt < 2; ++attempt) {  // a refused open must not release the first lock
      auto second = make_file_row_store(o, nullptr);
      ASSERT_FALSE(second.ok());
      EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status().to_string();
      EXPECT_NE(second.status().message().find("already open in this process"), std::string::npos)
          << second.status().to_string();
    }
    first.value().reset();
    auto again = make_file_row_store(o, nullptr);
    EXPECT_TRUE(again.ok()) << again.status().to_string();
    again.value().reset();
    std::filesystem::remove(path);
  }
  std::filesystem::remove_all(dir);
}

// plan --probe-disk: the probe writes a scratch file in full, reads random blocks of it, and
// leaves nothing behind; a directory it cannot write is an IoError naming the file.
TEST(DiskProbeTest, ProbesAWrittenScratchFileAndDeletesIt) {
  const std::string dir = temp_dir("probe");
  DiskProbeOptions o;
  o.file_bytes = size_t{8} << 20;
  o.seconds = 0.05;
  o.queue_depth = 8;
  auto p = probe_disk(dir, o);
  if (!p.ok() && p.status().message().find("O_DIRECT") != std::string::npos)
    GTEST_SKIP() << "no O_DIRECT here: " << p.status().to_string();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_GT(p.value().read_iops, 0.0);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  auto missing = probe_disk(dir + "/no/such/dir", o);
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("leanemb_disk_probe."), std::string::npos) << missing.status().message();
  EXPECT_EQ(random_read_iops(dir + "/none", 4096, 8, 0.01, 1).status().code(), StatusCode::kIoError);
  o.block = 1000;
  EXPECT_EQ(probe_disk(dir, o).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace leanemb::tiered
