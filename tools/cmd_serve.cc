// `leanemb test`, `leanemb predict`, `leanemb export`: use a trained model (docs/serve.md).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/export.h"
#include "serve/predict.h"
#include "serve/report.h"
#include "serve/saved_model.h"
#include "tools/commands.h"

namespace leanemb::tools {

namespace {

struct ServeArgs {
  std::string run, data, json_out, output, out_dir, summary;
  std::vector<std::string> sets;
  int64_t k = 1, rows = 0, prune_min_count = 0;
  double threshold = 0.0;
  bool probs = false, quiet = false, with_state = false, serving = false;
};

Status write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) return io_error("cannot write --json file '" + path + "'");
  return Status();
}

int run_test(const ServeArgs& a) {
  auto run = serve::open_saved_run(a.run);
  if (!run.ok()) return report_error(run.status());
  nlohmann::json r;
  if (run.value().task == "ctr") {
    auto m = serve::load_ctr(run.value(), a.sets);
    if (!m.ok()) return report_error(m.status());
    auto t = serve::test_ctr_file(*m.value(), a.data, a.rows);
    if (!t.ok()) return report_error(t.status());
    r = std::move(t).value();
    std::printf("N\t%lld\nAUC\t%.6f\nlogloss\t%.6f\n", static_cast<long long>(r["rows"].get<int64_t>()), r["auc"].get<double>(),
                r["logloss"].get<double>());
  } else {
    auto m = serve::load_text(run.value(), a.sets);
    if (!m.ok()) return report_error(m.status());
    auto t = serve::test_text_file(*m.value(), a.data, static_cast<int>(a.k));
    if (!t.ok()) return report_error(t.status());
    r = std::move(t).value();
    // fastText's `test FILE k` lines (std::setprecision(3): three significant digits).
    std::printf("N\t%lld\nP@%lld\t%.3g\nR@%lld\t%.3g\n", static_cast<long long>(r["examples"].get<int64_t>()),
                static_cast<long long>(a.k), r["precision_at_k"].get<double>(), static_cast<long long>(a.k),
                r["recall_at_k"].get<double>());
  }
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
    file.reset(std::fopen(a.output.c_str(), "w"));
    if (!file) return report_error(invalid_argument("--output '" + a.output + "' cannot be written"));
    out = file.get();
  }
  static char buf[1 << 16];
  std::setvbuf(out, buf, _IOFBF, sizeof buf);
  Result<serve::PredictStats> ps = serve::PredictStats{};
  if (run.value().task == "ctr") {
    auto m = serve::load_ctr(run.value(), a.sets);
    if (!m.ok()) return report_error(m.status());
    ps = serve::predict_ctr_file(*m.value(), a.data, out);
  } else {
    auto m = serve::load_text(run.value(), a.sets);
    if (!m.ok()) return report_error(m.status());
    serve::TextPredictOptions o;
    o.k = static_cast<int>(a.k);
    o.probs = a.probs;
    o.threshold = a.threshold;
    ps = serve::predict_text_file(*m.value(), a.data, o, out);
  }
  if (!ps.ok()) return report_error(ps.status());
  if (file) {
    if (std::fclose(file.release()) != 0) return report_error(io_error("cannot write --output '" + a.output + "'"));
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
  auto run = serve::open_saved_run(a.run);
  if (!run.ok()) return report_error(run.status());
  if (a.serving) {
    if (a.with_state) return report_error(invalid_argument("--serving writes no optimizer state: drop --with-state"));
    auto r = serve::export_serving(run.value(), a.out_dir, a.sets);
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

int run_report(const ServeArgs& a) {
  std::ifstream m(a.run + "/metrics.jsonl");
  if (!m) return report_error(not_found("no metrics.jsonl in '" + a.run + "' (a run directory of leanemb train)"));
  std::stringstream ms;
  ms << m.rdbuf();
  std::string summary;
  if (!a.summary.empty()) {
    std::ifstream s(a.summary);
    if (!s) return report_error(not_found("cannot open --summary '" + a.summary + "'"));
    std::stringstream ss;
    ss << s.rdbuf();
    summary = ss.str();
  }
  auto html = serve::render_report("leanemb run " + a.run, ms.str(), summary);
  if (!html.ok()) return report_error(html.status());
  const std::string out = a.output.empty() ? a.run + "/report.html" : a.output;
  std::ofstream f(out);
  f << html.value();
  if (!f) return report_error(io_error("cannot write '" + out + "'"));
  if (!a.quiet) std::printf("wrote %s\n", out.c_str());
  return kExitOk;
}

// --run DIR (or --checkpoint DIR), --set, --quiet: every command here.
void add_model_options(CLI::App* cmd, ServeArgs* a) {
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("empty value") : std::string(); }, "NONEMPTY", "non-empty");
  cmd->add_option("--run,--checkpoint", a->run,
                  "A run directory (train --out: its newest complete checkpoint) or one checkpoint directory")
      ->required()->type_name("DIR")->check(non_empty);
  cmd->add_option("--set", a->sets, "Override a key of the saved config, e.g. memory.device_budget=\"1GiB\" (repeatable)")
      ->type_name("KEY=VALUE");
  cmd->add_flag("--quiet", a->quiet, "No summary on stderr");
  cmd->footer(exit_code_table());
}

}  // namespace

