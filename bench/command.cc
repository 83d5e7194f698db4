// `leanemb bench`: parses the options, runs a benchmark workload (bench/workloads.h), prints the
// table and writes JSON. Values are taken as strings and parsed here so that every bad value
// gets a message naming the flag and exit code 2 (CLI11's own conversion errors use other codes).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "workloads.h"
#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "leanemb/table_options.h"
#include "leanemb/commands.h"

namespace leanemb::cli {

namespace {


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

// The table and batch shape, the pooling, the rows' dtype and the optimizer.
Status parse_shape_flags(const BenchArgs& a, bench::BenchOptions* out) {
  bench::BenchOptions& o = *out;
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
    auto d = parse_dtype(a.dtype, DTypeUse::kRows);
    if (!d.ok()) return flag_error("--dtype", d.status());
    o.dtype = d.value();
  }
  if (!a.optimizer.empty()) {
    auto k = parse_optimizer(a.optimizer);
    if (!k.ok()) return flag_error("--optimizer", k.status());
    o.optimizer = k.value();
  }
  if (!a.state_dtype.empty()) {
    auto s = parse_dtype(a.state_dtype, DTypeUse::kOptimizerState);
    if (!s.ok()) return flag_error("--state-dtype", s.status());
    o.state_dtype = s.value();
  }
  return Status();
}

// The memory budgets, placement and the arena soak's flags.
Status parse_memory_flags(const BenchArgs& a, bench::BenchOptions* out) {
  bench::BenchOptions& o = *out;
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
  return Status();
}

// --workload tiered's cache and row store (--cache-fraction and --store-path: restore's too).
Status parse_cache_flags(const BenchArgs& a, bench::BenchOptions* out) {
  bench::BenchOptions& o = *out;
  if (!a.cache_fraction.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(o.cache_fraction, parse_real("--cache-fraction", a.cache_fraction));
    if (!(o.cache_fraction > 0 && o.cache_fraction <= 1)) return invalid_argument("--cache-fraction must be in (0, 1]");
  }
  if (!a.policy.empty()) {  // a comma list: one cached contender per policy
    o.cache_policies.clear();
    for (size_t i = 0; i <= a.policy.size();) {
      const size_t j = std::min(a.policy.find(',', i), a.policy.size());
      auto p = parse_cache_policy(a.policy.substr(i, j - i));
      if (!p.ok()) return flag_error("--policy", p.status());
      if (std::find(o.cache_policies.begin(), o.cache_policies.end(), p.value()) != o.cache_policies.end())
        return invalid_argument("--policy names '" + a.policy.substr(i, j - i) + "' twice");
      o.cache_policies.push_back(p.value());
      i = j + 1;
    }
  }
  if (!a.store.empty()) {
    auto k = parse_store_kind(a.store);
    if (!k.ok()) return flag_error("--store", k.status());
    o.store = k.value();
  }
  o.store_path = a.store_path;
  if (!a.store_layout.empty()) {
    auto l = parse_file_store_layout(a.store_layout);
    if (!l.ok()) return flag_error("--store-layout", l.status());
    if (o.store != StoreKind::kFile) return invalid_argument("--store-layout needs --store file");
    o.store_layout = l.value();
  }
  if (!o.store_path.empty() && o.store != StoreKind::kFile && o.workload != "restore")
    return invalid_argument("--store-path needs --store file");
  if (!a.store_direct_io.empty()) {
    if (a.store_direct_io != "on" && a.store_direct_io != "off")
      return invalid_argument("--store-direct-io must be on or off, got '" + a.store_direct_io + "'");
    if (o.store != StoreKind::kFile) return invalid_argument("--store-direct-io needs --store file");
    o.store_direct_io = a.store_direct_io == "on";
  }
  if (!a.prefetch.empty()) {
    if (a.prefetch != "on" && a.prefetch != "off") return invalid_argument("--prefetch must be on or off, got '" + a.prefetch + "'");
    o.prefetch = a.prefetch == "on";
  }
  if (!a.prefetch_nice.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(int64_t n, parse_int("--prefetch-nice", a.prefetch_nice, -20, 19));
    o.prefetch_nice = static_cast<int>(n);
  }
  return Status();
}

// A comma list of finite numbers.
Status parse_real_list(const std::string& flag, const std::string& v, std::vector<double>* out) {
  out->clear();
  size_t i = 0;
  while (i <= v.size()) {
    const size_t j = std::min(v.find(',', i), v.size());
    LEANEMB_ASSIGN_OR_RETURN(double x, parse_real(flag, v.substr(i, j - i)));
    out->push_back(x);
    i = j + 1;
  }
  return Status();
}

// --workload tiered's sweeps; then the check that no tiered flag was given to another workload.
Status parse_sweep_flags(const BenchArgs& a, bench::BenchOptions* out) {
  bench::BenchOptions& o = *out;
  if (!a.sweep_fractions.empty()) LEANEMB_RETURN_IF_ERROR(parse_real_list("--sweep-fractions", a.sweep_fractions, &o.sweep_fractions));
  if (!a.sweep_alphas.empty()) LEANEMB_RETURN_IF_ERROR(parse_real_list("--sweep-alphas", a.sweep_alphas, &o.sweep_alphas));
  for (double f : o.sweep_fractions)
    if (!(f > 0 && f <= 1)) return invalid_argument("--sweep-fractions entries must be in (0, 1]");
  o.sweep = a.sweep;
  o.no_resident = a.no_resident;
  if (!a.micro_batches.empty()) {
    if (o.workload != "grad-accum") return invalid_argument("--micro-batches belongs to --workload grad-accum");
    std::vector<double> k;
    LEANEMB_RETURN_IF_ERROR(parse_real_list("--micro-batches", a.micro_batches, &k));
    o.micro_batches = {1};
    for (double x : k) {
      if (!(x >= 1 && x <= 65536 && x == std::floor(x))) return invalid_argument("--micro-batches entries must be integers in [1, 65536]");
      o.micro_batches.push_back(static_cast<int>(x));
    }
    std::sort(o.micro_batches.begin(), o.micro_batches.end());
    o.micro_batches.erase(std::unique(o.micro_batches.begin(), o.micro_batches.end()), o.micro_batches.end());
  }
  if (!a.precision.empty()) {
    if (o.workload != "grad-accum") return invalid_argument("--precision belongs to --workload grad-accum");
    auto p = parse_dtype(a.precision, DTypeUse::kActivations);
    if (!p.ok()) return flag_error("--precision", p.status());
    if (p.value() == DType::kF16) return invalid_argument("--precision: fp32 or bf16");
    o.precision = p.value();
  }
  const bool tiered_only = !a.policy.empty() || !a.store.empty() || !a.store_layout.empty() || !a.store_direct_io.empty() || !a.prefetch.empty() || !a.prefetch_nice.empty() ||
                           a.sweep || a.no_resident || !a.sweep_fractions.empty() || !a.sweep_alphas.empty();
  const bool restore_ok = o.workload == "restore" && !tiered_only;  // restore takes --cache-fraction, --store-path
  if ((tiered_only || !a.cache_fraction.empty() || !a.store_path.empty()) && o.workload != "tiered" && !restore_ok)
    return invalid_argument("--cache-fraction, --policy, --store, --store-path, --store-layout, --store-direct-io, --prefetch, --prefetch-nice, --sweep* and --no-resident "
                            "belong to --workload tiered (--workload restore takes --cache-fraction and --store-path)");
  return Status();
}

Result<bench::BenchOptions> to_options(const BenchArgs& a) {
  bench::BenchOptions o;
  o.workload = a.workload;
  LEANEMB_RETURN_IF_ERROR(parse_shape_flags(a, &o));
  LEANEMB_RETURN_IF_ERROR(parse_memory_flags(a, &o));
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
  LEANEMB_RETURN_IF_ERROR(parse_cache_flags(a, &o));
  LEANEMB_RETURN_IF_ERROR(parse_sweep_flags(a, &o));
  o.json_path = a.json;
  o.quiet = a.quiet;
  return o;
}

}  // namespace

int run_bench(const BenchArgs& a) {
  auto o = to_options(a);
  if (!o.ok()) return report_error(o.status());
  nlohmann::json doc;
  const Status s = bench::run_workload(o.value(), &doc);
  if (!s.ok()) return report_error(s);
  return 0;
}

std::string bench_workload_list() {
  std::string names;
  for (const auto& n : bench::workload_names()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

}  // namespace leanemb::cli
