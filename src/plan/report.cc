// plan_report_text / plan_report_json. See report.h.
#include "plan/report.h"

#include <algorithm>
#include <cstdio>

namespace leanemb::plan {

namespace {

std::string gb(size_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(b) / 1e9);
  return buf;
}

std::string both(size_t b) {
  if (b == 0) return "0";
  return gb(b) + " (" + format_bytes(b) + ")";
}

const char* formula(Category c, WorkloadKind k) {
  switch (c) {
    case Category::kWeights: return "rows x weight bytes (+ dense layers)";
    case Category::kOptimizerState: return "rows x state bytes (Adam: 2 x dim x state dtype)";
    case Category::kGradients:
      return k == WorkloadKind::kCtr
                 ? "naive: rows x dim x 4; plan: B x F x dim x 4 + dense; micro > 1: B/micro x F x dim x 4 + unique rows x dim x 4"
                 : "naive: rows x dim x 4 + B x L x dim x 4; micro > 1 or AMP: B/micro x L x dim x 4 (AMP: x 2) + unique rows x "
                   "dim x 4 (<= min(rows, B x L))";
    case Category::kActivations:
      return k == WorkloadKind::kCtr ? "B x F x dim x 4 + MLP saved (AMP: 2 B/elem)" : "B/micro x L x dim x 4 (AMP: x 2)";
    case Category::kWorkspace: return "dedup buffers ~ 44 B x ids (+1/8), MLP scratch, AMP output's fp32 chunk (>= 4 MiB)";
    case Category::kRowCache: return "cache rows x fat row + index";
    case Category::kCommBuffers: return "shards > 1: messages and routing buffers of the largest slice (dist/comm_sizes.h)";
    case Category::kIoBuffers: return "cache staging";
  }
  return "";
}

std::string precision_text(DType p) {
  switch (p) {
    case DType::kF32: return "fp32 (no AMP)";
    case DType::kBF16: return "bf16 activations, fp32 master weights (torch.autocast(dtype=torch.bfloat16))";
    case DType::kF16: return "fp16 + dynamic loss scaling (O1-like; GradScaler)";
    default: break;  // not an activation dtype
  }
  return "";
}

std::span<const LeanOptionInfo> table_of(const PlannerOptions& o) { return o.parity.empty() ? lean_option_table() : o.parity; }

// The accuracy evidence of the plan's lean options (parity.h, docs/accuracy.md).
std::string accuracy_text(const Workload& base, const PlannerOptions& o, const PlanResult& r) {
  const auto table = table_of(o);
  std::string out = "\nAccuracy evidence (bench/parity.py, best-vs-best over 3 seeds, difference +-se; one-sided: proven "
                    "when no dataset is below the reference by more than 0.001 AUC / 0.003 P@1; docs/accuracy.md):\n";
  const std::vector<LeanOption> chosen = lean_options_chosen(base, r.chosen.workload);
  if (chosen.empty()) out += "  the plan adds no lean option to your settings\n";
  const OptimizerKind mine = base.row_optimizer.kind, plan = r.chosen.workload.row_optimizer.kind;
  for (LeanOption lo : chosen) {
    const LeanOptionInfo& i = lean_option_info(lo, table);
    const bool ok = proven_for(i, base.kind, plan);
    out += std::string(ok ? "  chosen, proven: " : "  chosen, NOT PROVEN (you allowed it): ") + std::string(i.what) + ": " +
           parity_text(i, base.kind, plan) + "\n";
  }
  for (LeanOption lo : lean_options_configured(base)) {
    const LeanOptionInfo& i = lean_option_info(lo, table);
    if (!proven_for(i, base.kind, mine))
      out += "  in your config, NOT PROVEN: " + std::string(i.what) + ": " + parity_text(i, base.kind, mine) + "\n";
  }
  for (LeanOption lo : r.unproven_excluded) {
    const LeanOptionInfo& i = lean_option_info(lo, table);
    out += "  not proven, not searched: " + std::string(i.what) + ": " + parity_text(i, base.kind, mine) +
           "; allow with --allow-unproven " + std::string(i.name) + "\n";
  }
  return out;
}

nlohmann::json parity_json(const LeanOptionInfo& i, WorkloadKind kind, OptimizerKind optimizer) {
  auto diff = [](const Difference& d) {
    return nlohmann::json{{"value", d.value}, {"se", d.se >= 0 ? nlohmann::json(d.se) : nlohmann::json(nullptr)},
                          {"dataset", std::string(d.dataset)}};
  };
  auto task = [&](const TaskParity& p, double band) {
    nlohmann::json j{{"verdict", std::string(verdict_name(p.verdict))}, {"band", band}, {"datasets", std::string(p.datasets)}};
    if (p.verdict == Verdict::kProven || p.verdict == Verdict::kLoss) {
      j["lowest_difference"] = diff(p.lowest);
      j["highest_difference"] = diff(p.highest);
      j["gain_beyond_band"] = p.highest.value > band;
    }
    return j;
  };
  return {{"name", std::string(i.name)},
          {"what", std::string(i.what)},
          {"proven", proven_for(i, kind, optimizer)},
          {"measured_with_optimizer", measured_with(i, optimizer)},
          {"ctr", task(i.ctr, kCtrBand)},
          {"text", task(i.text, kTextBand)},
          {"evidence", std::string(i.evidence)}};
}

// "bf16 rows 2.00 + adam state fp32 8.00" (+ padding, + column accumulators when there are any).
std::string bytes_parts_text(const Workload& w, const TableBytesPerParameter& t) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s rows %.2f + %s state %s %.2f", std::string(dtype_name(w.row_dtype)).c_str(), t.row_bytes,
                std::string(optimizer_name(w.row_optimizer.kind)).c_str(),
                std::string(dtype_name(w.row_optimizer.state_dtype)).c_str(), t.state_bytes);
  std::string s = buf;
  if (t.padding_bytes > 0) {
    std::snprintf(buf, sizeof buf, " + padding %.2f", t.padding_bytes);
    s += buf;
  }
  if (t.table_state_bytes > 0) {
    std::snprintf(buf, sizeof buf, " + column accumulators %.2g", t.table_state_bytes);
    s += buf;
  }
  return s;
}

