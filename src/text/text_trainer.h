// The text-classification run behind `leanemb train` for configs with task = "text": builds the
// vocabulary from the training files, encodes the data, trains a TextModel for `epochs` epochs
// with fastText's linear learning-rate decay (rate * (1 - tokens processed / total tokens)),
// and evaluates precision@1, recall@1 and accuracy on the eval files (as `fasttext test`).
//
// Progress lines go to stderr every log_every_s seconds (unless quiet). The returned JSON
// summary holds every figure (docs/text.md lists them).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "leanemb/status.h"
#include "text/text_config.h"
#include "train/run_options.h"
#include "train/task_config.h"

namespace leanemb::text {

// Precision and recall at k, as `fasttext test FILE k` prints them: up to k predictions per
// example (its k highest-scoring labels; ties: the lower label id first); precision = correct /
// predictions, recall = correct / gold labels. The _at_1 fields are those of the top label alone
// (accuracy = correct / examples, equal to precision@1, reported for readers who expect it).
struct TextEvalResult {
  int64_t examples = 0;
  int64_t gold_labels = 0;
  int64_t correct = 0;  // examples whose top label is one of theirs
  double precision_at_1 = 0, recall_at_1 = 0, accuracy = 0;
  int k = 1;
  int64_t predictions = 0;     // min(k, labels) per example
  int64_t correct_at_k = 0;    // predicted labels that are gold
  double precision_at_k = 0, recall_at_k = 0;
  double loss = 0;  // mean loss per example
};

class TextModel;
struct TextDataset;
// The k highest logits of one example's [num_labels] logits, best first (ties: lower id first).
void top_k_labels(std::span<const float> logits, int k, std::vector<int32_t>* out);
// Evaluates `model` on `data` in batches of `batch_size`, at k (>= 1).
inline constexpr int64_t kTextEvalBatchSize = 256;  // examples per evaluation batch (the planner counts them)
Result<TextEvalResult> evaluate_text(TextModel& model, const TextDataset& data, int64_t batch_size = kTextEvalBatchSize, int k = 1);

// The text run of `leanemb train` on the one loop (train/task.h): options as for a CTR run
// (output directory, resume, stop signal, steps, communicator).
// Errors: data (NotFound, IoError, InvalidArgument for malformed input), ResourceExhausted,
// the loop's.
Result<nlohmann::json> run_text_training(const train::RunOptions& options, const TextConfig& config);

// The task registry's parse function (serve/task_registry.h): a text config as a
// train::TaskConfig (text/text_task_config.cc). Errors: as parse_text_config.
Result<std::unique_ptr<train::TaskConfig>> parse_task_config(std::string_view toml_text, const std::string& origin,
                                                             std::span<const std::string> sets);

}  // namespace leanemb::text
