// The registered tasks (see task_registry.h): one line per task.
#include "serve/task_registry.h"

#include "ctr/ctr_config.h"
#include "ctr/ctr_task.h"
#include "text/text_trainer.h"

namespace leanemb::serve {

namespace {

const TaskEntry kTasks[] = {
    {"ctr", ctr::default_config_text, ctr::parse_task_config, test_ctr_run, predict_ctr_run, export_ctr_arrays, export_ctr_serving},
    {"text", nullptr, text::parse_task_config, test_text_run, predict_text_run, export_text_arrays, export_text_serving},
};

}  // namespace

std::span<const TaskEntry> registered_tasks() { return kTasks; }

Result<const TaskEntry*> find_task(std::string_view name) {
  std::string names;
  for (const TaskEntry& t : kTasks) {
    if (t.name == name) return &t;
    names += (names.empty() ? "" : ", ") + std::string(t.name);
  }
  return invalid_argument("unknown task '" + std::string(name) + "' (registered tasks: " + names + ")");
}

const TaskEntry& default_task() { return kTasks[0]; }

}  // namespace leanemb::serve