// Whether every lean option of the plan, the user's own included, is proven (or exact) for the task.
bool plan_at_parity(const Workload& base, const PlannerOptions& o, const PlanResult& r) {
  for (LeanOption lo : lean_options_configured(r.chosen.workload))
    if (!proven_for(lean_option_info(lo, table_of(o)), base.kind, r.chosen.workload.row_optimizer.kind)) return false;
  return true;
}

// Bytes per parameter (rows + optimizer state) of the naive baseline and the plan, in total and
// per table (every table up to 8; beyond, the range over the tables).
std::string bytes_per_parameter_text(const Workload& base, const PlannerOptions& o, const PlanResult& r) {
  const Workload naive = naive_workload(base);
  const Result<BytesPerParameter> nb = bytes_per_parameter(naive), pb = bytes_per_parameter(r.chosen.workload);
  if (!nb.ok() || !pb.ok() || pb->tables.empty()) return "";
  char buf[512];
  std::string out = "\nBytes per parameter (rows + optimizer state, the fat rows as allocated over rows x dim; gradients, "
                    "activations and buffers not counted):\n";
  std::snprintf(buf, sizeof buf, "  naive: %.2f (%s)\n  plan:  %.2f (%s)%s\n", nb->total, bytes_parts_text(naive, nb->tables[0]).c_str(),
                pb->total, bytes_parts_text(r.chosen.workload, pb->tables[0]).c_str(),
                plan_at_parity(base, o, r) ? "; at parity: every lean option of the plan is proven (below)"
                                           : "; NOT proven at parity: the plan has unproven options (below)");
  out += buf;
  if (pb->tables.size() <= 8) {
    for (size_t i = 0; i < pb->tables.size(); ++i) {
      const TableBytesPerParameter& t = pb->tables[i];
      std::snprintf(buf, sizeof buf, "  table \"%s\" (%lld x %lld): naive %.2f, plan %.2f (%s)\n", t.name.c_str(),
                    static_cast<long long>(t.rows), static_cast<long long>(t.dim), nb->tables[i].total(), t.total(),
                    bytes_parts_text(r.chosen.workload, t).c_str());
      out += buf;
    }
  } else {
    double lo = pb->tables[0].total(), hi = lo;
    for (const TableBytesPerParameter& t : pb->tables) {
      lo = std::min(lo, t.total());
      hi = std::max(hi, t.total());
    }
    if (hi - lo < 0.005) std::snprintf(buf, sizeof buf, "  %zu tables: plan %.2f each (--json has each)\n", pb->tables.size(), hi);
    else std::snprintf(buf, sizeof buf, "  %zu tables: plan %.2f to %.2f per table (--json has each)\n", pb->tables.size(), lo, hi);
    out += buf;
  }
  return out;
}

