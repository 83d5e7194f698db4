// `leanemb report RUN_DIR` (docs/serve.md): one self-contained HTML page of a run, drawn by this
// small SVG code (no scripts, no network, no external files): loss, eval metric and samples/s
// over steps from RUN_DIR/metrics.jsonl, and, given the run's --json-summary, its memory by tier
// and category (stacked bars, planned beside measured when the summary has the plan).
//
// Every chart is an <svg class="chart" id="chart-<series>"> holding one <polyline> whose
// data-steps and data-values attributes list the points it draws (%.9g), so that a reader (or
// a test) can check the picture against metrics.jsonl.
//
// Thread safety: a pure function of its inputs.
#pragma once

#include <string>

#include "leanemb/status.h"

namespace leanemb::serve {

// metrics_jsonl: the text of metrics.jsonl; summary_json: the --json-summary text or empty.
// Errors: InvalidArgument for a line that is not a JSON object.
Result<std::string> render_report(const std::string& title, const std::string& metrics_jsonl, const std::string& summary_json);

}  // namespace leanemb::serve
