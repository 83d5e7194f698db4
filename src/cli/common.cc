// The CLI's exit codes and error reporting (leanemb/commands.h).
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <string>

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

int report_error(const Status& s) {
  std::fprintf(stderr, "leanemb: error: %s\n", s.to_string().c_str());
  return exit_code_for(s);
}

}  // namespace leanemb::cli
