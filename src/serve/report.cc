// `leanemb report` (see report.h). The charts are drawn by src/chart (svg_chart.h).
#include "serve/report.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "core/json.h"

#include "chart/svg_chart.h"
#include "leanemb/memory.h"

namespace leanemb::serve {

using nlohmann::json;

namespace {

struct Checkpoint {
  double step = 0, seconds = 0;
  std::string path;
};

// What metrics.jsonl holds, as series over steps.
struct Run {
  chart::Series loss{"loss", "", {}, {}}, speed{"samples_per_s", "", {}, {}}, scale{"loss_scale", "", {}, {}};
  chart::Series skipped{"skipped_steps", "", {}, {}}, eval{"eval", "", {}, {}}, logloss{"eval_logloss", "", {}, {}};
  chart::Series ckpt_seconds{"checkpoint_seconds", "", {}, {}};
  std::string eval_name = "Eval metric";
  int64_t cut_last_line = 0;  // the last line's number when it was cut short (left out)
  std::vector<std::pair<std::string, chart::Series>> transfers;  // direction -> cumulative bytes
  std::vector<std::pair<std::string, chart::Series>> row_cache;  // fetched / written back bytes
  std::vector<Checkpoint> checkpoints;
  std::vector<chart::Marker> markers;  // checkpoints, skipped steps, epoch ends: on every step chart
};

void add_point(std::vector<std::pair<std::string, chart::Series>>* named, const std::string& key, const std::string& label, double x,
               double y) {
  auto it = std::find_if(named->begin(), named->end(), [&](const auto& p) { return p.first == key; });
  if (it == named->end()) {
    named->push_back({key, chart::Series{key, label, {}, {}}});
    it = named->end() - 1;
  }
  it->second.x.push_back(x);
  it->second.y.push_back(y);
}

std::string direction_label(std::string key) {  // "host_to_device" -> "host->device"
  const size_t at = key.find("_to_");
  return at == std::string::npos ? key : key.substr(0, at) + "->" + key.substr(at + 4);
}

Result<Run> parse_metrics(const std::string& metrics_jsonl, std::vector<std::string>* warnings) {
  Run r;
  std::istringstream in(metrics_jsonl);
  int64_t line_no = 0;
  double last_skipped = 0;
  // The last line, when it is not JSON and has no newline: a write cut short (disk full, a
  // kill while appending; a line is appended with its newline in one write). It is left out
  // with a warning; a bad line anywhere else (or a whole bad last line) is an error.
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const json j = parse_json_or_discarded(line);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number()) {
      const bool last = in.eof() && j.is_discarded();  // getline ran into the end before a newline
      if (!last) return invalid_argument("metrics.jsonl line " + std::to_string(line_no) + " is not a JSON object with a step");
      if (warnings)
        warnings->push_back("metrics.jsonl line " + std::to_string(line_no) + " (the last, " + std::to_string(line.size()) +
                            " bytes) is cut short: a write that did not complete (disk full, or the run was killed while "
                            "writing it); the report leaves it out");
      r.cut_last_line = line_no;
      continue;
    }
    const double step = j["step"].get<double>();
    auto number = [&](const char* key, chart::Series* s) {
      if (j.contains(key) && j[key].is_number()) {
        s->x.push_back(step);
        s->y.push_back(j[key].get<double>());
      }
    };
    number("loss", &r.loss);
    number("samples_per_s", &r.speed);
    number("loss_scale", &r.scale);
    number("skipped_steps", &r.skipped);
    if (j.contains("skipped_steps") && j["skipped_steps"].is_number()) {
      const double now = j["skipped_steps"].get<double>();
      if (now > last_skipped)
        r.markers.push_back({step, "skipped", chart::num(now - last_skipped) + " step(s) skipped (non-finite gradients) by step " + chart::num(step)});
      last_skipped = now;
    }
    if (j.contains("transfers") && j["transfers"].is_object())
      for (const auto& [dir, v] : j["transfers"].items())
        if (v.is_number()) add_point(&r.transfers, dir, direction_label(dir), step, v.get<double>());
    if (j.contains("row_cache") && j["row_cache"].is_object())
      for (const char* key : {"fetched_bytes", "written_back_bytes"})
        if (j["row_cache"].contains(key) && j["row_cache"][key].is_number())
          add_point(&r.row_cache, key, std::string(key) == "fetched_bytes" ? "fetched (store -> cache)" : "written back (cache -> store)", step,
                    j["row_cache"][key].get<double>());
    if (j.contains("eval") && j["eval"].is_object()) {
      const json& e = j["eval"];
      for (const char* key : {"auc", "precision_at_1"})
        if (e.contains(key) && e[key].is_number()) {
          r.eval.x.push_back(step);
          r.eval.y.push_back(e[key].get<double>());
          r.eval_name = std::string(key) == "auc" ? "Eval AUC" : "Eval P@1";
        }
      if (e.contains("logloss") && e["logloss"].is_number()) {
        r.logloss.x.push_back(step);
        r.logloss.y.push_back(e["logloss"].get<double>());
      }
      if (j.contains("epoch") && j["epoch"].is_number())
        r.markers.push_back({step, "epoch", "end of epoch " + dump_json(j["epoch"]) + " (step " + chart::num(step) + ")"});
    }
    if (j.contains("checkpoint") && j["checkpoint"].is_string()) {
      Checkpoint c{step, j.value("checkpoint_seconds", 0.0), j["checkpoint"].get<std::string>()};
      r.checkpoints.push_back(c);
      r.ckpt_seconds.x.push_back(step);
      r.ckpt_seconds.y.push_back(c.seconds);
      r.markers.push_back({step, "checkpoint", "checkpoint at step " + chart::num(step) + ": " + c.path});
    }
  }
  return r;
}

