// TrainTask: a model and its data, plugged into the one step loop of `leanemb train`
// (run_loop, train/loop.cc). The loop owns everything that does not depend on the model: the
// output directory (lock, consent, resume point), the memory plan and MemorySystem, resuming,
// the steps, progress lines and metrics.jsonl, periodic and final checkpoints, divergence and
// graceful stop, the final evaluation and the summary. A task owns its model (which holds an
// EmbeddingTables: local or sharded, any layers), its data and what a checkpoint must add to
// resume it bit-exactly. `task = "ctr"` (ctr/ctr_task.cc) and `task = "text"`
// (text/text_trainer.cc) are the two; the CLI finds the config's task in the task registry
// (serve/task_registry.h) and nothing else forks.
//
// Checkpoints: the loop writes blob "train/state" (step, samples, skipped steps, the tables'
// step counter, table order, task), "train/config" (the saved configuration, compared on
// resume) and the tables (EmbeddingTables::save: plain or sharded, loadable at any world
// size); the task adds its own blobs (dense parameters and state, reader position, ...).
// Every rank runs the same loop (collective calls in the same order).
//
// Thread safety: one loop per task; the task is called from the loop's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/sharded_checkpoint.h"
#include "leanemb/checkpoint.h"
#include "leanemb/memory_system.h"
#include "leanemb/status.h"
#include "leanemb/tables.h"
#include "nn/tensor.h"
#include "plan/memory_model.h"
#include "train/config_diff.h"
#include "train/run_options.h"

namespace leanemb::train {

using Blobs = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

// What one train_step did.
struct TaskStep {
  double loss = 0.0;     // mean loss of the step's (global) batch
  int64_t samples = 0;   // records / examples in the global batch
  bool skipped = false;  // a non-finite gradient skipped the update
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;

  virtual EmbeddingTables& tables() = 0;
  // The next global batch of the training data (every rank the same): false at its end.
  virtual Result<bool> next_batch() = 0;
  // One optimizer step on the batch next_batch() gave; step_no is 1-based. inject_nonfinite:
  // a testing hook that puts an Inf into the gradient (the step must be skipped).
  virtual Result<TaskStep> train_step(int64_t step_no, bool inject_nonfinite) = 0;
  // Evaluates on the task's eval data (collective); empty JSON when it has none.
  virtual bool has_eval() const = 0;
  virtual Result<nlohmann::json> evaluate() = 0;
  // "auc 0.7941" / "p@1 0.8312" for the progress line, from evaluate()'s result.
  virtual std::string eval_headline(const nlohmann::json& eval) const = 0;
  // The checkpoint's blobs besides train/state, train/config and the tables. Every task writes
  // "train/reader" (its data position) and "amp/loss_scaler" (the training digest reads both).
  virtual Result<Blobs> checkpoint_blobs() const = 0;
  // Restores those blobs from `r` (the tables are already loaded).
  virtual Status restore(const ckpt::CheckpointReader& r) = 0;
  // Dense parameters (divergence checks).
  virtual std::vector<nn::NamedTensor> dense_parameters() const = 0;
  virtual double loss_scale() const { return 1.0; }
  // Epochs: the epoch (0-based) of the batch next_batch() gave last, and the steps of one epoch
  // when known before training (-1: unknown; the loop then counts the first epoch's steps).
  virtual int64_t batch_epoch() const { return -1; }
  virtual int64_t steps_per_epoch() const { return -1; }
  // Task-specific fields of the summary document.
  virtual void add_summary(nlohmann::json* summary) const = 0;
};

// Where the task lives.
struct TaskContext {
  MemorySystem* memory = nullptr;
  dist::Communicator* comm = nullptr;  // null (one process) or the run's communicator, world > 1
  std::function<void(const std::string&)> say;  // progress notes (rank 0, not quiet)
  bool quiet = false;
};

// The model-independent settings of a run (from the task's config).
struct LoopSettings {
  std::string task = "ctr";        // recorded in train/state
  std::string origin;              // the config's file name
  int64_t steps = 0;               // 0: until the data ends
  int64_t epochs = 0;              // with steps 0: the reader's passes (the terminal progress line's ETA); 0: unknown
  int64_t eval_every = 0;          // steps; 0: only at the end
  int64_t eval_every_epochs = 0;   // also at the end of every N-th epoch (0: no)
  int64_t checkpoint_every = 0;    // steps; 0: only at the end; < 0: never (no final one either)
  int keep_checkpoints = 3;
  dist::IncrementalOptions incremental;  // incremental checkpoints (one process, or each rank's shard chain)
  bool disk_check = true;                 // train.disk_check (Run::open)
  int64_t log_every = 100;         // steps between progress / metrics lines
  double log_every_s = 0;          // > 0: also a progress line when this many seconds passed
  int64_t max_consecutive_skipped = 0;  // divergence (train/divergence.h)
  double max_loss_growth = 0;           // divergence: 0 = no loss-growth check
  int threads = 0;
  int grad_groups = 0;             // 0: the world size
  MemorySystemOptions memory;
  std::vector<int64_t> inject_nonfinite_steps;  // testing hooks (config: train / dist)
  int inject_exit_rank = -1;
  int64_t inject_exit_step = 0;
  ConfigRecord record;             // the saved configuration (train/config_diff.h)
  std::string store_dir;           // created before the task (file stores); empty: none
  std::string progress_unit = "samples";  // "samples" | "examples"
  // Called after the output directory is taken, before anything else: generate or check the
  // data (rank 0 prints). May be null.
  std::function<Status(dist::Communicator* comm, bool lead)> prepare;
  // The memory plan of one rank at `world` ranks (reserved up front with a device budget,
  // compared with the measured peaks at the end). May be null: no plan.
  std::function<Result<plan::Prediction>(int world)> plan;
  // Creates the task (after the MemorySystem).
  std::function<Result<std::unique_ptr<TrainTask>>(const TaskContext&)> make_task;
};

// Runs the loop (see the header comment) with the run options' output directory, resume,
// stop signal, steps override and communicator. Returns the summary document
// (ctr/ctr_task.h lists the common fields).
Result<nlohmann::json> run_loop(const RunOptions& ro, LoopSettings settings);

}  // namespace leanemb::train
