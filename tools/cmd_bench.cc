// `leanemb bench`: parses the options, runs a benchmark workload (bench/workloads.h), prints the
// table and writes JSON. Values are taken as strings and parsed here so that every bad value
// gets a message naming the flag and exit code 2 (CLI11's own conversion errors use other codes).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench/workloads.h"
#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "tiered/row_cache.h"
#include "tiered/row_store.h"
#include "tools/commands.h"

namespace leanemb::tools {

namespace {

struct BenchArgs {
  std::string workload = "optimizer";
  std::string rows, dim, batch, bag_size, pooling, alpha, tables, dtype, optimizer, state_dtype;
  std::string threads = "2", iters, warmup, seed = "1", json, roofline_bytes = "1GiB";
  std::string device_budget, host_budget, placement, max_split, ops;
  std::string cache_fraction, policy, store, store_path, prefetch, prefetch_nice, sweep_fractions, sweep_alphas;
  bool sweep = false, no_resident = false;
  bool quiet = false;
};

// Integer flag: decimal ("200000") or an exact integer in scientific notation ("2e6").
Result<int64_t> parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  const std::string what = flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'";
  if (v.empty()) return invalid_argument(what);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0') {
    errno = 0;
    const double d = std::strtod(v.c_str(), &end);
    if (errno != 0 || end == v.c_str() || *end != '\0' || !std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e18)
      return invalid_argument(what);
    x = static_cast<long long>(d);
  }
  if (x < lo || x > hi) return invalid_argument(what);
  return static_cast<int64_t>(x);
}

Result<double> parse_real(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || end == v.c_str() || *end != '\0' || !std::isfinite(d))
    return invalid_argument(flag + " expects a finite number, got '" + v + "'");
  return d;
}

// Prefixes a parse error with the flag it came from.
Status flag_error(const std::string& flag, const Status& s) { return Status(s.code(), flag + ": " + s.message()); }

