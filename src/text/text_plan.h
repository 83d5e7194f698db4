// The memory model's view of a text run (task = "text", docs/text.md): the data a run reads
// (dictionary, encoded examples) and the plan::Workload of kind kText built from it, so that
// `leanemb plan --config` and the trainer's planned-vs-measured table predict text runs like
// CTR runs.
//
// Thread safety: plain functions.
#pragma once

#include <memory>

#include "leanemb/status.h"
#include "plan/memory_model.h"
#include "text/text_config.h"
#include "text/text_data.h"

namespace leanemb::text {

// What a text run reads before it trains: read once, by the plan or by the task, whichever
// comes first.
struct TextData {
  Dictionary dict;
  TextDataset train, eval;
  TextDataStats train_stats, eval_stats;
  double seconds = 0;  // reading and encoding
};
// Errors: the readers' (NotFound, InvalidArgument for malformed input over the allowed rate).
Result<std::shared_ptr<TextData>> read_text_data(const TextConfig& c);

// The workload of a run of `c` over `data`: one table of the dictionary's input rows (or the
// dynamic capacity) looked up by each example's ids (mean and longest from the data), the head,
// batches of c.batch_size, evaluation batches of evaluate_text's size.
Result<plan::Workload> text_workload(const TextConfig& c, const TextData& data);

}  // namespace leanemb::text
