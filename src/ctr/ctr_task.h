// `task = "ctr"`: the DLRM-style CTR model and its Criteo-format data as a TrainTask of the one
// step loop behind `leanemb train` (train/task.h, docs/train.md).
//
// run_ctr_training() generates the synthetic data when the config asks for it and it is missing,
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
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ctr/ctr_config.h"
#include "leanemb/status.h"
#include "train/run_options.h"
#include "train/task_config.h"

namespace leanemb::ctr {

// Runs training; returns the summary document:
//   {"outcome": "completed" | "stopped" (a StopSignal) | "diverged" (train/divergence.h; no
//    final checkpoint, no final eval), "stopped": {"step", "signal"}, "diverged": {"step",
//    "message"}, "steps", "samples", "samples_per_s", "train_seconds", "loss", "eval": {"auc", "logloss", "rows"},
//    "teacher_auc", "skipped_steps", "resumed_from_step", "memory": {tier: {category: peak}},
//    "memory_detail": MemorySystem::to_json, "embedding_bytes", "checkpoint": path, ...}
// Errors: those of the data, model, memory and checkpoint layers, with context.
Result<nlohmann::json> run_ctr_training(const train::RunOptions& options, const CtrConfig& config);

// The task registry's parse function (serve/task_registry.h): a CTR config as a
// train::TaskConfig (ctr/ctr_task_config.cc). Errors: as parse_ctr_config.
Result<std::unique_ptr<train::TaskConfig>> parse_task_config(std::string_view toml_text, const std::string& origin,
                                                             std::span<const std::string> sets);

}  // namespace leanemb::ctr
