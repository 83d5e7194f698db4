// The `grad-accum` workload (issue 39): the embedding-only workload of `leanemb plan --vocab ...`
// scaled down, run on the device arena with 1, 2 and 4 micro-batches (--micro-batches LIST: 1 and
// the listed counts), rows in --dtype (default fp32), its measured device peak
// by category printed beside the memory model's prediction for the same workload (kExpected).
//
// One table (--rows, default 1e5; --dim 64) and one sequence feature (--pooling none unless
// given: --bag-size ids per sample, default 128) of --batch samples (256), Adam unless
// --optimizer, uniform ids. A step, as the model does it: 1 micro-batch: forward of the batch
// (its output [B x L, dim] in activations), its output gradient (gradients), backward_update.
// k micro-batches: begin_accumulation of the batch, then per micro-batch forward (output in
// activations), its output gradient (gradients), accumulate, both freed; apply_accumulated.
// --precision bf16 (AMP): the output and its gradient are bf16 in the arena (forward_bf16,
// backward_update_bf16 / accumulate_bf16 through an fp32 scratch of a chunk of bags, workspace:
// EmbeddingTables::kBf16ScratchFloats or the largest bag's outputs), the gradient drawn in fp32
// and rounded to nearest even. --iters steps (default 3). The gate: every k's rows and
// optimizer state after the steps equal k = 1's bit for bit (the accumulation is exact).
#include <cmath>
#include <cstring>
#include <random>

#include "bench_internal.h"
#include "amp/precision.h"
#include "leanemb/embedding.h"
#include "plan/memory_model.h"

namespace leanemb::bench::internal {
namespace {

struct AccumShape {
  int64_t rows = 100000, dim = 64, batch = 256, seq = 128;
  PoolingMode pooling = PoolingMode::kNone;
  DType dtype = DType::kF32;  // the rows' (--dtype)
  DType precision = DType::kF32;  // the output's and its gradient's (--precision)
  OptimizerOptions optimizer;
  int steps = 3;
};

// Step s's ids [B x L] (bags of exactly L ids) and the output gradient of the whole batch.
struct AccumStep {
  std::vector<int64_t> ids, offsets;
  std::vector<float> grad;  // [B x L, dim] (sequence) or [B, dim] (pooled)
};
AccumStep make_step(const AccumShape& s, int step, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(step));
  AccumStep a;
  a.ids.resize(static_cast<size_t>(s.batch * s.seq));
  for (auto& id : a.ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.rows));
  for (int64_t b = 0; b <= s.batch; ++b) a.offsets.push_back(b * s.seq);
  const int64_t outs = s.pooling == PoolingMode::kNone ? s.batch * s.seq : s.batch;
  std::normal_distribution<float> g(0.0f, 0.01f);
  a.grad.resize(static_cast<size_t>(outs * s.dim));
  for (float& x : a.grad) x = g(rng);
  return a;
}

plan::Workload plan_workload_of(const AccumShape& s, int micro, int threads) {
  plan::Workload w;
  w.kind = plan::WorkloadKind::kEmbeddingOnly;
  plan::TableSpec t;
  t.name = "t0";
  t.num_rows = s.rows;
  t.dim = s.dim;
  t.pooling = s.pooling;
  t.max_ids_per_sample = s.seq;
  t.mean_ids_per_sample = static_cast<double>(s.seq);
  // The stream's expected distinct rows: its ids are rows drawn uniformly (no vocabulary hashed
  // into the rows, which plan::expected_unique_rows models on top), R (1 - (1 - 1/R)^n).
  const double r = static_cast<double>(s.rows);
  t.expected_unique_rows = -r * std::expm1(static_cast<double>(s.batch * s.seq) * std::log1p(-1.0 / r));
  w.tables.push_back(t);
  w.batch_size = s.batch;
  w.micro_batches = micro;
  w.row_dtype = s.dtype;
  w.precision = s.precision;
  w.row_optimizer = s.optimizer;
  w.num_threads = threads;
  return w;
}

