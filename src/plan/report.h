// What `leanemb plan` prints: the seed's memory breakdown table for the naive baseline and the
// chosen plan side by side, the chosen settings and their cost, and the seed's deployment table
// with the allocator settings that exist for PyTorch users on that device; or, when nothing
// fits, the smallest budget that would. Also as JSON.
//
// Thread safety: plain functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "plan/planner.h"

namespace leanemb::plan {

struct ReportContext {
  std::string workload_text;   // one line describing the workload
  int64_t sequence_length = 0; // the deployment table's sequence length (0: pooled bags)
  int64_t checkpoint_every = 1000;
  // Random reads per second of the disk a file store would use (plan --disk-iops, or measured by
  // plan --probe-disk: tiered::probe_disk), and where the figure comes from; 0: unknown.
  double disk_read_iops = 0;
  std::string disk_read_iops_source;
  bool incremental_checkpoints = false;  // train.incremental_checkpoints
};

std::string plan_report_text(const Workload& base, const PlannerOptions& options, const PlanResult& result,
                             const ReportContext& ctx);
nlohmann::json plan_report_json(const Workload& base, const PlannerOptions& options, const PlanResult& result,
                                const ReportContext& ctx);
// "bf16 rows (stochastic rounding), adam state fp32 on the device, ..." of a candidate.
std::string describe_settings(const Workload& w);
// The breakdown table's formula column: how `c`'s bytes are counted for `kind`.
const char* category_formula(Category c, WorkloadKind kind);

// `leanemb plan --html FILE` (src/plan/report_html.cc): one self-contained HTML page (no
// scripts, no network) with the breakdown table as a picture: stacked bars by category
// (src/chart/svg_chart.h) for the naive baseline on the device beside the chosen plan's device
// and host tiers (and the config as written, with --config), the usable device memory as a
// limit line; the table itself, the settings and the text report. Drawn when nothing fits too
// (then the bars are the smallest plan's). Chart id chart-plan; bars "naive (device)",
// "plan (device)", "plan (host)", "as configured (device)", "as configured (host)".
std::string plan_report_html(const Workload& base, const PlannerOptions& options, const PlanResult& result,
                             const ReportContext& ctx);

}  // namespace leanemb::plan
