// The report page's structure (serve/report.h): the sections it has, numbers as a reader wants
// them, no chart for a quantity with one point (or one that never moves), and with several runs
// one series per run on every chart over steps.
#include "serve/report.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

namespace leanemb::serve {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// metrics.jsonl of a short fp32 run: loss and samples/s every 10 steps, one evaluation at the end.
std::string fp32_metrics(double speed_scale) {
  std::string m;
  for (int step = 10; step <= 50; step += 10)
    m += "{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(0.7 - step * 0.001) +
         ",\"samples_per_s\":" + std::to_string(185501.23122463224 * speed_scale + step) +
         ",\"loss_scale\":1.0,\"skipped_steps\":0,\"transfers\":{\"host_to_device\":" + std::to_string(step * 1024) +
         ",\"device_to_host\":0}}\n";
  return m + "{\"step\":50,\"eval\":{\"auc\":0.78852295502,\"logloss\":0.452177}}\n";
}

std::string summary(const std::string& row_dtype, double speed) {
  return "{\"task\":\"ctr\",\"outcome\":\"completed\",\"steps\":50,\"samples\":51200,\"samples_per_s\":" + std::to_string(speed) +
         ",\"train_seconds\":3.078954556,\"loss\":0.65,\"skipped_steps\":0,\"eval\":{\"auc\":0.78852295502,\"logloss\":0.452177},"
         "\"embedding_table_bytes\":99840000,\"sparse_table_rows\":[390000,390000],"
         "\"memory_detail\":{\"device\":{\"peak_bytes\":113317772,\"budget_bytes\":0}},"
         "\"plan\":{\"device\":{\"categories\":{\"weights\":{\"planned\":50030404,\"measured\":50030404}}}},"
         "\"config\":{\"precision\":\"fp32\",\"row_dtype\":\"" + row_dtype + "\",\"row_optimizer\":\"adagrad\"}}";
}

// The <svg> element of chart `id` (empty when the page has none).
std::string chart_of(const std::string& html, const std::string& id) {
  const size_t at = html.find("<svg class=\"chart\" id=\"chart-" + id + "\"");
  if (at == std::string::npos) return "";
  return html.substr(at, html.find("</svg>", at) - at);
}

TEST(ReportTest, OneRunPageHasItsSectionsAndReadableNumbers) {
  auto page = render_report("run", fp32_metrics(1), summary("fp32", 185501.23122463224));
  ASSERT_TRUE(page.ok()) << page.status().message();
  const std::string& html = page.value();
  for (const char* section : {"id=\"sec-summary\"", "id=\"sec-eval\"", "id=\"sec-training\"", "id=\"sec-transfers\"",
                              "id=\"sec-checkpoints\"", "id=\"sec-memory\"", "id=\"summary\"", "id=\"eval\""})
    EXPECT_NE(html.find(section), std::string::npos) << section;
  EXPECT_EQ(html.find("id=\"sec-config\""), std::string::npos);  // a diff needs two runs
  // Numbers: separators, 4 significant digits, units; no raw double, no JSON blob.
  EXPECT_NE(html.find("185,500 samples/s"), std::string::npos);
  EXPECT_EQ(html.find("185501.23"), std::string::npos);
  EXPECT_NE(html.find("51,200"), std::string::npos);
  EXPECT_NE(html.find("3.079 s"), std::string::npos);
  EXPECT_NE(html.find("108.07 MiB"), std::string::npos);  // the device's peak
  EXPECT_NE(html.find("<th class=\"l\">AUC</th><td>0.7885</td>"), std::string::npos);
  EXPECT_EQ(html.find("{\"auc\""), std::string::npos);
  EXPECT_NE(html.find("<th class=\"l\">bytes per embedding row (weights + state)</th><td>128</td>"), std::string::npos);
  // Charts only where they say something: the loss and samples/s move; one evaluation is a
  // number; a loss scale stuck at 1 (fp32) and no skipped step draw nothing.
  EXPECT_FALSE(chart_of(html, "loss").empty());
  EXPECT_FALSE(chart_of(html, "samples_per_s").empty());
  EXPECT_FALSE(chart_of(html, "transfers").empty());
  EXPECT_FALSE(chart_of(html, "memory").empty());
  for (const char* id : {"eval", "eval_logloss", "loss_scale", "skipped_steps", "checkpoint_seconds"})
    EXPECT_TRUE(chart_of(html, id).empty()) << id;
  EXPECT_NE(html.find("One evaluation per run"), std::string::npos);
  // Whole steps on the x axis.
  const std::string loss = chart_of(html, "loss");
  for (size_t at = loss.find("class=\"x-tick\" data-value=\""); at != std::string::npos; at = loss.find("class=\"x-tick\"", at + 1)) {
    const size_t v = loss.find("data-value=\"", at) + 12;
    EXPECT_EQ(loss.substr(v, loss.find('"', v) - v).find('.'), std::string::npos);
  }
}

// fp16: a moving loss scale and skipped steps are charted.
TEST(ReportTest, LossScaleAndSkippedStepsAreChartedWhenTheyMove) {
  const std::string m =
      "{\"step\":2,\"loss\":0.7,\"samples_per_s\":10,\"loss_scale\":65536,\"skipped_steps\":0}\n"
      "{\"step\":4,\"loss\":0.6,\"samples_per_s\":11,\"loss_scale\":32768,\"skipped_steps\":1}\n";
  auto page = render_report("run", m, "");
  ASSERT_TRUE(page.ok());
  EXPECT_FALSE(chart_of(page.value(), "loss_scale").empty());
  EXPECT_FALSE(chart_of(page.value(), "skipped_steps").empty());
  EXPECT_NE(page.value().find("no evaluation in metrics.jsonl"), std::string::npos);
}

// Two runs: every chart over steps draws exactly one series per run, named after the run, with a
// legend; the tables have a column per run and the configuration diff lists only what differs.
TEST(ReportTest, TwoRunsOverlayOneSeriesPerRun) {
  std::string multi_eval_a = fp32_metrics(1), multi_eval_b = fp32_metrics(0.5);
  multi_eval_a += "{\"step\":60,\"eval\":{\"auc\":0.79,\"logloss\":0.45}}\n";  // two evaluations: an eval chart
  auto page = render_runs("two", {{"fp32-run", multi_eval_a, summary("fp32", 185501.2)}, {"bf16-run", multi_eval_b, summary("bf16", 92750.6)}});
  ASSERT_TRUE(page.ok()) << page.status().message();
  const std::string& html = page.value();
  std::vector<std::string> charts;
  for (size_t at = html.find("<svg class=\"chart\" id=\"chart-"); at != std::string::npos; at = html.find("<svg class=\"chart\" id=\"chart-", at + 1)) {
    const size_t id = at + 29;
    charts.push_back(html.substr(id, html.find('"', id) - id));
  }
  for (const char* want : {"eval", "eval_logloss", "loss", "samples_per_s", "transfers-host_to_device", "memory"})
    EXPECT_NE(std::find(charts.begin(), charts.end(), want), charts.end()) << want;
  for (const std::string& id : charts) {
    if (id == "memory") continue;  // bars, not series
    SCOPED_TRACE(id);
    const std::string svg = chart_of(html, id);
    EXPECT_EQ(count(svg, "<polyline"), 2u);
    EXPECT_EQ(count(svg, "data-series=\"fp32-run\""), 1u);
    EXPECT_EQ(count(svg, "data-series=\"bf16-run\""), 1u);
    EXPECT_EQ(count(svg, "class=\"legend\""), 2u);
    EXPECT_EQ(count(svg, "data-kind="), 0u);  // no per-run markers on a comparison
  }
  EXPECT_NE(html.find("<tr><th class=\"l\"></th><th>fp32-run</th><th>bf16-run</th></tr>"), std::string::npos);
  EXPECT_NE(html.find("<th class=\"l\">samples/s</th><td>185,500 samples/s</td><td>92,750 samples/s</td>"), std::string::npos);
  EXPECT_NE(html.find("id=\"config_diff\""), std::string::npos);
  EXPECT_NE(html.find("<th class=\"l\">row_dtype</th><td class=\"l\">fp32</td><td class=\"l\">bf16</td>"), std::string::npos);
  EXPECT_EQ(html.find("<th class=\"l\">precision</th>"), std::string::npos);  // the same in both: not listed
  EXPECT_NE(html.find("data-bar=\"bf16-run: device measured\""), std::string::npos);
  // A bad line names its run.
  auto bad = render_runs("two", {{"a", "{\"step\":1}\n", ""}, {"b", "not json\n{\"step\":1}\n", ""}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("b: metrics.jsonl line 1", 0), 0u) << bad.status().message();
}

}  // namespace
}  // namespace leanemb::serve
