// SVG line charts and stacked bars (see svg_chart.h).
#include "chart/svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "leanemb/memory.h"

namespace leanemb::chart {

namespace {

constexpr std::array<const char*, 8> kPalette = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                 "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

std::string px(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

struct Range {
  double lo = 0, hi = 0;
  bool empty = true;
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = empty ? v : std::min(lo, v);
    hi = empty ? v : std::max(hi, v);
    empty = false;
  }
  // A range of nonzero width (a flat series gets 10% of its value, or 1, above it).
  void widen() {
    if (hi == lo) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  }
};

}  // namespace

std::string escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
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

std::string num(double v) {
  char b[40];
  // Integers (bytes, steps) exactly; other values to 9 significant digits.
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string label(double v, Axis axis) {
  if (axis == Axis::kBytes && v >= 0 && std::isfinite(v)) return format_bytes(static_cast<size_t>(std::llround(v)));
  char b[40];
  const double a = std::fabs(v);
  if (a >= 1e9) std::snprintf(b, sizeof b, "%.4gG", v / 1e9);  // 1.2e+05 reads worse than 120k
  else if (a >= 1e6) std::snprintf(b, sizeof b, "%.4gM", v / 1e6);
  else if (a >= 1e4) std::snprintf(b, sizeof b, "%.4gk", v / 1e3);
  else std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

namespace {

// "1234567" -> "1,234,567" (a leading '-' kept).
std::string group_thousands(const std::string& digits) {
  const size_t first = digits.empty() || digits[0] != '-' ? 0 : 1;
  std::string o = digits.substr(0, first);
  const size_t n = digits.size() - first;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) o += ',';
    o += digits[first + i];
  }
  return o;
}

}  // namespace

std::string format_number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  char b[48];
  const double a = std::fabs(v);
  if (v == std::floor(v) && a < 1e15) {  // counts: steps, samples, bytes
    std::snprintf(b, sizeof b, "%.0f", v);
    return group_thousands(b);
  }
  if (a >= 1000 && a < 1e15) {  // 4 significant digits, written out: 185501.23 -> "185,500"
    const double scale = std::pow(10.0, std::floor(std::log10(a)) - 3);
    std::snprintf(b, sizeof b, "%.0f", std::round(v / scale) * scale);
    return group_thousands(b);
  }
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string format_seconds(double s) {
  if (!std::isfinite(s) || std::fabs(s) < 60) return format_number(s) + " s";
  char b[48];
  if (std::fabs(s) < 3600) {
    const double m = std::floor(s / 60);
    std::snprintf(b, sizeof b, "%.0f min %.0f s", m, std::round(s - 60 * m));
    return b;
  }
  return format_number(s / 3600) + " h";
}

std::string category_color(std::string_view category, size_t index) {
  for (int c = 0; c < kNumCategories; ++c)
    if (category == category_name(static_cast<Category>(c))) {
      static constexpr std::array<const char*, kNumCategories> kFixed = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                                         "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};
      return kFixed[static_cast<size_t>(c)];
    }
  return kPalette[index % kPalette.size()];
}

std::string draw_line_chart(const LineChart& c) {
  const double W = c.width, H = c.height, L = 84, R = 24, B = 40;
  bool legend = false;
  Range xr, yr;
  for (const Series& s : c.series) {
    legend = legend || !s.label.empty();
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      xr.add(s.x[i]);
      yr.add(s.y[i]);
    }
  }
  const double T = legend ? 48 : 32;
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"chart-" << escape(c.id) << "\" data-title=\"" << escape(c.title)
    << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\">\n<text x=\"10\" y=\"18\" class=\"title\">" << escape(c.title) << "</text>\n";
  if (xr.empty) {
    o << "<text x=\"" << L << "\" y=\"" << H / 2 << "\" class=\"empty\">" << escape(c.empty_text) << "</text>\n</svg>\n";
    return o.str();
  }
  for (const Marker& m : c.markers) xr.add(m.x);
  if (c.y_axis == Axis::kBytes) yr.add(0);
  xr.widen();
  if (c.integer_x && xr.hi - xr.lo < 2) xr.hi = xr.lo + 2;  // room for three whole-step ticks
  yr.widen();
  auto sx = [&](double x) { return L + (x - xr.lo) / (xr.hi - xr.lo) * (W - L - R); };
  auto sy = [&](double y) { return H - B - (y - yr.lo) / (yr.hi - yr.lo) * (H - T - B); };
  // Axes, three ticks on each, a grid line per y tick.
  o << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" class=\"axis\"/>\n"
    << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" class=\"axis\"/>\n";
  for (int i = 0; i < 3; ++i) {
    double x = xr.lo + (xr.hi - xr.lo) * i / 2.0;
    const double y = yr.lo + (yr.hi - yr.lo) * i / 2.0;
    if (c.integer_x) x = i == 0 ? std::ceil(x) : i == 2 ? std::floor(x) : std::round(x);  // whole steps, inside the range
    o << "<line x1=\"" << L << "\" y1=\"" << px(sy(y)) << "\" x2=\"" << W - R << "\" y2=\"" << px(sy(y)) << "\" class=\"grid\"/>\n"
      << "<text x=\"" << L - 6 << "\" y=\"" << px(sy(y) + 4) << "\" text-anchor=\"end\">" << escape(label(y, c.y_axis)) << "</text>\n"
      << "<text x=\"" << px(sx(x)) << "\" y=\"" << H - B + 16 << "\" text-anchor=\"" << (i == 0 ? "start" : i == 1 ? "middle" : "end")
      << "\" class=\"x-tick\" data-value=\"" << num(x) << "\">" << escape(c.integer_x ? format_number(x) : label(x, Axis::kNumber))
      << "</text>\n";
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 6 << "\" text-anchor=\"middle\">" << escape(c.x_label) << "</text>\n";
  for (const Marker& m : c.markers)
    o << "<line class=\"marker marker-" << escape(m.kind) << "\" data-kind=\"" << escape(m.kind) << "\" data-step=\"" << num(m.x)
      << "\" x1=\"" << px(sx(m.x)) << "\" y1=\"" << T << "\" x2=\"" << px(sx(m.x)) << "\" y2=\"" << H - B << "\"><title>"
      << escape(m.title) << "</title></line>\n";
  size_t points = 0;
  for (const Series& s : c.series) points += s.x.size();
  double lx = L;
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    const std::string color = kPalette[k % kPalette.size()];
    std::string xs, ys, pts;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (i) {
        xs += ' ';
        ys += ' ';
        pts += ' ';
      }
      xs += num(s.x[i]);
      ys += num(s.y[i]);
      pts += px(sx(s.x[i]));
      pts += ',';
      pts += px(sy(s.y[i]));
    }
    o << "<polyline class=\"series\" data-series=\"" << escape(s.id) << "\" data-steps=\"" << xs << "\" data-values=\"" << ys
      << "\" points=\"" << pts << "\" stroke=\"" << color << "\"/>\n";
    if (points <= 200)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        o << "<circle class=\"point\" cx=\"" << px(sx(s.x[i])) << "\" cy=\"" << px(sy(s.y[i])) << "\" r=\"2.5\" fill=\"" << color
          << "\"><title>" << escape(s.label.empty() ? s.id : s.label) << " at " << num(s.x[i]) << ": " << escape(label(s.y[i], c.y_axis))
          << "</title></circle>\n";
    if (!s.label.empty()) {
      o << "<rect x=\"" << px(lx) << "\" y=\"27\" width=\"12\" height=\"12\" fill=\"" << color << "\"/><text class=\"legend\" data-category=\""
        << escape(s.id) << "\" x=\"" << px(lx + 16) << "\" y=\"37\">" << escape(s.label) << "</text>\n";
      lx += 24 + 6.5 * static_cast<double>(s.label.size());
    }
  }
  o << "</svg>\n";
  return o.str();
}