chart::LineChart step_chart(const Run& r, std::string id, std::string title, std::vector<chart::Series> series,
                            chart::Axis axis = chart::Axis::kNumber, std::string empty = "no data in metrics.jsonl") {
  chart::LineChart c;
  c.id = std::move(id);
  c.title = std::move(title);
  c.series = std::move(series);
  c.markers = r.markers;
  c.y_axis = axis;
  c.empty_text = std::move(empty);
  return c;
}

std::vector<chart::Series> values_of(const std::vector<std::pair<std::string, chart::Series>>& named) {
  std::vector<chart::Series> out;
  for (const auto& p : named) out.push_back(p.second);
  return out;
}

// Memory: one stacked bar per tier, planned beside measured when the summary has the plan.
chart::BarChart memory_chart(const json& sum) {
  chart::BarChart c;
  c.id = "memory";
  c.width = 1000;
  c.title = "Memory by tier and category (peak bytes of each category; device = device (cpu) on this build)";
  if (sum.contains("plan") && sum["plan"].is_object()) {
    c.title = "Memory by tier and category, planned (leanemb plan's model) beside measured (peak bytes)";
    for (const auto& [tier, t] : sum["plan"].items()) {
      if (!t.is_object() || !t.contains("categories")) continue;
      chart::Bar planned{tier + " planned", {}}, measured{tier + " measured", {}};
      for (const auto& [cat, v] : t["categories"].items()) {
        planned.segments.push_back({cat, v.value("planned", 0.0)});
        measured.segments.push_back({cat, v.value("measured", 0.0)});
      }
      c.bars.push_back(planned);
      c.bars.push_back(measured);
    }
  } else if (sum.contains("memory") && sum["memory"].is_object()) {
    for (const auto& [tier, cats] : sum["memory"].items()) {
      chart::Bar b{tier + " measured", {}};
      for (const auto& [cat, v] : cats.items())
        if (v.is_number()) b.segments.push_back({cat, v.get<double>()});
      c.bars.push_back(b);
    }
  }
  return c;
}

std::string summary_table(const json& sum) {
  std::ostringstream o;
  o << "<h2>Summary</h2>\n<table id=\"summary\">\n";
  for (const char* k : {"task", "outcome", "steps", "samples", "samples_this_run", "samples_per_s", "train_seconds", "loss", "skipped_steps",
                        "loss_scale", "steps_per_epoch", "resumed_from_step", "checkpoint"})
    if (sum.contains(k) && !sum[k].is_null())
      o << "<tr><th class=\"l\">" << k << "</th><td class=\"l\">" << chart::escape(sum[k].is_string() ? sum[k].get<std::string>() : dump_json(sum[k]))
        << "</td></tr>\n";
  if (sum.contains("eval") && sum["eval"].is_object())
    o << "<tr><th class=\"l\">final eval</th><td class=\"l\">" << chart::escape(dump_json(sum["eval"])) << "</td></tr>\n";
  o << "</table>\n";
  const json* t = sum.contains("transfers") ? &sum["transfers"]
                  : sum.contains("memory_detail") && sum["memory_detail"].contains("transfers") ? &sum["memory_detail"]["transfers"]
                                                                                                : nullptr;
  if (t && t->is_object()) {
    o << "<table id=\"transfers\"><tr><th class=\"l\">between tiers (whole run)</th><th>bytes</th></tr>\n";
    for (const auto& [dir, v] : t->items())
      if (v.is_number())
        o << "<tr><td class=\"l\">" << chart::escape(direction_label(dir)) << "</td><td data-bytes=\"" << chart::num(v.get<double>()) << "\">"
          << chart::escape(chart::label(v.get<double>(), chart::Axis::kBytes)) << "</td></tr>\n";
    if (sum.contains("row_cache") && sum["row_cache"].is_object())
      for (const auto& [k, v] : sum["row_cache"].items())
        if (v.is_number())
          o << "<tr><td class=\"l\">row cache " << chart::escape(k) << "</td><td>"
            << chart::escape(k.find("bytes") != std::string::npos ? chart::label(v.get<double>(), chart::Axis::kBytes) : dump_json(v)) << "</td></tr>\n";
    o << "</table>\n";
  }
  return o.str();
}

