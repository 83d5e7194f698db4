// `leanemb test`, `leanemb predict`, `leanemb export`: use a trained model (docs/serve.md).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "leanemb/json.h"
#include "leanemb/progress.h"

#include "leanemb/paths.h"

#include "serve/export.h"
#include "serve/predict.h"
#include "serve/report.h"
#include "serve/saved_model.h"
#include "serve/task_registry.h"
#include "leanemb/commands.h"

namespace leanemb::cli {

namespace {


Status write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << dump_json(j, 2) << "\n";
  f.close();  // flushes: a write error shows here
  if (!f) return io_error("cannot write --json file '" + path + "'");
  return Status();
}

// outputs_never_alias_inputs for test / predict: `output` is neither the --data file (opening it
// for writing would truncate what is about to be read) nor a file of the run given as --run (a
// checkpoint's MANIFEST or data file, its metrics log).
Status check_serve_output(const data::NamedPath& output, const ServeArgs& a) {
  const data::NamedPath in{"--data", a.data};
  LEANEMB_RETURN_IF_ERROR(data::check_output_not_input(output, std::span<const data::NamedPath>(&in, 1)));
  return data::check_output_outside(output, data::run_owned_paths(a.run, "--run"));
}

}  // namespace

int run_test(const ServeArgs& a) {
  if (!a.json_out.empty()) {
    if (Status s = check_serve_output({"--json", a.json_out}, a); !s.ok()) return report_error(s);
  }
  auto run = serve::open_saved_run(a.run);
  if (!run.ok()) return report_error(run.status());
  auto task = serve::find_task(run.value().task);
  if (!task.ok()) return report_error(task.status());
  serve::TestOptions o;
  o.sets = a.sets;
  o.max_rows = a.rows;
  o.k = static_cast<int>(a.k);
  auto t = task.value()->test(run.value(), a.data, o);
  if (!t.ok()) return report_error(t.status());
  std::fputs(t.value().lines.c_str(), stdout);
  nlohmann::json r = std::move(t.value().figures);
  r["checkpoint"] = run.value().checkpoint;
  r["step"] = run.value().step;
  r["data"] = a.data;
  if (!a.quiet && r.value("malformed", int64_t{0}) > 0)
    std::fprintf(stderr, "leanemb: %lld malformed lines skipped (docs/data.md)\n", static_cast<long long>(r["malformed"].get<int64_t>()));
  if (!a.json_out.empty())
    if (Status s = write_json(a.json_out, r); !s.ok()) return report_error(s);
  return kExitOk;
}

int run_predict(const ServeArgs& a) {
  auto run = serve::open_saved_run(a.run);
  if (!run.ok()) return report_error(run.status());
  std::FILE* out = stdout;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(nullptr, std::fclose);
  if (!a.output.empty()) {
    if (Status s = check_serve_output({"--output", a.output}, a); !s.ok()) return report_error(s);
    file.reset(std::fopen(a.output.c_str(), "w"));
    if (!file) return report_error(invalid_argument("--output '" + a.output + "' cannot be written"));
    out = file.get();
  }
  static char buf[1 << 16];
  std::setvbuf(out, buf, _IOFBF, sizeof buf);
  // A terminal gets one progress line with rate and ETA (by the input's bytes; core/progress.h),
  // unless the predictions themselves go to it.
  std::unique_ptr<TtyProgress> bar;
  serve::PredictProgress progress;
  if (!a.quiet && isatty(STDERR_FILENO) && (file || !isatty(STDOUT_FILENO))) {
    struct stat sb {};
    const double mb = ::stat(a.data.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) ? static_cast<double>(sb.st_size) / 1e6 : 0.0;
    bar = std::make_unique<TtyProgress>(stderr, "predict", "MB", mb);
    progress = [&bar](int64_t bytes, int64_t lines) {
      bar->update(static_cast<double>(bytes) / 1e6, format_count(static_cast<double>(lines)) + " lines");
    };
  }
  auto task = serve::find_task(run.value().task);
  if (!task.ok()) return report_error(task.status());
  serve::PredictOptions o;
  o.sets = a.sets;
  o.text.k = static_cast<int>(a.k);
  o.text.probs = a.probs;
  o.text.threshold = a.threshold;
  Result<serve::PredictStats> ps = task.value()->predict(run.value(), a.data, o, out, progress);
  if (bar && bar->printed()) {  // the last line, complete, above the summary or the error
    if (ps.ok()) bar->finish(bar->total() > 0 ? bar->total() : 0.0, format_count(static_cast<double>(ps->lines)) + " lines");
    else std::fputc('\n', stderr);
  }
  if (!ps.ok()) {
    // A write error names the output (the predictor only knows a FILE*).
    if (file && ps.status().code() == StatusCode::kIoError)
      return report_error(io_error("--output '" + a.output + "': " + ps.status().message()));
    return report_error(ps.status());
  }
  if (file) {
    const bool failed = std::ferror(file.get()) != 0;  // a write that failed before the last flush
    if (std::fclose(file.release()) != 0 || failed) return report_error(io_error("cannot write --output '" + a.output + "'"));
  }
  const serve::PredictStats& s = ps.value();
  if (!a.quiet)
    std::fprintf(stderr, "leanemb: %lld predictions in %.2f s (%.0f lines/s)%s%s\n", static_cast<long long>(s.lines), s.seconds,
                 s.seconds > 0 ? static_cast<double>(s.lines) / s.seconds : 0.0,
                 s.malformed ? ("; " + std::to_string(s.malformed) + " malformed lines skipped (no output line)").c_str() : "",
                 s.empty ? ("; " + std::to_string(s.empty) + " lines without a word (empty output lines)").c_str() : "");
  return kExitOk;
}

