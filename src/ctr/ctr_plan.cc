// ctr_workload and config_to_toml. See ctr_plan.h.
#include "ctr/ctr_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tiered/row_cache.h"

namespace leanemb::ctr {

using namespace plan;  // NOLINT: the memory model's types, throughout

Result<Workload> ctr_workload(const CtrConfig& c) {
  Workload w;
  w.kind = WorkloadKind::kCtr;
  w.batch_size = c.batch_size;
  w.micro_batches = c.micro_batches;
  w.num_dense = c.num_dense;
  w.bottom_mlp = c.bottom_mlp;
  w.top_mlp = c.top_mlp;
  w.interaction = c.interaction;
  w.dense_optimizer = c.dense_optimizer.kind;
  w.row_dtype = c.row_dtype;
  w.row_optimizer = c.row_optimizer;
  w.precision = c.precision;
  w.checkpoint_activations = c.checkpoint_activations;
  w.placement = c.memory.placement;
  if (c.row_cache.enabled()) {
    w.cache_fraction = c.row_cache.fraction;
    w.file_store = c.row_cache.store == StoreKind::kFile;
    w.file_store_layout = c.row_cache.store_layout;
    w.cache_min_rows = c.cache_min_rows;
    w.cache_policy = c.row_cache.policy;
    w.cache_prefetch = c.cache_prefetch;
  }
  w.num_threads = c.threads;
  w.track_changed_rows = c.incremental_checkpoints;
  w.link_store_rows = c.link_store_rows;
  w.checkpoint_every = c.checkpoint_every;
  w.keep_checkpoints = c.keep_checkpoints;
  w.full_checkpoint_every = c.full_checkpoint_every;
  // The run's steps: train.steps, else the epochs over the generated rows (unknown for other data).
  if (c.steps > 0) {
    w.run_steps = c.steps;
  } else if (c.generate && c.batch_size > 0) {
    w.run_steps = (c.gen.train_rows + c.batch_size - 1) / c.batch_size * std::max<int64_t>(c.epochs, 1);
  }
  w.forward_payload = c.forward_payload;
  w.backward_payload = c.backward_payload;
  // Ids per sample: synthetic data holds 1..multi_hot_max values (uniform) in a field that is
  // non-empty with probability 1 - missing; max_len truncates. Other data: one id, unknown skew.
  const int64_t mh = c.generate ? c.gen.multi_hot_max : 1;
  const int64_t cap = max_ids_per_field(c);
  double mean = 0.0;
  for (int64_t l = 1; l <= mh; ++l) mean += static_cast<double>(std::min(l, cap));
  mean = mean / static_cast<double>(mh) * (c.generate ? 1.0 - c.gen.sparse_missing_rate : 1.0);
  for (int f = 0; f < c.num_sparse; ++f) {
    TableSpec t;
    t.name = "C";
    t.name.append(std::to_string(f + 1));
    t.num_rows = c.table_rows.size() == 1 ? c.table_rows[0] : c.table_rows[static_cast<size_t>(f)];
    t.dim = c.embedding_dim;
    t.pooling = c.pooling;
    t.max_ids_per_sample = cap;
    t.mean_ids_per_sample = mean;
    if (c.generate) {
      const int64_t vocab = c.gen.vocab.size() == 1 ? c.gen.vocab[0] : c.gen.vocab[static_cast<size_t>(f)];
      t.zipf = c.gen.zipf;
      t.vocab = vocab;
      const int64_t ids = static_cast<int64_t>(mean * static_cast<double>(c.batch_size) + 0.5);
      t.expected_unique_rows = expected_unique_rows(ids, vocab, c.gen.zipf, t.num_rows);
    }
    w.tables.push_back(t);
  }
  // Dynamic tables: rows of their capacity, ids mapped by an IdMap (ctr_model_options in ctr_task.cc).
  for (const DynamicTableConfig& d : c.dynamic_tables) {
    TableSpec& t = w.tables[static_cast<size_t>(std::stoi(d.table.substr(1)) - 1)];
    t.dynamic = d.options;
    if (d.capacity_rows > 0) t.num_rows = d.capacity_rows;
    if (c.generate) {
      const int64_t ids = static_cast<int64_t>(mean * static_cast<double>(c.batch_size) + 0.5);
      const int64_t vocab = c.gen.vocab.size() == 1 ? c.gen.vocab[0] : c.gen.vocab[std::stoul(d.table.substr(1)) - 1];
      t.expected_unique_rows = expected_unique_rows(ids, vocab, c.gen.zipf, t.num_rows);
    }
  }
  w.grad_groups = c.grad_groups > 0 ? c.grad_groups : 1;
  return w;
}

namespace {
// Built with append: GCC 12's -Wrestrict misfires on chains of string operator+.
std::string str(const std::string& s) {
  std::string out = "\"";
  out.append(s);
  out.push_back('"');
  return out;
}
template <typename T>
std::string list(const std::vector<T>& v, bool quote = false) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    if constexpr (std::is_same_v<T, std::string>) out.append(quote ? str(v[i]) : v[i]);
    else out.append(std::to_string(v[i]));
  }
  out.push_back(']');
  return out;
}
std::string num(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", x);
  std::string s = b;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
const char* interaction_str(nn::InteractionKind k) { return k == nn::InteractionKind::kDot ? "dot" : "cat"; }
const char* dense_opt_str(nn::DenseOptimizerKind k) {
  return k == nn::DenseOptimizerKind::kSgd ? "sgd" : (k == nn::DenseOptimizerKind::kAdagrad ? "adagrad" : "adam");
}
const char* init_str(InitKind k) { return k == InitKind::kUniform ? "uniform" : (k == InitKind::kNormal ? "normal" : "zeros"); }
}  // namespace

