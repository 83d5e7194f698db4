// CtrConfig parsing on toml++ (exceptions are caught here; none cross the API).
#include "ctr/ctr_config.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/enum_names.h"
#include "tiered/id_map.h"
#include "tiered/row_cache.h"
#include "tiered/row_store.h"
#include "ctr/default_config.h"  // generated: kDefaultConfigText
#include "train/config_sections.h"
#include "train/toml_section.h"

namespace leanemb {
template <>
struct EnumNames<nn::InteractionKind> {
  static constexpr std::string_view kWhat = "interaction";
  static constexpr EnumName<nn::InteractionKind> kNames[] = {{nn::InteractionKind::kDot, "dot", ""},
                                                             {nn::InteractionKind::kCat, "cat", ""}};
};
}  // namespace leanemb

namespace leanemb::ctr {

using train::ConfigRecord;
using train::Section;

std::string_view default_config_text() { return kDefaultConfigText; }

int64_t max_ids_per_field(const CtrConfig& c) {
  const int64_t mh = c.generate ? c.gen.multi_hot_max : 1;
  return c.max_len > 0 ? std::min<int64_t>(c.max_len, mh) : mh;
}

namespace {

Result<nn::InteractionKind> parse_interaction(std::string_view s) { return parse_enum<nn::InteractionKind>(s); }
std::string_view interaction_name(nn::InteractionKind k) { return enum_name(k); }

// The keys of one dynamic table ([embedding.dynamic] gives the defaults of all).
Status read_dynamic_keys(Section& s, DynamicTableConfig* d) {
  LEANEMB_RETURN_IF_ERROR(s.read("capacity_rows", &d->capacity_rows, 0, int64_t{1} << 40));
  int64_t min_count = d->options.min_count, partitions = d->options.partitions, hashes = d->options.bloom_hashes;
  LEANEMB_RETURN_IF_ERROR(s.read("min_count", &min_count, 1, 255));
  LEANEMB_RETURN_IF_ERROR(s.read("partitions", &partitions, 1, 65536));
  LEANEMB_RETURN_IF_ERROR(s.read("bloom_hashes", &hashes, 1, 16));
  d->options.min_count = static_cast<uint32_t>(min_count);
  d->options.partitions = static_cast<uint32_t>(partitions);
  d->options.bloom_hashes = static_cast<uint32_t>(hashes);
  LEANEMB_RETURN_IF_ERROR(s.read_enum("eviction", &d->options.eviction, parse_eviction_policy, eviction_policy_name));
  LEANEMB_RETURN_IF_ERROR(s.read("max_age_steps", &d->options.max_age_steps, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(s.read("bloom_counters", &d->options.bloom_counters));
  return Status();
}

// [embedding.dynamic]: `tables` (names, or "all") and defaults; [embedding.dynamic.C<k>]
// subtables make table C<k> dynamic with their own keys over the defaults.
Status read_dynamic_tables(const toml::table* t, const std::string& origin, int num_sparse, ConfigRecord* record,
                           std::vector<DynamicTableConfig>* out) {
  out->clear();
  if (t == nullptr) return Status();
  Section s(t, "embedding.dynamic", origin, record);
  DynamicTableConfig base;
  base.options.enabled = true;
  std::vector<std::string> names;
  LEANEMB_RETURN_IF_ERROR(s.read("tables", &names));
  LEANEMB_RETURN_IF_ERROR(read_dynamic_keys(s, &base));
  auto check_name = [&](const std::string& n) -> Status {
    int k = 0;
    if (n.size() < 2 || n[0] != 'C' || std::sscanf(n.c_str() + 1, "%d", &k) != 1 || k < 1 || k > num_sparse ||
        n.substr(1) != std::to_string(k))
      return invalid_argument(origin + ": embedding.dynamic: '" + n + "' is not a table (C1 .. C" + std::to_string(num_sparse) + ")");
    return Status();
  };
  if (names.size() == 1 && names[0] == "all") {
    names.clear();
    for (int k = 1; k <= num_sparse; ++k) {
      std::string n = "C";  // (not "C" + to_string(k): GCC 12's -Wrestrict false positive)
      n += std::to_string(k);
      names.push_back(n);
    }
  }
  std::map<std::string, DynamicTableConfig> tables;
  for (const std::string& n : names) {
    LEANEMB_RETURN_IF_ERROR(check_name(n));
    tables[n] = base;
    tables[n].table = n;
  }
  for (const auto& [k, node] : *t) {
    const std::string name(k.str());
    if (!node.is_table()) continue;
    s.get(name);  // a per-table subtable, not an unknown key
    LEANEMB_RETURN_IF_ERROR(check_name(name));
    DynamicTableConfig d = tables.count(name) ? tables[name] : base;
    d.table = name;
    Section sub(node.as_table(), "embedding.dynamic." + name, origin, record);
    LEANEMB_RETURN_IF_ERROR(read_dynamic_keys(sub, &d));
    LEANEMB_RETURN_IF_ERROR(sub.check_unknown());
    tables[name] = d;
  }
  LEANEMB_RETURN_IF_ERROR(s.check_unknown());
  if (tables.empty())
    return invalid_argument(origin + ": [embedding.dynamic] names no table (tables = [\"C1\", ...] or \"all\", or [embedding.dynamic.C<k>])");
  for (auto& [name, d] : tables) out->push_back(d);
  std::sort(out->begin(), out->end(), [](const DynamicTableConfig& a, const DynamicTableConfig& b) {
    return std::stoi(a.table.substr(1)) < std::stoi(b.table.substr(1));
  });
  return Status();
}

// [data]
Status read_data_section(Section& d, CtrConfig* c) {
  LEANEMB_RETURN_IF_ERROR(d.read("train", &c->train_files));
  LEANEMB_RETURN_IF_ERROR(d.read("eval", &c->eval_files));
  LEANEMB_RETURN_IF_ERROR(d.read("dir", &c->data_dir));
  LEANEMB_RETURN_IF_ERROR(d.read("generate", &c->generate));
  LEANEMB_RETURN_IF_ERROR(d.read("num_dense", &c->num_dense, 0, 1024));
  LEANEMB_RETURN_IF_ERROR(d.read("num_sparse", &c->num_sparse, 1, 1024));
  LEANEMB_RETURN_IF_ERROR(d.read("max_len", &c->max_len, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(d.read("shuffle_buffer", &c->shuffle_buffer, 0, int64_t{1} << 32));
  LEANEMB_RETURN_IF_ERROR(d.read("max_malformed_rate", &c->max_malformed_rate, 0.0, 1.0));
  {
    std::string categorical = "hex";
    LEANEMB_RETURN_IF_ERROR(d.read("categorical", &categorical));
    if (categorical != "hex" && categorical != "string")
      return d.error("categorical", "expected \"hex\" (1-16 hex digits per value) or \"string\" (any strings, hashed), got \"" +
                                        categorical + "\"");
    c->string_values = categorical == "string";
  }
  LEANEMB_RETURN_IF_ERROR(d.read("eval_rows", &c->eval_rows, 0, INT64_MAX));
  return d.check_unknown();
}

// [data.gen]
Status read_gen_section(Section& g, data::GenOptions* gen) {
  LEANEMB_RETURN_IF_ERROR(g.read("train_rows", &gen->train_rows, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(g.read("eval_rows", &gen->eval_rows, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(g.read("seed", &gen->seed));
  LEANEMB_RETURN_IF_ERROR(g.read("vocab", &gen->vocab, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(g.read("zipf", &gen->zipf, 0.0, 10.0));
  LEANEMB_RETURN_IF_ERROR(g.read("multi_hot_max", &gen->multi_hot_max, 1, 1 << 20));
  LEANEMB_RETURN_IF_ERROR(g.read("latent_dim", &gen->latent_dim, 1, 16));
  LEANEMB_RETURN_IF_ERROR(g.read("noise_std", &gen->noise_std, 0.0, 100.0));
  LEANEMB_RETURN_IF_ERROR(g.read("dense_weight", &gen->dense_weight, 0.0, 100.0));
  LEANEMB_RETURN_IF_ERROR(g.read("first_order_weight", &gen->first_order_weight, 0.0, 100.0));
  LEANEMB_RETURN_IF_ERROR(g.read("pairwise_weight", &gen->pairwise_weight, 0.0, 100.0));
  LEANEMB_RETURN_IF_ERROR(g.read("target_label_rate", &gen->target_label_rate, 0.0, 1.0));
  LEANEMB_RETURN_IF_ERROR(g.read("target_auc", &gen->target_auc, 0.5, 1.0));
  LEANEMB_RETURN_IF_ERROR(g.read_enum("format", &gen->format, data::parse_output_format, data::output_format_name));
  return g.check_unknown();
}

// [model]
Status read_model_section(Section& m, CtrConfig* c) {
  LEANEMB_RETURN_IF_ERROR(m.read("embedding_dim", &c->embedding_dim, 1, 4096));
  if (const toml::node* tr = m.get("table_rows"); tr && tr->is_string()) {
    if (tr->value<std::string>() != std::optional<std::string>("auto"))
      return m.error("table_rows", "expected \"auto\" (sizes derived from the training data), an integer, or one integer per "
                                   "sparse feature, got \"" + tr->value<std::string>().value_or("") + "\"");
    c->table_rows_auto = true;
    c->table_rows.clear();
    m.note("table_rows", "\"auto\"");
  } else {
    LEANEMB_RETURN_IF_ERROR(m.read("table_rows", &c->table_rows, 1, (int64_t{1} << 32) - 1));
  }
  LEANEMB_RETURN_IF_ERROR(m.read("bottom_mlp", &c->bottom_mlp, 1, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(m.read("top_mlp", &c->top_mlp, 1, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(m.read_enum("interaction", &c->interaction, parse_interaction, interaction_name));
  LEANEMB_RETURN_IF_ERROR(m.read_enum("pooling", &c->pooling, parse_pooling, pooling_name));
  return m.check_unknown();
}

// [embedding] (after [data]: the dynamic tables are checked against data.num_sparse)
Status read_embedding_section(Section& e, const std::string& origin, CtrConfig* c) {
  c->row_optimizer.kind = OptimizerKind::kAdagrad;
  c->row_optimizer.learning_rate = 0.05f;
  LEANEMB_RETURN_IF_ERROR(train::read_row_table_keys(e, &c->row_dtype, &c->row_optimizer, &c->row_init));
  LEANEMB_RETURN_IF_ERROR(e.read("cache_fraction", &c->row_cache.fraction, 0.0, 1.0));
  LEANEMB_RETURN_IF_ERROR(e.read_enum("cache_policy", &c->row_cache.policy, tiered::parse_cache_policy, tiered::cache_policy_name));
  LEANEMB_RETURN_IF_ERROR(e.read("cache_min_rows", &c->cache_min_rows, 0, int64_t{1} << 40));
  LEANEMB_RETURN_IF_ERROR(e.read("cache_prefetch_nice", &c->row_cache.prefetch_nice, -20, 19));
  LEANEMB_RETURN_IF_ERROR(e.read("cache_prefetch", &c->cache_prefetch));
  LEANEMB_RETURN_IF_ERROR(e.read_enum("store", &c->row_cache.store, parse_store_kind, store_kind_name));
  LEANEMB_RETURN_IF_ERROR(e.read("store_dir", &c->store_dir));
  LEANEMB_RETURN_IF_ERROR(
      e.read_enum("store_layout", &c->row_cache.store_layout, parse_file_store_layout, file_store_layout_name));
  if (c->row_cache.store == StoreKind::kFile && c->row_cache.enabled() && c->store_dir.empty())
    return invalid_argument(origin + ": embedding.store = \"file\" needs embedding.store_dir (where the table files go)");
  const toml::node* dyn = e.get("dynamic");
  if (dyn && !dyn->is_table()) return e.error("dynamic", "expected a table ([embedding.dynamic])");
  LEANEMB_RETURN_IF_ERROR(read_dynamic_tables(dyn ? dyn->as_table() : nullptr, origin, c->num_sparse, &c->record, &c->dynamic_tables));
  return e.check_unknown();
}

// [dense]
Status read_dense_section(Section& dn, CtrConfig* c) {
  c->dense_optimizer.kind = nn::DenseOptimizerKind::kAdam;
  c->dense_optimizer.learning_rate = 0.001;
  LEANEMB_RETURN_IF_ERROR(dn.read_enum("optimizer", &c->dense_optimizer.kind, train::parse_dense_optimizer, train::dense_optimizer_name));
  LEANEMB_RETURN_IF_ERROR(dn.read("learning_rate", &c->dense_optimizer.learning_rate, 0.0, 1e6));
  LEANEMB_RETURN_IF_ERROR(dn.read("weight_decay", &c->dense_optimizer.weight_decay, 0.0, 1e6));
  LEANEMB_RETURN_IF_ERROR(dn.read("beta1", &c->dense_optimizer.beta1, 0.0, 0.999999));
  LEANEMB_RETURN_IF_ERROR(dn.read("beta2", &c->dense_optimizer.beta2, 0.0, 0.999999));
  if (dn.get("eps")) {
    double eps = 0;
    LEANEMB_RETURN_IF_ERROR(dn.read("eps", &eps, 0.0, 1.0));
    c->dense_optimizer.eps = eps;
  } else {
    dn.note("eps", "\"the optimizer's default\"");
  }
  return dn.check_unknown();
}

// [train]
Status read_train_section(Section& t, CtrConfig* c) {
  LEANEMB_RETURN_IF_ERROR(t.read("batch_size", &c->batch_size, 1, int64_t{1} << 24));
  LEANEMB_RETURN_IF_ERROR(t.read("steps", &c->steps, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("epochs", &c->epochs, 0, 1 << 20));
  LEANEMB_RETURN_IF_ERROR(t.read_dtype("precision", &c->precision, DTypeUse::kActivations));
  LEANEMB_RETURN_IF_ERROR(t.read("micro_batches", &c->micro_batches, 1, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(t.read("checkpoint_activations", &c->checkpoint_activations));
  LEANEMB_RETURN_IF_ERROR(t.read("deterministic", &c->deterministic));
  LEANEMB_RETURN_IF_ERROR(t.read("seed", &c->seed));
  LEANEMB_RETURN_IF_ERROR(t.read("threads", &c->threads, 0, 1024));
  LEANEMB_RETURN_IF_ERROR(train::read_train_cadence_keys(t, c));
  LEANEMB_RETURN_IF_ERROR(t.read("log_every", &c->log_every, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("inject_nonfinite_steps", &c->inject_nonfinite_steps, 1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(train::read_train_guard_keys(t, c));
  return t.check_unknown();
}

// The checks across sections, once every section is read.
Status check_cross_fields(const CtrConfig& c) {
  const std::string& origin = c.origin;
  if (c.train_files.empty() && !c.generate)
    return invalid_argument(origin + ": data.train is empty (give files, or data.dir with data.generate = true)");
  if (c.generate && c.data_dir.empty()) return invalid_argument(origin + ": data.generate needs data.dir");
  if (!c.table_rows_auto && c.table_rows.size() != 1 && c.table_rows.size() != static_cast<size_t>(c.num_sparse))
    return invalid_argument(origin + ": model.table_rows has " + std::to_string(c.table_rows.size()) +
                            " values; give one, or one per sparse feature (" + std::to_string(c.num_sparse) + ")");
  if (c.interaction == nn::InteractionKind::kDot && c.bottom_mlp.back() != c.embedding_dim)
    return invalid_argument(origin + ": interaction dot needs model.bottom_mlp to end in embedding_dim (" +
                            std::to_string(c.embedding_dim) + "), it ends in " + std::to_string(c.bottom_mlp.back()));
  if (c.num_dense == 0) return invalid_argument(origin + ": data.num_dense must be >= 1 (the bottom MLP needs input)");
  if (c.batch_size % c.micro_batches != 0)
    return invalid_argument(origin + ": train.batch_size (" + std::to_string(c.batch_size) +
                            ") must be a multiple of train.micro_batches (" + std::to_string(c.micro_batches) + ")");
  if (c.steps == 0 && c.epochs == 0) return invalid_argument(origin + ": train.steps and train.epochs are both 0");
  if (!dtype_traits(c.row_dtype).trainable)
    return invalid_argument(origin + ": embedding.dtype " + std::string(dtype_name(c.row_dtype)) + " rows cannot be trained");
  auto layout = make_row_layout(c.embedding_dim, c.row_dtype, c.row_optimizer);
  if (!layout.ok()) return invalid_argument(origin + ": [embedding]: " + layout.status().message());
  for (const DynamicTableConfig& d : c.dynamic_tables) {
    const size_t f = static_cast<size_t>(std::stoi(d.table.substr(1)) - 1);
    if (c.table_rows_auto && d.capacity_rows == 0)
      return invalid_argument(origin + ": embedding.dynamic." + d.table + " needs capacity_rows with model.table_rows = \"auto\" "
                              "(a dynamic table's capacity is not derived from the data)");
    const int64_t rows = d.capacity_rows > 0 ? d.capacity_rows : c.table_rows[c.table_rows.size() == 1 ? 0 : f];
    if (rows % d.options.partitions != 0)
      return invalid_argument(origin + ": embedding.dynamic." + d.table + ": the capacity (" + std::to_string(rows) +
                              " rows) must be a multiple of partitions (" + std::to_string(d.options.partitions) + ")");
  }
  return Status();
}

// With data.generate: the generator's output and shape from [data], and its files as the
// train / eval files when none are given.
Status complete_generated_data(CtrConfig* c) {
  if (!c->generate) return Status();
  c->gen.out_dir = c->data_dir;
  c->gen.num_dense = c->num_dense;
  c->gen.num_sparse = c->num_sparse;
  const char* ext = c->gen.format == data::OutputFormat::kBinary ? ".bin" : ".tsv";
  if (c->train_files.empty()) c->train_files = {c->data_dir + "/train" + ext};
  if (c->eval_files.empty() && c->gen.eval_rows > 0) c->eval_files = {c->data_dir + "/eval" + ext};
  return data::validate_gen_options(c->gen);
}

}  // namespace

Result<CtrConfig> parse_ctr_config(std::string_view toml_text, const std::string& origin, std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(toml::table doc, train::parse_toml_document(toml_text, origin, sets));
  CtrConfig c;
  c.origin = origin;
  // `task` is which trainer (train/toml_section.h: config_task); this one is "ctr".
  LEANEMB_RETURN_IF_ERROR(train::check_top_level_keys(doc, origin, "ctr",
                                               "task must be \"ctr\" for a CTR config (text models: task = \"text\", docs/text.md)",
                                               "sections: data, model, embedding, dense, train, memory, dist"));
  const toml::table* data = train::config_section(doc, "data");
  Section d(data, "data", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_data_section(d, &c));
  Section g(data && data->get("gen") ? data->get("gen")->as_table() : nullptr, "data.gen", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_gen_section(g, &c.gen));
  Section m(train::config_section(doc, "model"), "model", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_model_section(m, &c));
  Section e(train::config_section(doc, "embedding"), "embedding", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_embedding_section(e, origin, &c));
  Section dn(train::config_section(doc, "dense"), "dense", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_dense_section(dn, &c));
  Section t(train::config_section(doc, "train"), "train", origin, &c.record);
  LEANEMB_RETURN_IF_ERROR(read_train_section(t, &c));
  LEANEMB_RETURN_IF_ERROR(train::read_run_sections(doc, origin, &c));
  LEANEMB_RETURN_IF_ERROR(check_cross_fields(c));
  LEANEMB_RETURN_IF_ERROR(complete_generated_data(&c));
  return c;
}

Result<CtrConfig> load_ctr_config(const std::string& path, std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(std::string text, train::read_text_file(path, "config file"));
  return parse_ctr_config(text, path, sets);
}

}  // namespace leanemb::ctr
