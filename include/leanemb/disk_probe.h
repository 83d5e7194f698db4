// The disk a file store would use, measured: random O_DIRECT reads at a queue depth through
// io_uring (the store's engine). `bench --workload tiered` probes the table file it wrote;
// `leanemb plan --probe-disk DIR` probes a scratch file in DIR to predict how long a step's
// store reads take (docs/plan.md, "The store's traffic and the disk"). Timing only: nothing in
// CI depends on the figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::tiered {

// Random reads of `block` bytes at queue depth `qd` for about `seconds` over `path` (opened
// O_DIRECT): reads per second. The offsets are the blocks of random rows of `rows` (rows of
// `row_bytes` each that were written), or of the whole file when `rows` is empty. A sparse file's
// holes never reach the disk, so a probe over a mostly unwritten table file measures the file
// system, not the medium: probe written rows. Errors: IoError (open, io_uring, a failed read),
// InvalidArgument (a file smaller than one block).
Result<double> random_read_iops(const std::string& path, size_t block, int qd, double seconds, uint64_t seed,
                                const std::vector<int64_t>& rows = {}, size_t row_bytes = 0);

struct DiskProbeOptions {
  size_t file_bytes = size_t{1} << 30;  // the scratch file, written in full first
  size_t block = 4096;
  int queue_depth = 64;
  double seconds = 2.0;
  uint64_t seed = 1;
};

struct DiskProbe {
  double read_iops = 0;  // random `block` reads per second at `queue_depth`
  DiskProbeOptions options;
  std::string dir;
  double write_seconds = 0;  // writing the scratch file
};

// Writes a scratch file of options.file_bytes in `dir` (sequentially, O_DIRECT), probes random
// reads over it, and deletes it. Errors: IoError naming the file (no O_DIRECT on the file
// system, a full disk, ...).
Result<DiskProbe> probe_disk(const std::string& dir, const DiskProbeOptions& options = {});

}  // namespace leanemb::tiered