// A buffer of `n` elements of `bytes` each from the allocator of category c, counted as c.
Result<Allocation> take(MemorySystem& m, Category c, int64_t n, size_t bytes = 4) {
  return m.allocator_for(c)->allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * bytes, c);
}

// Bags [b0, b1) of the step as a batch of their own.
SparseBatch bags(const AccumStep& a, int64_t b0, int64_t b1, std::vector<int64_t>* offsets) {
  offsets->clear();
  for (int64_t b = b0; b <= b1; ++b) offsets->push_back(a.offsets[static_cast<size_t>(b)] - a.offsets[static_cast<size_t>(b0)]);
  const auto lo = static_cast<size_t>(a.offsets[static_cast<size_t>(b0)]);
  SparseBatch sb;
  sb.batch_size = b1 - b0;
  sb.features.push_back(FeatureInput{std::span<const int64_t>(a.ids).subspan(lo, static_cast<size_t>(a.offsets[static_cast<size_t>(b1)]) - lo),
                                     *offsets, {}});
  return sb;
}

// One micro-batch [b0, b1): its output (activations) and output gradient (gradients), forward,
// then the update (k = 1) or accumulate.
Status micro_batch(EmbeddingCollection& c, MemorySystem& m, const AccumShape& s, const AccumStep& a, int64_t b0, int64_t b1,
                   bool whole) {
  std::vector<int64_t> off;
  const SparseBatch sb = bags(a, b0, b1, &off);
  const bool seq = s.pooling == PoolingMode::kNone;
  const int64_t outs = seq ? static_cast<int64_t>(sb.features[0].ids.size()) : b1 - b0;
  const int64_t first = seq ? a.offsets[static_cast<size_t>(b0)] : b0;
  LEANEMB_ASSIGN_OR_RETURN(Allocation out, take(m, Category::kActivations, outs * s.dim));
  const std::span<float> out_span(out.as<float>(), static_cast<size_t>(outs * s.dim));
  const std::span<float> seq_out[1] = {out_span};
  LEANEMB_RETURN_IF_ERROR(seq ? c.forward(sb, {}, seq_out) : c.forward(sb, out_span));
  LEANEMB_ASSIGN_OR_RETURN(Allocation grad, take(m, Category::kGradients, outs * s.dim));
  std::memcpy(grad.data(), a.grad.data() + first * s.dim, static_cast<size_t>(outs * s.dim) * 4);
  const std::span<const float> g(grad.as<float>(), static_cast<size_t>(outs * s.dim));
  const std::span<const float> seq_g[1] = {g};
  if (whole) return (seq ? c.backward_update(sb, {}, seq_g) : c.backward_update(sb, g)).status();
  return seq ? c.accumulate(b0, b1, {}, seq_g) : c.accumulate(b0, b1, g);
}

// The bf16 form of a micro-batch [b0, b1) of `step` (the step's whole batch, as begin_accumulation
// got it): forward_bf16 into a bf16 output, the gradient rounded to bf16, then
// backward_update_bf16 (k = 1) or accumulate_bf16, through an fp32 scratch (workspace).
Status micro_batch_bf16(EmbeddingCollection& c, MemorySystem& m, const AccumShape& s, const AccumStep& a, const SparseBatch& step,
                        int64_t b0, int64_t b1, bool whole) {
  std::vector<int64_t> off;
  const SparseBatch sb = bags(a, b0, b1, &off);
  const bool seq = s.pooling == PoolingMode::kNone;
  const int64_t outs = seq ? static_cast<int64_t>(sb.features[0].ids.size()) : b1 - b0;
  const int64_t first = seq ? a.offsets[static_cast<size_t>(b0)] : b0;
  const int64_t scratch_floats = std::max(EmbeddingTables::kBf16ScratchFloats, c.bf16_min_scratch_floats(step));
  LEANEMB_ASSIGN_OR_RETURN(Allocation scratch, take(m, Category::kWorkspace, scratch_floats));
  const std::span<float> sc(scratch.as<float>(), static_cast<size_t>(scratch_floats));
  const auto n = static_cast<size_t>(outs * s.dim);
  LEANEMB_ASSIGN_OR_RETURN(Allocation out, take(m, Category::kActivations, outs * s.dim, 2));
  const std::span<uint16_t> out_span(static_cast<uint16_t*>(out.data()), n);
  const std::span<uint16_t> seq_out[1] = {out_span};
  LEANEMB_RETURN_IF_ERROR(seq ? c.forward_bf16(sb, {}, seq_out, sc) : c.forward_bf16(sb, out_span, {}, sc));
  LEANEMB_ASSIGN_OR_RETURN(Allocation grad, take(m, Category::kGradients, outs * s.dim, 2));
  auto* g16 = static_cast<uint16_t*>(grad.data());
  amp::pack(std::span<const float>(a.grad).subspan(static_cast<size_t>(first * s.dim), n), DType::kBF16, g16);
  const std::span<const uint16_t> g(g16, n);
  const std::span<const uint16_t> seq_g[1] = {g};
  const std::span<const uint16_t> pooled_g = seq ? std::span<const uint16_t>() : g;
  const std::span<const std::span<const uint16_t>> seq_gs = seq ? std::span<const std::span<const uint16_t>>(seq_g) : std::span<const std::span<const uint16_t>>();
  if (whole) return c.backward_update_bf16(sb, pooled_g, seq_gs, sc).status();
  return c.accumulate_bf16(step, b0, b1, pooled_g, seq_gs, sc);
}

