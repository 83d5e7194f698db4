// The measured accuracy parity of each memory-lean option the planner can choose (issue 21).
//
// Each option carries, per task (CTR, text), what bench/parity.py measured: the best-vs-best
// differences (the option at its own best learning rate minus the fp32 full-state reference at
// its best rate, mean over 3 seeds) over the harness's datasets of that task, the lowest and the
// highest with their standard errors. "Without loss" is one-sided (issue 39): an option is
// proven when its lowest difference is >= -band (0.001 AUC on CTR, 0.003 P@1 on text) on every
// dataset; a gain beyond the band is not a loss (it is shown, "better than the reference by X").
// docs/accuracy.md has every figure, its seeds, spread, command, CPU and load.
//
// A state dtype's figures hold for the optimizer they were measured with (`optimizers`).
//
// The planner (planner.h) searches an option only when it is proven for the workload's task and
// optimizer or the user allowed it explicitly (--allow-unproven NAME, or the option's own --allow-* flag);
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
  kBf16Activations,   // bf16 activations, fp32 master weights: CTR dense compute; embedding-only output + its gradient
  kRowCache,          // rows in host RAM behind a device row cache
  kSm3,               // adagrad -> sm3 (a row and a column accumulator instead of one per element)
  kFp8Rows,           // fp8 rows (E4M3, exponent bias 12), stochastic rounding on update
  kQ8Rows,            // q8 rows (int8 codes + an fp32 scale per row), stochastic rounding on update
  kInt4State,         // optimizer state 4-bit block-wise, stochastic rounding
};
inline constexpr int kNumLeanOptions = 11;

// The lean options that are an optimizer-state dtype, with that dtype: the one place that pairs
// them (what a workload's state dtype counts as, and what the planner tries for each).
struct StateDtypeOption {
  LeanOption option;
  DType state;
};
inline constexpr StateDtypeOption kStateDtypeOptions[] = {{LeanOption::kBf16State, DType::kBF16},
                                                          {LeanOption::kInt8State, DType::kInt8Blockwise},
                                                          {LeanOption::kInt4State, DType::kInt4Blockwise}};

enum class Verdict : uint8_t {
  kProven,       // measured, and no dataset of the task below the reference by more than the band
  kLoss,         // measured below the reference by more than the band on at least one dataset
  kNotMeasured,  // no measurement for this task: unproven
  kExact,        // bit-identical to the reference (by construction, checked by tests)
};
// "proven", "loss beyond the goal", "not measured (unproven)", "exact".
std::string_view verdict_name(Verdict v);

// The goal of issue 21, per task: a best-vs-best difference of at most this much below the
// reference (AUC on CTR, P@1 on text).
inline constexpr double kCtrBand = 0.001;
inline constexpr double kTextBand = 0.003;

// The one-sided rule: proven when the lowest difference over the task's datasets is >= -band (a
// gain, however large, is not a loss); a loss otherwise. 1e-12 of slack for the decimal figures.
constexpr Verdict one_sided_verdict(double lowest_difference, double band) {
  return lowest_difference >= -band - 1e-12 ? Verdict::kProven : Verdict::kLoss;
}

// One best-vs-best difference: its value, its standard error (sqrt(sd_m^2/n + sd_r^2/n); < 0
// when not recorded) and the dataset it was measured on.
struct Difference {
  double value = 0;
  double se = -1;
  std::string_view dataset;
};

struct TaskParity {
  Verdict verdict = Verdict::kNotMeasured;
  Difference lowest;          // the lowest difference over the datasets: what the rule judges
  Difference highest;         // the highest: the two-sided view (a gain beyond the band is shown)
  std::string_view datasets;  // where it was measured, e.g. "ctr_small, debpkg, debfiles"
};

// A measured task: its verdict by the one-sided rule at `band`.
constexpr TaskParity measured(double band, Difference lowest, Difference highest, std::string_view datasets) {
  return TaskParity{one_sided_verdict(lowest.value, band), lowest, highest, datasets};
}
// The band of a task's metric: kCtrBand for CTR, kTextBand for text.
double band_of(bool text);

// The bit of optimizer k in LeanOptionInfo::optimizers.
constexpr uint8_t optimizer_bit(OptimizerKind k) { return static_cast<uint8_t>(1u << static_cast<unsigned>(k)); }

struct LeanOptionInfo {
  LeanOption option;
  std::string_view name;      // the --allow-unproven spelling, e.g. "bf16-rows"
  std::string_view what;      // "bf16 rows (stochastic rounding)"
  TaskParity ctr, text;
  std::string_view evidence;  // where the figures are, e.g. "docs/accuracy.md#bf16-rows"
  // The optimizers the figures were measured with (optimizer_bit), for an option whose effect
  // depends on the optimizer (a state dtype: Adagrad's one sum against Adam's two moments); 0: the
  // option does not depend on it (rows, activations, the cache). For another optimizer the option
  // is "not measured" whatever the figures say.
  uint8_t optimizers = 0;
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

// Whether the figures of `info` hold for tables trained with `optimizer`.
bool measured_with(const LeanOptionInfo& info, OptimizerKind optimizer);
// Safe for a workload kind and its tables' optimizer: measured with that optimizer, and kProven
// or kExact on its task; kEmbeddingOnly (no model behind the table, either task's kind of model)
// needs both tasks.
bool proven_for(const LeanOptionInfo& info, WorkloadKind kind, OptimizerKind optimizer);
// For the report, per task of `kind`: "CTR proven (AUC: lowest -0.00072 +-0.00160 on debpkg >=
// -0.001; highest +0.00065 +-0.00033 on debfiles; measured on ctr_small, debpkg, debfiles)", a
// gain beyond the band as "better than the reference by +0.00103 +-0.00060 on debpkg (beyond
// the band: a gain, not a loss)"; then "; docs/accuracy.md#...". For an optimizer the figures
// were not measured with, first "not measured with adam (unproven); the figures are adagrad's: ".
std::string parity_text(const LeanOptionInfo& info, WorkloadKind kind, OptimizerKind optimizer);

}  // namespace leanemb::plan
