// read_text_data and text_workload. See text_plan.h.
#include "text/text_plan.h"

#include <algorithm>
#include <chrono>

#include "text/text_model.h"
#include "text/text_trainer.h"

namespace leanemb::text {

Result<std::shared_ptr<TextData>> read_text_data(const TextConfig& c) {
  const auto t0 = std::chrono::steady_clock::now();
  auto d = std::make_shared<TextData>();
  LEANEMB_ASSIGN_OR_RETURN(d->dict, Dictionary::build(c.train_files, c.data));
  LEANEMB_ASSIGN_OR_RETURN(d->train, read_dataset(c.train_files, d->dict, c.data, &d->train_stats));
  if (!c.eval_files.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(d->eval, read_dataset(c.eval_files, d->dict, c.data, &d->eval_stats));
  }
  d->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return d;
}

Result<plan::Workload> text_workload(const TextConfig& c, const TextData& data) {
  const int64_t n = data.train.num_examples();
  if (n < 1) return invalid_argument(c.origin + ": the training files hold no usable line");
  TextModelOptions mo = c.model;
  mo.input_rows = data.dict.input_rows(c.data);
  mo.num_labels = data.dict.num_labels();
  const CollectionOptions co = TextModel::collection_options(mo);  // the table the model builds
  const TableOptions& to = co.tables[0];
  plan::Workload w;
  w.kind = plan::WorkloadKind::kText;
  plan::TableSpec t;
  t.name = to.name;
  t.num_rows = to.num_rows;
  t.dim = to.dim;
  t.pooling = PoolingMode::kMean;
  t.dynamic = to.dynamic;
  int64_t longest = 0;
  for (int64_t i = 0; i < n; ++i)
    longest = std::max(longest, data.train.offsets[static_cast<size_t>(i) + 1] - data.train.offsets[static_cast<size_t>(i)]);
  t.max_ids_per_sample = longest;
  t.mean_ids_per_sample = static_cast<double>(data.train.ids.size()) / static_cast<double>(n);
  w.tables.push_back(t);
  w.batch_size = c.batch_size;
  w.row_dtype = to.dtype;
  w.row_optimizer = to.optimizer;
  w.dense_optimizer = c.model.dense_optimizer.kind;
  w.placement = c.memory.placement;
  w.num_threads = c.threads;
  w.track_changed_rows = c.incremental_checkpoints;
  w.link_store_rows = c.link_store_rows;
  w.checkpoint_every = c.checkpoint_every;
  w.keep_checkpoints = c.keep_checkpoints;
  w.full_checkpoint_every = c.full_checkpoint_every;
  w.num_labels = mo.num_labels;
  w.text_hidden = c.model.hidden;
  w.eval_batch_size = data.eval.num_examples() > 0 ? std::min<int64_t>(kTextEvalBatchSize, data.eval.num_examples()) : 0;
  w.grad_groups = c.grad_groups > 0 ? c.grad_groups : 1;
  w.precision = c.model.precision;  // the embedding output's (the head is fp32)
  return w;
}

}  // namespace leanemb::text
