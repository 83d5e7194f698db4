// leanemb command-line tool: parse arguments and call one function of the public API per command.
// Every subcommand's options are declared here, the one translation unit that includes CLI11
// (a header-only library that costs about half a minute to compile per file under the sanitizers),
// into the options structs of include/leanemb/commands.h; the commands themselves (parse the
// values, call the library, print, map Status to exit codes) are in src/cli/<name>_command.cc and
// bench/command.cc.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "leanemb/commands.h"

namespace leanemb::cli {
namespace {

// An explicitly empty value ("--rows ''") is an error, not "use the default".
const CLI::Validator& non_empty() {
  static const CLI::Validator v([](std::string& s) { return s.empty() ? std::string("empty value") : std::string(); },
                                "NONEMPTY", "non-empty");
  return v;
}

// A check for integer flags: a decimal integer in [lo, hi] (huge values are refused, not
// saturated; a trailing unit or fraction is refused).
CLI::Validator int_flag(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        int64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        if (ec == std::errc() && end == v.data() + v.size() && x >= lo && x <= hi) return std::string();
        return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'";
      },
      "INT", "int_flag");
}

// "bench, ckpt, ..., train": the names of `app`'s subcommands, comma-separated.
std::string command_list(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(c->get_name());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// True when `name` is one of `app`'s subcommands.
bool has_command(const CLI::App& app, const std::string& name) {
  return !app.get_subcommands([&](const CLI::App* c) { return c->check_name(name); }).empty();
}

// Each add_<command> declares a subcommand's options into its Args and, as its callback, stores
// run_<command>'s exit code in *result.

// --run DIR (or --checkpoint DIR), --set, --quiet: every command here.
void add_model_options(CLI::App* cmd, ServeArgs* a) {
  cmd->add_option("--run,--checkpoint", a->run,
                  "A run directory (train --out: its newest complete checkpoint) or one checkpoint directory")
      ->required()->type_name("DIR")->check(non_empty());
  cmd->add_option("--set", a->sets, "Override a key of the saved config, e.g. memory.device_budget=\"1GiB\" (repeatable)")
      ->type_name("KEY=VALUE");
  cmd->add_flag("--quiet", a->quiet, "No summary on stderr");
  cmd->footer(exit_code_table());
}

void add_train(CLI::App& app, int* result) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model from a TOML config: a CTR model (docs/train.md) or, with task = \"text\", a "
               "fastText-style text classifier (docs/text.md); without --config, the embedded default "
               "(examples/ctr_small.toml: generates its data, trains, evaluates against the teacher)");
  cmd->add_option("--config", a->config, "TOML config file")->type_name("FILE")->check(non_empty());
  cmd->add_option("--set", a->sets, "Override a config key: section.key=value (repeatable)")->type_name("KEY=VALUE");
  cmd->add_option("--steps", a->steps, "Optimizer steps (overrides train.steps; 0 = train.epochs epochs)")->type_name("N")->check(non_empty());
  cmd->add_option("--out", a->out, "Output directory: checkpoints/, metrics.jsonl (default: runs/<the config file's name without "
                                   ".toml>; runs/ctr_small without --config)")->type_name("DIR")->check(non_empty());
  cmd->add_flag("--resume", a->resume,
                "Continue from the newest valid checkpoint in --out (no checkpoint at all: start at step 0; checkpoints "
                "but none valid: fail, unless --start-fresh)");
  cmd->add_flag("--overwrite", a->overwrite,
                "Start at step 0 on an --out that holds an earlier run: its checkpoints and metrics are moved into "
                "--out/replaced-<time>/ (nothing is deleted)");
  cmd->add_flag("--start-fresh", a->start_fresh,
                "With --resume: when no checkpoint in --out is valid, move them into --out/corrupt/ and start at step 0");
  cmd->add_option("--json-summary", a->json_summary, "Write the run summary as JSON to FILE")->type_name("FILE")->check(non_empty());
  cmd->add_option("--device-budget", a->device_budget, "Device tier budget (memory.device_budget), e.g. 512MiB")->type_name("BYTES")->check(non_empty());
  cmd->add_option("--host-budget", a->host_budget, "Host tier budget (memory.host_budget)")->type_name("BYTES")->check(non_empty());
  cmd->add_option("--placement", a->placement, "memory.placement, e.g. optimizer_state=host")->type_name("CAT=TIER,...")->check(non_empty());
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  cmd->add_flag("--print-default-config", a->print_config, "Print the embedded default config and exit");
  cmd->footer(exit_code_table());
  cmd->callback([a, result] { *result = run_train(*a); });
}

