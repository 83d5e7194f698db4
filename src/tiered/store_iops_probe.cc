// store_iops_probe: random aligned-read IOPS of the file row store (io_uring vs thread pool)
// and of two raw baselines (one thread of pread; RowFileIo io_uring without the store), on one
// O_DIRECT file. Not a test (timing decides nothing in CI); results go to docs/tiered.md.
//
//   store_iops_probe DIR [file_gib=2] [seconds=5] [queue_depth=64] [row_bytes=4096]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "leanemb/memory.h"
#include "tiered/file_io.h"
#include "tiered/row_store.h"

using namespace leanemb;
using namespace leanemb::tiered;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Reads batches of `qd` random rows through the store for `seconds`; returns rows per second.
double store_iops(RowStore* store, int64_t num_rows, int qd, double seconds, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> rows(static_cast<size_t>(qd));
  std::vector<uint8_t> out(rows.size() * store->row_bytes()), present(rows.size());
  uint64_t n = 0;
  const double t0 = now_s();
  double t = t0;
  while (t - t0 < seconds) {
    for (auto& r : rows) r = static_cast<int64_t>(rng() % static_cast<uint64_t>(num_rows));
    Status st = store->read_rows(rows, out.data(), present.data());
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      std::exit(1);
    }
    n += rows.size();
    t = now_s();
  }
  return static_cast<double>(n) / (t - t0);
}

// Raw engine: `qd` aligned reads per submit_and_wait (threads == 0) or plain pread QD 1.
double raw_iops(int fd, RowFileIo* io, uint64_t file_bytes, size_t bytes, int qd, double seconds) {
  std::mt19937_64 rng(7);
  void* mem = std::aligned_alloc(4096, bytes * static_cast<size_t>(qd));
  auto* buf = static_cast<uint8_t*>(mem);
  std::vector<IoOp> ops(static_cast<size_t>(io ? qd : 1));
  const uint64_t blocks = file_bytes / bytes;
  uint64_t n = 0;
  const double t0 = now_s();
  double t = t0;
  while (t - t0 < seconds) {
    for (size_t i = 0; i < ops.size(); ++i) {
      ops[i] = {false, (rng() % blocks) * bytes, buf + i * bytes, static_cast<uint32_t>(bytes), 0};
    }
    if (io) {
      io->submit_and_wait(ops);
    } else if (::pread(fd, buf, bytes, static_cast<off_t>(ops[0].offset)) != static_cast<ssize_t>(bytes)) {
      std::perror("pread");
      std::exit(1);
    }
    n += ops.size();
    t = now_s();
  }
  std::free(mem);
  return static_cast<double>(n) / (t - t0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [file_gib=2] [seconds=5] [queue_depth=64] [row_bytes=4096]\n", argv[0]);
    return 2;
  }
  const std::string path = std::string(argv[1]) + "/iops_probe.bin";
  const double gib = argc > 2 ? std::atof(argv[2]) : 2.0;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 5.0;
  const int qd = argc > 4 ? std::atoi(argv[4]) : 64;
  const size_t row_bytes = argc > 5 ? static_cast<size_t>(std::atol(argv[5])) : 4096;
  const int64_t num_rows = static_cast<int64_t>(gib * 1073741824.0) / static_cast<int64_t>(row_bytes);

  // The factory truncates the file, so each engine's store is filled anew (sequential writes
  // of whole blocks: no read-modify-write) before its reads, so they hit real data.
  for (IoEngineKind engine : {IoEngineKind::kUring, IoEngineKind::kThreads}) {
    RowStoreOptions o{StoreKind::kFile, num_rows, row_bytes, path, true, qd, engine};
    auto store = make_row_store(o, nullptr);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.status().to_string().c_str());
      return 1;
    }
    const double tf = now_s();
    const int64_t chunk = std::max<int64_t>(1, (int64_t{32} << 20) / static_cast<int64_t>(row_bytes));
    std::vector<uint8_t> src(static_cast<size_t>(chunk) * row_bytes, 0xA5);
    std::vector<int64_t> rows;
    for (int64_t r0 = 0; r0 < num_rows; r0 += chunk) {
      rows.clear();
      for (int64_t r = r0; r < std::min(num_rows, r0 + chunk); ++r) rows.push_back(r);
      if (Status st = (*store)->write_rows(rows, src.data()); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.to_string().c_str());
        return 1;
      }
    }
    if (Status st = (*store)->flush(); !st.ok()) std::fprintf(stderr, "%s\n", st.to_string().c_str());
    const double fill_s = now_s() - tf;
    const RowStoreStats fs = (*store)->stats();
    std::printf("%s: %.2f GiB, %lld rows of %zu bytes, block %zu, direct %d, fill %.1f s (%.0f MiB/s)\n",
                path.c_str(), gib, static_cast<long long>(num_rows), row_bytes, fs.block_bytes, fs.direct_io, fill_s,
                gib * 1024 / fill_s);
    const double iops = store_iops(store->get(), num_rows, qd, seconds, 1);
    std::printf("store %-8s QD %d: %.0f rows/s\n", std::string(fs.io_engine).c_str(), qd, iops);
  }

  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) {
    std::perror("open");
    return 1;
  }
  const uint64_t file_bytes = static_cast<uint64_t>(num_rows) * row_bytes;
  auto ring = make_uring_file_io(fd, qd);
  if (ring.ok()) std::printf("raw io_uring    QD %d: %.0f IOPS\n", qd, raw_iops(fd, ring->get(), file_bytes, row_bytes, qd, seconds));
  auto pool = make_thread_pool_file_io(fd, std::min(qd, 16));
  std::printf("raw threads(%d) QD %d: %.0f IOPS\n", std::min(qd, 16), qd,
              raw_iops(fd, pool.get(), file_bytes, row_bytes, qd, seconds));
  std::printf("raw pread       QD 1: %.0f IOPS\n", raw_iops(fd, nullptr, file_bytes, row_bytes, 1, seconds));
  ::close(fd);
  ::unlink(path.c_str());
  return 0;
}
