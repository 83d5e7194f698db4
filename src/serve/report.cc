// `leanemb report` (see report.h). The charts are drawn by src/chart (svg_chart.h).
#include "serve/report.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>
#include <vector>

#include "leanemb/json.h"

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
  nlohmann::json last_eval = nlohmann::json::object();  // the last eval record (the final evaluation without a summary)
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
      r.last_eval = e;
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

// One run as the page reads it: its name (the legend key when several are drawn), its series, its
// summary (null without one).
struct Loaded {
  std::string name;
  Run r;
  json sum;
};

std::vector<chart::Series> values_of(const std::vector<std::pair<std::string, chart::Series>>& named) {
  std::vector<chart::Series> out;
  for (const auto& p : named) out.push_back(p.second);
  return out;
}

size_t most_points(const std::vector<Loaded>& runs, const std::function<const chart::Series&(const Run&)>& pick) {
  size_t n = 0;
  for (const Loaded& l : runs) n = std::max(n, pick(l.r).x.size());
  return n;
}

// A chart over steps. One run: its own series (ids as before: "loss", "eval" ...) and its markers.
// Several: one series per run, named after the run, with a legend and distinct colours (the
// palette in run order); no markers (each run's checkpoints would crowd the others' lines).
chart::LineChart overlay(const std::vector<Loaded>& runs, std::string id, std::string title,
                         const std::function<chart::Series(const Run&)>& pick, chart::Axis axis = chart::Axis::kNumber,
                         std::string empty = "no data in metrics.jsonl") {
  chart::LineChart c;
  c.id = std::move(id);
  c.title = std::move(title);
  c.y_axis = axis;
  c.empty_text = std::move(empty);
  if (runs.size() == 1) {
    c.series.push_back(pick(runs[0].r));
    c.markers = runs[0].r.markers;
    return c;
  }
  for (const Loaded& l : runs) {
    chart::Series s = pick(l.r);
    s.id = l.name;
    s.label = l.name;
    c.series.push_back(std::move(s));
  }
  return c;
}

const chart::Series* find_named(const std::vector<std::pair<std::string, chart::Series>>& named, const std::string& key) {
  for (const auto& p : named)
    if (p.first == key) return &p.second;
  return nullptr;
}

// The keys of a named set over all runs, in first-seen order.
std::vector<std::string> named_keys(const std::vector<Loaded>& runs, std::vector<std::pair<std::string, chart::Series>> Run::*field) {
  std::vector<std::string> keys;
  for (const Loaded& l : runs)
    for (const auto& p : l.r.*field)
      if (std::find(keys.begin(), keys.end(), p.first) == keys.end()) keys.push_back(p.first);
  return keys;
}

bool any_nonzero(const chart::Series& s) {
  return std::any_of(s.y.begin(), s.y.end(), [](double v) { return v != 0; });
}

// The loss scale carries information only when it moved off 1 (fp16's dynamic scaling); fp32 and
// bf16 runs log a constant 1.
bool scale_informative(const chart::Series& s) {
  return std::any_of(s.y.begin(), s.y.end(), [&](double v) { return v != 1 || v != s.y.front(); });
}

