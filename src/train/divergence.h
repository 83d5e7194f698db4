// DivergenceMonitor: stops a run whose training has diverged (docs/train.md, "Divergence").
//
// After every step the loop reports whether the step was skipped (a non-finite gradient: the
// loss scaler or the found-inf check skipped its updates), the step's training loss and the
// dense parameters. The run has diverged when
//   - `max_consecutive_skipped` steps in a row were skipped;
//   - a dense parameter is not finite (checked every step: dense parameters are small);
//   - the step's loss is not finite, or exceeds `max_loss_growth` times the starting loss (the
//     loss of this process's first step): finite but exploding losses used to run to the end
//     and exit 0 (a learning rate of 1e6 ended "completed" with a loss of 2.85e35);
// and, after an evaluation (observe_eval), when a metric of it is not finite.
// Embedding rows are protected by the found-inf check that runs before any row update (and its
// bound on the reduced gradients, UpdateOptions::max_abs_grad), so a step that would make them
// or their optimizer state non-finite is skipped and counted.
//
// The verdict is the same on every rank (skips are agreed across ranks, the dense parameters
// and the reported loss, the mean over the global batch, are identical on all of them), so no
// collective is needed.
// Thread safety: one monitor per run, one thread.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "leanemb/json.h"
#include "nn/tensor.h"

namespace leanemb::train {

struct DivergenceOptions {
  int64_t max_consecutive_skipped = 100;  // 0: never stop for skipped steps
  bool check_dense_parameters = true;
  // Diverged when a step's loss exceeds this many times the starting loss (the first step's,
  // floored at kMinStartLoss so that a start near 0 does not make every loss "growth"). 0: no
  // growth check (a non-finite loss still stops the run).
  double max_loss_growth = 1e6;
  static constexpr double kMinStartLoss = 1e-6;
};

class DivergenceMonitor {
 public:
  explicit DivergenceMonitor(DivergenceOptions options) : options_(options) {}
  // Step `step` (1-based) finished with training loss `loss`. Returns "diverged at step N:
  // <why>" once the run diverged.
  std::optional<std::string> observe(int64_t step, bool skipped, double loss, std::span<const nn::NamedTensor> dense_parameters);
  // An evaluation after step `step` gave `eval` (a JSON object of metrics, possibly nested):
  // "diverged at step N: ..." naming the first metric that is not finite (NaN, +-Inf).
  std::optional<std::string> observe_eval(int64_t step, const nlohmann::json& eval) const;
  int64_t consecutive_skipped() const { return consecutive_; }
  // The starting loss (NaN before the first step with a finite loss).
  double start_loss() const { return start_loss_; }

 private:
  DivergenceOptions options_;
  int64_t consecutive_ = 0;
  double start_loss_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace leanemb::train
