// `leanemb report` (see report.h).
#include "serve/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "leanemb/memory.h"

namespace leanemb::serve {

using nlohmann::json;

namespace {

struct Series {
  std::string id, title, unit;
  std::vector<std::pair<double, double>> points;  // (step, value)
};

std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string short_num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A line chart of one series: axes with min/max labels, one polyline, a dot per point.
std::string line_chart(const Series& s) {
  constexpr double W = 640, H = 240, L = 70, R = 20, T = 30, B = 40;
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"chart-" << s.id << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\">\n";
  o << "<text x=\"" << L << "\" y=\"18\" class=\"title\">" << escape(s.title) << "</text>\n";
  if (s.points.empty()) {
    o << "<text x=\"" << L << "\" y=\"" << H / 2 << "\">no data in metrics.jsonl</text>\n</svg>\n";
    return o.str();
  }
  double x0 = s.points.front().first, x1 = x0, y0 = s.points.front().second, y1 = y0;
  for (const auto& [x, y] : s.points) {
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + (y0 == 0 ? 1 : std::fabs(y0) * 0.1);
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  o << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" class=\"axis\"/>\n";
  o << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" class=\"axis\"/>\n";
  o << "<text x=\"" << L - 6 << "\" y=\"" << py(y1) + 4 << "\" text-anchor=\"end\">" << short_num(y1) << "</text>\n";
  o << "<text x=\"" << L - 6 << "\" y=\"" << py(y0) + 4 << "\" text-anchor=\"end\">" << short_num(y0) << "</text>\n";
  o << "<text x=\"" << L << "\" y=\"" << H - B + 16 << "\">" << short_num(x0) << "</text>\n";
  o << "<text x=\"" << W - R << "\" y=\"" << H - B + 16 << "\" text-anchor=\"end\">" << short_num(x1) << "</text>\n";
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 6 << "\" text-anchor=\"middle\">step</text>\n";
  std::string steps, values, pts;
  for (const auto& [x, y] : s.points) {
    if (!steps.empty()) {
      steps += ' ';
      values += ' ';
    }
    steps += num(x);
    values += num(y);
    char b[64];
    std::snprintf(b, sizeof b, "%s%.2f,%.2f", pts.empty() ? "" : " ", px(x), py(y));
    pts += b;
  }
  o << "<polyline class=\"series\" data-series=\"" << s.id << "\" data-steps=\"" << steps << "\" data-values=\"" << values
    << "\" points=\"" << pts << "\"/>\n";
  if (s.points.size() <= 200)
    for (const auto& [x, y] : s.points) o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2.5\"/>\n";
  o << "</svg>\n";
  return o.str();
}

// Memory: one stacked bar per tier (and per planned / measured when the plan is there).
std::string memory_chart(const json& sum) {
  struct Bar {
    std::string label;
    std::vector<std::pair<std::string, double>> parts;  // category, bytes
  };
  std::vector<Bar> bars;
  if (sum.contains("plan") && sum["plan"].is_object()) {
    for (const auto& [tier, t] : sum["plan"].items()) {
      Bar planned{tier + " planned", {}}, measured{tier + " measured", {}};
      for (const auto& [cat, v] : t["categories"].items()) {
        planned.parts.emplace_back(cat, v.value("planned", 0.0));
        measured.parts.emplace_back(cat, v.value("measured", 0.0));
      }
      bars.push_back(planned);
      bars.push_back(measured);
    }
  } else if (sum.contains("memory") && sum["memory"].is_object()) {
    for (const auto& [tier, cats] : sum["memory"].items()) {
      Bar b{tier + " peak", {}};
      for (const auto& [cat, v] : cats.items()) b.parts.emplace_back(cat, v.get<double>());
      bars.push_back(b);
    }
  }
  double most = 1;
  for (const Bar& b : bars) {
    double t = 0;
    for (const auto& p : b.parts) t += p.second;
    most = std::max(most, t);
  }
  static const char* colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};
  std::vector<std::string> cats;
  for (const Bar& b : bars)
    for (const auto& p : b.parts)
      if (std::find(cats.begin(), cats.end(), p.first) == cats.end()) cats.push_back(p.first);
  const double W = 640, row = 34, L = 150, R = 110;
  const double H = 40 + row * static_cast<double>(bars.size()) + 20 * static_cast<double>((cats.size() + 3) / 4);
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"chart-memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\">\n";
  o << "<text x=\"10\" y=\"18\" class=\"title\">Memory by tier and category (peak bytes; device = device (cpu) on this build)</text>\n";
  double y = 30;
  for (const Bar& b : bars) {
    o << "<text x=\"" << L - 6 << "\" y=\"" << y + 17 << "\" text-anchor=\"end\">" << escape(b.label) << "</text>\n";
    double x = L, total = 0;
    for (const auto& [cat, bytes] : b.parts) {
      const double w = bytes / most * (W - L - R);
      const size_t ci = static_cast<size_t>(std::find(cats.begin(), cats.end(), cat) - cats.begin()) % 8;
      o << "<rect class=\"mem\" data-bar=\"" << escape(b.label) << "\" data-category=\"" << escape(cat) << "\" data-bytes=\"" << num(bytes)
        << "\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"24\" fill=\"" << colors[ci] << "\"><title>"
        << escape(cat) << ": " << format_bytes(static_cast<size_t>(bytes)) << "</title></rect>\n";
      x += w;
      total += bytes;
    }
    o << "<text x=\"" << x + 6 << "\" y=\"" << y + 17 << "\">" << format_bytes(static_cast<size_t>(total)) << "</text>\n";
    y += row;
  }
  for (size_t i = 0; i < cats.size(); ++i) {
    const double lx = 10 + static_cast<double>(i % 4) * 155, ly = y + 14 + static_cast<double>(i / 4) * 20;
    o << "<rect x=\"" << lx << "\" y=\"" << ly - 10 << "\" width=\"12\" height=\"12\" fill=\"" << colors[i % 8] << "\"/>"
      << "<text x=\"" << lx + 16 << "\" y=\"" << ly << "\">" << escape(cats[i]) << "</text>\n";
  }
  o << "</svg>\n";
  return bars.empty() ? std::string() : o.str();
}

}  // namespace

Result<std::string> render_report(const std::string& title, const std::string& metrics_jsonl, const std::string& summary_json) {
  Series loss{"loss", "Training loss (mean over log_every steps)", "", {}};
  Series speed{"samples_per_s", "Samples per second (since the run started)", "", {}};
  Series eval{"eval", "Eval metric", "", {}};
  Series scale{"loss_scale", "Loss scale", "", {}};
  Series skipped{"skipped_steps", "Skipped steps (non-finite gradients, cumulative)", "", {}};
  std::istringstream in(metrics_jsonl);
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step"))
      return invalid_argument("metrics.jsonl line " + std::to_string(line_no) + " is not a JSON object with a step");
    const double step = j["step"].get<double>();
    if (j.contains("loss") && j["loss"].is_number()) loss.points.emplace_back(step, j["loss"].get<double>());
    if (j.contains("samples_per_s") && j["samples_per_s"].is_number()) speed.points.emplace_back(step, j["samples_per_s"].get<double>());
    if (j.contains("loss_scale") && j["loss_scale"].is_number()) scale.points.emplace_back(step, j["loss_scale"].get<double>());
    if (j.contains("skipped_steps") && j["skipped_steps"].is_number()) skipped.points.emplace_back(step, j["skipped_steps"].get<double>());
    if (j.contains("eval") && j["eval"].is_object()) {
      for (const char* key : {"auc", "precision_at_1"}) {
        if (j["eval"].contains(key) && j["eval"][key].is_number()) {
          eval.points.emplace_back(step, j["eval"][key].get<double>());
          eval.title = std::string(key) == "auc" ? "Eval AUC" : "Eval P@1";
        }
      }
    }
  }
  json sum;
  if (!summary_json.empty()) {
    sum = json::parse(summary_json, nullptr, false);
    if (sum.is_discarded() || !sum.is_object()) return invalid_argument("the --summary file is not a JSON object");
  }
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << escape(title) << "</title>\n<style>\n"
    << "body{font-family:sans-serif;margin:20px;color:#222} .chart{display:block;margin:12px 0;border:1px solid #ddd}\n"
    << "svg text{font-size:11px;fill:#333} svg .title{font-size:13px;font-weight:bold} .axis{stroke:#888}\n"
    << ".series{fill:none;stroke:#4e79a7;stroke-width:1.5} circle{fill:#4e79a7} table{border-collapse:collapse}\n"
    << "td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}\n</style></head><body>\n";
  o << "<h1>" << escape(title) << "</h1>\n";
  if (!sum.is_null()) {
    o << "<table id=\"summary\">\n";
    for (const char* k : {"task", "outcome", "steps", "samples", "samples_per_s", "train_seconds", "loss", "skipped_steps"})
      if (sum.contains(k)) o << "<tr><th>" << k << "</th><td>" << escape(sum[k].dump()) << "</td></tr>\n";
    if (sum.contains("eval") && sum["eval"].is_object())
      o << "<tr><th>final eval</th><td>" << escape(sum["eval"].dump()) << "</td></tr>\n";
    o << "</table>\n";
  }
  o << line_chart(loss) << line_chart(eval) << line_chart(speed);
  if (!scale.points.empty()) o << line_chart(scale);
  if (!skipped.points.empty()) o << line_chart(skipped);
  if (!sum.is_null()) o << memory_chart(sum);
  o << "<p>Drawn by leanemb report from metrics.jsonl" << (sum.is_null() ? "" : " and the run's summary") << ".</p>\n</body></html>\n";
  return o.str();
}

}  // namespace leanemb::serve
