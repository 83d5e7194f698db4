// Planner: presets, the search, the cost model. See planner.h and docs/plan.md.
#include "plan/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace leanemb::plan {

namespace {
constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMiB = size_t{1} << 20;
// Fixed cost of one more micro-batch pass (kernel launches, synchronization), seconds.
constexpr double kMicroBatchOverheadS = 20e-6;

std::vector<DevicePreset> presets() {
  // Nominal spec-sheet figures (docs/plan.md lists the sources); GB/s = 1e9 B/s.
  return {
      {"ascend-910a", 32 * kGiB, 512 * kMiB, 1200, 32, 3, 90, "PYTORCH_NPU_ALLOC_CONF", "HCCL"},
      {"ascend-910b", 64 * kGiB, 512 * kMiB, 1600, 64, 3, 196, "PYTORCH_NPU_ALLOC_CONF", "HCCL"},
      {"a100-40", 40 * kGiB, 512 * kMiB, 1555, 32, 3, 300, "PYTORCH_CUDA_ALLOC_CONF", "NCCL"},
      {"a100-80", 80 * kGiB, 512 * kMiB, 2039, 32, 3, 300, "PYTORCH_CUDA_ALLOC_CONF", "NCCL"},
      {"h100-80", 80 * kGiB, 512 * kMiB, 3350, 64, 3, 450, "PYTORCH_CUDA_ALLOC_CONF", "NCCL"},
      {"h200-141", size_t{141} * 1000 * 1000 * 1000, 512 * kMiB, 4800, 64, 3, 450, "PYTORCH_CUDA_ALLOC_CONF", "NCCL"},
  };
}
}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (const auto& p : presets()) n.push_back(p.name);
  n.push_back("cpu:<bytes>");
  return n;
}

