// `leanemb bench` workloads. Invariants every workload keeps (docs/benchmarks.md):
//   * the id stream and the gradient array are generated once per shape and shared, unchanged,
//     by every contender of that shape (one distinct batch per iteration, cycling through
//     kStreamBatches pre-generated batches);
//   * each contender owns its TrackingAllocator, so "memory" is that contender's alone;
//   * a contender is timed only after its correctness gate ran; a failed gate is reported and
//     makes run_workload return an error after everything else has run;
//   * ceilings used for efficiencies are measured in the same run, right before the contender.
#include "workloads.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "bench_internal.h"

namespace leanemb::bench {

namespace {

using namespace internal;  // NOLINT: this file is the internals' main user

// ---- running contenders, interleaved --------------------------------------------------------
//
// The machine is shared and its bandwidth swings by up to 3x within seconds, so contenders that
// are compared are alive at the same time and timed in rounds: in each round every contender
// of the group runs a block of iterations (the order rotates from round to round), and, where a
// ceiling is wanted, a short gather probe runs too. Ratios and efficiencies are medians of
// per-round ratios (docs/benchmarks.md, principle 3).

struct RunConfig {
  int threads = 2;
  int iters = 50;
  int warmup = 10;
  uint64_t seed = 1;
  size_t roofline_bytes = size_t{1} << 30;
  int block = 5;  // iterations per contender per round
  MemorySystemOptions memory;
  bool quiet = false;
};

struct Live {
  const Shape* shape = nullptr;
  const Contender* c = nullptr;
  const Stream* stream = nullptr;
  Engine e;
  json j;
  bool gate_pass = true;
  std::vector<float> out;
  int64_t cursor = 0;  // the contender's own iteration count: batch = cursor % kStreamBatches
  std::vector<double> fwd, step;
  std::vector<std::vector<double>> fwd_round, step_round;
  // Forward alone, in iterations with no backward in between: the lookup kernel without the
  // previous update's dirty rows being written back underneath it.
  std::vector<double> fwd_only;
  std::vector<std::vector<double>> fwd_only_round;
  double unique_sum = 0;
  GatherPattern pattern;  // what its forward reads, for the ceiling probe
  double fwd_bytes = 0;
};

Status run_iters(Live& lv, int n, int round);

// Builds the engine, runs the gate, records the build-time RSS growth.
Status prepare(Live& lv, const RunConfig& rc, const Progress& progress) {
  const Shape& s = *lv.shape;
  const Contender& c = *lv.c;
  progress("%s: building %d table(s) of %lld rows x %lld (%s rows, %s, state %s)", c.name.c_str(), s.tables,
           static_cast<long long>(s.rows), static_cast<long long>(s.dim), std::string(dtype_name(c.dtype)).c_str(),
           c.frozen ? "frozen" : std::string(optimizer_name(c.optimizer.kind)).c_str(),
           std::string(dtype_name(c.optimizer.state_dtype)).c_str());
  const size_t rss0 = proc_status_bytes("VmRSS");
  const auto t_build = Clock::now();
  LEANEMB_ASSIGN_OR_RETURN(lv.e, build_engine(s, c, s.rows, rc.seed, rc.threads, false, rc.memory));
  lv.j["build_s"] = ms_since(t_build) / 1e3;
  const size_t rss1 = proc_status_bytes("VmRSS");
  // Approximate: reads low when the C library reuses memory it already holds (freed by an
  // earlier contender or gate) instead of mapping new pages; `memory` is the exact figure.
  lv.j["rss_growth_at_build_bytes"] = rss1 > rss0 ? rss1 - rss0 : 0;
  const RowLayout& l = lv.e.coll->layout(0);
  lv.pattern.row_bytes = l.weight_bytes;
  lv.pattern.stride_bytes = l.stride_bytes;
  // A table smaller than the probe buffer: the probe reads segments of the table's size, a
  // feature's worth of rows at a time, as the forward does; a larger one: the whole buffer.
  const size_t table_bytes = static_cast<size_t>(s.rows) * l.stride_bytes;
  if (table_bytes < rc.roofline_bytes) {
    lv.pattern.segment_bytes = table_bytes;
    lv.pattern.per_segment = s.batch * s.bag;
  }
  lv.out.resize(static_cast<size_t>(s.batch * lv.e.coll->pooled_dim()));
  lv.fwd_bytes = static_cast<double>(lv.out.size()) * 4.0 +
                 static_cast<double>(lv.stream->lookups_per_batch) * static_cast<double>(l.weight_bytes);

  progress("%s: correctness gate", c.name.c_str());
  LEANEMB_ASSIGN_OR_RETURN(GateResult gate, run_gate(s, c, lv.e, *lv.stream, rc.seed, rc.threads));
  lv.gate_pass = gate.pass;
  lv.j["gate"] = gate.pass ? "pass" : "fail";
  lv.j["gate_method"] = gate.method;
  lv.j["gate_forward_max_rel_diff"] = gate.forward.rel();
  lv.j["gate_weights_max_rel_diff"] = c.frozen ? json(nullptr) : json(gate.weights.rel());
  lv.j["gate_state_max_rel_diff"] = (c.frozen || l.state_bytes == 0) ? json(nullptr) : json(gate.state.rel());
  lv.j["gate_bit_exact"] = gate.forward.bit_exact && gate.weights.bit_exact && gate.state.bit_exact;
  if (!gate.pass) {
    lv.j["gate_detail"] = gate.detail;
    progress("%s: GATE FAILED: %s", c.name.c_str(), gate.detail.c_str());
  }
  // Bytes one step moves between tiers (non-zero when weights or optimizer state are on the host).
  lv.e.mem->reset_transfers();
  LEANEMB_RETURN_IF_ERROR(run_iters(lv, 1, -1));
  const TransferStats ts = lv.e.mem->transfers();
  lv.j["transfers_one_step"] = {{"host_to_device_bytes", ts.host_to_device()}, {"device_to_host_bytes", ts.device_to_host()}};
  return Status();
}

// Runs n iterations; records them (in round `round`) unless round < 0 (warm-up).
Status run_iters(Live& lv, int n, int round) {
  const Shape& s = *lv.shape;
  EmbeddingCollection& coll = *lv.e.coll;
  for (int k = 0; k < n; ++k) {
    const SparseBatch sb = view_batch(lv.stream->batches[static_cast<size_t>(lv.cursor++ % kStreamBatches)], s.batch);
    const auto t0 = Clock::now();
    LEANEMB_RETURN_IF_ERROR(coll.forward(sb, lv.out));
    const double f = ms_since(t0);
    double stp = f;
    int64_t unique = 0;
    if (!lv.c->frozen) {
      LEANEMB_ASSIGN_OR_RETURN(UpdateReport rep, coll.backward_update(sb, lv.stream->grad));
      stp = ms_since(t0);
      unique = rep.unique_rows;
    }
    if (round < 0) continue;
    lv.fwd.push_back(f);
    lv.step.push_back(stp);
    lv.fwd_round[static_cast<size_t>(round)].push_back(f);
    lv.step_round[static_cast<size_t>(round)].push_back(stp);
    lv.unique_sum += static_cast<double>(unique);
  }
  return Status();
}

// Runs n forward-only iterations and records them in round `round`.
Status run_forward_only(Live& lv, int n, int round) {
  const Shape& s = *lv.shape;
  for (int k = 0; k < n; ++k) {
    const SparseBatch sb = view_batch(lv.stream->batches[static_cast<size_t>(lv.cursor++ % kStreamBatches)], s.batch);
    const auto t0 = Clock::now();
    LEANEMB_RETURN_IF_ERROR(lv.e.coll->forward(sb, lv.out));
    const double f = ms_since(t0);
    lv.fwd_only.push_back(f);
    lv.fwd_only_round[static_cast<size_t>(round)].push_back(f);
  }
  return Status();
}

// Forward and step times, their rates and bytes per second.
void timing_json(Live& lv, int rounds, int block) {
  json& j = lv.j;
  const RowLayout& l = lv.e.coll->layout(0);
  const Summary fs = summarize(lv.fwd), ss = summarize(lv.step);
  const double lookups = static_cast<double>(lv.stream->lookups_per_batch);
  const double fwd_gbs = fs.median > 0 ? lv.fwd_bytes / (fs.median * 1e-3) / 1e9 : 0.0;
  j["measured_iters"] = lv.fwd.size();
  j["rounds"] = rounds;
  j["block_iters"] = block;
  j["forward_ms_median"] = fs.median;
  j["forward_ms_p10"] = fs.p10;
  j["forward_ms_p90"] = fs.p90;
  j["forward_only_ms_median"] = summarize(lv.fwd_only).median;
  j["lookups_per_batch"] = lv.stream->lookups_per_batch;
  j["lookups_per_s"] = fs.median > 0 ? lookups / (fs.median * 1e-3) : 0.0;
  j["forward_gbs"] = fwd_gbs;
  j["forward_bytes_formula"] = "(output bytes + lookups x row bytes) / forward time (FBGEMM)";
  if (lv.c->frozen) {
    j["step_ms_median"] = nullptr;
    j["step_ms_p10"] = nullptr;
    j["step_ms_p90"] = nullptr;
    j["step_note"] = "lookup-only table (frozen): forward only";
  } else {
    const double unique = lv.unique_sum / static_cast<double>(std::max<size_t>(1, lv.fwd.size()));
    const double row = static_cast<double>(l.weight_bytes), state = static_cast<double>(l.state_bytes);
    const double grad_bytes = static_cast<double>(lv.out.size()) * 4.0;
    const double true_bytes = lookups * row + unique * 2.0 * (row + state) + grad_bytes;
    j["step_ms_median"] = ss.median;
    j["step_ms_p10"] = ss.p10;
    j["step_ms_p90"] = ss.p90;
    j["step_lookups_per_s"] = ss.median > 0 ? lookups / (ss.median * 1e-3) : 0.0;
    j["unique_rows_per_step"] = unique;
    j["step_true_gbs"] = ss.median > 0 ? true_bytes / (ss.median * 1e-3) / 1e9 : 0.0;
    j["step_bytes_formula"] = "lookups x row bytes + unique rows x 2 x (row + state bytes) + gradient bytes";
  }
}

// Per-round ratios against the shape's baseline contender `base`, which ran in the same group.
void baseline_json(Live& lv, const Live& base, int rounds) {
  json& j = lv.j;
  std::vector<double> fr, sr, fo;
  for (int r = 0; r < rounds; ++r) {
    const double bo = median_of(base.fwd_only_round[static_cast<size_t>(r)]);
    const double co = median_of(lv.fwd_only_round[static_cast<size_t>(r)]);
    if (bo > 0 && co > 0) fo.push_back(co / bo);
    const double bf = median_of(base.fwd_round[static_cast<size_t>(r)]), cf = median_of(lv.fwd_round[static_cast<size_t>(r)]);
    const double bs = median_of(base.step_round[static_cast<size_t>(r)]), cs = median_of(lv.step_round[static_cast<size_t>(r)]);
    if (bf > 0 && cf > 0) fr.push_back(cf / bf);
    if (bs > 0 && cs > 0 && !lv.c->frozen && !base.c->frozen) sr.push_back(cs / bs);
  }
  j["baseline"] = base.c->name;
  j["forward_ms_ratio_vs_baseline"] = fr.empty() ? json(nullptr) : json(median_of(fr));
  j["forward_only_ms_ratio_vs_baseline"] = fo.empty() ? json(nullptr) : json(median_of(fo));
  j["step_ms_ratio_vs_baseline"] = sr.empty() ? json(nullptr) : json(median_of(sr));
  j["ratio_method"] = "median over rounds of (this contender's median / baseline's median in the same round)";
}

// The forward's efficiency against the random-gather ceiling: the full probe before the rounds
// and the short probes between them (one per round). fwd_gbs: the forward's median GB/s.
void ceiling_json(Live& lv, const std::vector<double>& round_ceiling, const GatherCeiling& full_ceiling, int rounds,
                  double fwd_gbs) {
  json& j = lv.j;
  std::vector<double> eff;
  for (int r = 0; r < rounds; ++r) {
    const double cf = median_of(lv.fwd_round[static_cast<size_t>(r)]);
    const double ceil_r = round_ceiling[static_cast<size_t>(r)];
    if (cf > 0 && ceil_r > 0) eff.push_back(lv.fwd_bytes / (cf * 1e-3) / 1e9 / ceil_r);
  }
  const double quick = median_of(round_ceiling);
  const double ceiling = std::max(quick, full_ceiling.gather_gbs);
  j["gather_ceiling"] = to_json(full_ceiling);
  j["gather_ceiling_round_median_gbs"] = quick;
  j["gather_ceiling_gbs"] = ceiling;
  j["gather_ceiling_note"] =
      "random gather of rows of this contender's row bytes and stride over a separate buffer (in table-sized "
      "segments, one feature's lookups at a time, when a table is smaller than the buffer), summed in registers. "
      "gather_ceiling: full probe before the rounds (best of repeats, prefetch distances and hints); "
      "gather_ceiling_round_median_gbs: short probes between the rounds; gather_ceiling_gbs: the larger of the two";
  j["forward_efficiency"] = ceiling > 0 ? fwd_gbs / ceiling : 0.0;
  j["forward_efficiency_note"] = "forward GB/s (median) / gather_ceiling_gbs";
  j["forward_efficiency_same_round"] = eff.empty() ? 0.0 : median_of(eff);
  j["forward_efficiency_same_round_note"] =
      "median over rounds of forward GB/s / that round's short probe; the short probes run between contender "
      "blocks and suffer the same cold page walks, so this is the kinder figure";
}

// Memory by tier, the arena, bytes per parameter, the table against L3, peak RSS.
void footprint_json(Live& lv) {
  json& j = lv.j;
  const Shape& s = *lv.shape;
  const RowLayout& l = lv.e.coll->layout(0);
  const auto tiers = lv.e.mem->stats();
  j["memory"] = memory_json(tiers[0]);
  j["memory_host"] = memory_json(tiers[1]);
  j["placement"] = lv.e.mem->placement().to_string();
  const size_t budget = lv.e.mem->options().device_budget_bytes;
  j["device_budget_bytes"] = budget;
  j["device_peak_bytes"] = tiers[0].peak_bytes;
  if (budget) j["device_peak_within_budget"] = tiers[0].peak_bytes <= budget;
  if (const DeviceArena* a = lv.e.mem->arena()) {
    const ArenaStats as = a->arena_stats();
    j["arena"] = {{"reserved_bytes", as.reserved_bytes}, {"cached_free_bytes", as.cached_free_bytes},
                  {"largest_free_bytes", as.largest_free_bytes}, {"fragmentation", as.fragmentation},
                  {"num_segments", as.num_segments}, {"huge_pages", as.huge_pages}};
  }
  const double params = static_cast<double>(s.tables) * static_cast<double>(s.rows) * static_cast<double>(s.dim);
  size_t wbytes = 0, sbytes = 0;
  for (const MemoryStats& ms : tiers) {
    wbytes += ms[Category::kWeights].current_bytes;
    sbytes += ms[Category::kOptimizerState].current_bytes;
  }
  j["bytes_per_param"] = static_cast<double>(wbytes + sbytes) / params;
  j["row_bytes"] = l.weight_bytes;
  j["state_bytes_per_row"] = l.state_bytes;
  j["stride_bytes"] = l.stride_bytes;
  const double table_bytes = static_cast<double>(s.tables) * static_cast<double>(s.rows) * static_cast<double>(l.stride_bytes);
  j["table_bytes"] = table_bytes;
  const size_t l3 = l3_cache_bytes();
  j["l3_bytes"] = l3;
  j["table_over_l3"] = l3 > 0 ? json(table_bytes / static_cast<double>(l3)) : json(nullptr);
  j["peak_rss_bytes"] = process_max_rss_bytes();
  j["peak_rss_scope"] =
      "process-wide (getrusage ru_maxrss) at the end of this contender's group: contenders compared with each other "
      "are alive together, so this covers all of them; rss_growth_at_build_bytes is this contender's own resident "
      "growth when its tables were built, and memory is its exact engine accounting";
}

// Fills the timing part of lv.j. `base` is the shape's baseline contender when it ran in the
// same group (per-round ratios), else null.
void finish(Live& lv, const Live* base, const std::vector<double>* round_ceiling, const GatherCeiling* full_ceiling,
            int rounds, int block) {
  timing_json(lv, rounds, block);
  if (base != nullptr) baseline_json(lv, *base, rounds);
  if (round_ceiling != nullptr && full_ceiling != nullptr) {
    const double fwd_ms = summarize(lv.fwd).median;
    ceiling_json(lv, *round_ceiling, *full_ceiling, rounds, fwd_ms > 0 ? lv.fwd_bytes / (fwd_ms * 1e-3) / 1e9 : 0.0);
  }
  footprint_json(lv);
}

json contender_header(const Shape& s, const Contender& c) {
  return {{"name", c.name},
          {"shape", s.name},
          {"tables", s.tables},
          {"rows", s.rows},
          {"dim", s.dim},
          {"batch", s.batch},
          {"bag_size", s.bag},
          {"alpha", s.alpha},
          {"pooling", std::string(pooling_name(s.pooling))},
          {"dtype", std::string(dtype_name(c.dtype))},
          {"optimizer", c.frozen ? std::string("none (frozen)") : std::string(optimizer_name(c.optimizer.kind))},
          {"state_dtype", std::string(dtype_name(c.optimizer.state_dtype))},
          {"learning_rate", c.optimizer.learning_rate},
          {"eps", c.optimizer.eps}};
}

// ---- workload definitions ----------------------------------------------------------------------

struct Plan {
  std::vector<Shape> shapes;
  std::vector<Contender> contenders;
  // true: each shape's first contender is the baseline of that shape's contenders (precision:
  // fp32 of each shape); false: the plan's first contender is everyone's baseline (skew).
  bool baseline_per_shape = true;
};

OptimizerOptions make_optimizer(OptimizerKind k, DType sd) {
  OptimizerOptions o;
  o.kind = k;
  o.learning_rate = 0.01f;
  o.eps = default_eps(k);
  o.state_dtype = sd;
  return o;
}

Contender make_contender(int shape, DType dt, OptimizerKind k, DType sd, bool ceiling) {
  Contender c;
  c.shape = shape;
  c.dtype = dt;
  c.frozen = !dtype_traits(dt).trainable;
  c.optimizer = make_optimizer(c.frozen ? OptimizerKind::kSgd : k, sd);
  c.want_ceiling = ceiling;
  c.name = std::string(dtype_name(dt)) + "/" + (c.frozen ? std::string("frozen") : std::string(optimizer_name(k)));
  if (!c.frozen && c.optimizer.state_dtype != DType::kF32 && k != OptimizerKind::kSgd &&
      k != OptimizerKind::kRowwiseAdagrad && k != OptimizerKind::kSm3)
    c.name += "/state:" + std::string(dtype_name(sd));
  return c;
}

Shape apply_overrides(Shape s, const BenchOptions& o) {
  if (o.rows) s.rows = *o.rows;
  if (o.dim) s.dim = *o.dim;
  if (o.batch) s.batch = *o.batch;
  if (o.bag_size) s.bag = *o.bag_size;
  if (o.pooling) s.pooling = *o.pooling;
  if (o.alpha) s.alpha = *o.alpha;
  if (o.tables) s.tables = *o.tables;
  return s;
}

Status validate_shape(const Shape& s) {
  if (s.tables < 1 || s.tables > kMaxTables)
    return invalid_argument("--tables must be in [1, " + std::to_string(kMaxTables) + "], got " + std::to_string(s.tables));
  if (s.rows < 1) return invalid_argument("--rows must be >= 1, got " + std::to_string(s.rows));
  if (s.dim < 1 || s.dim > 65536) return invalid_argument("--dim must be in [1, 65536], got " + std::to_string(s.dim));
  if (s.batch < 1) return invalid_argument("--batch must be >= 1, got " + std::to_string(s.batch));
  if (s.bag < 1 || s.bag > s.rows)
    return invalid_argument("--bag-size must be in [1, rows = " + std::to_string(s.rows) + "] (bags hold distinct ids), got " +
                            std::to_string(s.bag));
  if (s.pooling == PoolingMode::kNone) return invalid_argument("--pooling must be sum or mean for benchmarks");
  if (!std::isfinite(s.alpha)) return invalid_argument("--alpha must be finite");
  if (static_cast<double>(s.batch) * static_cast<double>(s.bag) >= 2147483647.0)
    return invalid_argument("--batch x --bag-size must be < 2^31 lookups per feature");
  return Status();
}

// A single contender from --dtype/--optimizer/--state-dtype, defaults filled per workload.
Contender single_contender(const BenchOptions& o, DType default_dtype, OptimizerKind default_opt, bool ceiling) {
  const DType dt = o.dtype.value_or(default_dtype);
  OptimizerKind k = o.optimizer.value_or(default_opt);
  if (!o.optimizer && o.state_dtype && *o.state_dtype != DType::kF32) k = OptimizerKind::kAdam;
  return make_contender(0, dt, k, o.state_dtype.value_or(DType::kF32), ceiling);
}

// --workload optimizer: every optimizer (and a few dtypes) on one shape, or the one --dtype /
// --optimizer / --state-dtype name.
Status plan_optimizer(const BenchOptions& o, bool single, Plan* out) {
  Plan& p = *out;
  p.shapes.push_back(apply_overrides({"optimizer", 1, 2000000, 128, 4096, 20, 1.05, PoolingMode::kSum}, o));
  if (single) {
    if (o.dtype && !dtype_traits(*o.dtype).trainable)
      return invalid_argument("--dtype " + std::string(dtype_name(*o.dtype)) +
                              " rows are lookup-only; the optimizer workload trains (use --workload precision)");
    p.contenders.push_back(single_contender(o, DType::kF32, OptimizerKind::kRowwiseAdagrad, false));
  } else {
    using K = OptimizerKind;
    for (K k : {K::kSgd, K::kAdagrad, K::kRowwiseAdagrad, K::kAdam, K::kPartialRowwiseAdam, K::kSm3})
      p.contenders.push_back(make_contender(0, DType::kF32, k, DType::kF32, false));
    p.contenders.push_back(make_contender(0, DType::kF32, K::kAdam, DType::kInt8Blockwise, false));
    p.contenders.push_back(make_contender(0, DType::kBF16, K::kRowwiseAdagrad, DType::kF32, false));
    p.contenders.push_back(make_contender(0, DType::kBF16, K::kSm3, DType::kF32, false));
    // fp16 and q8 rows: the weights' stochastic rounding against fp32 RowwiseAdagrad in one run;
    // q8 also at the rows of the 4-bit state below, so that the two differ only in the state.
    for (DType r : {DType::kF16, DType::kQ8}) p.contenders.push_back(make_contender(0, r, K::kRowwiseAdagrad, DType::kF32, false));
    // Per-element Adagrad state in little memory (issue 39), against bf16 row-wise Adagrad above
    // (2.06 bytes per parameter at dim 128): 8-bit state with bf16 (3.06), q8 (2.09) and fp8 rows
    // (2.06); 4-bit state (stochastic rounding) with q8 (1.59) and bf16 rows (2.56).
    for (auto [rows, state] : {std::pair{DType::kBF16, DType::kInt8Blockwise}, {DType::kQ8, DType::kInt8Blockwise},
                               {DType::kFP8, DType::kInt8Blockwise}, {DType::kQ8, DType::kInt4Blockwise},
                               {DType::kBF16, DType::kInt4Blockwise}})
      p.contenders.push_back(make_contender(0, rows, K::kAdagrad, state, false));
  }
  return Status();
}

// --workload precision: every row dtype on three table sizes.
void plan_precision(const BenchOptions& o, Plan* out) {
  Plan& p = *out;
  // The tbe-default shape; one table of 1e6 rows (fp32 16x and bf16 8x this machine's 32 MiB
  // L3: out of cache, and within the reach of the TLB's huge-page entries); one of 1e7 rows
  // (155x L3 in fp32, where every lookup also pays a page walk). --rows, --batch and --tables resize
  // the 1e7-row table; --dim, --bag-size, --alpha, --pooling apply to all three.
  for (Shape s : {Shape{"tbe-default", 32, 100000, 128, 512, 20, 1.0, PoolingMode::kSum},
                  Shape{"mid-table", 1, 1000000, 128, 4096, 20, 1.0, PoolingMode::kSum}}) {
    if (o.dim) s.dim = *o.dim;
    if (o.bag_size) s.bag = *o.bag_size;
    if (o.alpha) s.alpha = *o.alpha;
    if (o.pooling) s.pooling = *o.pooling;
    p.shapes.push_back(s);
  }
  p.shapes.push_back(apply_overrides({"large-table", 1, 10000000, 128, 4096, 20, 1.0, PoolingMode::kSum}, o));
  std::vector<DType> dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8, DType::kFP8, DType::kInt8Rowwise};
  if (o.dtype) dtypes = {DType::kF32, *o.dtype};  // fp32 stays as the baseline of the speedup
  if (o.dtype && *o.dtype == DType::kF32) dtypes = {DType::kF32};
  const OptimizerKind k = o.optimizer.value_or(OptimizerKind::kRowwiseAdagrad);
  const DType sd = o.state_dtype.value_or(DType::kF32);
  for (int si = 0; si < static_cast<int>(p.shapes.size()); ++si)
    for (DType dt : dtypes) {
      Contender c = make_contender(si, dt, k, sd, true);
      c.name = p.shapes[static_cast<size_t>(si)].name + ":" + c.name;
      p.contenders.push_back(c);
    }
}

// --workload skew: one contender per Zipf exponent, the first (uniform) everyone's baseline.
void plan_skew(const BenchOptions& o, Plan* out) {
  Plan& p = *out;
  p.baseline_per_shape = false;
  for (double a : {1.0, 1.05, 1.15, 1.2}) {
    Shape s = apply_overrides({"", 1, 10000000, 128, 2048, 20, 1.0, PoolingMode::kSum}, o);
    s.alpha = a;
    char name[32];
    std::snprintf(name, sizeof name, a <= 1.0 ? "uniform" : "zipf-%.2f", a);
    s.name = name;
    p.shapes.push_back(s);
    Contender c = single_contender(o, DType::kF32, OptimizerKind::kRowwiseAdagrad, false);
    c.shape = static_cast<int>(p.shapes.size()) - 1;
    c.name = s.name + ":" + c.name;
    p.contenders.push_back(c);
  }
}

Result<Plan> plan_workload(const BenchOptions& o) {
  Plan p;
  const std::string& w = o.workload;
  const bool single = o.dtype || o.optimizer || o.state_dtype;
  if (w == "tbe-default") {
    // FBGEMM's TBE benchmark defaults (row-wise Adagrad is its default optimizer).
    p.shapes.push_back(apply_overrides({"tbe-default", 32, 100000, 128, 512, 20, 1.0, PoolingMode::kSum}, o));
    p.contenders.push_back(single_contender(o, DType::kF32, OptimizerKind::kRowwiseAdagrad, true));
  } else if (w == "tbe-ci") {
    p.shapes.push_back(apply_overrides({"tbe-ci", 1, 10000000, 256, 13107, 55, 1.15, PoolingMode::kSum}, o));
    p.contenders.push_back(single_contender(o, DType::kF16, OptimizerKind::kRowwiseAdagrad, true));
  } else if (w == "optimizer") {
    LEANEMB_RETURN_IF_ERROR(plan_optimizer(o, single, &p));
  } else if (w == "precision") {
    plan_precision(o, &p);
  } else if (w == "skew") {
    plan_skew(o, &p);
  } else {
    std::string names;
    for (const auto& n : workload_names()) names += (names.empty() ? "" : ", ") + n;
    const bool planned = w == "dlrm";
    return Status(planned ? StatusCode::kUnimplemented : StatusCode::kInvalidArgument,
                  "workload '" + w + "' " + (planned ? "is not implemented yet" : "is unknown") + " (available: " + names + ")");
  }
  for (const Shape& s : p.shapes) LEANEMB_RETURN_IF_ERROR(validate_shape(s));
  for (const Contender& c : p.contenders) {
    auto l = make_row_layout(p.shapes[static_cast<size_t>(c.shape)].dim, c.dtype, c.optimizer);
    if (!l.ok()) return Status(l.status().code(), c.name + ": " + l.status().message());
  }
  return p;
}

// Splits the plan into groups run one after the other. Contenders that are compared (one shape,
// or the whole plan when it has one baseline) are alive together; a group is split only when it
// would not fit in memory.
std::vector<std::vector<size_t>> plan_groups(const Plan& p, size_t budget_bytes) {
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> cur;
  size_t cur_bytes = 0;
  for (size_t i = 0; i < p.contenders.size(); ++i) {
    const Contender& c = p.contenders[i];
    const Shape& s = p.shapes[static_cast<size_t>(c.shape)];
    const auto l = make_row_layout(s.dim, c.dtype, c.optimizer);
    const size_t bytes = static_cast<size_t>(s.tables) * static_cast<size_t>(s.rows) * (l.ok() ? l.value().stride_bytes : 0);
    const bool new_shape = !cur.empty() && p.baseline_per_shape && p.contenders[cur.back()].shape != c.shape;
    if (!cur.empty() && (new_shape || cur_bytes + bytes > budget_bytes)) {
      groups.push_back(cur);
      cur.clear();
      cur_bytes = 0;
    }
    cur.push_back(i);
    cur_bytes += bytes;
  }
  if (!cur.empty()) groups.push_back(cur);
  return groups;
}

// The baseline of contender i: its shape's first contender, or the plan's first.
size_t baseline_of(const Plan& p, size_t i) {
  if (!p.baseline_per_shape) return 0;
  for (size_t k = 0; k < p.contenders.size(); ++k)
    if (p.contenders[k].shape == p.contenders[i].shape) return k;
  return i;
}

// Builds and gates a group's contenders (a shape's id stream is generated on first use).
Status prepare_group(const Plan& plan, const std::vector<size_t>& group, std::vector<std::optional<Stream>>& streams,
                     const RunConfig& rc, const Progress& progress, std::vector<std::unique_ptr<Live>>* lives) {
  for (size_t i : group) {
    const Contender& c = plan.contenders[i];
    const Shape& s = plan.shapes[static_cast<size_t>(c.shape)];
    auto& st = streams[static_cast<size_t>(c.shape)];
    if (!st) {
      progress("generating the input stream of shape %s: %d batch(es) x %d table(s) x %lld bags x %lld ids, alpha %.2f",
               s.name.c_str(), kStreamBatches, s.tables, static_cast<long long>(s.batch), static_cast<long long>(s.bag),
               s.alpha);
      LEANEMB_ASSIGN_OR_RETURN(Stream gen, make_stream(s, rc.seed));
      st = std::move(gen);
    }
    auto lv = std::make_unique<Live>();
    lv->shape = &s;
    lv->c = &c;
    lv->stream = &*st;
    lv->j = contender_header(s, c);
    progress("contender %zu/%zu: %s", i + 1, plan.contenders.size(), c.name.c_str());
    const Status ps = prepare(*lv, rc, progress);
    if (!ps.ok()) return Status(ps.code(), c.name + ": " + ps.message());
    lives->push_back(std::move(lv));
  }
  return Status();
}

// A group's gather ceilings, per distinct row pattern: the full probe before the rounds, and
// the best of a few short probes in each round.
using CeilingKey = std::tuple<size_t, size_t, size_t, int64_t>;
CeilingKey ceiling_key(const GatherPattern& p) { return CeilingKey{p.row_bytes, p.stride_bytes, p.segment_bytes, p.per_segment}; }
struct Ceilings {
  std::unique_ptr<GatherProbe> probe;
  std::map<CeilingKey, std::pair<GatherPattern, GatherCeiling>> full;
  std::map<CeilingKey, std::vector<double>> per_round;
};

// One full probe per distinct row pattern of the contenders that want a ceiling.
Status measure_full_ceilings(const std::vector<std::unique_ptr<Live>>& lives, const RunConfig& rc,
                             const Progress& progress, Ceilings* c) {
  for (const auto& lv : lives) {
    if (!lv->c->want_ceiling || c->full.count(ceiling_key(lv->pattern))) continue;
    if (!c->probe) { LEANEMB_ASSIGN_OR_RETURN(c->probe, GatherProbe::create(rc.roofline_bytes, rc.threads)); }
    progress("measuring the random-gather ceiling for %zu-byte rows (stride %zu) over %s%s", lv->pattern.row_bytes,
             lv->pattern.stride_bytes, format_bytes(rc.roofline_bytes).c_str(),
             lv->pattern.segment_bytes ? (" in table-sized segments of " + format_bytes(lv->pattern.segment_bytes)).c_str() : "");
    LEANEMB_ASSIGN_OR_RETURN(GatherCeiling g, c->probe->measure(lv->pattern));
    c->full[ceiling_key(lv->pattern)] = {lv->pattern, g};
  }
  return Status();
}

// A round's short probes: per pattern, as many row bytes as one forward of its contenders reads
// (at least 64 MiB), best of 3.
Status probe_round(const std::vector<std::unique_ptr<Live>>& lives, Ceilings* c) {
  for (auto& [k, pg] : c->full) {
    double best = 0;
    size_t traffic = size_t{64} << 20;
    for (const auto& lv : lives)
      if (ceiling_key(lv->pattern) == k)
        traffic = std::max(traffic, static_cast<size_t>(lv->stream->lookups_per_batch) * lv->pattern.row_bytes);
    for (int rep = 0; rep < 3; ++rep) {
      LEANEMB_ASSIGN_OR_RETURN(double v, c->probe->quick_gbs(pg.first, pg.second.best_prefetch_rows, traffic));
      best = std::max(best, v);
    }
    c->per_round[k].push_back(best);
  }
  return Status();
}

// The measured rounds: each round probes the ceilings, then every contender (rotating which goes
// first) runs a block of steps and of forwards alone.
Status run_rounds(std::vector<std::unique_ptr<Live>>& lives, const RunConfig& rc, int rounds, int block,
                  const Progress& progress, Ceilings* c) {
  auto last_report = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    const int n = std::min(block, rc.iters - r * block);
    LEANEMB_RETURN_IF_ERROR(probe_round(lives, c));
    for (size_t k = 0; k < lives.size(); ++k) {
      Live& lv = *lives[(k + static_cast<size_t>(r)) % lives.size()];
      // One unmeasured iteration first: the previous contender evicted this one's hot rows
      // from the caches, and a steady training loop would not pay that.
      Status st = lives.size() > 1 ? run_iters(lv, 1, -1) : Status();
      if (st.ok()) st = run_iters(lv, n, r);
      if (st.ok()) st = run_forward_only(lv, n, r);
      if (!st.ok()) return Status(st.code(), lv.c->name + ": " + st.message());
    }
    if (std::chrono::duration<double>(Clock::now() - last_report).count() > 5.0 || r + 1 == rounds) {
      last_report = Clock::now();
      progress("round %d/%d done (%d measured iterations per contender)", r + 1, rounds, std::min(rc.iters, (r + 1) * block));
    }
  }
  return Status();
}

