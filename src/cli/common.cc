#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "leanemb/commands.h"

namespace leanemb::cli {

const char* exit_code_table() {
  return "Exit codes (every command):\n"
         "  0  success\n"
         "  1  runtime failure: training diverged, a rank failed, the output directory is in use, internal error\n"
         "  2  bad input: arguments, config, data files, a checkpoint that does not fit the config, an output\n"
         "     directory holding another run (train: --resume or --overwrite; export --serving: --overwrite), an\n"
         "     output file that is one of the inputs\n"
         "  3  a memory budget is exhausted (device or host tier)\n"
         "  4  I/O failure: disk full, a read or write error, a corrupt file (checkpoint or data)\n"
         "  5  stopped by SIGTERM, SIGINT or SIGHUP after writing a checkpoint (train: --resume continues)";
}

int exit_code_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound:
    case StatusCode::kUnimplemented: return kExitBadInput;
    case StatusCode::kResourceExhausted: {
      // The row stores (src/tiered) report a full disk as ResourceExhausted (retrying after
      // freeing space can work); for the exit code it is I/O, like every other full disk.
      const std::string& m = s.message();
      const bool disk = m.find(std::strerror(ENOSPC)) != std::string::npos || m.find(std::strerror(EDQUOT)) != std::string::npos;
      return disk ? kExitIo : kExitMemory;
    }
    case StatusCode::kIoError:
    case StatusCode::kDataLoss: return kExitIo;
    default: return kExitRuntime;
  }
}

namespace {
// Busy and total jiffies of all CPUs (the first line of /proc/stat); false when unreadable.
bool read_cpu_jiffies(unsigned long long* busy, unsigned long long* total) {
  std::ifstream f("/proc/stat");
  std::string cpu;
  unsigned long long v[8] = {};
  if (!(f >> cpu) || cpu != "cpu") return false;
  for (auto& x : v)
    if (!(f >> x)) return false;
  *total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
  *busy = *total - v[3] - v[4];  // minus idle and iowait
  return true;
}
}  // namespace

// CPU jiffies used by this process so far (its threads included: e.g. a BLAS thread pool).
unsigned long long self_jiffies() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  std::getline(f, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

double busy_cores_elsewhere(double seconds) {
  unsigned long long b0, t0, b1, t1;
  const unsigned long long s0 = self_jiffies();
  if (!read_cpu_jiffies(&b0, &t0)) return 0.0;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  if (!read_cpu_jiffies(&b1, &t1) || t1 <= t0) return 0.0;
  const unsigned long long own = self_jiffies() - s0;
  const unsigned long long busy = b1 - b0 > own ? b1 - b0 - own : 0;
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<double>(busy) / static_cast<double>(t1 - t0) * static_cast<double>(n > 0 ? n : 1);
}

int report_error(const Status& s) {
  std::fprintf(stderr, "leanemb: error: %s\n", s.to_string().c_str());
  return exit_code_for(s);
}

}  // namespace leanemb::cli
