// The SVG charts carry exactly the data they draw (svg_chart.h), escape text, and stay inside
// their boxes.
#include "chart/svg_chart.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace leanemb::chart {
namespace {

// The value of attribute `name` in the first tag holding `marker`.
std::string attr(const std::string& svg, const std::string& marker, const std::string& name) {
  const size_t at = svg.find(marker);
  if (at == std::string::npos) return "<none>";
  const size_t begin = svg.rfind('<', at), end = svg.find('>', at);
  const std::string tag = svg.substr(begin, end - begin);
  const size_t a = tag.find(" " + name + "=\"");
  if (a == std::string::npos) return "<none>";
  const size_t v = a + name.size() + 3;
  return tag.substr(v, tag.find('"', v) - v);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::vector<double> numbers(const std::string& s) {
  std::vector<double> v;
  std::istringstream in(s);
  for (double x; in >> x;) v.push_back(x);
  return v;
}

// Each series' polyline lists its points with every digit, one x,y pair per point, inside the box.
TEST(ChartTest, LineChartCarriesEverySeriesPoint) {
  LineChart c;
  c.id = "loss";
  c.title = "Loss <train>";
  c.series = {{"loss", "", {1, 2, 3}, {0.5, 0.123456789, 0.25}}, {"eval", "eval", {2, 4}, {0.75, 0.8}}};
  c.markers = {{5, "checkpoint", "step 5"}};
  const std::string svg = draw_line_chart(c);
  EXPECT_NE(svg.find("id=\"chart-loss\""), std::string::npos);
  EXPECT_NE(svg.find("Loss &lt;train&gt;"), std::string::npos);
  EXPECT_EQ(numbers(attr(svg, "data-series=\"loss\"", "data-steps")), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(numbers(attr(svg, "data-series=\"loss\"", "data-values")), (std::vector<double>{0.5, 0.123456789, 0.25}));
  EXPECT_EQ(numbers(attr(svg, "data-series=\"eval\"", "data-steps")), (std::vector<double>{2, 4}));
  const std::string pts = attr(svg, "data-series=\"loss\"", "points");
  EXPECT_EQ(std::count(pts.begin(), pts.end(), ','), 3);
  for (std::string p : {pts, attr(svg, "data-series=\"eval\"", "points")}) {
    std::replace(p.begin(), p.end(), ',', ' ');
    const std::vector<double> v = numbers(p);
    for (size_t i = 0; i < v.size(); i += 2) {
      EXPECT_GE(v[i], 0);
      EXPECT_LE(v[i], c.width);
      EXPECT_GE(v[i + 1], 0);
      EXPECT_LE(v[i + 1], c.height);
    }
  }
  // The marker widens the x range to step 5 and is drawn at the right edge of the plot.
  EXPECT_EQ(attr(svg, "data-kind=\"checkpoint\"", "data-step"), "5");
  EXPECT_EQ(std::stod(attr(svg, "data-kind=\"checkpoint\"", "x1")), c.width - 24);
  EXPECT_EQ(count(svg, "class=\"legend\""), 1u);  // only the labelled series
}

// A chart with no point says so instead of drawing axes.
TEST(ChartTest, EmptyLineChartSaysSo) {
  LineChart c;
  c.id = "eval";
  c.empty_text = "no evaluation";
  c.series = {{"eval", "", {}, {}}};
  const std::string svg = draw_line_chart(c);
  EXPECT_NE(svg.find("no evaluation"), std::string::npos);
  EXPECT_EQ(svg.find("<polyline"), std::string::npos);
}

// Stacked bars: one segment per category with its value, the bar's total, one legend entry per
// category, segments of a bar side by side and widths proportional to values.
TEST(ChartTest, StackedBarsCarryTheirValuesAndTotals) {
  BarChart c;
  c.id = "memory";
  c.bars = {{"naive (device)", {{"weights", 3000}, {"gradients", 1000}}}, {"plan (device)", {{"weights", 1000}, {"workspace", 500}}}};
  c.limits = {{5000, "budget", "usable"}};
  const std::string svg = draw_stacked_bars(c);
  EXPECT_EQ(attr(svg, "data-bar=\"naive (device)\" data-category=\"gradients\"", "data-value"), "1000");
  EXPECT_EQ(attr(svg, "class=\"bar-label\" data-bar=\"naive (device)\"", "data-total"), "4000");
  EXPECT_EQ(attr(svg, "class=\"bar-label\" data-bar=\"plan (device)\"", "data-total"), "1500");
  EXPECT_EQ(count(svg, "class=\"legend\""), 3u);
  EXPECT_EQ(count(svg, "class=\"segment\""), 4u);
  const double w_weights = std::stod(attr(svg, "data-bar=\"naive (device)\" data-category=\"weights\"", "width"));
  const double w_grads = std::stod(attr(svg, "data-bar=\"naive (device)\" data-category=\"gradients\"", "width"));
  EXPECT_NEAR(w_weights, 3 * w_grads, 0.02);
  EXPECT_NEAR(std::stod(attr(svg, "data-bar=\"naive (device)\" data-category=\"gradients\"", "x")),
              std::stod(attr(svg, "data-bar=\"naive (device)\" data-category=\"weights\"", "x")) + w_weights, 0.02);
  EXPECT_EQ(attr(svg, "class=\"limit\"", "data-value"), "5000");
  // The same category has the same colour on every chart.
  EXPECT_EQ(category_color("weights", 5), category_color("weights", 0));
  EXPECT_NE(category_color("weights", 0), category_color("gradients", 0));
}

// A page is self-contained: no script, no external reference besides the SVG namespace.
TEST(ChartTest, PageHasNoScriptAndEscapesItsTitle) {
  const std::string page = page_begin("run <a&b>") + page_end();
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<title>run &lt;a&amp;b&gt;</title>"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("http"), std::string::npos);
  EXPECT_EQ(label(1536, Axis::kBytes), "1.50 KiB");
  EXPECT_EQ(escape("\"x\""), "&quot;x&quot;");
}

// Numbers in tables: separators for integers, 4 significant digits otherwise, never a raw double.
TEST(ChartTest, FormatNumberIsReadable) {
  EXPECT_EQ(format_number(185501.23122463224), "185,500");
  EXPECT_EQ(format_number(1048576), "1,048,576");
  EXPECT_EQ(format_number(-1234567), "-1,234,567");
  EXPECT_EQ(format_number(300), "300");
  EXPECT_EQ(format_number(0.78852295502), "0.7885");
  EXPECT_EQ(format_number(12.3456), "12.35");
  EXPECT_EQ(format_number(1234.5678), "1,235");
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_seconds(3.078954556), "3.079 s");
  EXPECT_EQ(format_seconds(125), "2 min 5 s");
  EXPECT_EQ(format_seconds(4500), "1.25 h");
}

// The x axis of a chart over steps has whole-step ticks (never "538.5"), also for one point.
TEST(ChartTest, StepTicksAreIntegers) {
  for (const std::vector<double>& xs : {std::vector<double>{1, 1076}, std::vector<double>{7}, std::vector<double>{20, 21}}) {
    LineChart c;
    c.id = "loss";
    c.series = {{"loss", "", xs, std::vector<double>(xs.size(), 0.5)}};
    const std::string svg = draw_line_chart(c);
    EXPECT_EQ(count(svg, "class=\"x-tick\""), 3u);
    for (size_t at = svg.find("class=\"x-tick\""); at != std::string::npos; at = svg.find("class=\"x-tick\"", at + 1)) {
      const std::string v = attr(svg.substr(svg.rfind('<', at)), "class=\"x-tick\"", "data-value");
      EXPECT_EQ(v.find('.'), std::string::npos) << v;
      const size_t text = svg.find('>', at) + 1;
      EXPECT_EQ(svg.substr(text, svg.find('<', text) - text).find('.'), std::string::npos);
    }
  }
}

// Overlaid series (one per run) get distinct colours and one legend entry each.
TEST(ChartTest, OverlaidSeriesHaveDistinctColours) {
  LineChart c;
  c.id = "loss";
  c.series = {{"run-a", "run-a", {1, 2}, {0.5, 0.4}}, {"run-b", "run-b", {1, 2}, {0.6, 0.5}}};
  const std::string svg = draw_line_chart(c);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "class=\"legend\""), 2u);
  EXPECT_NE(attr(svg, "data-series=\"run-a\"", "stroke"), attr(svg, "data-series=\"run-b\"", "stroke"));
}

}  // namespace
}  // namespace leanemb::chart
