// DivergenceMonitor: stops a run whose training has diverged (docs/train.md, "Divergence").
//
// After every step the loop reports whether the step was skipped (a non-finite gradient: the
// loss scaler or the found-inf check skipped its updates) and the dense parameters. The run has
// diverged when `max_consecutive_skipped` steps in a row were skipped, or when a dense
// parameter is not finite (checked every step: dense parameters are small). Embedding rows are
// protected by the found-inf check that runs before any row update, so a step that would make
// them non-finite is skipped and counted.
//
// The verdict is the same on every rank (skips are agreed across ranks and the dense
// parameters are identical on all of them), so no collective is needed.
// Thread safety: one monitor per run, one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "nn/tensor.h"

namespace leanemb::train {

struct DivergenceOptions {
  int64_t max_consecutive_skipped = 100;  // 0: never stop for skipped steps
  bool check_dense_parameters = true;
};

class DivergenceMonitor {
 public:
  explicit DivergenceMonitor(DivergenceOptions options) : options_(options) {}
  // Step `step` (1-based) finished. Returns "diverged at step N: <why>" once the run diverged.
  std::optional<std::string> observe(int64_t step, bool skipped, std::span<const nn::NamedTensor> dense_parameters);
  int64_t consecutive_skipped() const { return consecutive_; }

 private:
  DivergenceOptions options_;
  int64_t consecutive_ = 0;
};

}  // namespace leanemb::train
