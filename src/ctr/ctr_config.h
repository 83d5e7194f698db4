// CtrConfig: everything `leanemb train` needs, read from a TOML file (docs/train.md lists
// every key with its default) with `--set section.key=value` overrides.
//
// Parsing is strict: an unknown section or key, a value of the wrong type or out of range is an
// InvalidArgument naming the key (and the file). Paths are used as given (relative paths are
// relative to the working directory).
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amp/precision.h"
#include "leanemb/data_synthetic.h"
#include "dist/payload.h"
#include "table/shard_plan.h"
#include "leanemb/dtype.h"
#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "leanemb/optimizer.h"
#include "leanemb/status.h"
#include "nn/dense_optimizer.h"
#include "nn/interaction.h"
#include "train/run_config.h"
#include "train/toml_section.h"

namespace leanemb::ctr {

// One dynamic table of a CTR model (docs/train.md, [embedding.dynamic]): feature `table` (C1,
// C2, ...) gets raw 64-bit ids and an IdMap of `capacity_rows` rows.
struct DynamicTableConfig {
  std::string table;             // "C<k>", k in [1, num_sparse]
  int64_t capacity_rows = 0;     // rows of the table; 0: its model.table_rows
  TableDynamicOptions options;   // min_count, eviction, max_age_steps, partitions, bloom_*
};

// A CTR config: the shared part (train/run_config.h: steps, epochs, seed, threads, log_every,
// the cadence, checkpoint and guard keys of [train], [memory], [dist], origin, record) and the
// CTR task's own sections and [train] keys below.
struct CtrConfig : train::RunConfig {
  // [data]
  std::vector<std::string> train_files;  // Criteo TSV or leanemb binary
  std::vector<std::string> eval_files;
  std::string data_dir;            // generate = true: where train.* / eval.* / meta.json go
  bool generate = false;           // write synthetic data to data_dir when it is missing
  data::GenOptions gen;            // [data.gen]: rows, vocab, zipf, multi_hot_max, seed, ...
  int num_dense = 13;
  int num_sparse = 26;
  int64_t max_len = 0;             // multi-hot truncation per feature (0 = none)
  int64_t shuffle_buffer = 0;      // records; 0 = file order
  double max_malformed_rate = 0.001;
  bool string_values = false;      // data.categorical = "string": any strings, hashed (docs/data.md)
  int64_t eval_rows = 0;           // evaluate on the first N eval records (0 = all)

  // [model]
  int64_t embedding_dim = 16;
  std::vector<int64_t> table_rows = {100000};  // one value for every feature, or num_sparse
  // model.table_rows = "auto": table_rows is derived from the training files before training
  // (derive_table_rows, ctr/table_rows.h; docs/train.md "Deriving table_rows"); table_rows is
  // empty until then.
  bool table_rows_auto = false;
  std::vector<int64_t> bottom_mlp = {64, 16};  // hidden widths..., last = embedding_dim (dot)
  std::vector<int64_t> top_mlp = {64, 32};     // hidden widths; a final 1-wide layer is added
  nn::InteractionKind interaction = nn::InteractionKind::kDot;
  PoolingMode pooling = PoolingMode::kSum;

  // [embedding]
  DType row_dtype = DType::kF32;
  OptimizerOptions row_optimizer;  // kind, learning_rate, eps, betas, weight_decay, state_dtype
  InitOptions row_init;            // init (uniform | normal | zeros), init_bound, init_std
  // Tiered tables (docs/tiered.md): cache_fraction > 0 keeps each table's rows in a row store
  // (store = host | file; file stores go to store_dir/<table>.rows) with a device-tier cache of
  // that fraction of its rows (cache_policy = lru | lfu | clock).
  TableCacheOptions row_cache;
  int64_t cache_min_rows = 1000000;  // tables with fewer rows stay resident
  // Cached tables: read one batch ahead and prefetch its rows during the current step.
  bool cache_prefetch = true;
  std::string store_dir;
  // [embedding.dynamic] (and [embedding.dynamic.C<k>] per table): dynamic vocabularies.
  std::vector<DynamicTableConfig> dynamic_tables;

  // [dense]
  nn::DenseOptimizerOptions dense_optimizer;

  // [train] (the shared keys: train::RunConfig)
  int64_t batch_size = 1024;
  DType precision = DType::kF32;
  int micro_batches = 1;           // gradient accumulation: batch_size / micro_batches per pass
  bool checkpoint_activations = false;
  bool deterministic = true;
};

// Parses TOML text. `sets` are "section.key=value" overrides applied before validation; value
// is a TOML value (`3`, `"x"`, `[1, 2]`, `true`) or else taken as a string.
// Errors: InvalidArgument naming the key, the value and the origin.
Result<CtrConfig> parse_ctr_config(std::string_view toml_text, const std::string& origin,
                                   std::span<const std::string> sets = {});
// Reads and parses a file. Errors: NotFound / IoError, then as parse_ctr_config.
Result<CtrConfig> load_ctr_config(const std::string& path, std::span<const std::string> sets = {});

// The embedded default (examples/ctr_small.toml, compiled in).
std::string_view default_config_text();

// The most ids a record holds per sparse feature: generated data holds 1..multi_hot_max values
// per field, other data is taken as one id; max_len truncates (the planner and the sharded
// tables' buffers use it).
int64_t max_ids_per_field(const CtrConfig& c);

}  // namespace leanemb::ctr
