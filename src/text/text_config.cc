// TextConfig parsing (train/toml_section.h does the TOML work).
#include "text/text_config.h"

#include <set>

#include "train/config_sections.h"
#include "train/toml_section.h"

namespace leanemb::text {

Result<TextConfig> parse_text_config(std::string_view toml_text, const std::string& origin,
                                     std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(toml::table doc, train::parse_toml_document(toml_text, origin, sets));
  TextConfig c;
  c.origin = origin;
  static const std::set<std::string> kSections = {"data", "model", "embedding", "dense", "train", "memory", "dist"};
  for (const auto& [k, node] : doc) {
    if (k.str() == "task") {
      if (node.value<std::string>() != std::optional<std::string>("text"))
        return invalid_argument(origin + ": task must be \"text\" for a text config");
      continue;
    }
    if (!node.is_table() || !kSections.count(std::string(k.str())))
      return invalid_argument(origin + ": unknown section or top-level key '" + std::string(k.str()) +
                              "' (text configs: task, data, model, embedding, dense, train, memory, dist)");
  }
  auto table = [&](const char* name) { return doc.get(name) ? doc.get(name)->as_table() : nullptr; };
  using train::Section;

  // [data]
  Section d(table("data"), "data", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(d.read("train", &c.train_files));
  LEANEMB_RETURN_IF_ERROR(d.read("eval", &c.eval_files));
  LEANEMB_RETURN_IF_ERROR(d.read("min_count", &c.data.min_count, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(d.read("min_count_label", &c.data.min_count_label, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(d.read("word_ngrams", &c.data.word_ngrams, 1, 16));
  LEANEMB_RETURN_IF_ERROR(d.read("buckets", &c.data.buckets, 1, int64_t{1} << 34));
  LEANEMB_RETURN_IF_ERROR(d.read("max_len", &c.data.max_len, 0, INT64_MAX));
  c.data.malformed.max_rate = 0.01;
  LEANEMB_RETURN_IF_ERROR(d.read("max_malformed_rate", &c.data.malformed.max_rate, 0.0, 1.0));
  LEANEMB_RETURN_IF_ERROR(d.check_unknown());

  // [model]
  TextModelOptions& m = c.model;
  Section mo(table("model"), "model", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(mo.read("dim", &m.dim, 1, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(mo.read("hidden", &m.hidden, 0, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(mo.read_enum("loss", &m.loss, parse_text_loss));
  std::string out_init = "zeros";
  LEANEMB_RETURN_IF_ERROR(mo.read("output_init", &out_init));
  if (out_init != "zeros" && out_init != "uniform") return mo.error("output_init", "expected \"zeros\" or \"uniform\"");
  m.zero_output_init = out_init == "zeros";
  LEANEMB_RETURN_IF_ERROR(mo.check_unknown());

  // [embedding]: the input table. fastText: plain SGD, lr 0.1, U(-1/dim, 1/dim).
  Section e(table("embedding"), "embedding", origin, &c.record);
  m.row_optimizer.kind = OptimizerKind::kSgd;
  m.row_optimizer.learning_rate = 0.1f;
  LEANEMB_RETURN_IF_ERROR(train::read_row_table_keys(e, &m.dtype, &m.row_optimizer, &m.init));
  LEANEMB_RETURN_IF_ERROR(e.read("dynamic", &m.dynamic.enabled));
  LEANEMB_RETURN_IF_ERROR(e.read("dynamic_rows", &m.dynamic_rows, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(e.read_enum("dynamic_eviction", &m.dynamic.eviction, parse_eviction_policy, eviction_policy_name));
  int64_t partitions = m.dynamic.partitions;
  LEANEMB_RETURN_IF_ERROR(e.read("dynamic_partitions", &partitions, 1, 65536));
  m.dynamic.partitions = static_cast<uint32_t>(partitions);
  LEANEMB_RETURN_IF_ERROR(e.check_unknown());

  // [dense]: the hidden and output layers (fastText: SGD at the same rate as the input rows).
  Section dn(table("dense"), "dense", origin, &c.record);
  m.dense_optimizer.kind = nn::DenseOptimizerKind::kSgd;
  m.dense_optimizer.learning_rate = m.row_optimizer.learning_rate;
  LEANEMB_RETURN_IF_ERROR(dn.read_enum("optimizer", &m.dense_optimizer.kind, train::parse_dense_optimizer));
  LEANEMB_RETURN_IF_ERROR(dn.read("learning_rate", &m.dense_optimizer.learning_rate, 0.0, 1e6));
  LEANEMB_RETURN_IF_ERROR(dn.read("weight_decay", &m.dense_optimizer.weight_decay, 0.0, 1e6));
  LEANEMB_RETURN_IF_ERROR(dn.check_unknown());

  // [train]
  Section t(table("train"), "train", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(t.read("epochs", &c.epochs, 1, 1 << 20));
  LEANEMB_RETURN_IF_ERROR(t.read("batch_size", &c.batch_size, 1, 1 << 20));
  std::string sched = "linear";
  LEANEMB_RETURN_IF_ERROR(t.read("lr_schedule", &sched));
  if (sched != "linear" && sched != "constant") return t.error("lr_schedule", "expected \"linear\" or \"constant\"");
  c.linear_decay = sched == "linear";
  LEANEMB_RETURN_IF_ERROR(t.read("shuffle", &c.shuffle));
  LEANEMB_RETURN_IF_ERROR(t.read("seed", &c.seed));
  LEANEMB_RETURN_IF_ERROR(t.read("threads", &c.threads, 0, 1024));
  LEANEMB_RETURN_IF_ERROR(t.read("log_every_s", &c.log_every_s, 0.0, 1e9));
  LEANEMB_RETURN_IF_ERROR(t.read("log_every", &c.log_every, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("steps", &c.steps, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("eval_every", &c.eval_every, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("eval_every_epochs", &c.eval_every_epochs, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("checkpoint_every", &c.checkpoint_every, -1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("keep_checkpoints", &c.keep_checkpoints, 0, 1000));
  LEANEMB_RETURN_IF_ERROR(t.read("incremental_checkpoints", &c.incremental_checkpoints));
  LEANEMB_RETURN_IF_ERROR(t.read("full_checkpoint_every", &c.full_checkpoint_every, 1, 1000000));
  LEANEMB_RETURN_IF_ERROR(t.read("max_delta_fraction", &c.max_delta_fraction, 1e-6, 1.0));
  LEANEMB_RETURN_IF_ERROR(t.read("disk_check", &c.disk_check));
  LEANEMB_RETURN_IF_ERROR(t.read("max_consecutive_skipped", &c.max_consecutive_skipped, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("max_loss_growth", &c.max_loss_growth, 0, 1e300));
  LEANEMB_RETURN_IF_ERROR(t.check_unknown());

  // [memory], [dist]: as a CTR config's.
  Section mem(table("memory"), "memory", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(train::read_memory_section(mem, &c));
  Section ds(table("dist"), "dist", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(train::read_dist_section(ds, &c));

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
