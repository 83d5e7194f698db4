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

}  // namespace leanemb::plan::testing_util
