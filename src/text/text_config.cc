// TextConfig parsing (train/toml_section.h does the TOML work).
#include "text/text_config.h"

#include "train/config_sections.h"
#include "train/toml_section.h"

namespace leanemb::text {

namespace {

using train::Section;

// [data]
Status read_data_section(Section& d, TextConfig* c) {
  LEANEMB_RETURN_IF_ERROR(d.read("train", &c->train_files));
  LEANEMB_RETURN_IF_ERROR(d.read("eval", &c->eval_files));
  LEANEMB_RETURN_IF_ERROR(d.read("min_count", &c->data.min_count, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(d.read("min_count_label", &c->data.min_count_label, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(d.read("word_ngrams", &c->data.word_ngrams, 1, 16));
  LEANEMB_RETURN_IF_ERROR(d.read("buckets", &c->data.buckets, 1, int64_t{1} << 34));
  LEANEMB_RETURN_IF_ERROR(d.read("max_len", &c->data.max_len, 0, INT64_MAX));
  c->data.malformed.max_rate = 0.01;
  LEANEMB_RETURN_IF_ERROR(d.read("max_malformed_rate", &c->data.malformed.max_rate, 0.0, 1.0));
  return d.check_unknown();
}

// [model]
Status read_model_section(Section& mo, TextModelOptions* m) {
  LEANEMB_RETURN_IF_ERROR(mo.read("dim", &m->dim, 1, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(mo.read("hidden", &m->hidden, 0, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(mo.read_enum("loss", &m->loss, parse_text_loss));
  std::string out_init = "zeros";
  LEANEMB_RETURN_IF_ERROR(mo.read("output_init", &out_init));
  if (out_init != "zeros" && out_init != "uniform") return mo.error("output_init", "expected \"zeros\" or \"uniform\"");
  m->zero_output_init = out_init == "zeros";
  return mo.check_unknown();
}

// [embedding]: the input table. fastText: plain SGD, lr 0.1, U(-1/dim, 1/dim).
Status read_embedding_section(Section& e, TextModelOptions* m) {
  m->row_optimizer.kind = OptimizerKind::kSgd;
  m->row_optimizer.learning_rate = 0.1f;
  LEANEMB_RETURN_IF_ERROR(train::read_row_table_keys(e, &m->dtype, &m->row_optimizer, &m->init));
  LEANEMB_RETURN_IF_ERROR(e.read("dynamic", &m->dynamic.enabled));
  LEANEMB_RETURN_IF_ERROR(e.read("dynamic_rows", &m->dynamic_rows, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(e.read_enum("dynamic_eviction", &m->dynamic.eviction, parse_eviction_policy, eviction_policy_name));
  int64_t partitions = m->dynamic.partitions;
  LEANEMB_RETURN_IF_ERROR(e.read("dynamic_partitions", &partitions, 1, 65536));
  m->dynamic.partitions = static_cast<uint32_t>(partitions);
  return e.check_unknown();
}

// [dense]: the hidden and output layers (fastText: SGD at the same rate as the input rows, so
// after [embedding]).
Status read_dense_section(Section& dn, TextModelOptions* m) {
  m->dense_optimizer.kind = nn::DenseOptimizerKind::kSgd;
  m->dense_optimizer.learning_rate = m->row_optimizer.learning_rate;
  LEANEMB_RETURN_IF_ERROR(dn.read_enum("optimizer", &m->dense_optimizer.kind, train::parse_dense_optimizer));
  LEANEMB_RETURN_IF_ERROR(dn.read("learning_rate", &m->dense_optimizer.learning_rate, 0.0, 1e6));
  LEANEMB_RETURN_IF_ERROR(dn.read("weight_decay", &m->dense_optimizer.weight_decay, 0.0, 1e6));
  return dn.check_unknown();
}

// [train]
Status read_train_section(Section& t, TextConfig* c) {
  LEANEMB_RETURN_IF_ERROR(t.read("epochs", &c->epochs, 1, 1 << 20));
  LEANEMB_RETURN_IF_ERROR(t.read("batch_size", &c->batch_size, 1, 1 << 20));
  std::string sched = "linear";
  LEANEMB_RETURN_IF_ERROR(t.read("lr_schedule", &sched));
  if (sched != "linear" && sched != "constant") return t.error("lr_schedule", "expected \"linear\" or \"constant\"");
  c->linear_decay = sched == "linear";
  LEANEMB_RETURN_IF_ERROR(t.read("shuffle", &c->shuffle));
  // The embedding output's precision (TextModelOptions::precision): fp32, or bf16 with the head
  // in fp32. fp16 would need loss scaling, which the text model does not have.
  LEANEMB_RETURN_IF_ERROR(t.read_dtype("precision", &c->model.precision, DTypeUse::kActivations));
  if (c->model.precision == DType::kF16)
    return t.error("precision", "fp16 is not supported by the text model (expected fp32 or bf16: the embedding output in bf16, "
                                "the head and the loss in fp32)");
  LEANEMB_RETURN_IF_ERROR(t.read("seed", &c->seed));
  LEANEMB_RETURN_IF_ERROR(t.read("threads", &c->threads, 0, 1024));
  LEANEMB_RETURN_IF_ERROR(t.read("log_every_s", &c->log_every_s, 0.0, 1e9));
  LEANEMB_RETURN_IF_ERROR(t.read("log_every", &c->log_every, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("steps", &c->steps, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(train::read_train_cadence_keys(t, c));
  LEANEMB_RETURN_IF_ERROR(train::read_train_guard_keys(t, c));
  return t.check_unknown();
}

}  // namespace

Result<TextConfig> parse_text_config(std::string_view toml_text, const std::string& origin,
                                     std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(toml::table doc, train::parse_toml_document(toml_text, origin, sets));
  TextConfig c;
  c.origin = origin;
  LEANEMB_RETURN_IF_ERROR(train::check_top_level_keys(doc, origin, "text", "task must be \"text\" for a text config",
                                                      "text configs: task, data, model, embedding, dense, train, memory, dist"));
  TextModelOptions& m = c.model;
  Section d(train::config_section(doc, "data"), "data", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_data_section(d, &c));
  Section mo(train::config_section(doc, "model"), "model", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_model_section(mo, &m));
  Section e(train::config_section(doc, "embedding"), "embedding", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_embedding_section(e, &m));
  Section dn(train::config_section(doc, "dense"), "dense", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_dense_section(dn, &m));
  Section t(train::config_section(doc, "train"), "train", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_train_section(t, &c));
  // [memory], [dist]: as every task's (train/run_config.h).
  LEANEMB_RETURN_IF_ERROR(train::read_run_sections(doc, origin, &c));

  if (c.train_files.empty()) return invalid_argument(origin + ": data.train is empty (fastText-format files)");
  if (!dtype_traits(m.dtype).trainable)
    return invalid_argument(origin + ": embedding.dtype " + std::string(dtype_name(m.dtype)) + " rows cannot be trained");
  auto layout = make_row_layout(m.dim, m.dtype, m.row_optimizer);
  if (!layout.ok()) return invalid_argument(origin + ": [embedding]: " + layout.status().message());
  m.seed = c.seed;
  m.num_threads = c.threads;
  return c;
}

Result<TextConfig> load_text_config(const std::string& path, std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(std::string text, train::read_text_file(path, "config file"));
  return parse_text_config(text, path, sets);
}

}  // namespace leanemb::text
