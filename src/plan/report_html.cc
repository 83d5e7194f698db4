// plan_report_html: the breakdown table as a picture (see report.h). Charts: src/chart.
#include <sstream>
#include <string>

#include "chart/svg_chart.h"
#include "plan/report.h"

namespace leanemb::plan {

namespace {

chart::Bar bar_of(const std::string& label, const TierPrediction& t) {
  chart::Bar b{label, {}};
  for (int c = 0; c < kNumCategories; ++c)
    if (const size_t v = t.peak[static_cast<size_t>(c)]) b.segments.push_back({std::string(category_name(static_cast<Category>(c))), static_cast<double>(v)});
  return b;
}

std::string bytes_cell(size_t v) {
  return "<td data-bytes=\"" + std::to_string(v) + "\">" + (v ? chart::escape(format_bytes(v)) : std::string("0")) + "</td>";
}

}  // namespace

std::string plan_report_html(const Workload& base, const PlannerOptions& o, const PlanResult& r, const ReportContext& ctx) {
  const size_t budget = o.device_budget_bytes ? o.device_budget_bytes : o.preset.device_bytes;
  const TierPrediction &naive = r.naive.device(), &dev = r.chosen.prediction.device(), &host = r.chosen.prediction.host();
  auto as_is = predict_memory(base, Estimate::kExpected);
  std::ostringstream p;
  p << chart::page_begin("leanemb plan");
  p << "<p>workload: " << chart::escape(ctx.workload_text) << "<br>device: " << chart::escape(o.preset.name) << ", "
    << chart::escape(format_bytes(budget)) << " per device (" << chart::escape(format_bytes(r.usable_device_bytes))
    << " usable after the runtime's " << chart::escape(format_bytes(o.preset.runtime_reserved_bytes)) << ")"
    << (o.host_budget_bytes ? ", host budget " + chart::escape(format_bytes(o.host_budget_bytes)) : std::string()) << "</p>\n";
  const bool naive_fits = naive.budget_bytes <= r.usable_device_bytes;
  p << "<p id=\"verdict\" data-fits=\"" << (r.fits ? "true" : "false") << "\">";
  if (r.fits)
    p << "The chosen plan fits: device peak " << chart::escape(format_bytes(dev.budget_bytes)) << " of " << chart::escape(format_bytes(r.usable_device_bytes))
      << " usable (" << r.num_fitting << " of " << r.num_candidates << " searched plans fit). The naive baseline needs "
      << chart::escape(format_bytes(naive.budget_bytes)) << (naive_fits ? " (it fits too)." : " and DOES NOT FIT.");
  else
    p << "NOTHING FITS: none of the " << r.num_candidates << " searched plans fits; the bars show the smallest one, which needs a device budget of "
      << chart::escape(format_bytes(r.smallest_device_bytes)) << ".";
  p << "</p>\n<p class=\"note\">naive = fp32 rows, full-table gradient, Adam fp32, fp32 activations, one micro-batch, all on the device<br>plan = "
    << chart::escape(describe_settings(r.chosen.workload)) << "</p>\n";

  chart::BarChart c;
  c.id = "plan";
  c.width = 1000;
  c.title = "Memory per device by category and tier: the naive baseline beside the chosen plan";
  c.bars = {bar_of("naive (device)", naive), bar_of("plan (device)", dev), bar_of("plan (host)", host)};
  if (as_is.ok()) {
    c.bars.push_back(bar_of("as configured (device)", as_is.value().device()));
    c.bars.push_back(bar_of("as configured (host)", as_is.value().host()));
  }
  c.limits = {{static_cast<double>(r.usable_device_bytes), "usable_device", "usable device memory"}};
  p << chart::draw_stacked_bars(c);
  p << "<p class=\"note\">Each category at its own peak over the step's phases: a bar can be longer than its tier's peak (the "
       "largest sum over the phases), which the table's last row gives.</p>\n";

  p << "<table id=\"breakdown\"><tr><th class=\"l\">category</th><th>naive (device)</th><th>plan (device)</th><th>plan (host)</th>"
       "<th class=\"l\">formula</th></tr>\n";
  for (int k = 0; k < kNumCategories; ++k) {
    const auto cat = static_cast<Category>(k);
    const size_t nv = naive.peak[static_cast<size_t>(k)], pd = dev.peak[static_cast<size_t>(k)], ph = host.peak[static_cast<size_t>(k)];
    if (!nv && !pd && !ph) continue;
    p << "<tr data-category=\"" << category_name(cat) << "\"><th class=\"l\">" << category_name(cat) << "</th>" << bytes_cell(nv) << bytes_cell(pd)
      << bytes_cell(ph) << "<td class=\"l\">" << chart::escape(category_formula(cat, base.kind)) << "</td></tr>\n";
  }
  p << "<tr><th class=\"l\">peak (total)</th>" << bytes_cell(naive.budget_bytes) << bytes_cell(dev.budget_bytes) << bytes_cell(host.peak_bytes)
    << "<td class=\"l\">peak of the sum over the step's phases (device: as the arena rounds; a budget of this runs)</td></tr>\n</table>\n";
  p << "<details><summary>The text report (as <code>leanemb plan</code> prints it)</summary>\n<pre>"
    << chart::escape(plan_report_text(base, o, r, ctx)) << "</pre></details>\n";
  p << "<p class=\"note\">Drawn by leanemb plan --html.</p>\n" << chart::page_end();
  return p.str();
}

}  // namespace leanemb::plan
