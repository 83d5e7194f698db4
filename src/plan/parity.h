// The measured accuracy parity of each memory-lean option the planner can choose (issue 21).
//
// Each option carries, per task (CTR, text), the verdict of bench/parity.py: the worst
// best-vs-best difference (the option at its own best learning rate minus the fp32 full-state
// reference at its best rate, mean over 3 seeds) over the harness's datasets of that task, and
// whether it is within the goal (|difference| <= 0.001 AUC on CTR, <= 0.003 P@1 on text).
// docs/accuracy.md has every figure, its seeds, spread, command, CPU and load.
//
// The planner (planner.h) searches an option only when it is proven for the workload's task or
// the user allowed it explicitly (--allow-unproven NAME, or the option's own --allow-* flag);
// among fitting plans it prefers fewer unproven options before a lower cost, and `leanemb plan`
// names the unproven options it used or left out.
//
// Thread safety: constant data and plain functions.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/status.h"
#include "plan/memory_model.h"

namespace leanemb::plan {

enum class LeanOption : uint8_t {
  kBf16Rows,          // bf16 rows, stochastic rounding on update
  kFp16Rows,          // fp16 rows, stochastic rounding on update
  kRowwiseOptimizer,  // adagrad -> rowwise_adagrad, adam -> partial_rowwise_adam
  kBf16State,         // optimizer state in bf16
  kInt8State,         // optimizer state 8-bit block-wise
  kBf16Activations,   // CTR: bf16 activations and dense compute, fp32 master weights
  kRowCache,          // rows in host RAM behind a device row cache
  kSm3,               // adagrad -> sm3 (a row and a column accumulator instead of one per element)
};
inline constexpr int kNumLeanOptions = 8;

enum class Verdict : uint8_t {
  kProven,       // measured within the goal on every dataset of the task
  kLoss,         // measured beyond the goal on at least one dataset
  kNotMeasured,  // no measurement for this task
  kExact,        // bit-identical to the reference (by construction, checked by tests)
};
std::string_view verdict_name(Verdict v);  // "proven", "outside the goal", "not measured", "exact"

struct TaskParity {
  Verdict verdict = Verdict::kNotMeasured;
  double worst_difference = 0;  // the largest |best-vs-best difference| over the datasets (signed)
  std::string_view datasets;    // where it was measured, e.g. "ctr_small (synthetic teacher)"
};

struct LeanOptionInfo {
  LeanOption option;
  std::string_view name;      // the --allow-unproven spelling, e.g. "bf16-rows"
  std::string_view what;      // "bf16 rows (stochastic rounding)"
  TaskParity ctr, text;
  std::string_view evidence;  // where the figures are, e.g. "docs/accuracy.md#bf16-rows"
};

// The built-in table (parity.cc), one entry per LeanOption in enum order.
std::span<const LeanOptionInfo> lean_option_table();
const LeanOptionInfo& lean_option_info(LeanOption o, std::span<const LeanOptionInfo> table = lean_option_table());
// "bf16-rows" -> kBf16Rows. Errors: InvalidArgument naming the known names.
Result<LeanOption> parse_lean_option(std::string_view name);
// "bf16-rows, fp16-rows, ..." (every option).
std::string lean_option_names();

// The lean options candidate `w` uses that the user's workload `base` does not (options the
// user configured are theirs, not the planner's choice).
std::vector<LeanOption> lean_options_chosen(const Workload& base, const Workload& w);
// The lean options the user's workload itself uses.
std::vector<LeanOption> lean_options_configured(const Workload& base);

// Safe for a workload kind: kProven or kExact on its task; kEmbeddingOnly (no model behind the
// table, either task's kind of model) needs both tasks.
bool proven_for(const LeanOptionInfo& info, WorkloadKind kind);
// "text P@1 -0.0183 (loss; debian, gcloud); docs/accuracy.md#..." for the report.
std::string parity_text(const LeanOptionInfo& info, WorkloadKind kind);

}  // namespace leanemb::plan