nlohmann::json bytes_per_parameter_json(const Workload& w) {
  const Result<BytesPerParameter> b = bytes_per_parameter(w);
  if (!b.ok()) return nullptr;
  nlohmann::json tables = nlohmann::json::array();
  for (const TableBytesPerParameter& t : b->tables)
    tables.push_back({{"name", t.name}, {"rows", t.rows}, {"dim", t.dim}, {"row_bytes", t.row_bytes},
                      {"state_bytes", t.state_bytes}, {"padding_bytes", t.padding_bytes},
                      {"table_state_bytes", t.table_state_bytes}, {"total", t.total()}});
  return {{"total", b->total}, {"parameters", b->parameters}, {"tables", tables}};
}

}  // namespace

const char* category_formula(Category c, WorkloadKind kind) { return formula(c, kind); }

std::string describe_settings(const Workload& w) {
  std::string s = std::string(dtype_name(w.row_dtype)) + " rows" +
                  (w.row_dtype == DType::kF32 ? "" : " (stochastic rounding)") + ", " +
                  std::string(optimizer_name(w.row_optimizer.kind)) + " state " +
                  std::string(dtype_name(w.row_optimizer.state_dtype)) + "; weights on " +
                  std::string(tier_name(w.placement[Category::kWeights])) + ", optimizer state on " +
                  std::string(tier_name(w.placement[Category::kOptimizerState]));
  if (w.cache_fraction < 1.0) s += ", device row cache " + std::to_string(static_cast<int>(w.cache_fraction * 100 + 0.5)) + "% of rows";
  s += "; " + std::to_string(w.micro_batches) + " micro-batch" + (w.micro_batches > 1 ? "es" : "");
  if (w.kind == WorkloadKind::kCtr)
    s += std::string(", activation checkpointing ") + (w.checkpoint_activations ? "on" : "off") + ", activations " +
         std::string(dtype_name(w.precision));
  s += "; " + std::to_string(w.num_shards) + " shard" + (w.num_shards > 1 ? "s" : "");
  return s;
}

// The least time a step's store reads take on the disk of ctx.disk_read_iops: one random read per
// missed row (a row of at most one block), the reads of a step in flight together at the
// store's queue depth, writes overlapped. 0 when unknown.
static double disk_read_ms_per_step(const Prediction& p, const ReportContext& ctx) {
  return ctx.disk_read_iops > 0 ? p.store_rows_read_per_step / ctx.disk_read_iops * 1e3 : 0.0;
}

// The disk at the run's peak (predict_run_disk), one line; empty when unknown.
static std::string run_disk_text(const char* which, const RunDiskPrediction& d) {
  if (!d.known) return "";
  auto size = [](double b) { return both(static_cast<size_t>(std::max(0.0, b))); };
  char buf[900];
  std::snprintf(buf, sizeof buf,
                "disk (%s) at the run's peak: %s at %s step %lld (%d checkpoint%s kept): store files %s (%.4g rows written, "
                "%.4g records appended), segment files only kept checkpoints hold %s, checkpoints %s%s; train.disk_check "
                "needs it free\n",
                which, size(d.peak_bytes).c_str(), d.kept_checkpoints > 0 ? "the checkpoint of" : "the end,",
                static_cast<long long>(d.peak_step), d.kept_checkpoints, d.kept_checkpoints == 1 ? "" : "s", size(d.store_bytes).c_str(),
                d.rows_written, d.records, size(d.pinned_bytes).c_str(), size(d.checkpoint_bytes).c_str(),
                d.linked ? " (the rows linked, not copied)" : "");
  return buf;
}

