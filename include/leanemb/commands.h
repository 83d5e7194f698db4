// The leanemb CLI's commands. tools/main.cc, the one translation unit that includes CLI11,
// declares every subcommand's options into an <Name>Args struct below and calls the command's
// run_<name>, whose return value is the process's exit code. Each run_<name> parses the values,
// calls the library, prints and maps Status to an exit code; implemented in src/cli/<name>_command.cc
// (common.cc: the exit codes), except run_bench and bench_workload_list, which are in bench/command.cc,
// in the benchmark workloads' library: installed beside libleanemb (component dev) and exported
// as leanemb::leanemb_bench_workloads, which a consumer calling them links (the CLI does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::cli {

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
// Prints "leanemb: error: <message>" to stderr and returns the exit code.
int report_error(const Status& s);


// `leanemb train` (src/cli/train_command.cc): a config of either task (docs/train.md, docs/text.md).
struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string steps, out, json_summary;  // out empty: runs/<config stem> (default_out)
  std::string device_budget, host_budget, placement;
  bool resume = false, overwrite = false, start_fresh = false, quiet = false, print_config = false;
};
int run_train(const TrainArgs& a);

// `leanemb plan` (src/cli/plan_command.cc, docs/plan.md).
struct PlanArgs {
  std::string config;
  std::vector<std::string> sets;
  int64_t vocab = 0, dim = 0, batch = 0, seq_len = 0;
  std::string pooling, optimizer = "adam", row_dtype = "fp32", state_dtype = "fp32", preset = "ascend-910a";
  std::string device_budget, host_budget, write_config;
  std::string precision;  // --precision: the embedding-only output's (fp32 | bf16; empty: fp32)
  std::string html;  // --html FILE: also the breakdown as a picture (plan_report_html)
  std::vector<std::string> allow_unproven;  // --allow-unproven: lean options (bf16-rows, ..., all) allowed without proof
  bool json = false, allow_rowwise = false, allow_bf16_state = false, allow_8bit_state = false, allow_4bit_state = false,
       allow_cache = false;
  bool no_host = false, keep_precision = false, largest_table = false;
  int max_shards = 1;
  double speed_tolerance_pct = 1.0;  // --speed-tolerance: estimates within this % of the fastest are equal
  double disk_iops = 0;    // --disk-iops: random reads/s of the store's disk
  std::string probe_disk;  // --probe-disk DIR: measure them there (probe_disk, leanemb/disk_probe.h)
};
int run_plan(const PlanArgs& a);

// `leanemb bench` (bench/command.cc, docs/benchmarks.md; link leanemb::leanemb_bench_workloads). Values stay strings: run_bench parses them,
// so that every bad value gets a message naming its flag and exit code 2.
struct BenchArgs {
  std::string workload = "optimizer";
  std::string rows, dim, batch, bag_size, pooling, alpha, tables, dtype, optimizer, state_dtype;
  std::string threads = "2", iters, warmup, seed = "1", json, roofline_bytes = "1GiB";
  std::string device_budget, host_budget, placement, max_split, ops;
  std::string cache_fraction, policy, store, store_path, store_layout, store_direct_io, prefetch, prefetch_nice, sweep_fractions, sweep_alphas;
  std::string micro_batches;  // grad-accum: --micro-batches LIST
  std::string precision;      // grad-accum: --precision fp32 | bf16
  bool sweep = false, no_resident = false;
  bool quiet = false;
};
int run_bench(const BenchArgs& a);
// "roofline, tbe-default, ...": the workloads --workload accepts.
std::string bench_workload_list();

// `leanemb ckpt verify | digest | list` (src/cli/ckpt_command.cc, docs/formats/checkpoint.md).
int run_ckpt_verify(const std::string& dir);
int run_ckpt_digest(const std::string& dir, bool training);
int run_ckpt_list(const std::string& out_dir);

// `leanemb convert` and `leanemb gen-data` (src/cli/data_command.cc, docs/data.md); values parsed as in bench.
struct ConvertArgs {
  std::string in, out, num_dense = "13", num_sparse = "26", max_malformed_rate = "0.001";
  bool quiet = false;
};
int run_convert(const ConvertArgs& a);
struct GenArgs {
  std::string out, train_rows = "1000000", eval_rows = "100000", seed = "1", num_dense = "13", num_sparse = "26";
  std::string vocab = "10000", zipf = "1.05", multi_hot_max = "1", format = "tsv", latent_dim = "4", noise = "0";
  std::string label_rate = "0.25", teacher_auc = "0.8", threads = "0";
  bool quiet = false;
};
int run_gen_data(const GenArgs& a);

// `leanemb test`, `predict`, `export`, `report` (src/cli/serve_command.cc, docs/serve.md).
struct ServeArgs {
  std::string run, data, json_out, output, out_dir, summary;
  std::vector<std::string> sets;
  std::vector<std::string> runs, summaries;  // report: RUN_DIR ..., --summary per run
  int64_t k = 1, rows = 0, prune_min_count = 0;
  double threshold = 0.0;
  bool probs = false, quiet = false, with_state = false, serving = false, overwrite = false;
};
int run_test(const ServeArgs& a);
int run_predict(const ServeArgs& a);
int run_export(const ServeArgs& a);
int run_report(const ServeArgs& a);

}  // namespace leanemb::cli