// Runs one group: prepare all, warm up all, then interleaved rounds with ceiling probes.
Status run_group(const Plan& plan, const std::vector<size_t>& group, std::vector<std::optional<Stream>>& streams,
                 const RunConfig& rc, const Progress& progress, json* contenders_out, std::string* failed) {
  std::vector<std::unique_ptr<Live>> lives;
  LEANEMB_RETURN_IF_ERROR(prepare_group(plan, group, streams, rc, progress, &lives));
  // Ceilings: one full probe per distinct row shape, then a short probe every round.
  Ceilings ceilings;
  LEANEMB_RETURN_IF_ERROR(measure_full_ceilings(lives, rc, progress, &ceilings));
  progress("warm-up: %d iteration(s) per contender", rc.warmup);
  for (auto& lv : lives) LEANEMB_RETURN_IF_ERROR(run_iters(*lv, rc.warmup, -1));
  const int block = std::max(1, std::min(rc.block, rc.iters));
  const int rounds = (rc.iters + block - 1) / block;
  for (auto& lv : lives) {
    lv->fwd_round.assign(static_cast<size_t>(rounds), {});
    lv->step_round.assign(static_cast<size_t>(rounds), {});
    lv->fwd_only_round.assign(static_cast<size_t>(rounds), {});
  }
  LEANEMB_RETURN_IF_ERROR(run_rounds(lives, rc, rounds, block, progress, &ceilings));
  for (auto& lv : lives) {
    // Per-round ratios need the baseline in this group.
    const size_t bi = baseline_of(plan, static_cast<size_t>(lv->c - plan.contenders.data()));
    const Live* base = nullptr;
    for (auto& other : lives)
      if (other->c == &plan.contenders[bi]) base = other.get();
    const CeilingKey key = ceiling_key(lv->pattern);
    const bool has_ceiling = lv->c->want_ceiling && ceilings.full.count(key);
    finish(*lv, base, has_ceiling ? &ceilings.per_round[key] : nullptr, has_ceiling ? &ceilings.full[key].second : nullptr,
           rounds, block);
    if (!lv->gate_pass) *failed += (failed->empty() ? "" : ", ") + lv->c->name;
    contenders_out->push_back(lv->j);
    std::printf("\nmemory of %s:\n%s", lv->c->name.c_str(), lv->e.mem->memory_summary().c_str());
  }
  return Status();
}

}  // namespace

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> kNames = {"roofline", "tbe-default", "optimizer", "precision", "tbe-ci", "skew",
                                                     "arena-soak", "tiered", "sharded", "restore", "grad-accum"};
  return kNames;
}

