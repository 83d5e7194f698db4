// leanemb command-line tool: parse arguments, call the library, print, map Status to exit codes.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"leanemb: train embedding models whose tables and optimizer state exceed fast memory"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("leanemb ") + LEANEMB_VERSION_STRING);
  leanemb::tools::CommandResult result;
  leanemb::tools::register_train(app, &result);
  leanemb::tools::register_bench(app, &result);
  leanemb::tools::register_ckpt(app, &result);
  leanemb::tools::register_data(app, &result);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a bad argument (exit code 2).
    return app.exit(e) == 0 ? 0 : 2;
  }
  return result.exit_code;
}
