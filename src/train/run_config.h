// RunConfig: the part of a `leanemb train` config every task shares, read the same way for
// every task: the [train] keys of the step count, cadence, checkpoints and divergence guard, the
// [memory] section (budgets, placement) and the [dist] section (several processes). A task's
// config is a RunConfig plus its own sections (ctr::CtrConfig, text::TextConfig), and
// loop_settings() turns it into the settings of the one step loop (train/task.h).
//
// Defaults are the CTR task's; a task with other defaults sets them before reading (the keys'
// ranges are the same for every task, except where a task reads a key itself: steps, epochs,
// log_every, log_every_s, inject_nonfinite_steps).
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "leanemb/dtype.h"
#include "leanemb/memory_system.h"
#include "leanemb/status.h"
#include "leanemb/tables.h"
#include "train/toml_section.h"

namespace leanemb::train {

struct LoopSettings;
struct RunOptions;

struct RunConfig {
  // [train], read by the task (its ranges differ)
  int64_t steps = 0;               // optimizer steps; 0 = run `epochs` epochs
  int64_t epochs = 1;              // passes over the training data (with steps = 0)
  uint64_t seed = 1;
  int threads = 0;                 // 0 = OpenMP's default
  int64_t log_every = 100;         // steps between progress / metrics lines (0: 1000)
  double log_every_s = 0;          // > 0: also a progress line when this many seconds passed
  std::vector<int64_t> inject_nonfinite_steps;  // testing: these steps get an Inf gradient
  // [train], shared (read_train_cadence_keys, read_train_guard_keys)
  int64_t eval_every = 0;          // steps; 0 = only at the end
  int64_t eval_every_epochs = 0;   // also after every N-th epoch (0 = no)
  int64_t checkpoint_every = 0;    // steps; 0 = only at the end; -1 = never (checkpoints off)
  int keep_checkpoints = 3;
  bool incremental_checkpoints = false;  // only the rows changed since the last checkpoint (docs/train.md)
  int full_checkpoint_every = 8;         // incremental: every N-th checkpoint of a chain is full
  double max_delta_fraction = 0.5;       // incremental: a full one when a chain's rows pass this fraction
  bool link_store_rows = true;           // checkpoints keep log-store tables by hard links (docs/train.md)
  bool disk_check = true;                // refuse to start when the disk cannot hold the store files and a checkpoint
  int64_t max_consecutive_skipped = 100;  // diverged after this many skipped steps in a row (0 = never)
  double max_loss_growth = 1e6;  // diverged when a step's loss exceeds this times the first step's (0 = no check)

  // [memory]
  MemorySystemOptions memory;

  // [dist] multi-process training (docs/dist.md)
  std::string dist_backend = "auto";  // auto (mpi when started by mpirun) | local (one process) | mpi
  int64_t dist_timeout_ms = 60000;    // every collective fails after this long, naming the silent rank
  ShardingKind sharding = ShardingKind::kRowModulo;
  DType forward_payload = DType::kF32;
  DType backward_payload = DType::kF32;
  int grad_groups = 0;                // dense gradient groups; 0 = the world size
  int inject_exit_rank = -1;          // testing: this rank ends its process (exit code 9, no cleanup)...
  int64_t inject_exit_step = 0;       // ...after completing this step, as a crashed rank would

  std::string origin;              // file name or "<embedded default>"
  // Every key's effective value (train/toml_section.h): saved in checkpoints ("train/config")
  // and compared on resume (train/config_diff.h).
  ConfigRecord record;
};

// The [train] keys of the evaluation and checkpoint cadence: eval_every, eval_every_epochs,
// checkpoint_every, keep_checkpoints, incremental_checkpoints, full_checkpoint_every,
// max_delta_fraction, disk_check. Errors: InvalidArgument naming the key.
Status read_train_cadence_keys(Section& t, RunConfig* c);
// The [train] keys of the guard against non-finite and diverging steps: max_consecutive_skipped,
// max_loss_growth.
Status read_train_guard_keys(Section& t, RunConfig* c);
// The sections every task's config has as they are: [memory] (device_budget, host_budget,
// max_split, reserve, placement) and [dist] (backend, timeout_ms, sharding, forward_payload,
// backward_payload, grad_groups and the testing hooks), each then with no other key, recorded
// in c->record. Errors: InvalidArgument naming the key and `origin`.
Status read_run_sections(const toml::table& doc, const std::string& origin, RunConfig* c);

// The loop's settings of a run of `task` (recorded in train/state) with this config: ro.steps
// (>= 0) overrides the config's steps; without evaluation data (`has_eval` false) there is no
// periodic evaluation. The task adds what is its own (prepare, plan, make_task, store_dir,
// progress_unit).
LoopSettings loop_settings(const std::string& task, const RunConfig& c, const RunOptions& ro, bool has_eval);

}  // namespace leanemb::train