int run_export(const ServeArgs& a) {
  if (a.prune_min_count < 0)
    return report_error(invalid_argument("--prune-min-count must be >= 1 (0: no pruning), got " + std::to_string(a.prune_min_count)));
  if (a.prune_min_count > 0 && !a.serving)
    return report_error(invalid_argument("--prune-min-count prunes a serving export: add --serving"));
  if (a.overwrite && !a.serving)
    return report_error(invalid_argument("--overwrite applies to --serving (a plain export replaces its own files only)"));
  auto run = serve::open_saved_run(a.run);
  if (!run.ok()) return report_error(run.status());
  if (a.serving) {
    if (a.with_state) return report_error(invalid_argument("--serving writes no optimizer state: drop --with-state"));
    serve::ServingExportOptions so;
    so.out_dir = a.out_dir;
    so.sets = a.sets;
    so.prune_min_count = a.prune_min_count;
    so.overwrite = a.overwrite;
    auto r = serve::export_serving(run.value(), so);
    if (!r.ok()) return report_error(r.status());
    if (!a.quiet) std::printf("%s", r.value().c_str());
    return kExitOk;
  }
  serve::ExportOptions o;
  o.out_dir = a.out_dir;
  o.with_state = a.with_state;
  o.sets = a.sets;
  auto r = serve::export_model(run.value(), o);
  if (!r.ok()) return report_error(r.status());
  if (!a.quiet) std::printf("%s", r.value().c_str());
  return kExitOk;
}

namespace {

Result<std::string> slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return not_found("cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The legend name of each run: the directory's last component, the whole path where two runs
// share it.
std::vector<std::string> run_names(const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (std::string d : dirs) {
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    const size_t slash = d.rfind('/');
    names.push_back(slash == std::string::npos ? d : d.substr(slash + 1));
  }
  for (size_t i = 0; i < names.size(); ++i)
    if (std::count(names.begin(), names.end(), names[i]) > 1) names[i] = dirs[i];
  return names;
}

}  // namespace

int run_report(const ServeArgs& a) {
  if (!a.summaries.empty() && a.summaries.size() != a.runs.size())
    return report_error(invalid_argument("--summary: give one per RUN_DIR, in their order (" + std::to_string(a.runs.size()) + " runs, " +
                                         std::to_string(a.summaries.size()) + " summaries)"));
  const std::vector<std::string> names = run_names(a.runs);
  std::vector<serve::RunInput> inputs;
  std::vector<data::NamedPath> ins;
  for (size_t i = 0; i < a.runs.size(); ++i) {
    auto m = slurp(a.runs[i] + "/metrics.jsonl");
    if (!m.ok()) return report_error(not_found("no metrics.jsonl in '" + a.runs[i] + "' (a run directory of leanemb train)"));
    std::string summary;
    if (!a.summaries.empty()) {
      auto s = slurp(a.summaries[i]);
      if (!s.ok()) return report_error(not_found("cannot open --summary '" + a.summaries[i] + "'"));
      summary = std::move(s).value();
      ins.push_back({"--summary", a.summaries[i]});
    }
    ins.push_back({"the metrics file", a.runs[i] + "/metrics.jsonl"});
    inputs.push_back({names[i], std::move(m).value(), std::move(summary)});
  }
  std::string title = a.runs.size() == 1 ? "leanemb run " + a.runs[0] : "leanemb runs";
  if (a.runs.size() > 1)
    for (size_t i = 0; i < names.size(); ++i) title += (i ? ", " : " ") + names[i];
  std::vector<std::string> warnings;
  auto html = serve::render_runs(title, inputs, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "leanemb: warning: %s\n", w.c_str());
  if (!html.ok()) return report_error(html.status());
  const std::string out = !a.output.empty() ? a.output : a.runs[0] + (a.runs.size() == 1 ? "/report.html" : "/compare.html");
  if (Status s = data::check_output_not_input({"--output", out}, ins); !s.ok()) return report_error(s);
  std::ofstream f(out);
  f << html.value();
  f.close();  // flushes: a write error shows here
  if (!f) return report_error(io_error("cannot write '" + out + "'"));
  if (!a.quiet) std::printf("wrote %s\n", out.c_str());
  return kExitOk;
}

}  // namespace leanemb::cli