namespace {

// The options every planned workload runs with. Errors: InvalidArgument.
Result<RunConfig> run_config(const BenchOptions& o) {
  if (o.threads < 1 || o.threads > 1024) return invalid_argument("--threads must be in [1, 1024], got " + std::to_string(o.threads));
  RunConfig rc;
  rc.threads = o.threads;
  rc.iters = o.iters.value_or(50);
  rc.warmup = o.warmup.value_or(10);
  rc.seed = o.seed;
  rc.roofline_bytes = o.roofline_bytes;
  rc.memory = o.memory;
  rc.quiet = o.quiet;
  if (rc.iters < 1) return invalid_argument("--iters must be >= 1, got " + std::to_string(rc.iters));
  if (rc.warmup < 0) return invalid_argument("--warmup must be >= 0, got " + std::to_string(rc.warmup));
  return rc;
}

// --workload roofline: the machine's bandwidth ceilings.
Status run_roofline(const RunConfig& rc, const Progress& progress, const CpuLoadMonitor& load_monitor, json* doc) {
  RooflineOptions ro;
  ro.buffer_bytes = rc.roofline_bytes;
  ro.num_threads = rc.threads;
  progress("roofline: %s buffer, %d thread(s)", format_bytes(ro.buffer_bytes).c_str(), rc.threads);
  LEANEMB_ASSIGN_OR_RETURN(RooflineResult r, measure_roofline(ro));
  (*doc)["roofline"] = to_json(r);
  (*doc)["machine_load"] = load_monitor.finish();
  (*doc)["peak_rss_bytes"] = process_max_rss_bytes();
  print_roofline((*doc)["roofline"]);
  print_load(*doc);
  std::fflush(stdout);
  return Status();
}

// The planned workloads (tbe-default, tbe-ci, optimizer, precision, skew): the plan's groups one
// after the other. *failed: the contenders whose correctness gate failed.
Status run_planned(const BenchOptions& o, const RunConfig& rc, const Progress& progress,
                   const CpuLoadMonitor& load_monitor, json* doc, std::string* failed) {
  LEANEMB_ASSIGN_OR_RETURN(Plan plan, plan_workload(o));
  if (rc.roofline_bytes < (size_t{64} << 20))
    return invalid_argument("--roofline-bytes must be >= 64MiB, got " + std::to_string(rc.roofline_bytes));
  // Contenders of a shape run together if 70% of the available memory holds them, next to the
  // probe buffer and one transient reference copy for the gate (< 2 GiB).
  const size_t avail = mem_available_bytes();
  const size_t reserve = rc.roofline_bytes + kFullGateMaxBytes;
  const size_t budget = avail == 0 ? SIZE_MAX : (avail / 10 * 7 > reserve ? avail / 10 * 7 - reserve : 1);
  const auto groups = plan_groups(plan, budget);
  (*doc)["groups"] = json::array();
  for (const auto& g : groups) {
    json names = json::array();
    for (size_t i : g) names.push_back(plan.contenders[i].name);
    (*doc)["groups"].push_back(names);
  }
  std::vector<std::optional<Stream>> streams(plan.shapes.size());
  (*doc)["contenders"] = json::array();
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (groups.size() > 1) progress("group %zu/%zu (%zu contender(s))", gi + 1, groups.size(), groups[gi].size());
    LEANEMB_RETURN_IF_ERROR(run_group(plan, groups[gi], streams, rc, progress, &(*doc)["contenders"], failed));
    // Streams of shapes that no later group uses can go.
    for (size_t si = 0; si < plan.shapes.size(); ++si) {
      bool used_later = false;
      for (size_t gk = gi + 1; gk < groups.size(); ++gk)
        for (size_t i : groups[gk]) used_later |= plan.contenders[i].shape == static_cast<int>(si);
      if (!used_later) streams[si].reset();
    }
  }
  (*doc)["summary"] = summarize_workload(o.workload, (*doc)["contenders"]);
  (*doc)["machine_load"] = load_monitor.finish();
  (*doc)["peak_rss_bytes"] = process_max_rss_bytes();
  (*doc)["peak_rss_scope"] = "process-wide (getrusage ru_maxrss)";
  print_table(*doc);
  return Status();
}

}  // namespace

