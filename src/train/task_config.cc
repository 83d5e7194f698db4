// The defaults of TaskConfig and the summary helpers the tasks share (see task_config.h).
#include "train/task_config.h"

#include <cstdarg>
#include <cstdio>

namespace leanemb::train {

Result<std::string> TaskConfig::planned_config(const plan::Workload&, size_t) const {
  return invalid_argument("--write-config is for CTR configs");
}

std::string resumed_part(const nlohmann::json& s, const char* unit) {
  if (s["resumed_from_step"].is_null()) return "";
  const int64_t from = s["resumed_from_step"].get<int64_t>(), to = s["steps"].get<int64_t>();
  if (to <= from)  // resumed at the run's last step: only the final evaluation ran
    return "resumed at step " + std::to_string(from) + ": nothing left to train (the checkpoint is at the run's last step; " +
           "give more --steps to continue); ";
  return "resumed at step " + std::to_string(from) + ": steps " + std::to_string(from + 1) + "-" + std::to_string(to) + " in this run (" +
         std::to_string(s["samples_this_run"].get<int64_t>()) + " " + unit + "; " + std::to_string(to) + " steps, " +
         std::to_string(s["samples"].get<int64_t>()) + " " + unit + " in all); ";
}

std::string format_text(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

}  // namespace leanemb::train
