// The configuration a checkpoint was trained with against the one a resume brings (docs/train.md,
// "Resuming"). A checkpoint stores the whole ConfigRecord (blob "train/config"); --resume
// compares it key by key and names every key that differs with its old and new value.
//
// Keys that change what is trained (the model, tables, optimizers, batch, precision, seed, the
// training data's shape) must match: a difference is an error. Keys that only change how the
// run goes on (steps and epochs to reach, logging, eval, checkpoint cadence, threads, memory
// budgets and placement, row-cache residency, process count and payloads, test hooks) may
// differ: each difference is a note. Paths of the data may differ too (moved files), noted.
//
// Thread safety: plain functions.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "leanemb/status.h"
#include "train/toml_section.h"

namespace leanemb::train {

struct ConfigDiff {
  std::vector<std::string> errors;  // "model.pooling: \"sum\" in the checkpoint, \"mean\" now"
  std::vector<std::string> notes;   // allowed differences, same form
};

// True when `key` ("section.key") may differ between the saved and the resumed configuration.
bool may_change_on_resume(const std::string& key);

// Compares every key of either record. A key only one record has (another version's config)
// is a note.
ConfigDiff diff_configs(const ConfigRecord& saved, const ConfigRecord& now);

// The record as the JSON text stored in a checkpoint, and back.
// Errors (parse): DataLoss "train/config is not ..." naming what is wrong.
std::vector<uint8_t> encode_config_record(const ConfigRecord& record);
Result<ConfigRecord> decode_config_record(std::span<const uint8_t> bytes);

// Checks the saved record (bytes of blob "train/config") against `now`: prints each note as
// "leanemb: note: resuming with ..." to stderr (when `print`), and returns InvalidArgument
// listing every error ("resuming from DIR: the configuration differs from the checkpoint's: ...").
Status check_resume_config(std::span<const uint8_t> saved_bytes, const ConfigRecord& now, const std::string& dir, bool print);

}  // namespace leanemb::train