std::string draw_stacked_bars(const BarChart& c) {
  // The bar labels sit left of the bars: room for the longest (run names make them long on a
  // comparison page), about 6.5 px a character at 11 px.
  size_t longest = 0;
  for (const Bar& b : c.bars) longest = std::max(longest, b.label.size());
  const double W = c.width, row = 34, L = std::max(170.0, 16 + 6.5 * static_cast<double>(longest)), R = 120, top = 34;
  std::vector<std::string> cats;
  double most = 0;
  for (const Bar& b : c.bars) {
    double total = 0;
    for (const Segment& s : b.segments) {
      total += std::max(0.0, s.value);
      if (std::find(cats.begin(), cats.end(), s.category) == cats.end()) cats.push_back(s.category);
    }
    most = std::max(most, total);
  }
  for (const Limit& l : c.limits) most = std::max(most, l.value);
  if (most <= 0) most = 1;
  const double per_row = 4, legend_rows = std::ceil(static_cast<double>(cats.size()) / per_row);
  const double bars_h = row * static_cast<double>(c.bars.size());
  const double H = top + bars_h + 20 + 20 * legend_rows + (c.limits.empty() ? 0 : 16);
  auto sx = [&](double v) { return L + v / most * (W - L - R); };
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"chart-" << escape(c.id) << "\" data-title=\"" << escape(c.title)
    << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\">\n<text x=\"10\" y=\"18\" class=\"title\">" << escape(c.title) << "</text>\n";
  const double y_first = top + (c.limits.empty() ? 0 : 16);
  // Limits first: the bars and their labels are drawn over them.
  for (const Limit& l : c.limits) {
    const double x = sx(l.value);
    o << "<line class=\"limit\" data-kind=\"" << escape(l.kind) << "\" data-value=\"" << num(l.value) << "\" x1=\"" << px(x) << "\" y1=\""
      << y_first - 4 << "\" x2=\"" << px(x) << "\" y2=\"" << y_first + bars_h - 6 << "\"/>\n<text x=\"" << px(x) << "\" y=\"" << y_first - 8
      << "\" text-anchor=\"" << (x > W / 2 ? "end" : "start") << "\" class=\"limit-label\">" << escape(l.title) << " "
      << escape(label(l.value, c.axis)) << "</text>\n";
  }
  double y = y_first;
  for (const Bar& b : c.bars) {
    double x = L, total = 0;
    for (const Segment& s : b.segments) {
      const double v = std::max(0.0, s.value), w = sx(v) - L;
      const size_t ci = static_cast<size_t>(std::find(cats.begin(), cats.end(), s.category) - cats.begin());
      o << "<rect class=\"segment\" data-bar=\"" << escape(b.label) << "\" data-category=\"" << escape(s.category) << "\" data-value=\""
        << num(s.value) << "\" x=\"" << px(x) << "\" y=\"" << y << "\" width=\"" << px(w) << "\" height=\"24\" fill=\""
        << category_color(s.category, ci) << "\"><title>" << escape(b.label) << ": " << escape(s.category) << " "
        << escape(label(v, c.axis)) << "</title></rect>\n";
      if (w >= 64)  // the value inside the segment when it fits
        o << "<text class=\"segment-label\" x=\"" << px(x + w / 2) << "\" y=\"" << y + 16 << "\" text-anchor=\"middle\">"
          << escape(label(v, c.axis)) << "</text>\n";
      x += w;
      total += v;
    }
    o << "<text x=\"" << L - 6 << "\" y=\"" << y + 17 << "\" text-anchor=\"end\">" << escape(b.label) << "</text>\n"
      << "<text class=\"bar-label\" data-bar=\"" << escape(b.label) << "\" data-total=\"" << num(total) << "\" x=\"" << px(x + 6)
      << "\" y=\"" << y + 17 << "\">" << escape(label(total, c.axis)) << "</text>\n";
    y += row;
  }
  for (size_t i = 0; i < cats.size(); ++i) {
    const double lx = 10 + static_cast<double>(i % 4) * 175, ly = y + 14 + static_cast<double>(i / 4) * 20;
    o << "<rect x=\"" << lx << "\" y=\"" << ly - 10 << "\" width=\"12\" height=\"12\" fill=\"" << category_color(cats[i], i)
      << "\"/><text class=\"legend\" data-category=\"" << escape(cats[i]) << "\" x=\"" << lx + 16 << "\" y=\"" << ly << "\">"
      << escape(cats[i]) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string page_begin(std::string_view title) {
  std::string o = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + escape(title) + "</title>\n<style>\n";
  o += "body{font-family:sans-serif;margin:20px;color:#222;max-width:1160px} .chart{display:inline-block;vertical-align:top;margin:6px;border:1px solid #ddd}\n"
       "svg text{font-size:11px;fill:#333} svg .title{font-size:13px;font-weight:bold} .axis{stroke:#888} .grid{stroke:#eee}\n"
       ".series{fill:none;stroke-width:1.5} .marker{stroke-width:1;stroke-dasharray:4 3} .marker-checkpoint{stroke:#59a14f}\n"
       ".marker-skipped{stroke:#e15759} .marker-epoch{stroke:#999} .limit{stroke:#e15759;stroke-width:2;stroke-dasharray:6 3}\n"
       "svg .limit-label{fill:#e15759} svg .segment-label{fill:#fff;font-size:10px}\n"
       "svg .bar-label{paint-order:stroke;stroke:#fff;stroke-width:3px} table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}\n"
       "th{background:#f4f4f4} td.l,th.l{text-align:left} pre{background:#f8f8f8;padding:8px;overflow-x:auto;font-size:11px}\n"
       ".note{color:#555;font-size:13px}\n</style></head><body>\n";
  o += "<h1>" + escape(title) + "</h1>\n";
  return o;
}

std::string page_end() { return "</body></html>\n"; }

}  // namespace leanemb::chart