struct AccumRun {
  MemoryStats device;
  std::vector<uint8_t> rows;  // every fat row after the steps (the gate)
  double ms_per_step = 0;
};

Result<AccumRun> run_micro(const AccumShape& s, int micro, const BenchOptions& o) {
  MemorySystemOptions mo = o.memory;
  if (mo.device_budget_bytes == 0) mo.device_budget_bytes = size_t{4} << 30;
  LEANEMB_ASSIGN_OR_RETURN(auto mem, MemorySystem::create(mo));
  CollectionOptions co;
  TableOptions t;
  t.name = "t0";
  t.num_rows = s.rows;
  t.dim = s.dim;
  t.dtype = s.dtype;
  t.optimizer = s.optimizer;
  co.tables.push_back(t);
  co.features.push_back(FeatureOptions{"f0", 0, s.pooling});
  co.seed = o.seed;
  co.num_threads = o.threads;
  LEANEMB_ASSIGN_OR_RETURN(auto c, EmbeddingCollection::create(co, mem.get()));
  const auto t0 = Clock::now();
  for (int step = 0; step < s.steps; ++step) {
    const AccumStep a = make_step(s, step, o.seed);
    std::vector<int64_t> off;
    const SparseBatch whole = bags(a, 0, s.batch, &off);
    if (micro > 1) LEANEMB_RETURN_IF_ERROR(c->begin_accumulation(whole));
    for (int i = 0; i < micro; ++i) {
      const int64_t b0 = s.batch * i / micro, b1 = s.batch * (i + 1) / micro;
      LEANEMB_RETURN_IF_ERROR(s.precision == DType::kBF16 ? micro_batch_bf16(*c, *mem, s, a, whole, b0, b1, micro == 1)
                                                          : micro_batch(*c, *mem, s, a, b0, b1, micro == 1));
    }
    if (micro > 1) LEANEMB_RETURN_IF_ERROR(c->apply_accumulated().status());
  }
  AccumRun r;
  r.ms_per_step = ms_since(t0) / s.steps;
  r.device = mem->stats()[0];
  r.rows.resize(static_cast<size_t>(s.rows) * c->layout(0).stride_bytes);
  LEANEMB_RETURN_IF_ERROR(c->read_raw_rows(0, 0, s.rows, r.rows));
  return r;
}

double pct(double measured, double planned) { return planned > 0 ? 100.0 * (measured - planned) / planned : 0.0; }