// Memory: per tier, a stacked bar of planned beside measured when the summary has the plan (the
// measured peaks alone otherwise); with several runs each bar's label starts with the run's name.
chart::BarChart memory_chart(const std::vector<Loaded>& runs) {
  chart::BarChart c;
  c.id = "memory";
  c.width = 1000;
  bool planned = false;
  for (const Loaded& l : runs) {
    const json& sum = l.sum;
    if (sum.is_null()) continue;
    const std::string prefix = runs.size() == 1 ? "" : l.name + ": ";
    if (sum.contains("plan") && sum["plan"].is_object()) {
      planned = true;
      for (const auto& [tier, t] : sum["plan"].items()) {
        if (!t.is_object() || !t.contains("categories")) continue;
        chart::Bar p{prefix + tier + " planned", {}}, m{prefix + tier + " measured", {}};
        double total = 0;
        for (const auto& [cat, v] : t["categories"].items()) {
          p.segments.push_back({cat, v.value("planned", 0.0)});
          m.segments.push_back({cat, v.value("measured", 0.0)});
          total += p.segments.back().value + m.segments.back().value;
        }
        if (total == 0) continue;  // a tier the run did not use (nothing placed on the host): two empty bars say nothing
        c.bars.push_back(p);
        c.bars.push_back(m);
      }
    } else if (sum.contains("memory") && sum["memory"].is_object()) {
      for (const auto& [tier, cats] : sum["memory"].items()) {
        chart::Bar b{prefix + tier + " measured", {}};
        for (const auto& [cat, v] : cats.items())
          if (v.is_number()) b.segments.push_back({cat, v.get<double>()});
        double total = 0;
        for (const chart::Segment& g : b.segments) total += g.value;
        if (total > 0) c.bars.push_back(b);
      }
    }
  }
  c.title = planned ? "Memory by tier and category: planned (leanemb plan's model) beside measured (peak bytes of each category)"
                    : "Memory by tier and category (peak bytes of each category)";
  return c;
}

// ---- tables ----------------------------------------------------------------------------------

using Cell = std::function<std::string(const Loaded&)>;  // "" = nothing to show for this run

std::string row(const std::string& name, const std::vector<Loaded>& runs, const Cell& cell) {
  std::vector<std::string> cells;
  bool any = false;
  for (const Loaded& l : runs) {
    cells.push_back(cell(l));
    any = any || !cells.back().empty();
  }
  if (!any) return "";
  std::string o = "<tr><th class=\"l\">" + chart::escape(name) + "</th>";
  for (const std::string& c : cells) o += "<td>" + chart::escape(c.empty() ? "-" : c) + "</td>";
  return o + "</tr>\n";
}

std::string header(const std::string& first, const std::vector<Loaded>& runs) {
  std::string o = "<tr><th class=\"l\">" + chart::escape(first) + "</th>";
  for (const Loaded& l : runs) o += "<th>" + chart::escape(l.name) + "</th>";
  return o + "</tr>\n";
}

// A number of the summary (or "" when it has none).
std::string sum_number(const json& sum, const char* key, const std::function<std::string(double)>& fmt) {
  if (sum.is_null() || !sum.contains(key) || !sum[key].is_number()) return "";
  return fmt(sum[key].get<double>());
}

std::string last_of(const chart::Series& s, const std::function<std::string(double)>& fmt) {
  return s.y.empty() ? "" : fmt(s.y.back());
}

std::string bytes(double v) { return chart::label(v, chart::Axis::kBytes); }

