// The top-level keys every task's config shares, read the same way for `task = "ctr"`
// (ctr/ctr_config.cc) and `task = "text"` (text/text_config.cc). The shared sections ([memory],
// [dist]) and [train] keys are train/run_config.h's.
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "train/run_config.h"
#include "train/toml_section.h"

namespace leanemb::train {

// Checks a config's top-level keys: `task`, when given, must be `task`; every other key must be
// one of the sections. Errors: InvalidArgument "origin: " + task_error, or naming the unknown key
// followed by "(" + known + ")".
inline Status check_top_level_keys(const toml::table& doc, const std::string& origin, std::string_view task,
                                   std::string_view task_error, std::string_view known) {
  static const std::set<std::string> kSections = {"data", "model", "embedding", "dense", "train", "memory", "dist"};
  for (const auto& [k, node] : doc) {
    if (k.str() == "task") {
      if (node.value<std::string>() != std::optional<std::string>(std::string(task)))
        return invalid_argument(origin + ": " + std::string(task_error));
      continue;
    }
    if (!node.is_table() || !kSections.count(std::string(k.str())))
      return invalid_argument(origin + ": unknown section or top-level key '" + std::string(k.str()) + "' (" +
                              std::string(known) + ")");
  }
  return Status();
}

// The top-level table `name` of a config, or null when absent (or not a table).
inline const toml::table* config_section(const toml::table& doc, const char* name) {
  return doc.get(name) ? doc.get(name)->as_table() : nullptr;
}

}  // namespace leanemb::train