// The row store's traffic of a workload with cached tables (docs/plan.md, "The store's traffic
// and the disk"), one line; empty without a cache.
static std::string store_traffic_text(const char* which, const Workload& w, const Prediction& p,
                                      const ReportContext& ctx) {
  if (p.store_misses_per_step <= 0 && p.disk_bytes == 0) return "";
  char buf[700];
  // The misses that initialize a row instead of reading it, when the run's ids are known.
  std::string first;
  if (p.store_first_touches_per_step > 0) {
    std::snprintf(buf, sizeof buf, " (of %.0f misses, %.0f rows touched for the first time in the run's second half, not read)",
                  p.store_misses_per_step, p.store_first_touches_per_step);
    first = buf;
  }
  if (w.file_store) {
    std::snprintf(buf, sizeof buf,
                  "disk (%s): table files %s; per step (LRU model, steady state) %.0f rows read%s, %.0f written back, "
                  "at most %.0f I/O requests\n",
                  which, both(p.disk_bytes).c_str(), p.store_rows_read_per_step, first.c_str(), p.store_rows_written_per_step,
                  p.store_requests_per_step);
    std::string out = buf;
    if (p.run_rows_touched >= 0) {
      std::snprintf(buf, sizeof buf, "disk (%s) over the run: %.4g rows touched (each written once evicted), table files %s\n", which,
                    p.run_rows_touched, both(p.disk_bytes_run).c_str());
      out += buf;
    }
    out += run_disk_text(which, p.run_disk);
    if (ctx.disk_read_iops > 0) {
      const double ms = disk_read_ms_per_step(p, ctx);
      std::snprintf(buf, sizeof buf,
                    "  the reads alone take at least %.1f ms per step at %.0f random reads/s (%s): a step that "
                    "misses this often is disk-bound below %.0f steps/s\n",
                    ms, ctx.disk_read_iops, ctx.disk_read_iops_source.c_str(), 1e3 / std::max(ms, 1e-9));
      out += buf;
    }
    return out;
  } else {
    std::snprintf(buf, sizeof buf, "row store (%s) per step (LRU model, steady state): %.0f rows read%s, %.0f written back\n",
                  which, p.store_rows_read_per_step, first.c_str(), p.store_rows_written_per_step);
  }
  return buf;
}

// plan_report_text's parts, in the order it prints them. Each formats into a 512-byte buffer
// as the report always has (snprintf truncates a longer line the same way).

// The workload and the device.
static std::string header_text(const PlannerOptions& o, const PlanResult& r, const ReportContext& ctx) {
  char buf[512];
  const size_t budget = o.device_budget_bytes ? o.device_budget_bytes : o.preset.device_bytes;
  std::snprintf(buf, sizeof buf, "workload: %s\ndevice: %s, %s per device (%s usable after the runtime's %s), HBM %.0f GB/s, host link %.0f GB/s%s\n",
                ctx.workload_text.c_str(), o.preset.name.c_str(), both(budget).c_str(), format_bytes(r.usable_device_bytes).c_str(),
                format_bytes(o.preset.runtime_reserved_bytes).c_str(), o.preset.hbm_gbps, o.preset.host_link_gbps,
                o.host_budget_bytes ? (", host budget " + format_bytes(o.host_budget_bytes)).c_str() : "");
  return buf;
}

// No plan fits: the smallest budget that would, or what to allow.
static std::string nothing_fits_text(const PlannerOptions& o, const PlanResult& r) {
  std::string out = "\nNOTHING FITS: no plan searched (" + std::to_string(r.num_candidates) + " candidates) fits in " +
                    format_bytes(r.usable_device_bytes) + " of device memory" +
                    (o.host_budget_bytes ? " and " + format_bytes(o.host_budget_bytes) + " of host memory" : std::string()) + ".\n";
  if (r.smallest_device_bytes)
    out += "The smallest device budget that would fit: " + both(r.smallest_device_bytes) + " per device, with: " +
           describe_settings(r.chosen.workload) + ".\n";
  else
    out += "No plan fits the host budget either; raise --host-budget (or allow more: --allow-rowwise, --allow-8bit-state, --allow-4bit-state, --allow-cache, --max-shards).\n";
  return out;
}

// Memory per device and category, naive against the plan, and the peak.
static std::string memory_table_text(const Workload& base, const PlanResult& r) {
  std::string out;
  char buf[512];
  out += "\nMemory per device, bytes as allocated (the seed's section 2 table, corrected):\n";
  out += "  naive = fp32 rows, full-table gradient, Adam fp32, fp32 activations, one micro-batch, all on the device\n";
  out += "  plan  = " + describe_settings(r.chosen.workload) + "\n\n";
  std::snprintf(buf, sizeof buf, "| %-16s | %-24s | %-24s | %-24s | %s\n", "category", "naive (device)", "plan (device)",
                "plan (host)", "formula");
  out += buf;
  out += "|------------------|--------------------------|--------------------------|--------------------------|--------\n";
  for (int c = 0; c < kNumCategories; ++c) {
    const auto cat = static_cast<Category>(c);
    const size_t nv = r.naive.device().peak[static_cast<size_t>(c)];
    const size_t pd = r.chosen.prediction.device().peak[static_cast<size_t>(c)];
    const size_t ph = r.chosen.prediction.host().peak[static_cast<size_t>(c)];
    if (!nv && !pd && !ph) continue;
    std::snprintf(buf, sizeof buf, "| %-16s | %-24s | %-24s | %-24s | %s\n", std::string(category_name(cat)).c_str(),
                  both(nv).c_str(), both(pd).c_str(), both(ph).c_str(), formula(cat, base.kind));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "| %-16s | %-24s | %-24s | %-24s | peak of the sum over the step's phases (device: as the arena rounds; a budget of this runs)\n", "peak (total)",
                both(r.naive.device().budget_bytes).c_str(), both(r.chosen.prediction.device().budget_bytes).c_str(),
                both(r.chosen.prediction.host().peak_bytes).c_str());
  out += buf;
  return out;
}