// The summary: one column per run. From the --json-summary where given, else the last records of
// metrics.jsonl.
std::string summary_table(const std::vector<Loaded>& runs) {
  auto num = [](double v) { return chart::format_number(v); };
  std::ostringstream o;
  o << "<h2 id=\"sec-summary\">Summary</h2>\n<table id=\"summary\">\n" << header("", runs);
  o << row("task", runs, [](const Loaded& l) { return l.sum.is_null() ? "" : l.sum.value("task", ""); });
  o << row("outcome", runs, [](const Loaded& l) { return l.sum.is_null() ? "" : l.sum.value("outcome", ""); });
  o << row("steps", runs, [&](const Loaded& l) {
    const std::string s = sum_number(l.sum, "steps", num);
    if (!s.empty() || l.r.loss.x.empty()) return s;
    return num(l.r.loss.x.back());  // the last logged step
  });
  o << row("samples", runs, [&](const Loaded& l) { return sum_number(l.sum, "samples", num); });
  o << row("training time", runs, [](const Loaded& l) { return sum_number(l.sum, "train_seconds", chart::format_seconds); });
  o << row("samples/s", runs, [&](const Loaded& l) {
    std::string s = sum_number(l.sum, "samples_per_s", num);
    if (s.empty()) s = last_of(l.r.speed, num);
    return s.empty() ? s : s + " samples/s";
  });
  o << row("final training loss", runs, [&](const Loaded& l) {
    const std::string s = sum_number(l.sum, "loss", num);
    return s.empty() ? last_of(l.r.loss, num) : s;
  });
  o << row("skipped steps", runs, [&](const Loaded& l) { return sum_number(l.sum, "skipped_steps", num); });
  o << row("final loss scale", runs, [&](const Loaded& l) { return scale_informative(l.r.scale) ? last_of(l.r.scale, num) : ""; });
  // Peak memory of each tier (the allocator's peak of the tier, not the sum of the categories' peaks).
  std::vector<std::string> tiers;
  for (const Loaded& l : runs)
    if (!l.sum.is_null() && l.sum.contains("memory_detail") && l.sum["memory_detail"].is_object())
      for (const auto& [tier, t] : l.sum["memory_detail"].items())
        if (t.is_object() && t.contains("peak_bytes") && std::find(tiers.begin(), tiers.end(), tier) == tiers.end()) tiers.push_back(tier);
  for (const std::string& tier : tiers)
    o << row("peak memory, " + tier, runs, [&](const Loaded& l) -> std::string {
      if (l.sum.is_null() || !l.sum.contains("memory_detail") || !l.sum["memory_detail"].contains(tier)) return "";
      const json& t = l.sum["memory_detail"][tier];
      std::string s = t.contains("peak_bytes") && t["peak_bytes"].is_number() ? bytes(t["peak_bytes"].get<double>()) : "";
      if (!s.empty() && t.contains("budget_bytes") && t["budget_bytes"].is_number() && t["budget_bytes"].get<double>() > 0)
        s += " of " + bytes(t["budget_bytes"].get<double>());
      return s;
    });
  o << row("embedding tables (weights + optimizer state)", runs, [](const Loaded& l) { return sum_number(l.sum, "embedding_table_bytes", bytes); });
  // Bytes per embedding row: what a row of the tables costs with its optimizer state (fp32 adagrad
  // 2 x 4 bytes per value, bf16 rows with rowwise adagrad 2 bytes per value + 4 per row).
  o << row("bytes per embedding row (weights + state)", runs, [&](const Loaded& l) -> std::string {
    if (l.sum.is_null() || !l.sum.contains("embedding_table_bytes") || !l.sum.contains("sparse_table_rows") ||
        !l.sum["sparse_table_rows"].is_array())
      return "";
    double rows = 0;
    for (const json& n : l.sum["sparse_table_rows"])
      if (n.is_number()) rows += n.get<double>();
    return rows > 0 ? num(l.sum["embedding_table_bytes"].get<double>() / rows) : "";
  });
  o << row("bytes per parameter", runs, [&](const Loaded& l) { return sum_number(l.sum, "bytes_per_param", num); });
  o << row("resumed from step", runs, [&](const Loaded& l) { return sum_number(l.sum, "resumed_from_step", num); });
  o << row("last checkpoint", runs, [](const Loaded& l) {
    return !l.sum.is_null() && l.sum.contains("checkpoint") && l.sum["checkpoint"].is_string() ? l.sum["checkpoint"].get<std::string>() : "";
  });
  o << "</table>\n";
  return o.str();
}

std::string metric_name(const std::string& key) {
  if (key == "auc") return "AUC";
  if (key == "precision_at_1") return "P@1";
  return key;
}