void add_plan(CLI::App& app, int* result) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Predict every byte of a run and choose settings that fit a device (docs/plan.md)");
  cmd->add_option("--config", a->config, "A `leanemb train` config to plan")->type_name("FILE")->check(non_empty());
  cmd->add_option("--set", a->sets, "Override a config key: section.key=value (repeatable)")->type_name("KEY=VALUE");
  cmd->add_option("--vocab", a->vocab, "Rows of the table (without --config)")->type_name("N")->check(int_flag(1, int64_t{1} << 48));
  cmd->add_option("--dim", a->dim, "Embedding dim")->type_name("N")->check(int_flag(1, 1 << 16));
  cmd->add_option("--batch", a->batch, "Samples per device per step")->type_name("N")->check(int_flag(1, int64_t{1} << 32));
  cmd->add_option("--seq-len", a->seq_len, "Ids per sample (a sequence, or a bag with --pooling sum|mean)")->type_name("N")->check(int_flag(1, int64_t{1} << 32));
  cmd->add_option("--pooling", a->pooling, "none (sequence output), sum or mean; default none with --seq-len > 1")->type_name("MODE")->check(non_empty());
  cmd->add_option("--optimizer", a->optimizer, "sgd, adagrad, rowwise_adagrad, adam, partial_rowwise_adam, sm3")->capture_default_str()->check(non_empty());
  cmd->add_option("--row-dtype", a->row_dtype, "The user's row dtype (the planner may propose another)")->capture_default_str()->check(non_empty());
  cmd->add_option("--state-dtype", a->state_dtype, "The user's optimizer state dtype")->capture_default_str()->check(non_empty());
  cmd->add_option("--precision", a->precision, "The user's output precision, fp32 (default) or bf16: the embedding output and "
                                               "its gradient in bf16 (AMP; without --config)")->type_name("DTYPE")->check(non_empty());
  cmd->add_option("--preset", a->preset, "ascend-910a, ascend-910b, a100-40, a100-80, h100-80, h200-141, cpu:<bytes>")->capture_default_str()->check(non_empty());
  cmd->add_option("--device-budget", a->device_budget, "Device memory per device (default: the preset's)")->type_name("BYTES")->check(non_empty());
  cmd->add_option("--host-budget", a->host_budget, "Host memory per device (default: no limit)")->type_name("BYTES")->check(non_empty());
  cmd->add_flag("--allow-rowwise", a->allow_rowwise, "Also search row-wise optimizers (rowwise_adagrad, partial_rowwise_adam)");
  cmd->add_flag("--allow-bf16-state", a->allow_bf16_state, "Also search bf16 optimizer state with optimizers it is not proven for (searched by default with adagrad)");
  cmd->add_flag("--allow-8bit-state", a->allow_8bit_state, "Also search 8-bit block-wise optimizer state with optimizers it is not proven for (searched by default with adagrad)");
  cmd->add_flag("--allow-4bit-state", a->allow_4bit_state, "Also search 4-bit block-wise optimizer state with optimizers it is not proven for (searched by default with adagrad)");
  cmd->add_flag("--allow-cache", a->allow_cache, "Also search a device row cache over host rows (docs/tiered.md)");
  cmd->add_option("--allow-unproven", a->allow_unproven, "Also search these lean options although their accuracy parity is not proven (docs/accuracy.md): bf16-rows, fp16-rows, rowwise, bf16-state, 8bit-state, bf16-activations, row-cache, sm3, fp8-rows, q8-rows, 4bit-state, all")->delimiter(',')->type_name("NAME,...");
  cmd->add_option("--max-shards", a->max_shards, "Devices the tables may be sharded over (row-wise)")->capture_default_str()->check(int_flag(1, 1 << 16));
  cmd->add_option("--speed-tolerance", a->speed_tolerance_pct, "Plans whose estimated step is within this percent of the "
                                                             "fastest fitting plan's count as equally fast; the lowest device peak of them is chosen (0: the fastest)")
      ->type_name("PCT")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  cmd->add_flag("--no-host", a->no_host, "Keep rows and optimizer state on the device");
  cmd->add_flag("--keep-precision", a->keep_precision, "Do not propose bf16 activations");
  cmd->add_flag("--largest-table", a->largest_table, "Print the largest table (rows at --dim) the plan and the naive baseline fit on the device");
  cmd->add_flag("--json", a->json, "Print JSON instead of tables");
  cmd->add_option("--disk-iops", a->disk_iops, "Random 4 KiB reads per second of the file store's disk (e.g. from fio at "
                                               "queue depth 64): with a file store, the least time a step's reads take")
      ->type_name("N")->check(CLI::Range(1.0, 1e9));
  cmd->add_option("--probe-disk", a->probe_disk, "Measure --disk-iops in DIR: write a 1 GiB scratch file there, read "
                                                 "random 4 KiB blocks at queue depth 64 for 2 s, delete it")
      ->type_name("DIR")->check(non_empty());
  cmd->add_option("--write-config", a->write_config, "Write the chosen plan as a `leanemb train` config (needs --config)")->type_name("FILE")->check(non_empty());
  cmd->add_option("--html", a->html, "Also write the breakdown as a picture: one self-contained HTML page (inline SVG), the naive "
                                     "baseline beside the chosen plan, by category and tier")->type_name("FILE")->check(non_empty());
  cmd->footer(std::string("plan exits 3 when no plan fits the device (the smallest budget that would is printed).\n") + exit_code_table());
  cmd->callback([a, result] { *result = run_plan(*a); });
}

