// leanemb command-line tool: parse arguments, call the library, print, map Status to exit codes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/commands.h"

namespace {
// Sets `name` to `value` unless the user set it; true when it was set here.
bool set_if_unset(const char* name, const char* value) {
  if (std::getenv(name) != nullptr) return false;
  setenv(name, value, 1);
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  // One thread and wait policy for every command and model (docs/train.md, "Threads and waiting"):
  // the hot loops run on parallel_for's pool (core/parallel.h: chunks claimed by whoever is free,
  // waiting threads yield their core and then sleep, never spin), whatever the machine's load.
  // OpenMP, left for one-off loops (initialization, data generation, row-cache copies), must not
  // spin beside it: OMP_WAIT_POLICY=passive. OpenBLAS runs single-threaded calls inside the pool
  // (nn/gemm.h): OPENBLAS_NUM_THREADS=1 keeps it from starting its own threads, which spin.
  // Both libraries read these variables when they load, before main(), so the process
  // re-executes itself once with them set; a user's own settings are kept.
  const bool set_omp = set_if_unset("OMP_WAIT_POLICY", "passive");
  const bool set_blas = set_if_unset("OPENBLAS_NUM_THREADS", "1");
  if (set_omp || set_blas) execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  CLI::App app{"leanemb: train embedding models whose tables and optimizer state exceed fast memory"};
  app.require_subcommand(1);
  app.footer(leanemb::tools::exit_code_table());
  app.set_version_flag("--version", std::string("leanemb ") + LEANEMB_VERSION_STRING);
  leanemb::tools::CommandResult result;
  leanemb::tools::register_train(app, &result);
  leanemb::tools::register_plan(app, &result);
  leanemb::tools::register_bench(app, &result);
  leanemb::tools::register_ckpt(app, &result);
  leanemb::tools::register_data(app, &result);
  leanemb::tools::register_serve(app, &result);
  // A first argument that is neither an option nor a command is an unknown command (CLI11 would
  // say "A subcommand is required", which misleads).
  if (argc > 1 && argv[1][0] != '-' && !leanemb::tools::has_command(app, argv[1])) {
    std::fprintf(stderr, "leanemb: error: unknown command '%s'; the commands are: %s (leanemb --help)\n", argv[1],
                 leanemb::tools::command_list(app).c_str());
    return leanemb::tools::kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a bad argument (exit code 2).
    return app.exit(e) == 0 ? leanemb::tools::kExitOk : leanemb::tools::kExitBadInput;
  }
  return result.exit_code;
}