// One micro count's JSON and printed table: measured and planned peaks per category.
json report_micro(int micro, const AccumRun& r, const plan::Prediction& p, bool gate) {
  const plan::TierPrediction& d = p.tier[0];
  json cats = json::object();
  std::printf("\n%d micro-batch(es): device peak measured %zu B, planned %zu B (%+.2f%%), %.1f ms/step, rows %s\n", micro,
              r.device.peak_bytes, d.peak_bytes, pct(static_cast<double>(r.device.peak_bytes), static_cast<double>(d.peak_bytes)),
              r.ms_per_step, gate ? "identical to 1 micro-batch" : "DIFFER from 1 micro-batch");
  std::printf("  %-16s %14s %14s %9s\n", "category", "measured peak", "planned peak", "error");
  for (int ci = 0; ci < kNumCategories; ++ci) {
    const auto c = static_cast<Category>(ci);
    const size_t meas = r.device[c].peak_bytes, plan = d.peak[static_cast<size_t>(ci)];
    if (meas == 0 && plan == 0) continue;
    const double e = pct(static_cast<double>(meas), static_cast<double>(plan));
    std::printf("  %-16s %14zu %14zu %+8.2f%%\n", std::string(category_name(c)).c_str(), meas, plan, e);
    cats[std::string(category_name(c))] = {{"measured_peak_bytes", meas}, {"planned_peak_bytes", plan}, {"error_pct", e}};
  }
  return {{"micro_batches", micro},
          {"device_peak_measured_bytes", r.device.peak_bytes},
          {"device_peak_planned_bytes", d.peak_bytes},
          {"device_peak_error_pct", pct(static_cast<double>(r.device.peak_bytes), static_cast<double>(d.peak_bytes))},
          {"planned_peak_phase", d.peak_phase},
          {"ms_per_step", r.ms_per_step},
          {"rows_identical_to_one_micro_batch", gate},
          {"categories", cats}};
}

}  // namespace

Status run_grad_accum(const BenchOptions& o, const Progress& progress, json* doc) {
  AccumShape s;
  s.rows = o.rows.value_or(s.rows);
  s.dim = o.dim.value_or(s.dim);
  s.batch = o.batch.value_or(s.batch);
  s.seq = o.bag_size.value_or(s.seq);
  s.pooling = o.pooling.value_or(PoolingMode::kNone);
  s.dtype = o.dtype.value_or(DType::kF32);
  s.precision = o.precision;
  if (!dtype_traits(s.dtype).trainable) return invalid_argument("--dtype: grad-accum needs a trainable row dtype");
  s.optimizer.kind = o.optimizer.value_or(OptimizerKind::kAdam);
  s.optimizer.eps = default_eps(s.optimizer.kind);
  s.steps = o.iters.value_or(3);
  if (s.steps < 1) return invalid_argument("--iters must be >= 1");
  (*doc)["shape"] = {{"rows", s.rows}, {"dim", s.dim}, {"batch", s.batch}, {"seq_len", s.seq},
                     {"pooling", std::string(pooling_name(s.pooling))}, {"dtype", std::string(dtype_name(s.dtype))},
                     {"precision", std::string(dtype_name(s.precision))}, {"optimizer", std::string(optimizer_name(s.optimizer.kind))},
                     {"steps", s.steps}, {"ids", "uniform"}};
  (*doc)["runs"] = json::array();
  std::vector<uint8_t> reference;
  bool all_pass = true;
  for (int micro : o.micro_batches) {
    if (micro > s.batch) break;
    progress("grad-accum: %d micro-batch(es), %d step(s)", micro, s.steps);
    LEANEMB_ASSIGN_OR_RETURN(AccumRun r, run_micro(s, micro, o));
    LEANEMB_ASSIGN_OR_RETURN(plan::Prediction p,
                             plan::predict_memory(plan_workload_of(s, micro, o.threads), plan::Estimate::kExpected));
    if (micro == 1) reference = r.rows;
    const bool gate = r.rows == reference;
    all_pass = all_pass && gate;
    (*doc)["runs"].push_back(report_micro(micro, r, p, gate));
  }
  (*doc)["gate"] = all_pass ? "pass" : "fail";
  std::fflush(stdout);
  if (!all_pass) return internal_error("grad-accum: accumulated rows differ from one backward_update (gate failed)");
  return Status();
}

}  // namespace leanemb::bench::internal