// The final evaluation as name: value rows (from the summary's "eval", else the last eval record).
std::string eval_table(const std::vector<Loaded>& runs) {
  std::vector<std::string> keys;
  auto eval_of = [](const Loaded& l) -> json {
    if (!l.sum.is_null() && l.sum.contains("eval") && l.sum["eval"].is_object()) return l.sum["eval"];
    return l.r.last_eval;
  };
  for (const Loaded& l : runs) {
    const json e = eval_of(l);  // kept alive: items() of a temporary would dangle
    for (const auto& [k, v] : e.items())
      if (v.is_number() && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  bool teacher = false;
  for (const Loaded& l : runs) teacher = teacher || (!l.sum.is_null() && l.sum.contains("teacher_auc"));
  if (keys.empty()) return "<p class=\"note\">no evaluation in metrics.jsonl</p>\n";
  std::ostringstream o;
  o << "<table id=\"eval\">\n" << header("final evaluation", runs);
  for (const std::string& k : keys)
    o << row(metric_name(k), runs, [&](const Loaded& l) -> std::string {
      const json e = eval_of(l);
      return e.contains(k) && e[k].is_number() ? chart::format_number(e[k].get<double>()) : "";
    });
  if (teacher)
    o << row("teacher AUC (the synthetic data's ceiling)", runs,
             [](const Loaded& l) { return sum_number(l.sum, "teacher_auc", [](double v) { return chart::format_number(v); }); });
  o << "</table>\n";
  return o.str();
}

// "a.b" -> value text of every leaf of a JSON object.
void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out->push_back({prefix, j.is_string() ? j.get<std::string>() : dump_json(j)});
}

// The configuration keys whose values differ between the runs (from the summaries' "config").
std::string config_diff(const std::vector<Loaded>& runs) {
  std::vector<std::vector<std::pair<std::string, std::string>>> flat(runs.size());
  std::vector<std::string> keys;
  size_t with_config = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].sum.is_null() || !runs[i].sum.contains("config")) continue;
    ++with_config;
    flatten(runs[i].sum["config"], "", &flat[i]);
    for (const auto& [k, v] : flat[i])
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  std::ostringstream o;
  o << "<h2 id=\"sec-config\">Configuration differences</h2>\n";
  if (with_config < 2) return o.str() + "<p class=\"note\">Pass each run's --json-summary (--summary, once per run) to compare their configurations.</p>\n";
  auto value = [&](size_t i, const std::string& k) -> std::string {
    for (const auto& [kk, v] : flat[i])
      if (kk == k) return v;
    return "";
  };
  std::string rows;
  for (const std::string& k : keys) {
    bool differs = false;
    for (size_t i = 1; i < runs.size(); ++i) differs = differs || value(i, k) != value(0, k);
    if (!differs) continue;
    rows += "<tr><th class=\"l\">" + chart::escape(k) + "</th>";
    for (size_t i = 0; i < runs.size(); ++i) rows += "<td class=\"l\">" + chart::escape(value(i, k).empty() ? "-" : value(i, k)) + "</td>";
    rows += "</tr>\n";
  }
  if (rows.empty()) return o.str() + "<p class=\"note\">The runs' configurations (as their summaries record them) are the same.</p>\n";
  return o.str() + "<table id=\"config_diff\">\n" + header("key (only those that differ)", runs) + rows + "</table>\n";
}

std::string transfers_table(const json& sum) {
  std::ostringstream o;
  const json* t = sum.contains("transfers") ? &sum["transfers"]
                  : sum.contains("memory_detail") && sum["memory_detail"].contains("transfers") ? &sum["memory_detail"]["transfers"]
                                                                                                : nullptr;
  if (t && t->is_object()) {
    o << "<table id=\"transfers\"><tr><th class=\"l\">between tiers (whole run)</th><th>bytes</th></tr>\n";
    for (const auto& [dir, v] : t->items())
      if (v.is_number())
        o << "<tr><td class=\"l\">" << chart::escape(direction_label(dir)) << "</td><td data-bytes=\"" << chart::num(v.get<double>()) << "\">"
          << chart::escape(bytes(v.get<double>())) << "</td></tr>\n";
    if (sum.contains("row_cache") && sum["row_cache"].is_object())
      for (const auto& [k, v] : sum["row_cache"].items())
        if (v.is_number())
          o << "<tr><td class=\"l\">row cache " << chart::escape(k) << "</td><td>"
            << chart::escape(k.find("bytes") != std::string::npos     ? bytes(v.get<double>())
                             : k.find("seconds") != std::string::npos ? chart::format_seconds(v.get<double>())
                                                                      : chart::format_number(v.get<double>()))
            << "</td></tr>\n";
    o << "</table>\n";
  }
  return o.str();
}