void add_bench(CLI::App& app, int* result) {
  auto a = std::make_shared<BenchArgs>();
  const std::string names = bench_workload_list();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Run a benchmark workload (docs/benchmarks.md): same inputs for every contender, correctness "
               "gate before timing, medians and p10/p90, memory and bytes per parameter; JSON with --json");
  cmd->add_option("--workload", a->workload, "Workload: " + names)->capture_default_str()->type_name("NAME")->check(non_empty());
  cmd->add_option("--rows", a->rows, "Rows per table E (accepts 2e6); default per workload")->type_name("N")->check(non_empty());
  cmd->add_option("--dim", a->dim, "Embedding dim D; default per workload")->type_name("N")->check(non_empty());
  cmd->add_option("--batch", a->batch, "Bags per batch B; default per workload")->type_name("N")->check(non_empty());
  cmd->add_option("--bag-size", a->bag_size, "Ids per bag L (distinct); default per workload")->type_name("N")->check(non_empty());
  cmd->add_option("--pooling", a->pooling, "sum | mean (default sum)")->type_name("MODE")->check(non_empty());
  cmd->add_option("--alpha", a->alpha, "Zipf exponent of the ids, <= 1 means uniform; default per workload")->type_name("X")->check(non_empty());
  cmd->add_option("--tables", a->tables, "Number of tables T; default per workload")->type_name("N")->check(non_empty());
  cmd->add_option("--dtype", a->dtype, "Row dtype fp32 | fp16 | bf16 | q8 | fp8 | int8 (int8 is lookup-only)")->type_name("DTYPE")->check(non_empty());
  cmd->add_option("--optimizer", a->optimizer, "sgd | adagrad | rowwise_adagrad | adam | partial_rowwise_adam | sm3")->type_name("NAME")->check(non_empty());
  cmd->add_option("--state-dtype", a->state_dtype, "Optimizer state dtype fp32 | bf16 | int8 | int4")->type_name("DTYPE")->check(non_empty());
  cmd->add_option("--threads", a->threads, "OpenMP threads")->capture_default_str()->type_name("N")->check(non_empty());
  cmd->add_option("--iters", a->iters, "Measured iterations (default 50)")->type_name("N")->check(non_empty());
  cmd->add_option("--warmup", a->warmup, "Warm-up iterations (default 10)")->type_name("N")->check(non_empty());
  cmd->add_option("--seed", a->seed, "Seed of the input stream, gradients and table init")->capture_default_str()->type_name("N")->check(non_empty());
  cmd->add_option("--json", a->json, "Write the results as JSON to FILE")->type_name("FILE")->check(non_empty());
  cmd->add_option("--roofline-bytes", a->roofline_bytes, "Buffer of the ceiling probes (>= 64MiB, >> L3)")
      ->capture_default_str()->type_name("SIZE")->check(non_empty());
  cmd->add_flag("--quiet", a->quiet, "No progress lines on stderr");
  cmd->add_option("--device-budget", a->device_budget,
                  "Device tier budget (512MiB, 32GiB): each timed engine gets a DeviceArena of exactly this size")
      ->type_name("BYTES")->check(non_empty());
  cmd->add_option("--cache-fraction", a->cache_fraction, "tiered, restore: cache slots as a fraction of the rows (default 0.2)")->type_name("X")->check(non_empty());
  cmd->add_option("--policy", a->policy, "tiered: cache eviction policies, lru, lfu or clock, or a comma list run side by side (default lru)")->type_name("NAME")->check(non_empty());
  cmd->add_option("--store", a->store, "tiered: row store behind the cache, host or file (default host)")->type_name("NAME")->check(non_empty());
  cmd->add_option("--store-path", a->store_path, "tiered: the file store's table file (default ./leanemb-tiered-<pid>.rows, removed after the run); restore: the directory of its store file and checkpoints (default ./leanemb-restore-<pid>, removed after)")->type_name("FILE")->check(non_empty());
  cmd->add_option("--store-layout", a->store_layout, "tiered: the file store's layout, log or in_place (default log)")->type_name("NAME")->check(non_empty());
  cmd->add_option("--store-direct-io", a->store_direct_io, "tiered: the file store's O_DIRECT, on or off (off: buffered, through the page cache; default on)")->type_name("on|off")->check(non_empty());
  cmd->add_option("--prefetch", a->prefetch, "tiered: fetch the next step's rows during this step, on or off (default on)")->type_name("on|off")->check(non_empty());
  cmd->add_option("--prefetch-nice", a->prefetch_nice, "tiered: nice value of the cache's prefetch thread, -20..19 (default 19; 0 = the process's)")->type_name("N")->check(non_empty());
  cmd->add_flag("--no-resident", a->no_resident, "tiered: skip the resident contender (it needs the whole table in memory)");
  cmd->add_flag("--sweep", a->sweep, "tiered: report hit rates (and the offline LRU simulation) for every --sweep-alphas x --sweep-fractions pair instead");
  cmd->add_option("--sweep-fractions", a->sweep_fractions, "tiered --sweep: cache fractions (default 0.05,0.2,0.5)")->type_name("LIST")->check(non_empty());
  cmd->add_option("--micro-batches", a->micro_batches, "grad-accum: micro-batch counts to run besides 1, the reference (default 2,4)")->type_name("LIST")->check(non_empty());
  cmd->add_option("--precision", a->precision, "grad-accum: the output's and its gradient's precision, fp32 (default) or bf16 (AMP)")->type_name("DTYPE")->check(non_empty());
  cmd->add_option("--sweep-alphas", a->sweep_alphas, "tiered --sweep: Zipf exponents (default 1.05,1.15)")->type_name("LIST")->check(non_empty());
  cmd->add_option("--ops", a->ops, "arena-soak: allocate/free operations per run (default 1e6)")->type_name("N")->check(non_empty());
  cmd->add_option("--host-budget", a->host_budget, "Host tier budget (default: none)")->type_name("BYTES")->check(non_empty());
  cmd->add_option("--placement", a->placement,
                  "Tier per category, e.g. optimizer_state=host (weights, optimizer_state may go to the host)")
      ->type_name("CAT=TIER,...")->check(non_empty());
  cmd->add_option("--max-split", a->max_split, "DeviceArena max_split_bytes: larger cached blocks are not split")
      ->type_name("BYTES")->check(non_empty());
  cmd->footer(
      "With --optimizer, --dtype or --state-dtype the optimizer workload runs that one contender (defaults "
      "rowwise_adagrad / fp32 / fp32; an 8-bit or bf16 --state-dtype alone means adam) instead of its full list. "
      "A failed correctness gate exits 1.\n" + std::string(exit_code_table()));
  cmd->callback([a, result] { *result = run_bench(*a); });
}