Status run_workload(const BenchOptions& o, json* out) {
  const Progress progress{o.quiet};
  LEANEMB_ASSIGN_OR_RETURN(const RunConfig rc, run_config(o));

  const CpuLoadMonitor load_monitor;
  json doc;
  doc["workload"] = o.workload;
  doc["threads"] = rc.threads;
  doc["seed"] = rc.seed;
  doc["iters"] = rc.iters;
  doc["warmup"] = rc.warmup;

  if (o.workload == "arena-soak") {
    LEANEMB_RETURN_IF_ERROR(run_arena_soak(o, progress, &doc));
    doc["machine_load"] = load_monitor.finish();
  } else if (o.workload == "sharded") {
#ifdef LEANEMB_HAVE_DIST
    LEANEMB_RETURN_IF_ERROR(run_sharded(o, progress, &doc));
    doc["machine_load"] = load_monitor.finish();
#else
    return unimplemented("workload 'sharded' needs the dist module (this build skips it)");
#endif
  } else if (o.workload == "tiered") {
    LEANEMB_RETURN_IF_ERROR(run_tiered(o, progress, &doc));
    doc["machine_load"] = load_monitor.finish();
    print_load(doc);
  } else if (o.workload == "restore") {
    LEANEMB_RETURN_IF_ERROR(run_restore(o, progress, &doc));
    doc["machine_load"] = load_monitor.finish();
    print_load(doc);
  } else if (o.workload == "grad-accum") {
#ifdef LEANEMB_HAVE_PLAN
    LEANEMB_RETURN_IF_ERROR(run_grad_accum(o, progress, &doc));
    doc["machine_load"] = load_monitor.finish();
    print_load(doc);
#else
    return unimplemented("workload 'grad-accum' needs the plan module (this build skips it)");
#endif
  } else if (o.workload == "roofline") {
    LEANEMB_RETURN_IF_ERROR(run_roofline(rc, progress, load_monitor, &doc));
  } else {
    std::string failed;
    LEANEMB_RETURN_IF_ERROR(run_planned(o, rc, progress, load_monitor, &doc, &failed));
    if (!failed.empty()) {
      *out = doc;
      if (!o.json_path.empty()) LEANEMB_RETURN_IF_ERROR(write_json(o.json_path, doc));
      return internal_error("correctness gate failed for: " + failed + " (details in gate_detail)");
    }
  }
  *out = doc;
  if (!o.json_path.empty()) {
    LEANEMB_RETURN_IF_ERROR(write_json(o.json_path, doc));
    progress("wrote %s", o.json_path.c_str());
  }
  return Status();
}

}  // namespace leanemb::bench
