// `leanemb train`: train the CTR model of a config file (or the embedded default).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tools/commands.h"
#include "train/config.h"
#include "train/trainer.h"

namespace leanemb::tools {

namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string steps, out = "runs/ctr_small", json_summary;
  std::string device_budget, host_budget, placement;
  bool resume = false, quiet = false, print_config = false;
};

int run_train(const TrainArgs& a) {
  std::vector<std::string> sets = a.sets;
  if (!a.device_budget.empty()) sets.push_back("memory.device_budget=\"" + a.device_budget + "\"");
  if (!a.host_budget.empty()) sets.push_back("memory.host_budget=\"" + a.host_budget + "\"");
  if (!a.placement.empty()) sets.push_back("memory.placement=\"" + a.placement + "\"");
  if (a.print_config) {
    std::fputs(std::string(train::default_config_text()).c_str(), stdout);
    return 0;
  }
  auto cfg = a.config.empty() ? train::parse_config(train::default_config_text(), "<embedded default: examples/ctr_small.toml>", sets)
                              : train::load_config(a.config, sets);
  if (!cfg.ok()) return report_error(cfg.status());
  train::RunOptions ro;
  ro.config = std::move(cfg).value();
  ro.out_dir = a.out;
  ro.resume = a.resume;
  ro.quiet = a.quiet;
  ro.progress_tty = isatty(STDERR_FILENO) != 0;
  if (!a.steps.empty()) {
    char* end = nullptr;
    const long long s = std::strtoll(a.steps.c_str(), &end, 10);
    if (end == a.steps.c_str() || *end != '\0' || s < 0)
      return report_error(invalid_argument("--steps expects an integer >= 0, got '" + a.steps + "'"));
    ro.steps = s;
  }
  auto r = train::run_training(ro);
  if (!r.ok()) return report_error(r.status());
  const nlohmann::json& s = r.value();
  std::printf("\nmemory (peak per tier and category):\n%s", s["memory_summary_text"].get<std::string>().c_str());
  if (s.contains("plan")) {
    std::printf("\nplanned vs measured peak (leanemb plan's memory model, docs/plan.md):\n");
    for (const auto& [tier, t] : s["plan"].items()) {
      if (t["measured_peak"].get<size_t>() == 0 && t["planned_peak"].get<size_t>() == 0) continue;
      std::printf("  %-6s %-16s planned %-12s measured %s\n", tier.c_str(), "total", format_bytes(t["planned_peak"].get<size_t>()).c_str(),
                  format_bytes(t["measured_peak"].get<size_t>()).c_str());
      for (const auto& [cat, v] : t["categories"].items())
        std::printf("  %-6s %-16s planned %-12s measured %s\n", tier.c_str(), cat.c_str(), format_bytes(v["planned"].get<size_t>()).c_str(),
                    format_bytes(v["measured"].get<size_t>()).c_str());
    }
  }
  std::printf("\ntrained %lld steps (%lld samples) in %.1f s: %.0f samples/s; %lld skipped steps\n",
              static_cast<long long>(s["steps"].get<int64_t>()), static_cast<long long>(s["samples"].get<int64_t>()),
              s["train_seconds"].get<double>(), s["samples_per_s"].get<double>(),
              static_cast<long long>(s["skipped_steps"].get<int64_t>()));
  if (!s["eval"].is_null())
    std::printf("eval: AUC %.4f, logloss %.4f on %lld rows%s\n", s["eval"]["auc"].get<double>(),
                s["eval"]["logloss"].get<double>(), static_cast<long long>(s["eval"]["rows"].get<int64_t>()),
                s["teacher_auc"].is_null() ? "" : (" (teacher AUC " + std::to_string(s["teacher_auc"].get<double>()).substr(0, 6) + ")").c_str());
  std::printf("embedding tables: %s; checkpoint: %s\n", format_bytes(s["embedding_table_bytes"].get<size_t>()).c_str(),
              s["checkpoint"].get<std::string>().c_str());
  if (!a.json_summary.empty()) {
    nlohmann::json out = s;
    out.erase("memory_summary_text");
    const std::filesystem::path p(a.json_summary);
    std::error_code ec;
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    std::ofstream f(a.json_summary);
    f << out.dump(2) << "\n";
    if (!f) return report_error(io_error("cannot write --json-summary file '" + a.json_summary + "'"));
  }
  return 0;
}

}  // namespace

void register_train(CLI::App& app, CommandResult* result) {
  auto a = std::make_shared<TrainArgs>();
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("empty value") : std::string(); }, "NONEMPTY", "non-empty");
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a CTR model from a TOML config (docs/train.md); without --config, the embedded default "
               "(examples/ctr_small.toml: generates its data, trains, evaluates against the teacher)");
  cmd->add_option("--config", a->config, "TOML config file")->type_name("FILE")->check(non_empty);
  cmd->add_option("--set", a->sets, "Override a config key: section.key=value (repeatable)")->type_name("KEY=VALUE");
  cmd->add_option("--steps", a->steps, "Optimizer steps (overrides train.steps; 0 = train.epochs epochs)")->type_name("N")->check(non_empty);
  cmd->add_option("--out", a->out, "Output directory: checkpoints/, metrics.jsonl")->capture_default_str()->type_name("DIR")->check(non_empty);
  cmd->add_flag("--resume", a->resume, "Continue from the newest complete checkpoint in --out (none: start fresh)");
  cmd->add_option("--json-summary", a->json_summary, "Write the run summary as JSON to FILE")->type_name("FILE")->check(non_empty);
  cmd->add_option("--device-budget", a->device_budget, "Device tier budget (memory.device_budget), e.g. 512MiB")->type_name("BYTES")->check(non_empty);
  cmd->add_option("--host-budget", a->host_budget, "Host tier budget (memory.host_budget)")->type_name("BYTES")->check(non_empty);
  cmd->add_option("--placement", a->placement, "memory.placement, e.g. optimizer_state=host")->type_name("CAT=TIER,...")->check(non_empty);
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  cmd->add_flag("--print-default-config", a->print_config, "Print the embedded default config and exit");
  cmd->footer("Exit codes: 0 ok, 1 runtime failure, 2 bad arguments, config or data, 3 out of memory.");
  cmd->callback([a, result] { result->exit_code = run_train(*a); });
}

}  // namespace leanemb::tools
