// `leanemb predict` and `leanemb test` on a loaded model (serve/saved_model.h; docs/serve.md).
//
// CTR: the data file is read by the trainer's reader under the config's rules (schema, hashing,
// max_len, malformed lines skipped and counted, the malformed-rate limit) in file order, and the
// model's predict() runs in the config's batches and micro-batches on its memory system: one
// probability per record, in order. `test` is the trainer's evaluation loop on the file
// (ctr/ctr_serving.h: evaluate_ctr): the same AUC and logloss as the trainer's own final
// evaluation of that file.
//
// Text: every input line gives one output line, in fastText's `predict` format: the k best
// labels ("__label__x __label__y"), with `probs` each followed by its probability
// ("__label__x 0.93 __label__y 0.05": softmax over the labels, or each label's sigmoid for a
// one-vs-all model), labels below `threshold` left out; a line without a word gives an empty
// line (fastText does the same). Words are encoded as in training (text::encode_words); labels
// in the input are ignored. `test` is the trainer's evaluation (text::evaluate_text) at k.
//
// Thread safety: one thread at a time (the model's rule).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "leanemb/status.h"
#include "serve/saved_model.h"

namespace leanemb::serve {

struct PredictStats {
  int64_t lines = 0;        // output lines written
  int64_t malformed = 0;    // CTR: malformed lines skipped (no output line)
  int64_t empty = 0;        // text: lines without a word (an empty output line)
  double seconds = 0;
};

// Writes "%.9g\n" per record (the float's exact value). Errors: the reader's (NotFound,
// InvalidArgument above the malformed rate naming file and line), IoError writing `out`.
// `progress`, when set, is called after each batch with the input bytes read so far and the
// lines written (a terminal's progress line, core/progress.h).
using PredictProgress = std::function<void(int64_t bytes_read, int64_t lines)>;
Result<PredictStats> predict_ctr_file(LoadedCtr& m, const std::string& file, std::FILE* out,
                                      const PredictProgress& progress = {});

struct TextPredictOptions {
  int k = 1;               // >= 1; more than the labels: all of them
  bool probs = false;      // print each label's probability after it
  double threshold = 0.0;  // leave out labels with a lower probability
};
Result<PredictStats> predict_text_file(LoadedText& m, const std::string& file, const TextPredictOptions& options,
                                       std::FILE* out, const PredictProgress& progress = {});

// CTR: {"task": "ctr", "rows", "auc", "logloss", "malformed"}; text: {"task": "text", "k",
// "examples", "precision_at_k", "recall_at_k", "precision_at_1", "recall_at_1", "predictions",
// "gold_labels", "skipped_unknown_label_lines", "malformed"}.
Result<nlohmann::json> test_ctr_file(LoadedCtr& m, const std::string& file, int64_t max_rows);
Result<nlohmann::json> test_text_file(LoadedText& m, const std::string& file, int k);

// `leanemb test` and `leanemb predict` on a saved run of any task, as the task registry calls
// them (serve/task_registry.h): each task's function loads its model (load_ctr, load_text with
// `sets`) and runs the functions above.
struct TestOptions {
  std::vector<std::string> sets;  // applied to the saved config
  int64_t max_rows = 0;           // CTR: the first N records (0: all)
  int k = 1;                      // text: precision and recall at k
};
struct TestReport {
  nlohmann::json figures;  // test_*_file's document
  std::string lines;       // what `leanemb test` prints (CTR: N, AUC, logloss; text: fastText's `test` lines)
};
struct PredictOptions {
  std::vector<std::string> sets;  // applied to the saved config
  TextPredictOptions text;        // text: k, probs, threshold
};
Result<TestReport> test_ctr_run(const SavedRun& run, const std::string& file, const TestOptions& options);
Result<TestReport> test_text_run(const SavedRun& run, const std::string& file, const TestOptions& options);
Result<PredictStats> predict_ctr_run(const SavedRun& run, const std::string& file, const PredictOptions& options,
                                     std::FILE* out, const PredictProgress& progress);
Result<PredictStats> predict_text_run(const SavedRun& run, const std::string& file, const PredictOptions& options,
                                      std::FILE* out, const PredictProgress& progress);

}  // namespace leanemb::serve
