// `leanemb report RUN_DIR [RUN_DIR ...]` (docs/serve.md): one self-contained HTML page of a run,
// or of several overlaid (no scripts, no network, no external files), its charts drawn by
// src/chart (svg_chart.h: the element and data-* attribute conventions a reader or a test checks
// the picture by). Tables (summary, final evaluation, configuration differences) write numbers
// for reading (chart::format_number: separators, 4 significant digits, units). From
// RUN_DIR/metrics.jsonl: loss, eval metric (AUC or P@1, and logloss), samples/s, loss scale and
// skipped steps over steps; bytes moved between tiers and the row caches' fetch / write-back
// bytes (cumulative); checkpoints as a chart of their write seconds, a table, and markers on
// every chart over steps (skipped steps and ends of epochs are marked too). A chart is drawn only
// when it carries information: two points or more (one evaluation is a number in the table), a
// loss scale that moves off 1 (fp16), skipped steps that are not all 0, bytes that moved. Given
// the run's --json-summary: memory by tier and category as stacked bars, planned beside measured
// when the summary has the plan.
//
// Chart ids: chart-loss, chart-eval, chart-eval_logloss (CTR), chart-samples_per_s,
// chart-loss_scale, chart-skipped_steps, chart-transfers, chart-row_cache (cached tables),
// chart-checkpoint_seconds, chart-memory (with a summary); several runs: chart-transfers-<dir>
// and chart-row_cache-<key> (one chart per direction) instead of chart-transfers / chart-row_cache.
// Section ids: sec-summary, sec-config (several runs), sec-eval, sec-training, sec-transfers,
// sec-checkpoints, sec-memory.
//
// Thread safety: a pure function of its inputs.
#pragma once

#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::serve {

// metrics_jsonl: the text of metrics.jsonl; summary_json: the --json-summary text or empty.
// A last line that is not JSON and has no newline (a write cut short: disk full, a kill while
// appending) is left out with a note on the page and a warning in *warnings (when given).
// Errors: InvalidArgument for another line that is not a JSON object with a numeric step, or a
// summary that is not a JSON object.
Result<std::string> render_report(const std::string& title, const std::string& metrics_jsonl, const std::string& summary_json,
                                  std::vector<std::string>* warnings = nullptr);

// One run of a comparison: its name (the legend and the column header), metrics.jsonl's text and
// its --json-summary text (or empty).
struct RunInput {
  std::string name, metrics_jsonl, summary_json;
};

// The page of one run or of several (`leanemb report RUN [RUN ...]`): with several, every chart
// over steps draws one series per run (data-series = the run's name, a legend, distinct colours),
// the summary and evaluation tables have one column per run, a table lists the configuration keys
// whose values differ (from the summaries' "config"), and the memory chart has each run's bars.
// Errors: those of render_report, the run's name first.
Result<std::string> render_runs(const std::string& title, const std::vector<RunInput>& runs, std::vector<std::string>* warnings = nullptr);

}  // namespace leanemb::serve