std::string checkpoint_table(const Run& r) {
  if (r.checkpoints.empty()) return "<p class=\"note\">No checkpoint was written (metrics.jsonl records none).</p>\n";
  std::ostringstream o;
  o << "<table id=\"checkpoints\"><tr><th>step</th><th>write seconds</th><th class=\"l\">directory</th></tr>\n";
  for (const Checkpoint& c : r.checkpoints)
    o << "<tr><td>" << chart::num(c.step) << "</td><td>" << chart::label(c.seconds, chart::Axis::kNumber) << "</td><td class=\"l\">"
      << chart::escape(c.path) << "</td></tr>\n";
  o << "</table>\n";
  return o.str();
}

}  // namespace

Result<std::string> render_report(const std::string& title, const std::string& metrics_jsonl, const std::string& summary_json,
                                  std::vector<std::string>* warnings) {
  LEANEMB_ASSIGN_OR_RETURN(Run r, parse_metrics(metrics_jsonl, warnings));
  json sum;
  if (!summary_json.empty()) {
    sum = parse_json_or_discarded(summary_json);
    if (sum.is_discarded() || !sum.is_object()) return invalid_argument("the --summary file is not a JSON object");
  }
  std::ostringstream o;
  o << chart::page_begin(title);
  o << "<p class=\"note\">Dashed lines mark checkpoints (green), skipped steps (red) and ends of epochs (grey) on every chart over "
       "steps; hover a point or a line for its value.</p>\n";
  if (r.cut_last_line > 0)
    o << "<p class=\"note\">metrics.jsonl line " << r.cut_last_line
      << " (the last) is cut short (a write that did not complete) and is left out.</p>\n";
  if (!sum.is_null() && sum.contains("metrics_lost"))
    o << "<p class=\"note\">The run lost metrics.jsonl lines from step " << sum["metrics_lost"].value("step", int64_t{-1})
      << " on (a write failed): the charts end there.</p>\n";
  if (!sum.is_null()) o << summary_table(sum);
  o << "<h2>Training</h2>\n";
  o << chart::draw_line_chart(step_chart(r, "loss", "Training loss (mean over log_every steps)", {r.loss}));
  o << chart::draw_line_chart(step_chart(r, "eval", r.eval_name, {r.eval}, chart::Axis::kNumber, "no evaluation in metrics.jsonl"));
  if (!r.logloss.x.empty()) o << chart::draw_line_chart(step_chart(r, "eval_logloss", "Eval logloss", {r.logloss}));
  o << chart::draw_line_chart(step_chart(r, "samples_per_s", "Samples per second (this run's samples over its time so far)", {r.speed}));
  o << chart::draw_line_chart(step_chart(r, "loss_scale", "Loss scale (fp16: halved at a skipped step, grown after clean steps)", {r.scale}));
  o << chart::draw_line_chart(step_chart(r, "skipped_steps", "Skipped steps (non-finite gradients, cumulative)", {r.skipped}));
  o << "<h2>Transfers between tiers</h2>\n<p class=\"note\">What crossed from one tier to another: row cache fetches (store -> "
       "device) and write-backs (device -> store), rows and optimizer state placed on the host (read and written back each step).</p>\n";
  o << chart::draw_line_chart(step_chart(r, "transfers", "Bytes moved between tiers (cumulative)",
                                         values_of(r.transfers), chart::Axis::kBytes, "metrics.jsonl records no transfers (an older run)"));
  if (!r.row_cache.empty())
    o << chart::draw_line_chart(step_chart(r, "row_cache", "Row cache traffic (cumulative bytes, all cached tables)", values_of(r.row_cache),
                                           chart::Axis::kBytes));
  o << "<h2>Checkpoints</h2>\n";
  o << chart::draw_line_chart(step_chart(r, "checkpoint_seconds", "Checkpoints on the timeline: seconds to write each", {r.ckpt_seconds},
                                         chart::Axis::kNumber, "no checkpoint in metrics.jsonl"));
  o << checkpoint_table(r);
  o << "<h2>Memory</h2>\n";
  if (sum.is_null()) {
    o << "<p class=\"note\">Memory by tier and category: pass the run's --json-summary file with --summary.</p>\n";
  } else {
    const chart::BarChart m = memory_chart(sum);
    if (m.bars.empty()) o << "<p class=\"note\">The summary holds no memory figures.</p>\n";
    else o << chart::draw_stacked_bars(m);
  }
  o << "<p class=\"note\">Drawn by leanemb report from metrics.jsonl" << (sum.is_null() ? "" : " and the run's summary") << ".</p>\n";
  o << chart::page_end();
  return o.str();
}

}  // namespace leanemb::serve