Result<DevicePreset> find_preset(std::string_view name) {
  for (const auto& p : presets())
    if (p.name == name) return p;
  if (name.substr(0, 4) == "cpu:") {
    auto b = parse_bytes(name.substr(4));
    if (!b.ok() || b.value() == 0)
      return invalid_argument("preset '" + std::string(name) + "': cpu:<bytes> needs a size such as cpu:8GiB");
    // This machine's device tier is a DRAM arena: DRAM bandwidth, memcpy for the "host link".
    return DevicePreset{"cpu", b.value(), 0, 20, 10, 2, 10, "", "MPI"};
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

void price(const DevicePreset& preset, Candidate* c) {
  const Prediction& p = c->prediction;
  c->hbm_seconds = p.device_bytes_moved_per_step / (preset.hbm_gbps * 1e9);
  c->host_link_seconds = p.host_link_bytes_per_step / (preset.host_link_gbps * 1e9);
  c->comm_seconds = preset.interconnect_gbps > 0 ? p.comm_bytes_per_step / (preset.interconnect_gbps * 1e9) : 0.0;
  c->step_seconds = c->hbm_seconds + c->host_link_seconds + c->comm_seconds +
                    kMicroBatchOverheadS * static_cast<double>(c->workload.micro_batches);
}

namespace {

// How far a candidate is from the user's settings (ties in cost go to the smaller change).
int changes(const Workload& base, const Workload& w) {
  int n = 0;
  n += w.row_dtype != base.row_dtype;
  n += w.row_optimizer.kind != base.row_optimizer.kind;
  n += w.row_optimizer.state_dtype != base.row_optimizer.state_dtype;
  n += w.placement.tier != base.placement.tier;
  n += w.cache_fraction != base.cache_fraction;
  n += w.num_shards != base.num_shards;
  n += w.micro_batches != base.micro_batches;
  n += w.checkpoint_activations != base.checkpoint_activations;
  n += w.precision != base.precision;
  return n;
}

OptimizerKind rowwise_variant(OptimizerKind k) {
  if (k == OptimizerKind::kAdagrad) return OptimizerKind::kRowwiseAdagrad;
  if (k == OptimizerKind::kAdam) return OptimizerKind::kPartialRowwiseAdam;
  return k;
}

std::span<const LeanOptionInfo> parity_of(const PlannerOptions& o) {
  return o.parity.empty() ? lean_option_table() : o.parity;
}

bool allows(const PlannerOptions& o, LeanOption opt) {
  for (LeanOption a : o.allow)
    if (a == opt) return true;
  return false;
}

}  // namespace

bool lean_option_allowed(LeanOption opt, const Workload& w, const PlannerOptions& o) {
  return proven_for(lean_option_info(opt, parity_of(o)), w.kind, w.row_optimizer.kind) || allows(o, opt);
}

namespace {

// The values the search tries for each setting.
struct SearchSpace {
  std::vector<DType> dtypes;
  std::vector<OptimizerKind> opts;
  std::vector<DType> states;
  std::vector<double> caches;
  std::vector<int> shard_counts;
  std::vector<int> micros;
  std::vector<DType> precisions;
  std::vector<bool> ckpts;
};

SearchSpace search_space(const Workload& base, const PlannerOptions& o) {
  SearchSpace sp;
  sp.dtypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8, DType::kFP8};  // the evidence rules out the unproven
  sp.opts = {base.row_optimizer.kind};
  if (allows(o, LeanOption::kRowwiseOptimizer) && rowwise_variant(base.row_optimizer.kind) != base.row_optimizer.kind)
    sp.opts.push_back(rowwise_variant(base.row_optimizer.kind));
  // SM3 replaces Adagrad only; whether the evidence (or the user) allows it is checked per candidate.
  if (base.row_optimizer.kind == OptimizerKind::kAdagrad) sp.opts.push_back(OptimizerKind::kSm3);
  // A state dtype proven for the task with the workload's optimizer is searched as a proven row
  // dtype is; the others when allowed.
  sp.states = {DType::kF32};
  for (const StateDtypeOption& s : kStateDtypeOptions)
    if (lean_option_allowed(s.option, base, o)) sp.states.push_back(s.state);
  sp.caches = {1.0};
  if (allows(o, LeanOption::kRowCache)) sp.caches.insert(sp.caches.end(), {0.5, 0.2, 0.05, 0.01});
  for (int s = 1; s <= std::max(1, o.max_shards); s *= 2) sp.shard_counts.push_back(s);
  for (int k = 1; k <= 64 && k <= base.batch_size; k *= 2)
    if (base.batch_size % k == 0 && (k == 1 || base.kind != WorkloadKind::kText)) sp.micros.push_back(k);  // text: no micro-batches
  // bf16 activations: the CTR model's layers, or an embedding-only workload's output and its
  // gradient (EmbeddingTables::forward_bf16); the parity evidence decides whether it is proven.
  sp.precisions = {base.precision};
  if (!o.keep_precision && base.kind != WorkloadKind::kText && base.precision == DType::kF32)
    sp.precisions.push_back(DType::kBF16);
  sp.ckpts = base.kind == WorkloadKind::kCtr ? std::vector<bool>{false, true} : std::vector<bool>{false};
  return sp;
}

// Why 1% (kEqualSpeedTolerance): the estimate is bytes moved over nominal bandwidths plus a
// guessed 20 us per micro-batch. It leaves out terms of at least that size: the compute of the
// dedup sort and the optimizer, launch and synchronization costs beyond the 20 us guess, and the
// spread of sustained over nominal bandwidth between access patterns (rows gathered vs streamed).
// Two estimates within 1% are not told apart by such a model, so the planner spends that margin
// on memory: among them it takes the lowest device peak (docs/plan.md, "Planner").

// What the search has found so far.
struct Search {
  bool have = false, have_small = false;  // a fitting candidate; a candidate within the host budget
  double best_cost = 0;                   // the fastest fitting candidate's (of best_unproven)
  int best_unproven = 0;
  std::vector<Candidate> near;  // fitting, best_unproven options, cost within the tolerance of best_cost
  std::vector<int> near_changes;
  std::array<bool, kNumLeanOptions> excluded{};  // unproven options that ruled candidates out
  Candidate smallest;                            // the one needing the least device memory
  size_t smallest_need = std::numeric_limits<size_t>::max();
};

// Costs within 1e-9 relative are the same cost (floating-point noise of the sums).
constexpr double kSameCost = 1e-9;

// Keeps fitting candidate `c` (`unproven` options, `ch` changes) when it is among the equally
// fast ones: fewer unproven options first, then cost within `tol` of the fastest.
void keep_fitting(Candidate c, int unproven, int ch, double tol, Search* s) {
  if (!s->have || unproven < s->best_unproven) {
    s->near.clear();
    s->near_changes.clear();
    s->best_cost = c.step_seconds;
    s->best_unproven = unproven;
    s->have = true;
  } else if (unproven > s->best_unproven || c.step_seconds > s->best_cost * (1 + tol + kSameCost)) {
    return;
  }
  if (c.step_seconds < s->best_cost) {
    s->best_cost = c.step_seconds;
    const double limit = s->best_cost * (1 + tol + kSameCost);
    size_t j = 0;
    for (size_t i = 0; i < s->near.size(); ++i)
      if (s->near[i].step_seconds <= limit) {
        s->near[j] = std::move(s->near[i]);
        s->near_changes[j++] = s->near_changes[i];
      }
    s->near.resize(j);
    s->near_changes.resize(j);
  }
  s->near.push_back(std::move(c));
  s->near_changes.push_back(ch);
}

// Of the equally fast candidates, the one with the lowest device peak, then the cheaper, then
// the smaller change (the first found on a full tie).
size_t pick_equally_fast(const Search& s) {
  size_t best = 0;
  for (size_t i = 1; i < s.near.size(); ++i) {
    const Candidate &a = s.near[i], &b = s.near[best];
    const size_t pa = a.prediction.device().budget_bytes, pb = b.prediction.device().budget_bytes;
    if (pa != pb) {
      if (pa < pb) best = i;
      continue;
    }
    if (a.step_seconds < b.step_seconds * (1 - kSameCost) ||
        (a.step_seconds <= b.step_seconds * (1 + kSameCost) && s.near_changes[i] < s.near_changes[best]))
      best = i;
  }
  return best;
}

// Predicts and prices candidate `c` (its workload set), keeping it among the equally fast when it
// fits (keep_fitting), and as the smallest when it needs the least device memory.
void consider(const Workload& base, const PlannerOptions& o, Candidate c, PlanResult* res, Search* s) {
  const Workload& w = c.workload;
  auto p = predict_memory(w, Estimate::kWorstCase);
  if (!p.ok()) return;  // e.g. a state dtype the optimizer lacks
  c.prediction = std::move(p).value();
  // Accuracy evidence: options not proven for the task need the user's consent.
  int unproven = 0;
  bool allowed = true;
  for (LeanOption lo : lean_options_chosen(base, w)) {
    if (proven_for(lean_option_info(lo, parity_of(o)), base.kind, w.row_optimizer.kind)) continue;
    ++unproven;
    if (!lean_option_allowed(lo, w, o)) {
      s->excluded[static_cast<size_t>(lo)] = true;
      allowed = false;
    }
  }
  if (!allowed) return;
  price(o.preset, &c);
  ++res->num_candidates;
  const size_t dev = c.prediction.device().budget_bytes;
  const bool host_ok = o.host_budget_bytes == 0 || c.prediction.host().peak_bytes <= o.host_budget_bytes;
  if (host_ok && (!s->have_small || dev < s->smallest_need)) {
    s->smallest_need = dev;
    s->smallest = c;
    s->have_small = true;
  }
  if (!host_ok || dev > res->usable_device_bytes) return;
  ++res->num_fitting;
  const int ch = changes(base, w);
  keep_fitting(std::move(c), unproven, ch, std::max(0.0, o.speed_tolerance), s);
}

// The result from the search: the chosen candidate (the smallest when none fits) and the
// unproven options chosen and excluded.
void finish_plan(const Workload& base, const PlannerOptions& o, const Search& s, PlanResult* res) {
  res->fits = s.have;
  if (s.have) {
    res->chosen = s.near[pick_equally_fast(s)];
    res->fastest_step_seconds = s.best_cost;
  }
  if (s.have_small) res->smallest_device_bytes = s.smallest_need + o.preset.runtime_reserved_bytes;
  if (!s.have && s.have_small) res->chosen = s.smallest;
  if (s.have || s.have_small)
    for (LeanOption lo : lean_options_chosen(base, res->chosen.workload))
      if (!proven_for(lean_option_info(lo, parity_of(o)), base.kind, res->chosen.workload.row_optimizer.kind))
        res->unproven_chosen.push_back(lo);
  for (int i = 0; i < kNumLeanOptions; ++i)
    if (s.excluded[static_cast<size_t>(i)]) res->unproven_excluded.push_back(static_cast<LeanOption>(i));
}

}  // namespace

Result<PlanResult> make_plan(const Workload& base, const PlannerOptions& o) {
  PlanResult res;
  LEANEMB_ASSIGN_OR_RETURN(res.naive, predict_naive_baseline(base));
  LEANEMB_ASSIGN_OR_RETURN(Prediction check, predict_memory(base, Estimate::kWorstCase));
  (void)check;  // the user's own settings must be valid
  const size_t budget = o.device_budget_bytes ? o.device_budget_bytes : o.preset.device_bytes;
  res.usable_device_bytes = budget > o.preset.runtime_reserved_bytes ? budget - o.preset.runtime_reserved_bytes : 0;
  const SearchSpace sp = search_space(base, o);
  Search s;
  for (DType dt : sp.dtypes)
    for (OptimizerKind ok : sp.opts)
      for (DType sd : sp.states)
        for (int wt = 0; wt < 2; ++wt)
          for (int st = 0; st < 2; ++st)
            for (double cf : sp.caches)
              for (int sh : sp.shard_counts)
                for (int k : sp.micros)
                  for (DType pr : sp.precisions)
                    for (bool ck : sp.ckpts) {
                      if (cf < 1.0 && wt == 0) continue;  // a cache sits in front of host rows
                      if (!o.allow_host && (wt || st)) continue;
                      if (sd != DType::kF32 && element_states(ok) == 0) continue;  // no state for the dtype to store
                      Candidate c;
                      c.workload = base;
                      Workload& w = c.workload;
                      w.row_dtype = dt;
                      w.row_optimizer.kind = ok;
                      w.row_optimizer.state_dtype = sd;
                      w.placement[Category::kWeights] = wt ? Tier::kHost : Tier::kDevice;
                      w.placement[Category::kOptimizerState] = st ? Tier::kHost : Tier::kDevice;
                      w.cache_fraction = cf;
                      w.num_shards = sh;
                      w.micro_batches = k;
                      w.precision = pr;
                      w.checkpoint_activations = ck;
                      consider(base, o, std::move(c), &res, &s);
                    }
  finish_plan(base, o, s, &res);
  return res;
}

Result<int64_t> largest_table_rows(const Workload& base, const PlannerOptions& o, bool naive) {
  auto fits = [&](int64_t rows) -> Result<bool> {
    Workload w = base;
    for (TableSpec& t : w.tables) t.num_rows = rows;
    if (naive) {
      LEANEMB_ASSIGN_OR_RETURN(Prediction p, predict_naive_baseline(w));
      const size_t budget = o.device_budget_bytes ? o.device_budget_bytes : o.preset.device_bytes;
      return p.device().budget_bytes + o.preset.runtime_reserved_bytes <= budget;
    }
    LEANEMB_ASSIGN_OR_RETURN(PlanResult r, make_plan(w, o));
    return r.fits;
  };
  int64_t lo = 0, hi = 1;
  while (true) {
    LEANEMB_ASSIGN_OR_RETURN(bool f, fits(hi));
    if (!f) break;
    lo = hi;
    hi *= 2;
    if (hi > (int64_t{1} << 40)) return lo;
  }
  while (hi - lo > std::max<int64_t>(1, lo / 1000)) {
    const int64_t mid = lo + (hi - lo) / 2;
    LEANEMB_ASSIGN_OR_RETURN(bool f, fits(mid));
    (f ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace leanemb::plan
