// TextConfig: a text-classification run of `leanemb train` (a config with task = "text"),
// read from TOML with `--set section.key=value` overrides. docs/text.md lists every key with
// its default; defaults are fastText 0.9.2's `supervised` defaults where fastText has the knob.
//
// Parsing is strict, as the CTR config's: unknown keys, wrong types and out-of-range values are
// InvalidArgument naming the key and the file. Thread safety: plain data.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/memory_system.h"
#include "leanemb/status.h"
#include "leanemb/tables.h"
#include "text/text_data.h"
#include "text/text_model.h"
#include "train/toml_section.h"

namespace leanemb::text {

struct TextConfig {
  // [data]
  std::vector<std::string> train_files;  // fastText supervised format
  std::vector<std::string> eval_files;
  TextDataOptions data;                  // min_count, min_count_label, word_ngrams, buckets, max_len, max_malformed_rate
  // [model] dim, hidden, loss, output_init; [embedding] the input table; [dense] the head.
  TextModelOptions model;
  // [train]
  int64_t epochs = 5;
  int64_t batch_size = 8;
  bool linear_decay = true;   // lr_schedule = "linear" (fastText: lr * (1 - tokens seen / total)) | "constant"
  bool shuffle = true;        // a seeded permutation of the training lines each epoch
  uint64_t seed = 1;
  int threads = 0;            // 0 = OpenMP's default
  double log_every_s = 5.0;   // seconds between progress lines
  int64_t log_every = 0;      // steps between metrics.jsonl lines (0: 1000)
  int64_t steps = 0;          // optimizer steps; 0 = run `epochs` epochs
  int64_t eval_every = 0;     // steps; 0 = only at the end
  int64_t eval_every_epochs = 0;  // also after every N-th epoch (0 = no)
  int64_t checkpoint_every = 0;  // steps; 0 = only at the end; -1 = never (checkpoints off)
  int keep_checkpoints = 3;
  bool incremental_checkpoints = false;  // only the rows changed since the last checkpoint (docs/train.md)
  int full_checkpoint_every = 8;         // incremental: every N-th checkpoint of a chain is full
  double max_delta_fraction = 0.5;       // incremental: a full one when a chain's rows pass this fraction
  bool disk_check = true;                // refuse to start when the disk cannot hold the store files and a checkpoint
  int64_t max_consecutive_skipped = 100;  // divergence (train/divergence.h)
  double max_loss_growth = 1e6;            // divergence: loss / first step's loss (0 = no check)
  // [memory] (as a CTR config's: budgets, placement) and [dist] (several processes).
  MemorySystemOptions memory;
  std::string dist_backend = "auto";
  int64_t dist_timeout_ms = 60000;
  ShardingKind sharding = ShardingKind::kRowModulo;
  DType forward_payload = DType::kF32;
  DType backward_payload = DType::kF32;
  int grad_groups = 0;        // 0 = the world size
  int inject_exit_rank = -1;  // testing hooks, as a CTR config's [dist]
  int64_t inject_exit_step = 0;
  std::string origin;
  train::ConfigRecord record;  // every key's effective value (compared on resume)
};

// Errors: InvalidArgument naming the key, value and origin.
Result<TextConfig> parse_text_config(std::string_view toml_text, const std::string& origin,
                                     std::span<const std::string> sets = {});
Result<TextConfig> load_text_config(const std::string& path, std::span<const std::string> sets = {});

}  // namespace leanemb::text
