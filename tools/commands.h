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

// The exit codes of every command (README "Exit codes", `leanemb --help`):
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;   // runtime failure: diverged, a rank failed, busy --out, internal
inline constexpr int kExitBadInput = 2;  // bad arguments, config, data or checkpoint for this config
inline constexpr int kExitMemory = 3;    // a memory budget is exhausted
inline constexpr int kExitIo = 4;        // I/O failure: disk full, read/write error, corrupt file
inline constexpr int kExitStopped = 5;   // stopped by a signal after writing a checkpoint
// The table above as `--help` prints it.
const char* exit_code_table();
// InvalidArgument, OutOfRange, NotFound, Unimplemented -> 2; ResourceExhausted -> 3 (4 when its
// message is a full disk's errno text: a row store on a full disk); IoError, DataLoss -> 4;
// everything else -> 1.
int exit_code_for(const Status& s);
// A CLI11 check for integer flags: a decimal integer in [lo, hi] (huge values are refused, not
// saturated; a trailing unit or fraction is refused).
CLI::Validator int_flag(int64_t lo, int64_t hi);
// Prints "leanemb: error: <message>" to stderr and returns the exit code.
int report_error(const Status& s);
// Cores kept busy by all processes over the next `seconds` (this one sleeps meanwhile), from
// /proc/stat; 0 when unknown.
double busy_cores_elsewhere(double seconds);

// "bench, ckpt, ..., train": the names of `app`'s subcommands, comma-separated.
std::string command_list(const CLI::App& app);
// True when `name` is one of `app`'s subcommands.
bool has_command(const CLI::App& app, const std::string& name);

void register_bench(CLI::App& app, CommandResult* result);
void register_ckpt(CLI::App& app, CommandResult* result);
void register_data(CLI::App& app, CommandResult* result);  // convert, gen-data
void register_train(CLI::App& app, CommandResult* result);
void register_plan(CLI::App& app, CommandResult* result);
void register_serve(CLI::App& app, CommandResult* result);  // test, predict, export (docs/serve.md)

}  // namespace leanemb::tools
