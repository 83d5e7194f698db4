// `leanemb train`: train the model of a config file (or the embedded default): the config's task
// (serve/task_registry.h: a CTR model, or with task = "text" a text classifier), on the one loop
// (train/task.h).
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "leanemb/paths.h"
#include "leanemb/communicator.h"
#include "serve/task_registry.h"
#include "leanemb/commands.h"
#include "train/stop_signal.h"
#include "train/task_config.h"
#include "train/toml_section.h"
#include "leanemb/json.h"

namespace leanemb::cli {

namespace {


// --steps: a decimal integer >= 0 that fits in 64 bits (no saturation, no trailing text).
Result<int64_t> parse_steps(const std::string& s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) return invalid_argument("--steps " + s + " is out of range (at most " + std::to_string(INT64_MAX) + ")");
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return invalid_argument("--steps expects an integer >= 0, got '" + s + "'");
  return v;
}

// Before training: --json-summary must be writable (created now, filled at the end), so that a
// long run does not fail on it at the end.
Status check_summary_writable(const std::string& path) {
  if (path.empty()) return Status();
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (std::filesystem::is_directory(p, ec)) return invalid_argument("--json-summary '" + path + "' is a directory");
  const bool existed = std::filesystem::exists(p, ec);
  std::ofstream f(path, std::ios::app);
  if (!f) return invalid_argument("--json-summary '" + path + "' cannot be written: " + std::strerror(errno));
  f.close();
  if (!existed) std::filesystem::remove(p, ec);
  return Status();
}

Status write_json_summary(const std::string& path, nlohmann::json out) {
  out.erase("memory_summary_text");
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream f(path);
  f << dump_json(out, 2) << "\n";
  f.close();  // flushes: a full disk shows here, not in the destructor where it would be lost
  if (!f) return io_error("cannot write --json-summary file '" + path + "' (disk full or a write error)");
  return Status();
}

// Multi-process runs (docs/dist.md): MPI's lifetime and this process's communicator.
struct DistSetup {
  std::unique_ptr<dist::MpiRuntime> mpi;
  std::unique_ptr<dist::Communicator> comm;
};

// dist.backend: "local" = one process; "mpi" = MPI_COMM_WORLD; "auto" = mpi when a launcher
// (mpirun / mpiexec: Open MPI, or a PMI / PMIx launcher) started this process.
Result<DistSetup> setup_dist(const std::string& backend, int64_t timeout_ms) {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  DistSetup d;
  if (backend == "local" || (backend == "auto" && !launched)) return d;
  if (!dist::mpi_available())
    return unimplemented(std::string(launched ? "started by an MPI launcher" : "dist.backend = \"mpi\"") +
                         ", but this build has no MPI (install libopenmpi-dev openmpi-bin and rebuild; docs/dist.md)");
  LEANEMB_ASSIGN_OR_RETURN(d.mpi, dist::MpiRuntime::init(nullptr, nullptr));
  dist::CommOptions co;
  co.timeout_ms = timeout_ms;
  LEANEMB_ASSIGN_OR_RETURN(d.comm, dist::make_communicator("mpi", co));
  return d;
}

// Runs one parsed config of any task on the one loop: the flags, the communicator, the stop
// signal, the summary (the task's own lines from its TaskConfig).
// `inputs`: the files the run reads (config, data), which --json-summary must not be.
int execute(const TrainArgs& a, const train::TaskConfig& task, const std::vector<data::NamedPath>& inputs) {
  const std::string& dist_backend = task.run().dist_backend;
  const int64_t dist_timeout_ms = task.run().dist_timeout_ms;
  int64_t steps = -1;
  if (!a.steps.empty()) {
    auto st = parse_steps(a.steps);
    if (!st.ok()) return report_error(st.status());
    steps = st.value();
  }
  if (!a.json_summary.empty()) {
    if (Status st = data::check_output_not_input({"--json-summary", a.json_summary}, inputs); !st.ok()) return report_error(st);
    // Nor a file the run owns: a checkpoint's MANIFEST (the one --resume reads), the metrics log.
    if (Status st = data::check_output_outside({"--json-summary", a.json_summary}, data::run_owned_paths(a.out, "--out"));
        !st.ok())
      return report_error(st);
  }
  if (Status st = check_summary_writable(a.json_summary); !st.ok()) return report_error(st);
  auto dist_setup = setup_dist(dist_backend, dist_timeout_ms);
  if (!dist_setup.ok()) return report_error(dist_setup.status());
  dist::Communicator* comm = dist_setup.value().comm.get();
  const bool lead = comm == nullptr || comm->rank() == 0;
  // The first SIGTERM / SIGINT / SIGHUP stops after the step (exit 5), a second one at once
  // (installed after MPI started, so that these handlers are the ones in place).
  auto stop = train::StopSignal::install();
  if (!stop.ok()) return report_error(stop.status());
  train::RunOptions ro;
  ro.comm = comm;
  ro.out_dir = a.out;
  ro.resume = a.resume;
  ro.overwrite = a.overwrite;
  ro.start_fresh = a.start_fresh;
  ro.quiet = a.quiet;
  ro.progress_tty = isatty(STDERR_FILENO) != 0;
  ro.steps = steps;
  ro.stop = stop.value().get();
  auto r = task.train(ro);
  if (!r.ok()) {
    if (comm && comm->size() > 1)
      return report_error(Status(r.status().code(), "rank " + std::to_string(comm->rank()) + ": " + r.status().message()));
    return report_error(r.status());
  }
  const nlohmann::json& s = r.value();
  const std::string outcome = s.value("outcome", std::string("completed"));
  int code = outcome == "diverged" ? kExitRuntime : outcome == "stopped" ? kExitStopped : kExitOk;
  // no_silent_write_errors: a completed run whose metrics.jsonl lost lines is an I/O failure
  // (the warning came when it happened; the summary has "metrics_lost").
  const bool metrics_lost = s.contains("metrics_lost");
  if (metrics_lost && code == kExitOk) code = kExitIo;
  if (!lead) return code;
  if (comm && comm->size() > 1)
    std::printf("\n%d ranks (%s), tables sharded%s; largest rank's tables %s; rank 0 sent %.0f bytes per step\n", comm->size(),
                s["dist"]["backend"].get<std::string>().c_str(),
                s["dist"].contains("sharding") ? (" " + s["dist"]["sharding"].get<std::string>()).c_str() : "",
                format_bytes(s["dist"]["embedding_table_bytes_max_rank"].get<size_t>()).c_str(),
                s["dist"]["bytes_sent_per_step"].get<double>());
  std::printf("\nmemory (peak per tier and category):\n%s", s["memory_summary_text"].get<std::string>().c_str());
  if (s.contains("plan")) {
    // The lines first, the header only above some: a header with nothing under it (every tier
    // zero) said nothing.
    std::string lines;
    char buf[512];
    for (const auto& [tier, t] : s["plan"].items()) {
      if (t["measured_peak"].get<size_t>() == 0 && t["planned_peak"].get<size_t>() == 0) continue;
      const std::string label = tier == "device" ? "device (cpu)" : tier;  // tier_label(): this build's device is the CPU
      std::snprintf(buf, sizeof buf, "  %-12s %-16s planned %-12s measured %s%s\n", label.c_str(), "total",
                    format_bytes(t["planned_peak"].get<size_t>()).c_str(), format_bytes(t["measured_peak"].get<size_t>()).c_str(),
                    tier == "device" ? ("  (a budget of " + format_bytes(t["planned_budget"].get<size_t>()) + " holds it)").c_str() : "");
      lines += buf;
      for (const auto& [cat, v] : t["categories"].items()) {
        std::snprintf(buf, sizeof buf, "  %-12s %-16s planned %-12s measured %s\n", label.c_str(), cat.c_str(),
                      format_bytes(v["planned"].get<size_t>()).c_str(), format_bytes(v["measured"].get<size_t>()).c_str());
        lines += buf;
      }
    }
    if (!lines.empty())
      std::printf("\nplanned vs measured peak (leanemb plan's memory model, docs/plan.md):\n%s", lines.c_str());
  }
  std::fputs(task.summary_text(s).c_str(), stdout);
  const bool ckpt_on = s.value("checkpoints_enabled", true);
  const std::string ckpt = !s["checkpoint"].get<std::string>().empty() ? s["checkpoint"].get<std::string>()
                           : ckpt_on ? "(none)" : "(none: checkpoints are off, train.checkpoint_every = -1)";
  std::printf("embedding tables: %s; checkpoint: %s\n", format_bytes(s["embedding_table_bytes"].get<size_t>()).c_str(), ckpt.c_str());
  if (!a.json_summary.empty())
    if (Status st = write_json_summary(a.json_summary, s); !st.ok()) return report_error(st);
  if (outcome == "stopped")
    std::fprintf(stderr, "leanemb: stopped by %s after step %lld; %s; continue with --resume (exit code 5)\n",
                 s["stopped"]["signal"].get<std::string>().c_str(), static_cast<long long>(s["steps"].get<int64_t>()),
                 !ckpt_on ? "checkpoints are off (train.checkpoint_every = -1): nothing to resume from"
                 : ckpt == "(none)" ? "no step was trained, nothing to checkpoint" : ("checkpoint " + ckpt + " written").c_str());
  if (outcome == "diverged")
    std::fprintf(stderr, "leanemb: error: %s; the last finite checkpoint is %s\n", s["diverged"]["message"].get<std::string>().c_str(),
                 ckpt.c_str());
  if (metrics_lost)
    std::fprintf(stderr, "leanemb: error: %s (%lld lines lost); the training itself completed%s (exit code 4)\n",
                 s["metrics_lost"]["error"].get<std::string>().c_str(),
                 static_cast<long long>(s["metrics_lost"]["lines_lost"].get<int64_t>()),
                 ckpt_on ? "; its checkpoint is valid" : "");
  return code;
}

// The files a run reads, named for outputs_never_alias_inputs.
std::vector<data::NamedPath> run_inputs(const std::string& config, const std::vector<std::string>& train_files,
                                        const std::vector<std::string>& eval_files) {
  std::vector<data::NamedPath> in;
  if (!config.empty()) in.push_back({"--config", config});
  for (const std::string& f : train_files) in.push_back({"data.train", f});
  for (const std::string& f : eval_files) in.push_back({"data.eval", f});
  return in;
}

// --out's default: runs/<the config file's stem> (runs/ctr_small for the embedded default).
std::string default_out(const std::string& config) {
  if (config.empty()) return "runs/ctr_small";
  const std::string stem = std::filesystem::path(config).stem().string();
  return "runs/" + (stem.empty() ? std::string("run") : stem);
}

// A config error caused by a --set value (or by --device-budget / --host-budget / --placement)
// is attributed to it, not to the config file: "ORIGIN: KEY: what" becomes
// "--set KEY=VALUE: what (config ORIGIN)".
Status attribute_to_flag(const Status& s, const std::string& origin, const std::vector<std::pair<std::string, std::string>>& sets) {
  if (s.ok()) return s;
  const std::string& m = s.message();
  for (auto it = sets.rbegin(); it != sets.rend(); ++it) {  // the last setting of a key is the one used
    const std::string key = it->first.substr(0, it->first.find('='));
    const std::string prefix = origin + ": " + key + ": ", unknown = origin + ": unknown key " + key;
    if (m.rfind(prefix, 0) == 0) return Status(s.code(), it->second + ": " + m.substr(prefix.size()) + " (config " + origin + ")");
    if (m == unknown) return Status(s.code(), it->second + ": unknown key " + key + " (config " + origin + ")");
  }
  return s;
}

}  // namespace

