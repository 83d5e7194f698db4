// DivergenceMonitor. See divergence.h.
#include "train/divergence.h"

#include <cmath>

namespace leanemb::train {

std::optional<std::string> DivergenceMonitor::observe(int64_t step, bool skipped, std::span<const nn::NamedTensor> dense_parameters) {
  consecutive_ = skipped ? consecutive_ + 1 : 0;
  const std::string at = "diverged at step " + std::to_string(step) + ": ";
  if (options_.max_consecutive_skipped > 0 && consecutive_ >= options_.max_consecutive_skipped)
    return at + std::to_string(consecutive_) + " consecutive steps skipped for non-finite gradients (train.max_consecutive_skipped = " +
           std::to_string(options_.max_consecutive_skipped) + "); lower the learning rates";
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

}  // namespace leanemb::train
