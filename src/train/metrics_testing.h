// Test helper (tests only): the lines of a run's metrics.jsonl (train/loop.cc writes one JSON
// object per line).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace leanemb::train {

// The `field` of the last metrics.jsonl line of `step` in run directory `run_dir` that has it;
// null when there is none.
inline nlohmann::json metrics_field_at_step(const std::string& run_dir, int64_t step, const char* field) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  nlohmann::json found;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains(field) && j.contains("step") && j["step"] == step) found = j[field];
  }
  return found;
}

}  // namespace leanemb::train
