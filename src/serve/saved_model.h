// A trained model read back from its checkpoint, for the commands that use it: `leanemb test`,
// `predict` and `export` (docs/serve.md).
//
// A checkpoint holds everything needed (docs/formats/checkpoint.md): blob "train/state" names
// the task ("ctr" or "text") and the step, blob "train/config" every configuration key's
// effective value (the record --resume compares). open_saved_run() turns that record back into
// TOML text, which the task's own config parser reads, so the model is built by the very code
// the trainer used (CtrModel / TextModel with the config's row dtype, optimizer, memory budgets,
// placement and row caches) and its rows and dense parameters are loaded with the trainer's
// checkpoint code. `--set` overrides apply on top (e.g. memory.device_budget for serving).
//
// A text model's vocabulary is rebuilt from its training files, as the trainer built it (the
// files the saved config names must still be there); the checkpoint's recorded input rows and
// label count are checked against it.
//
// Ownership: a Loaded* owns its memory system and model (the model is destroyed first).
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "leanemb/checkpoint.h"
#include "leanemb/memory_system.h"
#include "leanemb/status.h"
#include "model/ctr_model.h"
#include "text/text_config.h"
#include "text/text_data.h"
#include "text/text_model.h"
#include "ctr/ctr_config.h"

namespace leanemb::serve {

struct SavedRun {
  std::string checkpoint;   // the checkpoint directory read
  int64_t step = 0;
  int64_t collection_step = 0;
  std::string task;         // a registered task's name (serve/task_registry.h: "ctr", "text")
  std::string config_toml;  // the saved configuration as TOML (task first, then every key)
  std::string origin;       // "the configuration saved in <checkpoint>"
  // A serving checkpoint (`leanemb export --serving`, serve/export.h): blob "serve/format"; its
  // tables hold int8 rows without optimizer state and are loaded lookup-only.
  bool serving = false;
  std::unique_ptr<ckpt::CheckpointReader> reader;
};

// `path`: a checkpoint directory (step-<N>, holding MANIFEST) or a run directory (--out of
// `leanemb train`: its newest complete checkpoint). Errors: NotFound ("no checkpoint ..."),
// DataLoss (a corrupt checkpoint or saved configuration), InvalidArgument (a checkpoint without
// a saved configuration: written by an older version).
Result<SavedRun> open_saved_run(const std::string& path);

// The row layout of a serving checkpoint's tables: int8 rows, SGD (no state), lookup-only.
inline constexpr char kServingFormat[] = "leanemb-serving-1";
void make_serving(DType* dtype, OptimizerOptions* optimizer);

// The record of blob "train/config" as TOML text (keys grouped into their [section] tables).
std::string config_record_toml(const std::string& task, const train::ConfigRecord& record);

struct LoadedCtr {
  ctr::CtrConfig config;
  std::unique_ptr<MemorySystem> memory;
  std::unique_ptr<model::CtrModel> model;
};
// Builds the CTR model of the saved configuration (with `sets`) and loads its rows, dense
// parameters and (with `state`) the dense optimizer state. Errors: the config's, the model's,
// InvalidArgument when the checkpoint does not fit the model.
Result<std::unique_ptr<LoadedCtr>> load_ctr(const SavedRun& run, std::span<const std::string> sets, bool state = false);

struct LoadedText {
  text::TextConfig config;
  text::Dictionary dict;
  std::unique_ptr<MemorySystem> memory;
  std::unique_ptr<text::TextModel> model;
};
Result<std::unique_ptr<LoadedText>> load_text(const SavedRun& run, std::span<const std::string> sets, bool state = false);

}  // namespace leanemb::serve
