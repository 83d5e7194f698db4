// predict_tables_memory (leanemb/plan.h): the memory model's embedding-only workload.
#include "leanemb/plan.h"

#include "plan/memory_model.h"

namespace leanemb::plan {

Result<Prediction> predict_tables_memory(const TablesWorkload& w, Estimate estimate) {
  Workload full;
  full.kind = WorkloadKind::kEmbeddingOnly;
  full.tables = w.tables;
  full.batch_size = w.batch_size;
  full.row_dtype = w.row_dtype;
  full.row_optimizer = w.row_optimizer;
  full.placement = w.placement;
  full.cache_fraction = w.cache_fraction;
  full.num_threads = w.num_threads;
  return predict_memory(full, estimate);
}

}  // namespace leanemb::plan
