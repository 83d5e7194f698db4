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
#include "train/run_config.h"
#include "train/toml_section.h"

namespace leanemb::text {

// A text config: the shared part (train/run_config.h: steps, epochs, seed, threads, log_every,
// log_every_s, the cadence, checkpoint and guard keys of [train], [memory], [dist], origin,
// record; with fastText's defaults where they differ) and the text task's own sections.
struct TextConfig : train::RunConfig {
  TextConfig() {
    epochs = 5;
    log_every_s = 5.0;  // seconds between progress lines
    log_every = 0;      // steps between metrics.jsonl lines (0: 1000)
  }
  // [data]
  std::vector<std::string> train_files;  // fastText supervised format
  std::vector<std::string> eval_files;
  TextDataOptions data;                  // min_count, min_count_label, word_ngrams, buckets, max_len, max_malformed_rate
  // [model] dim, hidden, loss, output_init; [embedding] the input table; [dense] the head.
  TextModelOptions model;
  // [train] (the shared keys: train::RunConfig)
  int64_t batch_size = 8;
  bool linear_decay = true;   // lr_schedule = "linear" (fastText: lr * (1 - tokens seen / total)) | "constant"
  bool shuffle = true;        // a seeded permutation of the training lines each epoch
};

// Errors: InvalidArgument naming the key, value and origin.
Result<TextConfig> parse_text_config(std::string_view toml_text, const std::string& origin,
                                     std::span<const std::string> sets = {});
Result<TextConfig> load_text_config(const std::string& path, std::span<const std::string> sets = {});

}  // namespace leanemb::text