std::string config_to_toml(const CtrConfig& c) {
  std::ostringstream o;
  o << "# Written by `leanemb plan --write-config` (docs/plan.md); every key: docs/train.md.\n\n[data]\n";
  if (c.generate) {
    o << "dir = " << str(c.data_dir) << "\ngenerate = true\n";
  } else {
    o << "train = " << list(c.train_files, true) << "\n";
    if (!c.eval_files.empty()) o << "eval = " << list(c.eval_files, true) << "\n";
  }
  o << "num_dense = " << c.num_dense << "\nnum_sparse = " << c.num_sparse << "\nmax_len = " << c.max_len
    << "\nshuffle_buffer = " << c.shuffle_buffer << "\nmax_malformed_rate = " << num(c.max_malformed_rate)
    << "\neval_rows = " << c.eval_rows << "\n";
  if (c.generate) {
    const data::GenOptions& g = c.gen;
    o << "\n[data.gen]\ntrain_rows = " << g.train_rows << "\neval_rows = " << g.eval_rows << "\nseed = " << g.seed
      << "\nvocab = " << list(g.vocab) << "\nzipf = " << num(g.zipf) << "\nmulti_hot_max = " << g.multi_hot_max
      << "\nlatent_dim = " << g.latent_dim << "\nnoise_std = " << num(g.noise_std)
      << "\ndense_weight = " << num(g.dense_weight) << "\nfirst_order_weight = " << num(g.first_order_weight)
      << "\npairwise_weight = " << num(g.pairwise_weight) << "\ntarget_label_rate = " << num(g.target_label_rate)
      << "\ntarget_auc = " << num(g.target_auc) << "\nformat = " << str(g.format == data::OutputFormat::kBinary ? "bin" : "tsv")
      << "\n";
  }
  o << "\n[model]\nembedding_dim = " << c.embedding_dim << "\ntable_rows = " << list(c.table_rows)
    << "\nbottom_mlp = " << list(c.bottom_mlp) << "\ntop_mlp = " << list(c.top_mlp)
    << "\ninteraction = " << str(interaction_str(c.interaction)) << "\npooling = " << str(std::string(pooling_name(c.pooling)))
    << "\n\n[embedding]\ndtype = " << str(std::string(dtype_name(c.row_dtype)))
    << "\noptimizer = " << str(std::string(optimizer_name(c.row_optimizer.kind)))
    << "\nlearning_rate = " << num(c.row_optimizer.learning_rate) << "\neps = " << num(c.row_optimizer.eps)
    << "\nbeta1 = " << num(c.row_optimizer.beta1) << "\nbeta2 = " << num(c.row_optimizer.beta2)
    << "\nweight_decay = " << num(c.row_optimizer.weight_decay)
    << "\nstate_dtype = " << str(std::string(dtype_name(c.row_optimizer.state_dtype)))
    << "\ninit = " << str(init_str(c.row_init.kind)) << "\ninit_bound = " << num(c.row_init.bound)
    << "\ninit_std = " << num(c.row_init.std);
  if (c.row_cache.enabled())
    o << "\ncache_fraction = " << num(c.row_cache.fraction)
      << "\ncache_policy = " << str(std::string(tiered::cache_policy_name(c.row_cache.policy)))
      << "\ncache_prefetch_nice = " << c.row_cache.prefetch_nice
      << "\ncache_prefetch = " << (c.cache_prefetch ? "true" : "false")
      << "\ncache_min_rows = " << c.cache_min_rows << "\nstore = " << str(std::string(store_kind_name(c.row_cache.store)))
      << "\nstore_layout = " << str(std::string(file_store_layout_name(c.row_cache.store_layout)))
      << (c.store_dir.empty() ? "" : "\nstore_dir = " + str(c.store_dir));
  o << "\n\n[dense]\noptimizer = " << str(dense_opt_str(c.dense_optimizer.kind))
    << "\nlearning_rate = " << num(c.dense_optimizer.learning_rate) << "\nweight_decay = " << num(c.dense_optimizer.weight_decay)
    << "\nbeta1 = " << num(c.dense_optimizer.beta1) << "\nbeta2 = " << num(c.dense_optimizer.beta2) << "\n";
  if (c.dense_optimizer.eps) o << "eps = " << num(*c.dense_optimizer.eps) << "\n";
  o << "\n[train]\nbatch_size = " << c.batch_size << "\nsteps = " << c.steps << "\nepochs = " << c.epochs
    << "\nprecision = " << str(std::string(dtype_name(c.precision))) << "\nmicro_batches = " << c.micro_batches
    << "\ncheckpoint_activations = " << (c.checkpoint_activations ? "true" : "false")
    << "\ndeterministic = " << (c.deterministic ? "true" : "false") << "\nseed = " << c.seed << "\nthreads = " << c.threads
    << "\neval_every = " << c.eval_every << "\ncheckpoint_every = " << c.checkpoint_every
    << "\nkeep_checkpoints = " << c.keep_checkpoints << "\nlog_every = " << c.log_every << "\n";
  o << "\n[memory]\n";
  if (c.memory.device_budget_bytes) o << "device_budget = " << str(std::to_string(c.memory.device_budget_bytes)) << "\n";
  if (c.memory.host_budget_bytes) o << "host_budget = " << str(std::to_string(c.memory.host_budget_bytes)) << "\n";
  if (c.memory.max_split_bytes) o << "max_split = " << str(std::to_string(c.memory.max_split_bytes)) << "\n";
  if (c.memory.reserve_bytes) o << "reserve = " << str(std::to_string(c.memory.reserve_bytes)) << "\n";
  o << "placement = " << str(c.memory.placement.to_string()) << "\n";
  return o.str();
}

}  // namespace leanemb::ctr