void add_ckpt(CLI::App& app, int* result) {
  CLI::App* cmd = app.add_subcommand("ckpt", "Inspect checkpoints: verify checksums, print the content digest, list");
  cmd->require_subcommand(1);
  cmd->footer(exit_code_table());
  auto dir = std::make_shared<std::string>();

  CLI::App* verify = cmd->add_subcommand("verify", "Check the manifest and every block checksum of a checkpoint");
  verify->add_option("DIR", *dir, "Checkpoint directory (<out>/checkpoints/step-<N>)")->required();
  verify->callback([dir, result] { *result = run_ckpt_verify(*dir); });

  CLI::App* digest = cmd->add_subcommand(
      "digest", "Print the XXH3-128 digest of a checkpoint's content (independent of file layout and chunking)");
  digest->add_option("DIR", *dir, "Checkpoint directory (<out>/checkpoints/step-<N>)")->required();
  auto training = std::make_shared<bool>(false);
  digest->add_flag("--training", *training,
                   "Print the training digest of a `leanemb train` checkpoint instead: embedding rows (keyed by global "
                   "row), dense blobs, loss scaler, reader position and step counters; equal for a plain and a sharded "
                   "checkpoint of the same state");
  digest->callback([dir, training, result] { *result = run_ckpt_digest(*dir, *training); });

  CLI::App* list = cmd->add_subcommand("list", "List the checkpoint directories of a run and whether each is complete");
  list->add_option("OUT_DIR", *dir, "Output directory of the run (holds checkpoints/)")->required();
  list->callback([dir, result] { *result = run_ckpt_list(*dir); });
}