Result<bench::BenchOptions> to_options(const BenchArgs& a) {
  bench::BenchOptions o;
  o.workload = a.workload;
  constexpr int64_t kBig = int64_t{1} << 40;
  if (!a.rows.empty()) { LEANEMB_ASSIGN_OR_RETURN(o.rows, parse_int("--rows", a.rows, 1, kBig)); }
  if (!a.dim.empty()) { LEANEMB_ASSIGN_OR_RETURN(o.dim, parse_int("--dim", a.dim, 1, 65536)); }
  if (!a.batch.empty()) { LEANEMB_ASSIGN_OR_RETURN(o.batch, parse_int("--batch", a.batch, 1, kBig)); }
  if (!a.bag_size.empty()) { LEANEMB_ASSIGN_OR_RETURN(o.bag_size, parse_int("--bag-size", a.bag_size, 1, kBig)); }
  if (!a.tables.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(int64_t t, parse_int("--tables", a.tables, 1, 4096));
    o.tables = static_cast<int>(t);
  }
  if (!a.alpha.empty()) { LEANEMB_ASSIGN_OR_RETURN(o.alpha, parse_real("--alpha", a.alpha)); }
  if (!a.pooling.empty()) {
    auto p = parse_pooling(a.pooling);
    if (!p.ok()) return flag_error("--pooling", p.status());
    if (p.value() == PoolingMode::kNone) return invalid_argument("--pooling: benchmarks pool bags; use sum or mean");
    o.pooling = p.value();
  }
  if (!a.dtype.empty()) {
    auto d = parse_dtype(a.dtype);
    if (!d.ok()) return flag_error("--dtype", d.status());
    o.dtype = d.value();
  }
  if (!a.optimizer.empty()) {
    auto k = parse_optimizer(a.optimizer);
    if (!k.ok()) return flag_error("--optimizer", k.status());
    o.optimizer = k.value();
  }
  if (!a.state_dtype.empty()) {
    auto s = parse_state_dtype(a.state_dtype);
    if (!s.ok()) return flag_error("--state-dtype", s.status());
    o.state_dtype = s.value();
  }
  if (!a.device_budget.empty()) {
    auto b = parse_bytes(a.device_budget);
    if (!b.ok()) return flag_error("--device-budget", b.status());
    if (b.value() == 0) return invalid_argument("--device-budget must be > 0");
    o.memory.device_budget_bytes = b.value();
  }
  if (!a.host_budget.empty()) {
    auto b = parse_bytes(a.host_budget);
    if (!b.ok()) return flag_error("--host-budget", b.status());
    if (b.value() == 0) return invalid_argument("--host-budget must be > 0");
    o.memory.host_budget_bytes = b.value();
  }
  if (!a.placement.empty()) {
    auto p = parse_placement(a.placement);
    if (!p.ok()) return flag_error("--placement", p.status());
    o.memory.placement = p.value();
  }
  if (!a.ops.empty()) { LEANEMB_ASSIGN_OR_RETURN(o.soak_ops, parse_int("--ops", a.ops, 1, int64_t{1} << 40)); }
  if (!a.max_split.empty()) {
    if (a.device_budget.empty() && a.workload != "arena-soak") return invalid_argument("--max-split needs --device-budget");
    auto b = parse_bytes(a.max_split);
    if (!b.ok()) return flag_error("--max-split", b.status());
    o.memory.max_split_bytes = b.value();
  }
  LEANEMB_ASSIGN_OR_RETURN(int64_t threads, parse_int("--threads", a.threads, 1, 1024));
  o.threads = static_cast<int>(threads);
  if (!a.iters.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(int64_t it, parse_int("--iters", a.iters, 1, 1000000));
    o.iters = static_cast<int>(it);
  }
  if (!a.warmup.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(int64_t wu, parse_int("--warmup", a.warmup, 0, 1000000));
    o.warmup = static_cast<int>(wu);
  }
  LEANEMB_ASSIGN_OR_RETURN(int64_t seed, parse_int("--seed", a.seed, 0, INT64_MAX));
  o.seed = static_cast<uint64_t>(seed);
  auto rb = parse_bytes(a.roofline_bytes);
  if (!rb.ok()) return flag_error("--roofline-bytes", rb.status());
  o.roofline_bytes = rb.value();
  if (!a.cache_fraction.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(o.cache_fraction, parse_real("--cache-fraction", a.cache_fraction));
    if (!(o.cache_fraction > 0 && o.cache_fraction <= 1)) return invalid_argument("--cache-fraction must be in (0, 1]");
  }
  if (!a.policy.empty()) {
    auto p = tiered::parse_cache_policy(a.policy);
    if (!p.ok()) return flag_error("--policy", p.status());
    o.cache_policy = p.value();
  }
  if (!a.store.empty()) {
    if (auto k = tiered::parse_store_kind(a.store); !k.ok()) return flag_error("--store", k.status());
    o.store = a.store;
  }
  o.store_path = a.store_path;
  if (!o.store_path.empty() && o.store != "file" && o.workload != "restore")
    return invalid_argument("--store-path needs --store file");
  if (!a.prefetch.empty()) {
    if (a.prefetch != "on" && a.prefetch != "off") return invalid_argument("--prefetch must be on or off, got '" + a.prefetch + "'");
    o.prefetch = a.prefetch == "on";
  }
  if (!a.prefetch_nice.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(int64_t n, parse_int("--prefetch-nice", a.prefetch_nice, -20, 19));
    o.prefetch_nice = static_cast<int>(n);
  }
  auto parse_list = [&](const std::string& flag, const std::string& v, std::vector<double>* out) -> Status {
    out->clear();
    size_t i = 0;
    while (i <= v.size()) {
      const size_t j = std::min(v.find(',', i), v.size());
      LEANEMB_ASSIGN_OR_RETURN(double x, parse_real(flag, v.substr(i, j - i)));
      out->push_back(x);
      i = j + 1;
    }
    return Status();
  };
  if (!a.sweep_fractions.empty()) LEANEMB_RETURN_IF_ERROR(parse_list("--sweep-fractions", a.sweep_fractions, &o.sweep_fractions));
  if (!a.sweep_alphas.empty()) LEANEMB_RETURN_IF_ERROR(parse_list("--sweep-alphas", a.sweep_alphas, &o.sweep_alphas));
  for (double f : o.sweep_fractions)
    if (!(f > 0 && f <= 1)) return invalid_argument("--sweep-fractions entries must be in (0, 1]");
  o.sweep = a.sweep;
  o.no_resident = a.no_resident;
  const bool tiered_only = !a.policy.empty() || !a.store.empty() || !a.prefetch.empty() || !a.prefetch_nice.empty() ||
                           a.sweep || a.no_resident || !a.sweep_fractions.empty() || !a.sweep_alphas.empty();
  const bool restore_ok = o.workload == "restore" && !tiered_only;  // restore takes --cache-fraction, --store-path
  if ((tiered_only || !a.cache_fraction.empty() || !a.store_path.empty()) && o.workload != "tiered" && !restore_ok)
    return invalid_argument("--cache-fraction, --policy, --store, --store-path, --prefetch, --prefetch-nice, --sweep* and --no-resident "
                            "belong to --workload tiered (--workload restore takes --cache-fraction and --store-path)");
  o.json_path = a.json;
  o.quiet = a.quiet;
  return o;
}