std::string checkpoint_table(const std::vector<Loaded>& runs) {
  size_t n = 0;
  for (const Loaded& l : runs) n += l.r.checkpoints.size();
  if (n == 0) return "<p class=\"note\">No checkpoint was written (no checkpoint in metrics.jsonl).</p>\n";
  std::ostringstream o;
  o << "<table id=\"checkpoints\"><tr>" << (runs.size() > 1 ? "<th class=\"l\">run</th>" : "")
    << "<th>step</th><th>write time</th><th class=\"l\">directory</th></tr>\n";
  for (const Loaded& l : runs)
    for (const Checkpoint& c : l.r.checkpoints)
      o << "<tr>" << (runs.size() > 1 ? "<td class=\"l\">" + chart::escape(l.name) + "</td>" : "") << "<td>" << chart::format_number(c.step)
        << "</td><td>" << chart::format_seconds(c.seconds) << "</td><td class=\"l\">" << chart::escape(c.path) << "</td></tr>\n";
  o << "</table>\n";
  return o.str();
}

// A quantity over steps: a chart when some run has two points or more; one point per run is a
// number in the tables, not a line.
std::string line_or_note(const chart::LineChart& c, size_t points, const std::string& one_point_note) {
  if (points >= 2) return chart::draw_line_chart(c);
  if (points == 1) return "<p class=\"note\" data-chart=\"" + chart::escape(c.id) + "\">" + chart::escape(one_point_note) + "</p>\n";
  if (c.empty_text.empty()) return "";  // the absence is said elsewhere (the evaluation table)
  return "<p class=\"note\" data-chart=\"" + chart::escape(c.id) + "\">" + chart::escape(c.title) + ": " + chart::escape(c.empty_text) +
         "</p>\n";
}

// What the page compares, and the runs whose metrics were cut or lost.
void intro_notes(std::ostringstream& o, const std::vector<Loaded>& runs) {
  const bool several = runs.size() > 1;
  if (several) {
    o << "<p class=\"note\">" << runs.size() << " runs compared: each chart draws one line per run (";
    for (size_t i = 0; i < runs.size(); ++i) o << (i ? ", " : "") << chart::escape(runs[i].name);
    o << "); the tables have one column per run.</p>\n";
  } else {
    o << "<p class=\"note\">Dashed lines mark checkpoints (green), skipped steps (red) and ends of epochs (grey) on every chart over "
         "steps; hover a point or a line for its value.</p>\n";
  }
  for (const Loaded& l : runs) {
    const std::string who = several ? l.name + ": " : "";
    if (l.r.cut_last_line > 0)
      o << "<p class=\"note\">" << chart::escape(who) << "metrics.jsonl line " << l.r.cut_last_line
        << " (the last) is cut short (a write that did not complete) and is left out.</p>\n";
    if (!l.sum.is_null() && l.sum.contains("metrics_lost") && l.sum["metrics_lost"].is_object())
      o << "<p class=\"note\">" << chart::escape(who) << "The run lost metrics.jsonl lines from step "
        << l.sum["metrics_lost"].value("step", int64_t{-1}) << " on (a write failed): the charts end there.</p>\n";
  }
}

// The evaluation table, and its metric over steps when some run has two evaluations.
void eval_section(std::ostringstream& o, const std::vector<Loaded>& runs) {
  o << "<h2 id=\"sec-eval\">Evaluation</h2>\n" << eval_table(runs);
  std::string eval_name = runs[0].r.eval_name;
  for (const Loaded& l : runs)
    if (!l.r.eval.x.empty()) eval_name = l.r.eval_name;
  o << line_or_note(overlay(runs, "eval", eval_name + " over steps", [](const Run& r) { return r.eval; }, chart::Axis::kNumber, ""),
                    most_points(runs, [](const Run& r) -> const chart::Series& { return r.eval; }),
                    "One evaluation per run (the table above): no chart.");
  const size_t logloss = most_points(runs, [](const Run& r) -> const chart::Series& { return r.logloss; });
  if (logloss >= 2) o << chart::draw_line_chart(overlay(runs, "eval_logloss", "Eval logloss", [](const Run& r) { return r.logloss; }));
}

