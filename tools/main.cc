// leanemb command-line tool: parse arguments, call the library, print, map Status to exit codes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  // `train` runs many short OpenMP regions per step, and how idle OpenMP workers wait decides
  // its speed. Measured on 2 cores (ctr_small, 2 threads, samples/s): idle machine: active
  // (spin) 96-103k, libgomp's default (spin a while, then sleep) 57k, passive 60k; one core busy
  // with another process: active 35k, passive 67k. So train picks `active` on an idle machine and
  // `passive` when other processes keep half a core or more busy (sampled over 100 ms).
  // libgomp reads OMP_WAIT_POLICY when it loads, before main(), so the process re-executes itself
  // once with the variable set; a user's own setting is always kept.
  if (argc > 1 && std::strcmp(argv[1], "train") == 0 && std::getenv("OMP_WAIT_POLICY") == nullptr) {
    const double busy_cores = leanemb::tools::busy_cores_elsewhere(0.1);
    const bool busy = busy_cores >= 0.5;
    setenv("OMP_WAIT_POLICY", busy ? "passive" : "active", 1);
    // nn::gemm runs single-threaded OpenBLAS calls inside OpenMP (docs/nn.md); without this,
    // OpenBLAS starts its own thread pool at load time, whose idle threads spin on the cores.
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) setenv("OPENBLAS_NUM_THREADS", "1", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a bad argument (exit code 2).
    return app.exit(e) == 0 ? leanemb::tools::kExitOk : leanemb::tools::kExitBadInput;
  }
  return result.exit_code;
}
