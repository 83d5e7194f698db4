// Test helpers of the plan module (tests only).
#pragma once

#include "plan/memory_model.h"

namespace leanemb::plan::testing_util {

// The seed's section 2 example: vocab 1e6 x dim 512, batch 4096 x sequence 2048 (unpooled),
// fp32 rows, Adam.
inline Workload seed_workload() {
  Workload w;
  w.kind = WorkloadKind::kEmbeddingOnly;
  TableSpec t;
  t.name = "vocab";
  t.num_rows = 1000000;
  t.dim = 512;
  t.pooling = PoolingMode::kNone;
  t.max_ids_per_sample = t.mean_ids_per_sample = 2048;
  w.tables = {t};
  w.batch_size = 4096;
  w.row_optimizer.kind = OptimizerKind::kAdam;
  return w;
}

// The seed's table as `rows` rows of 64 values with row-wise Adagrad, 4 ids a sample of Zipf(0.9)
// (a step touches a fraction of the rows), cached (`cache_fraction`) over log-layout file stores,
// with incremental checkpoints.
inline Workload log_store_workload(int64_t rows, double cache_fraction) {
  Workload w = seed_workload();
  for (TableSpec& t : w.tables) {
    t.num_rows = rows;
    t.dim = 64;
    t.pooling = PoolingMode::kSum;
    t.max_ids_per_sample = 4;
    t.mean_ids_per_sample = 4;
    t.zipf = 0.9;
  }
  w.row_optimizer.kind = OptimizerKind::kRowwiseAdagrad;
  w.cache_fraction = cache_fraction;
  w.file_store = true;
  w.file_store_layout = FileStoreLayout::kLog;
  w.track_changed_rows = true;
  return w;
}

}  // namespace leanemb::plan::testing_util
