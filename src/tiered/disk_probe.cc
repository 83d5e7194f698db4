// random_read_iops and probe_disk (disk_probe.h).
#include "leanemb/disk_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "tiered/file_io.h"

namespace leanemb::tiered {

namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

Result<std::unique_ptr<uint8_t, AlignedFree>> aligned(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return resource_exhausted("disk probe: cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 0x5a, bytes);
  return std::unique_ptr<uint8_t, AlignedFree>(static_cast<uint8_t*>(p));
}

}  // namespace

Result<double> random_read_iops(const std::string& path, size_t block, int qd, double seconds, uint64_t seed,
                                const std::vector<int64_t>& rows, size_t row_bytes) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (f.fd < 0) return io_error("disk probe: cannot open '" + path + "' with O_DIRECT: " + std::strerror(errno));
  const off_t size = ::lseek(f.fd, 0, SEEK_END);
  if (size < static_cast<off_t>(block)) return invalid_argument("disk probe: '" + path + "' is smaller than one block");
  LEANEMB_ASSIGN_OR_RETURN(auto io, make_uring_file_io(f.fd, qd));
  LEANEMB_ASSIGN_OR_RETURN(auto buf, aligned(block * static_cast<size_t>(qd)));
  std::mt19937_64 rng(seed);
  const uint64_t blocks = static_cast<uint64_t>(size) / block;
  std::vector<IoOp> ops(static_cast<size_t>(qd));
  uint64_t done = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int i = 0; i < qd; ++i) {
      ops[i] = IoOp{};
      ops[i].offset = rows.empty() ? (rng() % blocks) * block
                                   : static_cast<uint64_t>(rows[rng() % rows.size()]) * row_bytes / block * block;
      ops[i].buf = buf.get() + static_cast<size_t>(i) * block;
      ops[i].len = static_cast<uint32_t>(block);
    }
    io->submit_and_wait(ops);
    for (const IoOp& op : ops) {
      if (op.result != static_cast<int64_t>(block))
        return io_error("disk probe: a read of '" + path + "' returned " + std::to_string(op.result));
      ++done;
    }
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return static_cast<double>(done) / elapsed;
}

Result<DiskProbe> probe_disk(const std::string& dir, const DiskProbeOptions& o) {
  if (o.block == 0 || o.block % 512 != 0 || o.queue_depth < 1 || o.file_bytes < o.block || !(o.seconds > 0))
    return invalid_argument("disk probe: block must be a multiple of 512, queue depth >= 1, the file at least a block");
  const std::string path = dir + "/leanemb_disk_probe." + std::to_string(::getpid());
  DiskProbe p;
  p.options = o;
  p.dir = dir;
  {
    Fd f;
    f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_DIRECT, 0600);
    if (f.fd < 0) return io_error("disk probe: cannot create '" + path + "' with O_DIRECT: " + std::strerror(errno));
    // Written in full: reads of holes would never reach the medium.
    const size_t chunk = size_t{4} << 20;
    LEANEMB_ASSIGN_OR_RETURN(auto buf, aligned(chunk));
    const auto t0 = Clock::now();
    Status st;
    for (size_t at = 0; at < o.file_bytes && st.ok(); at += chunk) {
      const size_t n = std::min(chunk, (o.file_bytes - at + o.block - 1) / o.block * o.block);
      const ssize_t w = ::pwrite(f.fd, buf.get(), n, static_cast<off_t>(at));
      if (w != static_cast<ssize_t>(n))
        st = io_error("disk probe: writing '" + path + "' failed: " + (w < 0 ? std::strerror(errno) : "short write"));
    }
    if (st.ok() && ::fsync(f.fd) != 0) st = io_error("disk probe: fsync of '" + path + "': " + std::strerror(errno));
    p.write_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!st.ok()) {
      ::unlink(path.c_str());
      return st;
    }
  }
  Result<double> iops = random_read_iops(path, o.block, o.queue_depth, o.seconds, o.seed);
  ::unlink(path.c_str());
  if (!iops.ok()) return iops.status();
  p.read_iops = iops.value();
  return p;
}

}  // namespace leanemb::tiered