int run_train(const TrainArgs& args) {
  TrainArgs a = args;
  if (a.out.empty()) a.out = default_out(a.config);
  std::vector<std::string> sets = a.sets;
  std::vector<std::pair<std::string, std::string>> shown;  // each set and the flag that gave it
  for (const auto& s : a.sets) shown.emplace_back(s, "--set " + s);
  auto flag_set = [&](const std::string& flag, const std::string& key, const std::string& v) {
    if (v.empty()) return;
    sets.push_back(key + "=\"" + v + "\"");
    shown.emplace_back(sets.back(), flag + " " + v);
  };
  flag_set("--device-budget", "memory.device_budget", a.device_budget);
  flag_set("--host-budget", "memory.host_budget", a.host_budget);
  flag_set("--placement", "memory.placement", a.placement);
  const serve::TaskEntry& default_task = serve::default_task();
  if (a.print_config) {
    std::fputs(std::string(default_task.default_config()).c_str(), stdout);
    return 0;
  }
  // The config's task (the embedded default's without --config), found once in the registry.
  const std::string origin = a.config.empty() ? "<embedded default: examples/ctr_small.toml>" : a.config;
  std::string config_text(a.config.empty() ? default_task.default_config() : std::string_view());
  const serve::TaskEntry* task = &default_task;
  if (!a.config.empty()) {
    auto text = train::read_text_file(a.config, "config file");
    if (!text.ok()) return report_error(text.status());
    config_text = std::move(text).value();
    auto name = train::config_task(config_text, a.config, sets);
    if (!name.ok()) return report_error(attribute_to_flag(name.status(), a.config, shown));
    auto found = serve::find_task(name.value());
    if (!found.ok()) return report_error(Status(found.status().code(), a.config + ": " + found.status().message()));
    task = found.value();
  }
  auto cfg = task->parse_config(config_text, origin, sets);
  if (!cfg.ok()) return report_error(attribute_to_flag(cfg.status(), origin, shown));
  const train::TaskConfig& c = *cfg.value();
  return execute(a, c, run_inputs(a.config, c.train_files(), c.eval_files()));
}

}  // namespace leanemb::cli