// Loss, samples/s, the loss scale (fp16) and skipped steps (when any).
void training_section(std::ostringstream& o, const std::vector<Loaded>& runs) {
  const bool several = runs.size() > 1;
  o << "<h2 id=\"sec-training\">Training</h2>\n";
  o << line_or_note(overlay(runs, "loss", "Training loss (mean over log_every steps)", [](const Run& r) { return r.loss; }),
                    most_points(runs, [](const Run& r) -> const chart::Series& { return r.loss; }),
                    "One loss record per run (the summary above): no chart.");
  o << line_or_note(
                    overlay(runs, "samples_per_s", "Samples per second (this run's samples over its time so far)",
                            [](const Run& r) { return r.speed; }),
                    most_points(runs, [](const Run& r) -> const chart::Series& { return r.speed; }),
                    "One samples/s record per run (the summary above): no chart.");
  // fp16 only: the loss scale moves; skipped steps only when some step was skipped.
  if (std::any_of(runs.begin(), runs.end(), [](const Loaded& l) { return scale_informative(l.r.scale); }))
    o << chart::draw_line_chart(overlay(runs, "loss_scale", "Loss scale (fp16: halved at a skipped step, grown after clean steps)",
                                        [](const Run& r) { return r.scale; }));
  if (std::any_of(runs.begin(), runs.end(), [](const Loaded& l) { return any_nonzero(l.r.skipped); }))
    o << chart::draw_line_chart(overlay(runs, "skipped_steps", "Skipped steps (non-finite gradients, cumulative)",
                                        [](const Run& r) { return r.skipped; }));
  else o << "<p class=\"note\">No step was skipped" << (several ? " in any run" : "") << ".</p>\n";
}

// Bytes between tiers and the row caches' traffic.
void transfers_section(std::ostringstream& o, const std::vector<Loaded>& runs) {
  const bool several = runs.size() > 1;
  o << "<h2 id=\"sec-transfers\">Transfers between tiers</h2>\n<p class=\"note\">What crossed from one tier to another: row cache fetches "
       "(store -> device) and write-backs (device -> store), rows and optimizer state placed on the host (read and written back each "
       "step), checkpoints read back to the host.</p>\n";
  const std::vector<std::string> dirs = named_keys(runs, &Run::transfers);
  bool moved = false;
  for (const Loaded& l : runs)
    for (const auto& p : l.r.transfers) moved = moved || any_nonzero(p.second);
  if (dirs.empty()) {
    o << "<p class=\"note\">metrics.jsonl records no transfers (an older run).</p>\n";
  } else if (!moved) {
    o << "<p class=\"note\">No bytes moved between tiers at the logged steps (every category stayed on its tier; the summary's whole-run figures also count the final checkpoint).</p>\n";
  } else if (!several) {
    chart::LineChart c = overlay(runs, "transfers", "Bytes moved between tiers (cumulative)", [](const Run&) { return chart::Series{}; },
                                 chart::Axis::kBytes);
    c.series = values_of(runs[0].r.transfers);
    o << chart::draw_line_chart(c);
  } else {
    for (const std::string& d : dirs) {
      bool nonzero = false;
      for (const Loaded& l : runs)
        if (const chart::Series* s = find_named(l.r.transfers, d)) nonzero = nonzero || any_nonzero(*s);
      if (!nonzero) continue;
      o << chart::draw_line_chart(overlay(runs, "transfers-" + d, "Bytes moved " + direction_label(d) + " (cumulative)",
                                          [&](const Run& r) {
                                            const chart::Series* s = find_named(r.transfers, d);
                                            return s ? *s : chart::Series{d, "", {}, {}};
                                          },
                                          chart::Axis::kBytes));
    }
  }
  if (!several && !runs[0].sum.is_null()) o << transfers_table(runs[0].sum);
  if (!several && !runs[0].r.row_cache.empty()) {
    chart::LineChart c = overlay(runs, "row_cache", "Row cache traffic (cumulative bytes, all cached tables)",
                                 [](const Run&) { return chart::Series{}; }, chart::Axis::kBytes);
    c.series = values_of(runs[0].r.row_cache);
    o << chart::draw_line_chart(c);
  } else if (several) {
    for (const std::string& k : named_keys(runs, &Run::row_cache))
      o << chart::draw_line_chart(overlay(runs, "row_cache-" + k, "Row cache " + k + " (cumulative, all cached tables)",
                                          [&](const Run& r) {
                                            const chart::Series* s = find_named(r.row_cache, k);
                                            return s ? *s : chart::Series{k, "", {}, {}};
                                          },
                                          chart::Axis::kBytes));
  }
}

