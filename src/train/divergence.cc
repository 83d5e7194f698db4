// DivergenceMonitor. See divergence.h.
#include "train/divergence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace leanemb::train {

namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// The path ("logloss", "per_label.3.auc") of the first non-finite number in `j`, or "".
std::string first_non_finite(const nlohmann::json& j, const std::string& path, double* value) {
  if (j.is_number_float()) {
    const double x = j.get<double>();
    if (std::isfinite(x)) return "";
    *value = x;
    return path.empty() ? "value" : path;
  }
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::string p = first_non_finite(it.value(), path.empty() ? it.key() : path + "." + it.key(), value);
      if (!p.empty()) return p;
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      std::string p = first_non_finite(j[i], path + "[" + std::to_string(i) + "]", value);
      if (!p.empty()) return p;
    }
  }
  return "";
}

}  // namespace

std::optional<std::string> DivergenceMonitor::observe(int64_t step, bool skipped, double loss,
                                                      std::span<const nn::NamedTensor> dense_parameters) {
  consecutive_ = skipped ? consecutive_ + 1 : 0;
  const std::string at = "diverged at step " + std::to_string(step) + ": ";
  if (options_.max_consecutive_skipped > 0 && consecutive_ >= options_.max_consecutive_skipped)
    return at + std::to_string(consecutive_) + " consecutive steps skipped for non-finite gradients (train.max_consecutive_skipped = " +
           std::to_string(options_.max_consecutive_skipped) + "); lower the learning rates";
  if (!std::isfinite(loss)) return at + "the training loss is " + number(loss) + "; lower the learning rates";
  if (std::isnan(start_loss_)) start_loss_ = loss;
  if (options_.max_loss_growth > 0) {
    const double limit = options_.max_loss_growth * std::max(std::fabs(start_loss_), DivergenceOptions::kMinStartLoss);
    if (std::fabs(loss) > limit)
      return at + "the training loss " + number(loss) + " is more than " + number(options_.max_loss_growth) +
             " times its start " + number(start_loss_) + " (train.max_loss_growth); lower the learning rates";
  }
  if (!options_.check_dense_parameters) return std::nullopt;
  for (const nn::NamedTensor& t : dense_parameters) {
    for (size_t i = 0; i < t.values.size(); ++i) {
      if (std::isfinite(t.values[i])) continue;
      return at + "dense parameter " + t.name + "[" + std::to_string(i) + "] is " + std::to_string(t.values[i]) +
             "; lower the learning rates";
    }
  }
  return std::nullopt;
}

std::optional<std::string> DivergenceMonitor::observe_eval(int64_t step, const nlohmann::json& eval) const {
  double value = 0;
  const std::string path = first_non_finite(eval, "", &value);
  if (path.empty()) return std::nullopt;
  return "diverged at step " + std::to_string(step) + ": evaluation metric " + path + " is " + number(value) +
         "; lower the learning rates";
}

}  // namespace leanemb::train