void add_data(CLI::App& app, int* result) {
  auto c = std::make_shared<ConvertArgs>();
  CLI::App* conv = app.add_subcommand(
      "convert", "Convert a Criteo-style TSV file to leanemb binary records (docs/formats/binary-data.md): "
                 "categorical values stored as 64-bit hashes, dense values transformed, per-block XXH3 checksums");
  conv->add_option("--in", c->in, "Input TSV file (label, dense, categorical columns)")->required()->type_name("FILE")->check(non_empty());
  conv->add_option("--out", c->out, "Output binary file (written as FILE.tmp, renamed when complete)")
      ->required()->type_name("FILE")->check(non_empty());
  conv->add_option("--num-dense", c->num_dense, "Dense columns")->capture_default_str()->type_name("N")->check(non_empty());
  conv->add_option("--num-sparse", c->num_sparse, "Categorical columns")->capture_default_str()->type_name("N")->check(non_empty());
  conv->add_option("--max-malformed-rate", c->max_malformed_rate, "Fail when malformed lines exceed this fraction")
      ->capture_default_str()->type_name("X")->check(non_empty());
  conv->add_flag("--quiet", c->quiet, "No warnings for malformed lines (they are still counted)");
  conv->footer(exit_code_table());
  conv->callback([c, result] { *result = run_convert(*c); });

  auto g = std::make_shared<GenArgs>();
  CLI::App* gen = app.add_subcommand(
      "gen-data", "Generate Criteo-like synthetic data whose labels come from a planted factorization-machine teacher: "
                  "DIR/train.*, DIR/eval.*, DIR/meta.json (with teacher_auc and teacher_logloss on eval)");
  gen->add_option("--out", g->out, "Output directory (created if missing)")->required()->type_name("DIR")->check(non_empty());
  gen->add_option("--train-rows", g->train_rows, "Training rows (accepts 1e6)")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--eval-rows", g->eval_rows, "Evaluation rows")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--seed", g->seed, "Seed: same seed and options, same bytes")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--num-dense", g->num_dense, "Dense columns")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--num-sparse", g->num_sparse, "Categorical columns")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--vocab", g->vocab, "Vocabulary size: one for all features, or a comma list with one per feature")
      ->capture_default_str()->type_name("N|LIST")->check(non_empty());
  gen->add_option("--zipf", g->zipf, "Zipf exponent of the ids (0 = uniform)")->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--multi-hot-max", g->multi_hot_max, "Values per non-empty categorical field: uniform in [1, L]")
      ->capture_default_str()->type_name("L")->check(non_empty());
  gen->add_option("--format", g->format, "tsv | bin")->capture_default_str()->type_name("FMT")->check(non_empty());
  gen->add_option("--latent-dim", g->latent_dim, "Teacher latent dim k (1..16)")->capture_default_str()->type_name("K")->check(non_empty());
  gen->add_option("--noise", g->noise, "Std of Gaussian noise on the label logit (not in the teacher's p)")
      ->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--label-rate", g->label_rate, "Target mean label")->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--teacher-auc", g->teacher_auc, "Target expected AUC of the teacher")->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--threads", g->threads, "OpenMP threads (0 = default); output does not depend on it")
      ->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_flag("--quiet", g->quiet, "No progress lines on stderr");
  gen->footer(exit_code_table());
  gen->callback([g, result] { *result = run_gen_data(*g); });
}