// When each checkpoint was written and how long it took.
void checkpoints_section(std::ostringstream& o, const std::vector<Loaded>& runs) {
  o << "<h2 id=\"sec-checkpoints\">Checkpoints</h2>\n";
  if (most_points(runs, [](const Run& r) -> const chart::Series& { return r.ckpt_seconds; }) >= 2)
    o << chart::draw_line_chart(overlay(runs, "checkpoint_seconds", "Checkpoints on the timeline: seconds to write each",
                                        [](const Run& r) { return r.ckpt_seconds; }));
  o << checkpoint_table(runs);
}

// Memory by tier and category from the runs' summaries.
void memory_section(std::ostringstream& o, const std::vector<Loaded>& runs) {
  const bool several = runs.size() > 1;
  o << "<h2 id=\"sec-memory\">Memory</h2>\n";
  if (std::all_of(runs.begin(), runs.end(), [](const Loaded& l) { return l.sum.is_null(); })) {
    o << "<p class=\"note\">Memory by tier and category: pass the run's --json-summary file with --summary" << (several ? " (once per run)" : "")
      << ".</p>\n";
  } else {
    const chart::BarChart m = memory_chart(runs);
    if (m.bars.empty()) o << "<p class=\"note\">The summary holds no memory figures.</p>\n";
    else o << chart::draw_stacked_bars(m);
  }
}

std::string render(const std::string& title, const std::vector<Loaded>& runs) {
  std::ostringstream o;
  o << chart::page_begin(title);
  intro_notes(o, runs);
  o << summary_table(runs);
  if (runs.size() > 1) o << config_diff(runs);
  eval_section(o, runs);
  training_section(o, runs);
  transfers_section(o, runs);
  checkpoints_section(o, runs);
  memory_section(o, runs);
  o << "<p class=\"note\">Drawn by leanemb report from metrics.jsonl and, where given, each run's summary.</p>\n";
  o << chart::page_end();
  return o.str();
}

}  // namespace

Result<std::string> render_report(const std::string& title, const std::string& metrics_jsonl, const std::string& summary_json,
                                  std::vector<std::string>* warnings) {
  return render_runs(title, {RunInput{"run", metrics_jsonl, summary_json}}, warnings);
}

Result<std::string> render_runs(const std::string& title, const std::vector<RunInput>& inputs, std::vector<std::string>* warnings) {
  if (inputs.empty()) return invalid_argument("report: no run to draw");
  std::vector<Loaded> runs;
  for (const RunInput& in : inputs) {
    std::vector<std::string> w;
    Result<Run> r = parse_metrics(in.metrics_jsonl, &w);
    const std::string who = inputs.size() > 1 ? in.name + ": " : "";
    if (!r.ok()) return invalid_argument(who + r.status().message());
    if (warnings)
      for (const std::string& s : w) warnings->push_back(who + s);
    Loaded l{in.name, std::move(r).value(), json()};
    if (!in.summary_json.empty()) {
      l.sum = parse_json_or_discarded(in.summary_json);
      if (l.sum.is_discarded() || !l.sum.is_object()) return invalid_argument(who + "the --summary file is not a JSON object");
    }
    runs.push_back(std::move(l));
  }
  return render(title, runs);
}

}  // namespace leanemb::serve