// Whether the naive baseline fits, the config as it is, the step's cost, the plan's notes and
// the row store's traffic.
static std::string summary_text(const Workload& base, const PlanResult& r, const ReportContext& ctx) {
  std::string out;
  char buf[512];
  const bool naive_fits = r.naive.device().budget_bytes <= r.usable_device_bytes;
  std::snprintf(buf, sizeof buf, "\nnaive baseline %s (%s of %s usable); plan peak in phase '%s'; %d of %d searched plans fit.\n",
                naive_fits ? "fits" : "DOES NOT FIT", gb(r.naive.device().budget_bytes).c_str(), gb(r.usable_device_bytes).c_str(),
                r.chosen.prediction.device().peak_phase.c_str(), r.num_fitting, r.num_candidates);
  out += buf;
  // The config's own settings, as `leanemb train` would run them (its planned-vs-measured table).
  Result<Prediction> as_is = predict_memory(base, Estimate::kExpected);
  if (as_is.ok()) (void)predict_run_disk(base, &as_is.value());  // unknown when it fails
  if (as_is.ok()) {
    std::snprintf(buf, sizeof buf, "as configured (no changes): device peak %s (a budget of %s runs it), host peak %s\n",
                  both(as_is.value().device().peak_bytes).c_str(), both(as_is.value().device().budget_bytes).c_str(),
                  both(as_is.value().host().peak_bytes).c_str());
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "cost per step (nominal bandwidths): device memory %.2f GB -> %.2f ms, host link %.3f GB -> %.2f ms, "
                "all-to-all %.3f GB -> %.2f ms; estimate %.2f ms\n",
                r.chosen.prediction.device_bytes_moved_per_step / 1e9, r.chosen.hbm_seconds * 1e3,
                r.chosen.prediction.host_link_bytes_per_step / 1e9, r.chosen.host_link_seconds * 1e3,
                r.chosen.prediction.comm_bytes_per_step / 1e9, r.chosen.comm_seconds * 1e3, r.chosen.step_seconds * 1e3);
  out += buf;
  if (r.chosen.workload.cache_fraction < 1.0)
    out += r.chosen.workload.file_store
               ? "note: this plan keeps the rows in files (embedding.store = \"file\") behind a device row cache (docs/tiered.md).\n"
               : "note: this plan keeps the rows in host RAM behind a device row cache (docs/tiered.md; [embedding] cache_fraction).\n";
  out += store_traffic_text("plan", r.chosen.workload, r.chosen.prediction, ctx);
  if (as_is.ok()) out += store_traffic_text("as configured", base, as_is.value(), ctx);
  if (r.chosen.workload.num_shards > 1)
    out += "note: sharding (issue 7) is not built yet; shard figures are per device by the formula in docs/plan.md, not measured.\n";
  return out;
}

// When the chosen plan is not the fastest that fits: how much slower it is and why it is chosen
// (within the equal-speed tolerance, the lowest device peak of those). Empty otherwise.
static std::string equal_speed_text(const PlannerOptions& o, const PlanResult& r) {
  const double fastest = r.fastest_step_seconds, chosen = r.chosen.step_seconds;
  if (fastest <= 0 || chosen <= fastest * (1 + 1e-9)) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "equal speed: the fastest fitting plan estimates %.2f ms; this one %+.2f ms (%+.2f%%), within the %.2f%% "
                "the cost model does not resolve, and has the lowest device peak of those (--speed-tolerance 0: the fastest)\n",
                fastest * 1e3, (chosen - fastest) * 1e3, 100.0 * (chosen - fastest) / fastest, 100.0 * o.speed_tolerance);
  return buf;
}