int run_bench(const BenchArgs& a) {
  auto o = to_options(a);
  if (!o.ok()) return report_error(o.status());
  nlohmann::json doc;
  const Status s = bench::run_workload(o.value(), &doc);
  if (!s.ok()) return report_error(s);
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, CommandResult* result) {
  auto a = std::make_shared<BenchArgs>();
  std::string names;
  for (const auto& n : bench::workload_names()) names += (names.empty() ? "" : ", ") + n;
  // An explicitly empty value ("--rows ''") is an error, not "use the default".
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("empty value") : std::string(); }, "NONEMPTY", "non-empty");
  CLI::App* cmd = app.add_subcommand(
      "bench", "Run a benchmark workload (docs/benchmarks.md): same inputs for every contender, correctness "
               "gate before timing, medians and p10/p90, memory and bytes per parameter; JSON with --json");
  cmd->add_option("--workload", a->workload, "Workload: " + names)->capture_default_str()->type_name("NAME")->check(non_empty);
  cmd->add_option("--rows", a->rows, "Rows per table E (accepts 2e6); default per workload")->type_name("N")->check(non_empty);
  cmd->add_option("--dim", a->dim, "Embedding dim D; default per workload")->type_name("N")->check(non_empty);
  cmd->add_option("--batch", a->batch, "Bags per batch B; default per workload")->type_name("N")->check(non_empty);
  cmd->add_option("--bag-size", a->bag_size, "Ids per bag L (distinct); default per workload")->type_name("N")->check(non_empty);
  cmd->add_option("--pooling", a->pooling, "sum | mean (default sum)")->type_name("MODE")->check(non_empty);
  cmd->add_option("--alpha", a->alpha, "Zipf exponent of the ids, <= 1 means uniform; default per workload")->type_name("X")->check(non_empty);
  cmd->add_option("--tables", a->tables, "Number of tables T; default per workload")->type_name("N")->check(non_empty);
  cmd->add_option("--dtype", a->dtype, "Row dtype fp32 | fp16 | bf16 | int8 (int8 is lookup-only)")->type_name("DTYPE")->check(non_empty);
  cmd->add_option("--optimizer", a->optimizer, "sgd | adagrad | rowwise_adagrad | adam | partial_rowwise_adam")->type_name("NAME")->check(non_empty);
  cmd->add_option("--state-dtype", a->state_dtype, "Optimizer state dtype fp32 | bf16 | int8")->type_name("DTYPE")->check(non_empty);
  cmd->add_option("--threads", a->threads, "OpenMP threads")->capture_default_str()->type_name("N")->check(non_empty);
  cmd->add_option("--iters", a->iters, "Measured iterations (default 50)")->type_name("N")->check(non_empty);
  cmd->add_option("--warmup", a->warmup, "Warm-up iterations (default 10)")->type_name("N")->check(non_empty);
  cmd->add_option("--seed", a->seed, "Seed of the input stream, gradients and table init")->capture_default_str()->type_name("N")->check(non_empty);
  cmd->add_option("--json", a->json, "Write the results as JSON to FILE")->type_name("FILE")->check(non_empty);
  cmd->add_option("--roofline-bytes", a->roofline_bytes, "Buffer of the ceiling probes (>= 64MiB, >> L3)")
      ->capture_default_str()->type_name("SIZE")->check(non_empty);
  cmd->add_flag("--quiet", a->quiet, "No progress lines on stderr");
  cmd->add_option("--device-budget", a->device_budget,
                  "Device tier budget (512MiB, 32GiB): each timed engine gets a DeviceArena of exactly this size")
      ->type_name("BYTES")->check(non_empty);
  cmd->add_option("--cache-fraction", a->cache_fraction, "tiered, restore: cache slots as a fraction of the rows (default 0.2)")->type_name("X")->check(non_empty);
  cmd->add_option("--policy", a->policy, "tiered: cache eviction policy, lru or lfu (default lru)")->type_name("NAME")->check(non_empty);
  cmd->add_option("--store", a->store, "tiered: row store behind the cache, host or file (default host)")->type_name("NAME")->check(non_empty);
  cmd->add_option("--store-path", a->store_path, "tiered: the file store's table file (default ./leanemb-tiered-<pid>.rows, removed after the run); restore: the directory of its store file and checkpoints (default ./leanemb-restore-<pid>, removed after)")->type_name("FILE")->check(non_empty);
  cmd->add_option("--prefetch", a->prefetch, "tiered: fetch the next step's rows during this step, on or off (default on)")->type_name("on|off")->check(non_empty);
  cmd->add_option("--prefetch-nice", a->prefetch_nice, "tiered: nice value of the cache's prefetch thread, -20..19 (default 19; 0 = the process's)")->type_name("N")->check(non_empty);
  cmd->add_flag("--no-resident", a->no_resident, "tiered: skip the resident contender (it needs the whole table in memory)");
  cmd->add_flag("--sweep", a->sweep, "tiered: report hit rates (and the offline LRU simulation) for every --sweep-alphas x --sweep-fractions pair instead");
  cmd->add_option("--sweep-fractions", a->sweep_fractions, "tiered --sweep: cache fractions (default 0.05,0.2,0.5)")->type_name("LIST")->check(non_empty);
  cmd->add_option("--sweep-alphas", a->sweep_alphas, "tiered --sweep: Zipf exponents (default 1.05,1.15)")->type_name("LIST")->check(non_empty);
  cmd->add_option("--ops", a->ops, "arena-soak: allocate/free operations per run (default 1e6)")->type_name("N")->check(non_empty);
  cmd->add_option("--host-budget", a->host_budget, "Host tier budget (default: none)")->type_name("BYTES")->check(non_empty);
  cmd->add_option("--placement", a->placement,
                  "Tier per category, e.g. optimizer_state=host (weights, optimizer_state may go to the host)")
      ->type_name("CAT=TIER,...")->check(non_empty);
  cmd->add_option("--max-split", a->max_split, "DeviceArena max_split_bytes: larger cached blocks are not split")
      ->type_name("BYTES")->check(non_empty);
  cmd->footer(
      "With --optimizer, --dtype or --state-dtype the optimizer workload runs that one contender (defaults "
      "rowwise_adagrad / fp32 / fp32; an 8-bit or bf16 --state-dtype alone means adam) instead of its full list. "
      "A failed correctness gate exits 1.\n" + std::string(exit_code_table()));
  cmd->callback([a, result] { result->exit_code = run_bench(*a); });
}

}  // namespace leanemb::tools
