// The task registry: every task `leanemb train` can run, by name, with the functions the
// commands call for it. `leanemb train` and `leanemb plan` parse a config with its task's entry
// and then use only train::TaskConfig (train/task_config.h: the loop's settings, training, the
// summary lines, the memory model's workload); `leanemb test`, `predict` and `export` open a
// saved run (serve/saved_model.h) and call its task's entry. Nothing else branches on a task's
// name: the commands look the name up once (find_task) and an unknown one is an
// InvalidArgument listing the registered names.
//
// Adding a task: its folder (src/<task>: config, TrainTask, plan contribution, parse_task_config
// returning a train::TaskConfig), its test / predict / export functions (serve/predict.h,
// serve/export.h) and one line in kTasks (task_registry.cc).
//
// Thread safety: the table is constant.
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "leanemb/status.h"
#include "serve/export.h"
#include "serve/predict.h"
#include "serve/saved_model.h"
#include "train/task_config.h"

namespace leanemb::serve {

struct TaskEntry {
  std::string_view name;  // the config's `task` key, recorded in a checkpoint's train/state
  // The embedded default config (`leanemb train` without --config, --print-config); null: none.
  std::string_view (*default_config)();
  // A config of this task (TOML text; `sets`: "section.key=value" overrides) as a TaskConfig.
  // Errors: InvalidArgument naming the key, the value and the origin.
  Result<std::unique_ptr<train::TaskConfig>> (*parse_config)(std::string_view toml_text, const std::string& origin,
                                                             std::span<const std::string> sets);
  // `leanemb test`: the saved run's model loaded and evaluated on `file`.
  Result<TestReport> (*test)(const SavedRun& run, const std::string& file, const TestOptions& options);
  // `leanemb predict`: one output line per input record of `file` into `out`.
  Result<PredictStats> (*predict)(const SavedRun& run, const std::string& file, const PredictOptions& options, std::FILE* out,
                                  const PredictProgress& progress);
  // `leanemb export`: the arrays and their manifest entries; `export --serving`: the serving copy.
  Result<std::string> (*export_arrays)(const SavedRun& run, const ExportOptions& options, nlohmann::json* manifest);
  Result<std::string> (*export_serving)(ServingWriter& w);
};

// Every registered task, the default one first.
std::span<const TaskEntry> registered_tasks();
// The task named `name`. Errors: InvalidArgument "unknown task 'NAME' (registered tasks: ctr, text)".
Result<const TaskEntry*> find_task(std::string_view name);
// The task of the embedded default config (`leanemb train` without --config).
const TaskEntry& default_task();

}  // namespace leanemb::serve