// The cheapest plan with a lower device peak than the chosen one (a budget just below the chosen
// peak), when one fits with no more unproven options: what a smaller budget would trade for the
// memory (e.g. more micro-batches for 20 us each). The plans within the equal-speed tolerance of
// the fastest have been weighed already (the chosen one has the lowest peak of them), so this one
// is beyond it. Empty when there is none.
static std::string lower_peak_text(const Workload& base, const PlannerOptions& o, const PlanResult& r) {
  const size_t peak = r.chosen.prediction.device().budget_bytes;
  if (peak == 0) return "";
  PlannerOptions lower = o;
  lower.device_budget_bytes = peak - 1 + o.preset.runtime_reserved_bytes;
  const Result<PlanResult> l = make_plan(base, lower);
  if (!l.ok() || !l->fits || l->unproven_chosen.size() > r.unproven_chosen.size()) return "";
  const double fastest = r.fastest_step_seconds > 0 ? r.fastest_step_seconds : r.chosen.step_seconds;
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "lower peak: %s; device peak %s, estimate %.2f ms (%+.2f ms; the fastest fitting plan %+.2f%%); "
                "--device-budget %zu chooses it\n",
                describe_settings(l->chosen.workload).c_str(), both(l->chosen.prediction.device().budget_bytes).c_str(),
                l->chosen.step_seconds * 1e3, (l->chosen.step_seconds - r.chosen.step_seconds) * 1e3,
                100.0 * (l->chosen.step_seconds - fastest) / fastest,
                l->chosen.prediction.device().budget_bytes + o.preset.runtime_reserved_bytes);
  return buf;
}

// The seed's section 8 deployment table.
static std::string deployment_text(const PlannerOptions& o, const PlanResult& r, const ReportContext& ctx) {
  std::string out;
  const Workload& w = r.chosen.workload;
  out += "\nDeployment (the seed's section 8 table, for this plan):\n\n| parameter | value | note |\n|---|---|---|\n";
  auto row = [&](const std::string& k, const std::string& v, const std::string& n) { out += "| " + k + " | " + v + " | " + n + " |\n"; };
  row("batch_size per device", std::to_string(w.batch_size), std::to_string(w.micro_batches) + " micro-batch(es) of " +
      std::to_string(w.batch_size / w.micro_batches) + " (gradient accumulation, one embedding update per step)");
  row("sequence_length", ctx.sequence_length ? std::to_string(ctx.sequence_length) : "-",
      ctx.sequence_length ? "unpooled: the output is B x L x dim" : "pooled bags: per-token vectors never exist");
  row("embedding_dim", std::to_string(w.tables[0].dim), "");
  row("shard_count", std::to_string(w.num_shards), w.num_shards > 1 ? "row-wise; ids and outputs by all-to-all" : "one device holds the tables");
  row("amp_level", precision_text(w.precision),
      w.kind == WorkloadKind::kEmbeddingOnly && w.precision == DType::kBF16
          ? "embedding output and its gradient bf16 (round to nearest even); row sums and the update fp32"
          : "embedding output and row gradients stay fp32");
  row("gradient_checkpointing", w.checkpoint_activations ? "true" : "false",
      w.kind == WorkloadKind::kCtr ? "dense MLPs recompute hidden activations in backward" : "nothing to recompute in an embedding lookup");
  row("optimizer", std::string(optimizer_name(w.row_optimizer.kind)) + " fused into backward, state " +
      std::string(dtype_name(w.row_optimizer.state_dtype)) + " next to each row" +
      (w.placement[Category::kOptimizerState] == Tier::kHost ? ", state on host (moved with touched rows)" : ""),
      "only touched rows are updated; no full-table gradient");
  row("rows", std::string(dtype_name(w.row_dtype)) + (w.placement[Category::kWeights] == Tier::kHost ? " on host" : " on device"),
      w.row_dtype == DType::kF32 ? "" : "updates rounded stochastically");
  const size_t reserve = r.chosen.prediction.device().budget_bytes;
  row("memory_pool (leanemb)", "memory.reserve = " + std::to_string(reserve) + " (" + format_bytes(reserve) + ")",
      "reserve exactly the planned bytes up front; no \"pre-allocate 80%\"");
  if (!o.preset.alloc_env.empty())
    row("memory_pool (PyTorch)", o.preset.alloc_env + "=max_split_size_mb:128,garbage_collection_threshold:0.8",
        "or expandable_segments:True instead of max_split_size_mb; cap with set_per_process_memory_fraction");
  row("communication_backend", o.preset.comm_backend, w.num_shards > 1 ? "all-to-all for embeddings, all-reduce for dense" : "all-reduce of dense gradients only");
  row("checkpoint_interval", "every " + std::to_string(ctx.checkpoint_every) + " steps", "atomic, checksummed (train.checkpoint_every)");
  if (auto cb = checkpoint_bytes(w, ctx.checkpoint_every); cb.ok()) {
    row("checkpoint_bytes", "full " + format_bytes(cb->full) + ", incremental ~" + format_bytes(static_cast<size_t>(cb->incremental)) +
                                " per interval" +
                                (ctx.incremental_checkpoints && cb->sparse_base >= 0
                                     ? ", largest sparse base ~" + format_bytes(static_cast<size_t>(cb->sparse_base))
                                     : "") +
                                (ctx.incremental_checkpoints ? " (incremental on)" : ""),
        "train.incremental_checkpoints writes only the rows changed since the previous checkpoint");
  }
  return out;
}

