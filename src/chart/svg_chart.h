// Charts as inline SVG text, and the HTML page they go in: the one drawing code of
// `leanemb report` (src/serve/report.cc) and `leanemb plan --html` (src/plan/report_html.cc).
// No scripts, no fonts or files besides the page, no network: a page is one self-contained file.
// Written here (about 300 lines) rather than vendored: line charts and stacked bars are all the
// pages need, and no Debian-packaged C++ library draws SVG charts.
//
// Every element a reader (or a test) may check carries its data as attributes (num(): integers
// exactly, other values to 9 significant digits):
//   <svg class="chart" id="chart-<id>" data-title="...">
//   <polyline class="series" data-series="<id>" data-steps="x1 x2 ..." data-values="y1 y2 ..."
//             points="px,py px,py ...">           one per series, one x,y pair per point
//   <line class="marker marker-<kind>" data-kind="<kind>" data-step="x">   vertical markers
//                                                  (checkpoints, skipped steps) over the plot
//   <rect class="segment" data-bar="<bar label>" data-category="<category>" data-value="v">
//   <text class="bar-label" data-bar="<bar label>" data-total="v">          one per bar
//   <line class="limit" data-kind="<kind>" data-value="v">                  a limit (a budget)
//   <text class="legend" data-category="<name>">   one per category / series shown
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace leanemb::chart {

// Escapes & < > " for HTML text and attribute values.
std::string escape(std::string_view s);
// The digits a data-* attribute carries: integers exactly ("%.0f" below 9e15), else "%.9g".
std::string num(double v);
// "1.5 GiB" style bytes (format_bytes), or %.4g for plain numbers: axis and bar labels.
enum class Axis : uint8_t { kNumber, kBytes };
std::string label(double v, Axis axis);
// A number as a reader wants it in a table: integers exactly with thousands separators
// ("1,048,576"), other values to 4 significant digits ("0.7431", "185,500", "12.35"); a page
// never shows a raw double such as 185501.23122463224.
std::string format_number(double v);
// Seconds: "12.35 s", "2 min 5 s", "1.25 h".
std::string format_seconds(double seconds);

// The colour of a memory category (the eight of leanemb/memory.h have fixed colours, the same
// on every page) or of the i-th other name (a palette).
std::string category_color(std::string_view category, size_t index);

struct Series {
  std::string id;              // data-series; also the legend key
  std::string label;           // legend text (empty: no legend entry)
  std::vector<double> x, y;    // [n] each: the points, in drawing order
};

// A vertical line over a line chart's plot at x (e.g. a checkpoint at a step).
struct Marker {
  double x = 0;
  std::string kind;            // "checkpoint", "skipped", ...: class marker-<kind>, data-kind
  std::string title;           // tooltip
};

struct LineChart {
  std::string id;              // the svg's id is "chart-<id>"
  std::string title;
  std::string x_label = "step";
  Axis y_axis = Axis::kNumber;
  std::vector<Series> series;  // drawn on one shared scale
  std::vector<Marker> markers;
  std::string empty_text = "no data";  // drawn when no series has a point
  double width = 560, height = 240;
  // Steps are integers: the x ticks are whole numbers (never "538.5"), labelled with separators.
  bool integer_x = true;
};

// REQUIRES: each series' x and y have the same size.
std::string draw_line_chart(const LineChart& chart);

struct Segment {
  std::string category;
  double value = 0;            // >= 0
};

struct Bar {
  std::string label;
  std::vector<Segment> segments;  // stacked left to right, in order
};

// A vertical line across the bars at `value` (a budget).
struct Limit {
  double value = 0;
  std::string kind;            // data-kind
  std::string title;           // drawn beside the line
};

struct BarChart {
  std::string id;
  std::string title;
  Axis axis = Axis::kBytes;
  std::vector<Bar> bars;       // one horizontal stacked bar each, top to bottom
  std::vector<Limit> limits;
  double width = 720;
};

// Horizontal stacked bars on one scale, each bar's total at its end, a legend of the categories.
std::string draw_stacked_bars(const BarChart& chart);

// The page around the charts: doctype, <head> with the title and the one stylesheet, <body> and
// an <h1>; page_end() closes it.
std::string page_begin(std::string_view title);
std::string page_end();

}  // namespace leanemb::chart
