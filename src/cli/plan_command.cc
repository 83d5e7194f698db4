// `leanemb plan`: predict every byte of a run and choose settings that fit a device (docs/plan.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "leanemb/json.h"
#include "leanemb/paths.h"
#include "plan/memory_model.h"
#include "plan/parity.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "serve/task_registry.h"
#include "leanemb/disk_probe.h"
#include "leanemb/commands.h"
#include "train/task_config.h"
#include "train/toml_section.h"

namespace leanemb::cli {

namespace {


Result<plan::Workload> flag_workload(const PlanArgs& a, std::string* text) {
  if (a.vocab < 1 || a.dim < 1 || a.batch < 1)
    return invalid_argument("give --config FILE, or --vocab, --dim and --batch (each >= 1)");
  if (a.seq_len < 0) return invalid_argument("--seq-len must be >= 1");
  const int64_t L = a.seq_len > 0 ? a.seq_len : 1;
  plan::Workload w;
  w.kind = plan::WorkloadKind::kEmbeddingOnly;
  plan::TableSpec t;
  t.name = "table";
  t.num_rows = a.vocab;
  t.dim = a.dim;
  LEANEMB_ASSIGN_OR_RETURN(t.pooling, parse_pooling(a.pooling.empty() ? (L > 1 ? "none" : "sum") : a.pooling));
  t.max_ids_per_sample = L;
  t.mean_ids_per_sample = static_cast<double>(L);
  w.tables = {t};
  w.batch_size = a.batch;
  LEANEMB_ASSIGN_OR_RETURN(w.row_optimizer.kind, parse_optimizer(a.optimizer));
  w.row_optimizer.eps = default_eps(w.row_optimizer.kind);
  LEANEMB_ASSIGN_OR_RETURN(w.row_dtype, parse_dtype(a.row_dtype, DTypeUse::kRows));
  LEANEMB_ASSIGN_OR_RETURN(w.row_optimizer.state_dtype, parse_dtype(a.state_dtype, DTypeUse::kOptimizerState));
  if (!a.precision.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(w.precision, parse_dtype(a.precision, DTypeUse::kActivations));
    if (w.precision == DType::kF16) return invalid_argument("--precision: an embedding-only output is fp32 or bf16");
  }
  *text = "embedding only: table " + std::to_string(a.vocab) + " x " + std::to_string(a.dim) + ", batch " +
          std::to_string(a.batch) + " x " + std::to_string(L) + " ids (" + std::string(pooling_name(t.pooling)) +
          "), optimizer " + a.optimizer;
  return w;
}

}  // namespace

namespace {

// The planner's options from the flags.
Result<plan::PlannerOptions> planner_options(const PlanArgs& a) {
  plan::PlannerOptions po;
  LEANEMB_ASSIGN_OR_RETURN(po.preset, plan::find_preset(a.preset));
  for (auto [s, dst] : {std::pair{&a.device_budget, &po.device_budget_bytes}, {&a.host_budget, &po.host_budget_bytes}}) {
    if (s->empty()) continue;
    LEANEMB_ASSIGN_OR_RETURN(*dst, parse_bytes(*s));
  }
  using LO = plan::LeanOption;
  for (auto [flag, opt] : {std::pair{a.allow_rowwise, LO::kRowwiseOptimizer}, {a.allow_bf16_state, LO::kBf16State},
                           {a.allow_8bit_state, LO::kInt8State}, {a.allow_4bit_state, LO::kInt4State},
                           {a.allow_cache, LO::kRowCache}})
    if (flag) po.allow.push_back(opt);
  for (const std::string& n : a.allow_unproven) {
    if (n == "all") {
      for (const plan::LeanOptionInfo& i : plan::lean_option_table()) po.allow.push_back(i.option);
      continue;
    }
    auto lo = plan::parse_lean_option(n);
    if (!lo.ok()) return invalid_argument("--allow-unproven: " + lo.status().message());
    po.allow.push_back(lo.value());
  }
  po.max_shards = a.max_shards;
  po.keep_precision = a.keep_precision;
  po.speed_tolerance = a.speed_tolerance_pct / 100.0;
  po.allow_host = !a.no_host && !a.largest_table;
  if (a.max_shards < 1) return invalid_argument("--max-shards must be >= 1");
  return po;
}

// --disk-iops / --probe-disk into the report's context.
Status disk_rate(const PlanArgs& a, plan::ReportContext* ctx) {
  if (a.disk_iops > 0 && !a.probe_disk.empty()) return invalid_argument("--disk-iops and --probe-disk: give one");
  if (a.disk_iops > 0) {
    ctx->disk_read_iops = a.disk_iops;
    ctx->disk_read_iops_source = "--disk-iops";
  }
  if (!a.probe_disk.empty()) {
    auto probe = tiered::probe_disk(a.probe_disk);
    if (!probe.ok()) return Status(probe.status().code(), "--probe-disk: " + probe.status().message());
    ctx->disk_read_iops = probe.value().read_iops;
    ctx->disk_read_iops_source = "probed in " + a.probe_disk + ": 4 KiB at queue depth 64";
  }
  return Status();
}

// A config's workload, from its task's part of the memory model (*cfg: the parsed config, for
// --write-config).
Result<plan::Workload> config_workload(const PlanArgs& a, const std::string& text, std::unique_ptr<train::TaskConfig>* cfg,
                                       plan::ReportContext* ctx) {
  LEANEMB_ASSIGN_OR_RETURN(std::string name, train::config_task(text, a.config, a.sets));
  auto task = serve::find_task(name);
  if (!task.ok()) return Status(task.status().code(), a.config + ": " + task.status().message());
  LEANEMB_ASSIGN_OR_RETURN(*cfg, task.value()->parse_config(text, a.config, a.sets));
  train::TaskConfig& c = **cfg;
  if (!a.write_config.empty() && !c.writes_planned_config())
    return invalid_argument("--write-config is for CTR configs");
  LEANEMB_ASSIGN_OR_RETURN(plan::Workload w, c.plan_workload(&ctx->workload_text));
  if (c.run().checkpoint_every > 0) ctx->checkpoint_every = c.run().checkpoint_every;
  ctx->incremental_checkpoints = c.run().incremental_checkpoints;
  return w;
}

// The workload of --config (text or CTR), or of the flags.
Result<plan::Workload> workload_of(const PlanArgs& a, std::unique_ptr<train::TaskConfig>* cfg, plan::ReportContext* ctx) {
  if (a.config.empty()) {
    if (!a.sets.empty()) return invalid_argument("--set needs --config");
    ctx->sequence_length = a.seq_len > 1 ? a.seq_len : 0;
    return flag_workload(a, &ctx->workload_text);
  }
  // outputs_never_alias_inputs: --write-config or --html naming the --config read (data/io.h).
  const data::NamedPath config_in{"--config", a.config};
  for (const data::NamedPath& out : {data::NamedPath{"--write-config", a.write_config}, data::NamedPath{"--html", a.html}})
    if (!out.path.empty()) LEANEMB_RETURN_IF_ERROR(data::check_output_not_input(out, std::span<const data::NamedPath>(&config_in, 1)));
  if (a.vocab || a.dim || a.batch || a.seq_len || !a.pooling.empty() || !a.precision.empty())
    return invalid_argument("--config cannot be combined with --vocab/--dim/--batch/--seq-len/--pooling/--precision (use --set)");
  LEANEMB_ASSIGN_OR_RETURN(std::string text, train::read_text_file(a.config, "config"));
  return config_workload(a, text, cfg, ctx);
}

// --largest-table: the largest table the plan and the naive baseline fit.
int print_largest_table(const PlanArgs& a, const plan::Workload& w, const plan::PlannerOptions& po,
                        const plan::ReportContext& ctx) {
  if (!a.html.empty()) return report_error(invalid_argument("--html draws a plan's breakdown: not with --largest-table"));
  auto plan_rows = plan::largest_table_rows(w, po, false);
  if (!plan_rows.ok()) return report_error(plan_rows.status());
  auto naive_rows = plan::largest_table_rows(w, po, true);
  if (!naive_rows.ok()) return report_error(naive_rows.status());
  const double ratio = naive_rows.value() ? static_cast<double>(plan_rows.value()) / static_cast<double>(naive_rows.value()) : 0.0;
  if (a.json) {
    nlohmann::json j = {{"workload", ctx.workload_text}, {"preset", po.preset.name}, {"plan_rows", plan_rows.value()},
                        {"naive_rows", naive_rows.value()}, {"ratio", ratio}};
    std::printf("%s\n", dump_json(j, 2).c_str());
  } else {
    std::printf("largest table on one %s device (rows and state on the device; batch and ids as given):\n"
                "  naive fp32 Adam (dense gradient): %lld rows\n  chosen plan:                     %lld rows\n"
                "  ratio: %.2fx\n", po.preset.name.c_str(), static_cast<long long>(naive_rows.value()),
                static_cast<long long>(plan_rows.value()), ratio);
  }
  return 0;
}

// --write-config: the config with the fields the chosen plan decides replaced (its task's
// TaskConfig::planned_config).
Status write_plan_config(const PlanArgs& a, const train::TaskConfig* cfg, const plan::PlannerOptions& po,
                         const plan::PlanResult& res) {
  if (a.config.empty() || cfg == nullptr)
    return invalid_argument("--write-config needs --config: `leanemb train` runs the CTR model a config describes");
  const plan::Workload& c = res.chosen.workload;
  if (c.num_shards > 1)
    return failed_precondition("the chosen plan needs shards, which `leanemb train` cannot run yet; "
                               "rerun without --max-shards to write a config");
  LEANEMB_ASSIGN_OR_RETURN(std::string toml, cfg->planned_config(c, po.device_budget_bytes));
  std::ofstream f(a.write_config);
  f << toml;
  f.close();  // flushes: a write error shows here
  if (!f) return io_error("cannot write --write-config file '" + a.write_config + "'");
  std::fprintf(stderr, "wrote %s (leanemb train --config %s)\n", a.write_config.c_str(), a.write_config.c_str());
  return Status();
}

}  // namespace

int run_plan(const PlanArgs& a) {
  auto po = planner_options(a);
  if (!po.ok()) return report_error(po.status());
  plan::ReportContext ctx;
  if (Status s = disk_rate(a, &ctx); !s.ok()) return report_error(s);
  std::unique_ptr<train::TaskConfig> cfg;  // with --config
  auto wl = workload_of(a, &cfg, &ctx);
  if (!wl.ok()) return report_error(wl.status());
  const plan::Workload& w = wl.value();
  if (a.largest_table) return print_largest_table(a, w, po.value(), ctx);

  auto r = plan::make_plan(w, po.value());
  if (!r.ok()) return report_error(r.status());
  const plan::PlanResult& res = r.value();
  if (a.json) std::printf("%s\n", dump_json(plan::plan_report_json(w, po.value(), res, ctx), 2).c_str());
  else std::fputs(plan::plan_report_text(w, po.value(), res, ctx).c_str(), stdout);
  if (!a.html.empty()) {  // also when nothing fits: the page shows the smallest plan
    std::ofstream f(a.html);
    f << plan::plan_report_html(w, po.value(), res, ctx);
    f.close();  // flushes: a write error shows here
    if (!f) return report_error(io_error("cannot write --html file '" + a.html + "'"));
    std::fprintf(stderr, "wrote %s\n", a.html.c_str());
  }
  if (!res.fits) return kExitMemory;
  if (!a.write_config.empty())
    if (Status s = write_plan_config(a, cfg.get(), po.value(), res); !s.ok()) return report_error(s);
  return 0;
}

}  // namespace leanemb::cli