std::string plan_report_text(const Workload& base, const PlannerOptions& o, const PlanResult& r, const ReportContext& ctx) {
  std::string out = header_text(o, r, ctx);
  if (!r.fits) return out + nothing_fits_text(o, r) + accuracy_text(base, o, r);
  out += memory_table_text(base, r);
  out += summary_text(base, r, ctx);
  out += equal_speed_text(o, r);
  out += lower_peak_text(base, o, r);
  out += bytes_per_parameter_text(base, o, r);
  out += accuracy_text(base, o, r);
  out += deployment_text(o, r, ctx);
  return out;
}

// The disk at the run's peak (RunDiskPrediction) as plan --json's as_configured.run_disk.
static nlohmann::json run_disk_json(const RunDiskPrediction& d) {
  return {{"peak_bytes", d.peak_bytes},         {"peak_step", d.peak_step},     {"kept_checkpoints", d.kept_checkpoints},
          {"linked", d.linked},                 {"rows_written", d.rows_written}, {"records", d.records},
          {"store_bytes", d.store_bytes},       {"pinned_bytes", d.pinned_bytes}, {"checkpoint_bytes", d.checkpoint_bytes},
          {"copy_checkpoint_bytes", d.copy_checkpoint_bytes}};
}

nlohmann::json plan_report_json(const Workload& base, const PlannerOptions& o, const PlanResult& r, const ReportContext& ctx) {
  using nlohmann::json;
  auto tier_json = [](const TierPrediction& t) {
    json cats = json::object();
    for (int c = 0; c < kNumCategories; ++c)
      if (t.peak[static_cast<size_t>(c)]) cats[std::string(category_name(static_cast<Category>(c)))] = t.peak[static_cast<size_t>(c)];
    return json{{"peak_bytes", t.peak_bytes}, {"budget_bytes", t.budget_bytes}, {"peak_phase", t.peak_phase}, {"categories", cats}};
  };
  const Workload& w = r.chosen.workload;
  json j;
  j["workload"] = ctx.workload_text;
  j["preset"] = {{"name", o.preset.name}, {"device_bytes", o.preset.device_bytes},
                 {"runtime_reserved_bytes", o.preset.runtime_reserved_bytes}, {"hbm_gbps", o.preset.hbm_gbps},
                 {"host_link_gbps", o.preset.host_link_gbps}, {"ssd_gbps", o.preset.ssd_gbps},
                 {"interconnect_gbps", o.preset.interconnect_gbps}};
  j["device_budget_bytes"] = o.device_budget_bytes ? o.device_budget_bytes : o.preset.device_bytes;
  j["host_budget_bytes"] = o.host_budget_bytes;
  j["usable_device_bytes"] = r.usable_device_bytes;
  j["fits"] = r.fits;
  if (ctx.disk_read_iops > 0) j["disk"] = {{"read_iops", ctx.disk_read_iops}, {"source", ctx.disk_read_iops_source}};
  j["smallest_device_budget_bytes"] = r.smallest_device_bytes;
  j["candidates"] = r.num_candidates;
  j["fitting"] = r.num_fitting;
  j["naive"] = {{"device", tier_json(r.naive.device())}};
  if (auto cb = checkpoint_bytes(base, ctx.checkpoint_every); cb.ok()) {
    j["checkpoints"] = {{"every_steps", ctx.checkpoint_every}, {"incremental", ctx.incremental_checkpoints},
                        {"full_bytes", cb->full}, {"incremental_bytes_per_interval", cb->incremental}};
  }
  if (auto as_is = predict_memory(base, Estimate::kExpected); as_is.ok()) {
    Prediction& a = as_is.value();
    (void)predict_run_disk(base, &a);  // unknown when it fails
    j["as_configured"] = {{"device", tier_json(a.device())}, {"host", tier_json(a.host())},
                          {"store_misses_per_step", a.store_misses_per_step},
                          {"store_first_touches_per_step", a.store_first_touches_per_step},
                          {"store_rows_read_per_step", a.store_rows_read_per_step},
                          {"store_rows_written_per_step", a.store_rows_written_per_step},
                          {"disk_bytes", a.disk_bytes},
                          {"store_requests_per_step", a.store_requests_per_step},
                          {"disk_read_ms_per_step_min", a.disk_bytes ? disk_read_ms_per_step(a, ctx) : 0.0}};
    if (a.run_disk.known) j["as_configured"]["run_disk"] = run_disk_json(a.run_disk);
  }
  j["plan"] = {{"settings", describe_settings(w)},
               {"row_dtype", std::string(dtype_name(w.row_dtype))},
               {"optimizer", std::string(optimizer_name(w.row_optimizer.kind))},
               {"state_dtype", std::string(dtype_name(w.row_optimizer.state_dtype))},
               {"placement", w.placement.to_string()},
               {"cache_fraction", w.cache_fraction},
               {"num_shards", w.num_shards},
               {"micro_batches", w.micro_batches},
               {"checkpoint_activations", w.checkpoint_activations},
               {"precision", std::string(dtype_name(w.precision))},
               {"device", tier_json(r.chosen.prediction.device())},
               {"host", tier_json(r.chosen.prediction.host())},
               {"needs_tiered_storage", w.cache_fraction < 1.0},
               {"cost", {{"device_bytes_per_step", r.chosen.prediction.device_bytes_moved_per_step},
                         {"host_link_bytes_per_step", r.chosen.prediction.host_link_bytes_per_step},
                         {"store_misses_per_step", r.chosen.prediction.store_misses_per_step},
                         {"store_first_touches_per_step", r.chosen.prediction.store_first_touches_per_step},
                         {"store_rows_read_per_step", r.chosen.prediction.store_rows_read_per_step},
                         {"store_rows_written_per_step", r.chosen.prediction.store_rows_written_per_step},
                         {"disk_bytes", r.chosen.prediction.disk_bytes},
                         {"store_requests_per_step", r.chosen.prediction.store_requests_per_step},
                         {"disk_read_ms_per_step_min",
                          r.chosen.prediction.disk_bytes ? disk_read_ms_per_step(r.chosen.prediction, ctx) : 0.0},
                         {"comm_bytes_per_step", r.chosen.prediction.comm_bytes_per_step},
                         {"step_seconds", r.chosen.step_seconds},
                         {"fastest_step_seconds", r.fastest_step_seconds},
                         {"speed_tolerance", o.speed_tolerance}}}};
  {
    const auto table = table_of(o);
    nlohmann::json acc = {{"chosen", json::array()}, {"configured", json::array()}, {"unproven_excluded", json::array()},
                          {"unproven_chosen", json::array()}, {"evidence", "docs/accuracy.md"}};
    for (LeanOption lo : lean_options_chosen(base, w))
      acc["chosen"].push_back(parity_json(lean_option_info(lo, table), base.kind, w.row_optimizer.kind));
    for (LeanOption lo : lean_options_configured(base))
      acc["configured"].push_back(parity_json(lean_option_info(lo, table), base.kind, base.row_optimizer.kind));
    for (LeanOption lo : r.unproven_excluded) acc["unproven_excluded"].push_back(std::string(lean_option_info(lo, table).name));
    for (LeanOption lo : r.unproven_chosen) acc["unproven_chosen"].push_back(std::string(lean_option_info(lo, table).name));
    j["accuracy"] = acc;
  }
  j["bytes_per_parameter"] = {{"naive", bytes_per_parameter_json(naive_workload(base))},
                              {"plan", bytes_per_parameter_json(w)},
                              {"at_parity", plan_at_parity(base, o, r)}};
  j["deployment"] = {{"batch_size_per_device", w.batch_size},
                     {"sequence_length", ctx.sequence_length},
                     {"embedding_dim", w.tables[0].dim},
                     {"shard_count", w.num_shards},
                     {"amp_level", std::string(dtype_name(w.precision))},
                     {"gradient_checkpointing", w.checkpoint_activations},
                     {"optimizer", std::string(optimizer_name(w.row_optimizer.kind))},
                     {"memory_reserve_bytes", r.chosen.prediction.device().budget_bytes},
                     {"allocator_env", o.preset.alloc_env.empty() ? json(nullptr)
                                                                  : json(o.preset.alloc_env + "=max_split_size_mb:128,garbage_collection_threshold:0.8")},
                     {"communication_backend", o.preset.comm_backend},
                     {"checkpoint_interval_steps", ctx.checkpoint_every}};
  (void)base;
  return j;
}

}  // namespace leanemb::plan
