// Planner: given a workload and a device (a preset or budgets), search the settings that change
// memory without changing the model (row dtype, optimizer state dtype and placement, a row
// cache, shard count, micro-batches, activation checkpointing, activation precision), keep the
// plans whose worst-case prediction fits, rank them by a cost model of bytes moved per step per
// tier at the preset's nominal bandwidths, and pick the fastest; plans within the cost model's
// resolution of the fastest (speed_tolerance) count as equally fast, and among them the lowest
// device peak wins.
//
// Accuracy-safe by default: rows in fp32, fp16 or bf16 (updates with stochastic rounding), the
// user's full-rank optimizer (SGD, Adagrad, Adam) with fp32 state. Row-wise optimizers
// (rowwise_adagrad, partial_rowwise_adam), bf16 state and 8-bit state are searched only when
// allowed; a row cache only when allowed (rows in host RAM behind a device cache, docs/tiered.md).
// Every lean option carries its measured accuracy parity (parity.h, docs/accuracy.md): an
// option not proven for the workload's task is searched only when the user allows it
// (PlannerOptions::allow), fitting plans with fewer unproven options win over
// cheaper ones, and the result names the unproven options used and those left out.
//
// Presets and their bandwidths: docs/plan.md (nominal spec-sheet figures).
// Thread safety: plain functions.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/status.h"
#include "plan/memory_model.h"
#include "plan/parity.h"

namespace leanemb::plan {

struct DevicePreset {
  std::string name;
  size_t device_bytes = 0;            // memory of one device
  size_t runtime_reserved_bytes = 0;  // taken by the runtime (context, framework) before the run
  double hbm_gbps = 0;                // device memory bandwidth, GB/s (1e9 B/s)
  double host_link_gbps = 0;          // host <-> device, one direction
  double ssd_gbps = 0;                // local NVMe read
  double interconnect_gbps = 0;       // device <-> device (all-to-all), per device
  std::string alloc_env;              // PYTORCH_CUDA_ALLOC_CONF / PYTORCH_NPU_ALLOC_CONF / ""
  std::string comm_backend;           // HCCL, NCCL, MPI
};

// "ascend-910a", "ascend-910b", "a100-40", "a100-80", "h100-80", "h200-141", "cpu:<bytes>".
// Errors: InvalidArgument naming the known presets.
Result<DevicePreset> find_preset(std::string_view name);
std::vector<std::string> preset_names();

// The cost model's resolution: step estimates closer than this fraction are not told apart.
inline constexpr double kEqualSpeedTolerance = 0.01;

struct PlannerOptions {
  DevicePreset preset;
  size_t device_budget_bytes = 0;  // 0 = the preset's memory
  size_t host_budget_bytes = 0;    // 0 = no limit
  int max_shards = 1;              // devices the tables may be sharded over
  bool keep_precision = false;     // do not search activation precision (keep the workload's)
  bool allow_host = true;          // rows / state may be placed in host memory
  // The lean options the user allows (parity.h): each is searched although its parity is not
  // proven for the workload's task. The opt-in ones are searched only when listed here, proven or
  // not: kRowwiseOptimizer, the state dtypes (kStateDtypeOptions) and kRowCache. The CLI fills it
  // from --allow-rowwise, --allow-bf16-state, --allow-8bit-state, --allow-4bit-state, --allow-cache
  // and --allow-unproven NAME,...
  std::vector<LeanOption> allow;
  // The parity table consulted (tests pass their own); empty: lean_option_table().
  std::span<const LeanOptionInfo> parity;
  // Fitting plans whose estimated step is within this fraction of the fastest fitting plan's
  // (among those with the fewest unproven options) are equally fast: the lowest device peak of
  // them is chosen, then the cheaper, then the smaller change. 0: the fastest (ties in cost to
  // the lower peak). Default kEqualSpeedTolerance (why 1%: planner.cc, docs/plan.md "Planner").
  double speed_tolerance = kEqualSpeedTolerance;
};

struct Candidate {
  Workload workload;
  Prediction prediction;  // worst case
  double step_seconds = 0;
  double hbm_seconds = 0, host_link_seconds = 0, comm_seconds = 0;
};

struct PlanResult {
  bool fits = false;
  Candidate chosen;               // fits: the lowest device peak of the equally fast fitting plans
                                  // (speed_tolerance); else the smallest device need
  double fastest_step_seconds = 0;  // fits: the fastest fitting plan's estimate (same unproven count)
  Prediction naive;               // the seed's naive baseline
  size_t usable_device_bytes = 0; // budget - runtime reserve
  size_t smallest_device_bytes = 0;  // device budget the smallest plan needs (incl. runtime reserve)
  int num_candidates = 0;
  int num_fitting = 0;
  // Accuracy evidence (parity.h): the chosen plan's lean options (beyond the user's own) that
  // are not proven for the task (allowed by the user), and the options left out of the search
  // because they are not proven and were not allowed (each once, in LeanOption order).
  std::vector<LeanOption> unproven_chosen;
  std::vector<LeanOption> unproven_excluded;
};

// Whether the planner may search lean option `o` in workload `w` under `options` (proven for w's
// task with w's optimizer, or allowed).
bool lean_option_allowed(LeanOption o, const Workload& w, const PlannerOptions& options);

// Errors: InvalidArgument from the memory model (the workload itself is bad).
Result<PlanResult> make_plan(const Workload& base, const PlannerOptions& options);

// Per-step seconds of a workload's predicted traffic on a preset (the ranking's cost model).
void price(const DevicePreset& preset, Candidate* c);

// The largest table (rows at `dim`, one pooled feature, `batch`) whose plan fits, by bisection.
// naive: under the naive baseline (fp32 rows, dense gradient, Adam) instead of a plan.
Result<int64_t> largest_table_rows(const Workload& base, const PlannerOptions& options, bool naive);

}  // namespace leanemb::plan
