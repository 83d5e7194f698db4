// TaskConfig: one task's parsed config behind one interface, for the commands that take a config
// of any task (`leanemb train`, `leanemb plan`): they find the task in the task registry
// (serve/task_registry.h), parse the config with it and then call only this interface. Each
// task implements it in its own folder (ctr/ctr_task.cc, text/text_trainer.cc) over its own
// config struct, which is a RunConfig plus its own sections (train/run_config.h).
//
// Thread safety: one thread at a time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "leanemb/status.h"
#include "plan/memory_model.h"
#include "train/run_config.h"
#include "train/run_options.h"

namespace leanemb::train {

class TaskConfig {
 public:
  virtual ~TaskConfig() = default;

  // The shared part: [train] cadence, [memory], [dist], origin, the saved record.
  virtual const RunConfig& run() const = 0;
  // The files the run reads (data.train, data.eval), which no output may be.
  virtual const std::vector<std::string>& train_files() const = 0;
  virtual const std::vector<std::string>& eval_files() const = 0;

  // Trains on the one loop (train/task.h) with this config; returns the summary document.
  virtual Result<nlohmann::json> train(const RunOptions& ro) const = 0;
  // The lines `leanemb train` prints after the common part of the summary (what was trained,
  // the evaluation), each ending in '\n'.
  virtual std::string summary_text(const nlohmann::json& summary) const = 0;

  // `leanemb plan`: the task's contribution to the memory model (its workload), reading the
  // data where the task needs it to size the model; *what receives one line naming it
  // ("CTR model of FILE: ..."). Errors: the config's data, InvalidArgument (a config the memory
  // model cannot describe).
  virtual Result<plan::Workload> plan_workload(std::string* what) = 0;
  // `leanemb plan --write-config`: whether the task can write its config back with the fields a
  // plan decides, and that config as TOML (`chosen`: the chosen plan's workload;
  // device_budget_bytes: the budget planned for, 0 = keep the config's). Default: cannot
  // (InvalidArgument).
  virtual bool writes_planned_config() const { return false; }
  virtual Result<std::string> planned_config(const plan::Workload& chosen, size_t device_budget_bytes) const;
};

// After a resume, what this run did ("resumed at step 100: steps 101-200 in this run (12800
// samples; 200 steps, 25600 samples in all); "), for the tasks' summary_text; empty for a run
// from step 0. `unit`: "samples", "lines".
std::string resumed_part(const nlohmann::json& summary, const char* unit);

// printf into a std::string (the summary lines).
std::string format_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace leanemb::train
