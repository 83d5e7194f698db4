// Trainer: the step loop behind `leanemb train` (docs/train.md).
//
// run_training() generates the synthetic data when the config asks for it and it is missing,
// builds the MemorySystem (budgets, placement) and the CtrModel, optionally resumes from the
// newest complete checkpoint in <out>/checkpoints, then trains: one optimizer step per batch
// (micro-batches inside), a progress line, metrics as JSON lines in <out>/metrics.jsonl, eval
// (AUC, logloss) every eval_every steps and at the end, checkpoints every checkpoint_every steps
// and at the end. The summary holds what the CLI prints and writes with --json-summary.
//
// Checkpoint content (docs/formats/checkpoint.md): tables "emb/<table>" (raw fat rows: weights
// and optimizer state) and blobs "train/state" (step, samples, collection step, table order, skipped
// steps), "train/reader" (the data reader's position), "amp/loss_scaler", "dense/param/<name>"
// and "dense/opt/<name>" (fp32). Nothing that depends on time or thread count is stored, so a
// resumed run's checkpoints are byte-for-byte those of an uninterrupted run.
//
// Thread safety: one run at a time per output directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "leanemb/status.h"
#include "train/config.h"

namespace leanemb::ckpt {
class Env;
}
namespace leanemb::dist {
class Communicator;
}

namespace leanemb::train {

class StopSignal;

struct RunOptions {
  TrainConfig config;
  std::string out_dir = "runs/ctr_small";  // locked for the run; see train/run_dir.h
  bool resume = false;
  bool overwrite = false;    // move an earlier run's checkpoints and metrics aside (run_dir.h)
  bool start_fresh = false;  // with resume: no valid checkpoint -> set them aside, step 0
  // Graceful stop (train/stop_signal.h): checked before every step; when set on any rank,
  // every rank stops after the same step, writes a checkpoint and returns outcome "stopped".
  // Null: signals keep their default action.
  StopSignal* stop = nullptr;
  ckpt::Env* ckpt_env = nullptr;  // tests: the checkpoints' file system (null: the real one)
  // tests: the file system of metrics.jsonl (null: the real one; train/metrics_log.h)
  ckpt::Env* log_env = nullptr;
  int64_t steps = -1;              // >= 0 overrides config.steps
  bool progress_tty = false;       // rewrite one progress line (\r) instead of printing lines
  bool quiet = false;              // no progress at all
  // Multi-process training (docs/dist.md): this rank's communicator (null: one process). Every
  // rank runs run_training with the same options; rank 0 prints and writes metrics.
  dist::Communicator* comm = nullptr;
  // Testing: called after each completed step with the step number (1-based).
  std::function<void(int64_t)> after_step;
};

// Runs training; returns the summary document:
//   {"outcome": "completed" | "stopped" (a StopSignal) | "diverged" (train/divergence.h; no
//    final checkpoint, no final eval), "stopped": {"step", "signal"}, "diverged": {"step",
//    "message"}, "steps", "samples", "samples_per_s", "train_seconds", "loss", "eval": {"auc", "logloss", "rows"},
//    "teacher_auc", "skipped_steps", "resumed_from_step", "memory": {tier: {category: peak}},
//    "memory_detail": MemorySystem::to_json, "embedding_bytes", "checkpoint": path, ...}
// Errors: those of the data, model, memory and checkpoint layers, with context.
Result<nlohmann::json> run_training(const RunOptions& options);

}  // namespace leanemb::train