void add_serve(CLI::App& app, int* result) {
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("test", "Evaluate a trained model on a data file: N, AUC, logloss (CTR) or N, P@k, R@k "
                                               "as `fasttext test FILE k` prints them (text) (docs/serve.md)");
    add_model_options(cmd, a.get());
    cmd->add_option("--data", a->data, "Data file (the training format: Criteo TSV / binary, or fastText lines)")
        ->required()->type_name("FILE")->check(non_empty());
    cmd->add_option("--k", a->k, "Text: labels predicted per line (P@k, R@k)")->capture_default_str()->check(int_flag(1, 1000000));
    cmd->add_option("--rows", a->rows, "CTR: evaluate the first N records (0 = all)")->capture_default_str()->check(int_flag(0, INT64_MAX));
    cmd->add_option("--json", a->json_out, "Also write the results with every digit as JSON to FILE")->type_name("FILE")->check(non_empty());
    cmd->callback([a, result] { *result = run_test(*a); });
  }
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("predict", "Write a trained model's predictions for a data file, one line per record: "
                                                  "a click probability (CTR) or fastText's `predict` / `predict-prob` lines (text)");
    add_model_options(cmd, a.get());
    cmd->add_option("--data", a->data, "Data file (as `test`)")->required()->type_name("FILE")->check(non_empty());
    cmd->add_option("--k", a->k, "Text: labels per line")->capture_default_str()->check(int_flag(1, 1000000));
    cmd->add_flag("--prob", a->probs, "Text: each label followed by its probability (fastText's predict-prob)");
    cmd->add_option("--threshold", a->threshold, "Text: leave out labels of a lower probability")->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--output", a->output, "Write to FILE instead of stdout")->type_name("FILE")->check(non_empty());
    cmd->callback([a, result] { *result = run_predict(*a); });
  }
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("export", "Export a trained model's tables and dense parameters as NumPy .npy files with a "
                                                 "JSON manifest (text models: also word vectors in fastText's .vec format)");
    add_model_options(cmd, a.get());
    cmd->add_option("--out", a->out_dir, "Output directory (created; files in it are replaced)")->required()->type_name("DIR")->check(non_empty());
    cmd->add_flag("--with-state", a->with_state, "Also the optimizer state (row and dense)");
    cmd->add_flag("--serving", a->serving,
                  "Instead: a compact serving checkpoint in --out (int8 rows, no optimizer state) that predict and test read");
    cmd->add_option("--prune-min-count", a->prune_min_count,
                    "With --serving: drop the rows that occur fewer than N times in one pass over the run's training files "
                    "(0: keep every row)")->type_name("N")->capture_default_str();
    cmd->add_flag("--overwrite", a->overwrite,
                  "With --serving: an --out holding checkpoints, shards/ or metrics.jsonl (a training run, an earlier export) is "
                  "moved into --out/replaced-<time>/ first (without it such an --out is refused, exit 2)");
    cmd->callback([a, result] { *result = run_export(*a); });
  }
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("report", "Draw a run, or several overlaid, as one self-contained HTML page (inline SVG): "
                                                 "loss, eval metric and samples/s over steps; memory by tier and category with --summary");
    cmd->add_option("RUN_DIR", a->runs, "The run directories (train --out); several: one line per run on every chart")
        ->required()
        ->check(non_empty());
    cmd->add_option("--summary", a->summaries, "A run's --json-summary file (summary, memory charts): once per RUN_DIR, in their order")
        ->type_name("FILE")
        ->expected(1)  // one file per --summary: `report A --summary a.json B --summary b.json` leaves B a RUN_DIR
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->check(non_empty());
    cmd->add_option("--output", a->output, "The HTML file (default RUN_DIR/report.html; several runs: FIRST_RUN_DIR/compare.html)")
        ->type_name("FILE")
        ->check(non_empty());
    cmd->add_flag("--quiet", a->quiet, "Print nothing");
    cmd->footer(exit_code_table());
    cmd->callback([a, result] { *result = run_report(*a); });
  }
}

}  // namespace
}  // namespace leanemb::cli

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
  app.footer(leanemb::cli::exit_code_table());
  app.set_version_flag("--version", std::string("leanemb ") + LEANEMB_VERSION_STRING);
  int result = leanemb::cli::kExitOk;
  leanemb::cli::add_train(app, &result);
  leanemb::cli::add_plan(app, &result);
  leanemb::cli::add_bench(app, &result);
  leanemb::cli::add_ckpt(app, &result);
  leanemb::cli::add_data(app, &result);
  leanemb::cli::add_serve(app, &result);
  // A first argument that is neither an option nor a command is an unknown command (CLI11 would
  // say "A subcommand is required", which misleads).
  if (argc > 1 && argv[1][0] != '-' && !leanemb::cli::has_command(app, argv[1])) {
    std::fprintf(stderr, "leanemb: error: unknown command '%s'; the commands are: %s (leanemb --help)\n", argv[1],
                 leanemb::cli::command_list(app).c_str());
    return leanemb::cli::kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a bad argument (exit code 2).
    return app.exit(e) == 0 ? leanemb::cli::kExitOk : leanemb::cli::kExitBadInput;
  }
  return result;
}
