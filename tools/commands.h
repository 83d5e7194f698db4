// Subcommand registration for the leanemb CLI. Each cmd_<name>.cc adds one subcommand whose
// callback runs the library and stores its exit code in `result`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "leanemb/status.h"

namespace leanemb::tools {

struct CommandResult {
  int exit_code = 0;
};

// Exit codes: 0 ok, 1 runtime failure (I/O, internal), 2 bad arguments or input,
// 3 resource exhausted (memory budget).
int exit_code_for(const Status& s);
// Prints "leanemb: error: <message>" to stderr and returns the exit code.
int report_error(const Status& s);
// Cores kept busy by all processes over the next `seconds` (this one sleeps meanwhile), from
// /proc/stat; 0 when unknown.
double busy_cores_elsewhere(double seconds);

void register_bench(CLI::App& app, CommandResult* result);
void register_ckpt(CLI::App& app, CommandResult* result);
void register_data(CLI::App& app, CommandResult* result);  // convert, gen-data
void register_train(CLI::App& app, CommandResult* result);
void register_plan(CLI::App& app, CommandResult* result);

}  // namespace leanemb::tools