void register_serve(CLI::App& app, CommandResult* result) {
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("empty value") : std::string(); }, "NONEMPTY", "non-empty");
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("test", "Evaluate a trained model on a data file: N, AUC, logloss (CTR) or N, P@k, R@k "
                                               "as `fasttext test FILE k` prints them (text) (docs/serve.md)");
    add_model_options(cmd, a.get());
    cmd->add_option("--data", a->data, "Data file (the training format: Criteo TSV / binary, or fastText lines)")
        ->required()->type_name("FILE")->check(non_empty);
    cmd->add_option("--k", a->k, "Text: labels predicted per line (P@k, R@k)")->capture_default_str()->check(int_flag(1, 1000000));
    cmd->add_option("--rows", a->rows, "CTR: evaluate the first N records (0 = all)")->capture_default_str()->check(int_flag(0, INT64_MAX));
    cmd->add_option("--json", a->json_out, "Also write the results with every digit as JSON to FILE")->type_name("FILE")->check(non_empty);
    cmd->callback([a, result] { result->exit_code = run_test(*a); });
  }
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("predict", "Write a trained model's predictions for a data file, one line per record: "
                                                  "a click probability (CTR) or fastText's `predict` / `predict-prob` lines (text)");
    add_model_options(cmd, a.get());
    cmd->add_option("--data", a->data, "Data file (as `test`)")->required()->type_name("FILE")->check(non_empty);
    cmd->add_option("--k", a->k, "Text: labels per line")->capture_default_str()->check(int_flag(1, 1000000));
    cmd->add_flag("--prob", a->probs, "Text: each label followed by its probability (fastText's predict-prob)");
    cmd->add_option("--threshold", a->threshold, "Text: leave out labels of a lower probability")->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--output", a->output, "Write to FILE instead of stdout")->type_name("FILE")->check(non_empty);
    cmd->callback([a, result] { result->exit_code = run_predict(*a); });
  }
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("export", "Export a trained model's tables and dense parameters as NumPy .npy files with a "
                                                 "JSON manifest (text models: also word vectors in fastText's .vec format)");
    add_model_options(cmd, a.get());
    cmd->add_option("--out", a->out_dir, "Output directory (created; files in it are replaced)")->required()->type_name("DIR")->check(non_empty);
    cmd->add_flag("--with-state", a->with_state, "Also the optimizer state (row and dense)");
    cmd->add_flag("--serving", a->serving,
                  "Instead: a compact serving checkpoint in --out (int8 rows, no optimizer state) that predict and test read");
    cmd->callback([a, result] { result->exit_code = run_export(*a); });
  }
  {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("report", "Draw a run as one self-contained HTML page (inline SVG): loss, eval metric and "
                                                 "samples/s over steps; memory by tier and category with --summary");
    cmd->add_option("RUN_DIR", a->run, "The run directory (train --out)")->required()->check(non_empty);
    cmd->add_option("--summary", a->summary, "The run's --json-summary file (memory charts)")->type_name("FILE")->check(non_empty);
    cmd->add_option("--output", a->output, "The HTML file (default RUN_DIR/report.html)")->type_name("FILE")->check(non_empty);
    cmd->add_flag("--quiet", a->quiet, "Print nothing");
    cmd->footer(exit_code_table());
    cmd->callback([a, result] { result->exit_code = run_report(*a); });
  }
}

}  // namespace leanemb::tools
