// predict_tables_memory (leanemb/plan.h): the memory model's embedding-only workload; and
// naive_workload and bytes_per_parameter (memory_model.h), from the fat-row layout the tables allocate.
#include "leanemb/plan.h"

#include "plan/memory_model.h"
#include "table/step_sizes.h"

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

Workload naive_workload(const Workload& w) {
  Workload b = w;
  b.row_dtype = DType::kF32;
  b.row_optimizer.kind = OptimizerKind::kAdam;
  b.row_optimizer.state_dtype = DType::kF32;
  b.row_optimizer.eps = default_eps(OptimizerKind::kAdam);
  b.precision = DType::kF32;
  b.micro_batches = 1;
  b.checkpoint_activations = false;
  b.placement = Placement{};
  b.cache_fraction = 1.0;
  b.num_shards = 1;
  return b;
}

Result<BytesPerParameter> bytes_per_parameter(const Workload& w) {
  BytesPerParameter out;
  double bytes = 0;
  for (const TableSpec& t : w.tables) {
    LEANEMB_ASSIGN_OR_RETURN(const RowLayout l, make_row_layout(t.dim, w.row_dtype, w.row_optimizer));
    // A table split across tiers keeps weights and state apart, each padded (step_sizes.h).
    const bool split = l.state_bytes > 0 && w.placement[Category::kWeights] != w.placement[Category::kOptimizerState] &&
                       w.cache_fraction >= 1.0;
    const size_t stride = split ? split_weight_stride(l.weight_bytes) + split_state_stride(l.state_bytes) : l.stride_bytes;
    const double d = static_cast<double>(t.dim);
    TableBytesPerParameter b;
    b.name = t.name;
    b.rows = t.num_rows;
    b.dim = t.dim;
    b.row_bytes = static_cast<double>(l.weight_bytes) / d;
    b.state_bytes = static_cast<double>(l.state_bytes) / d;
    b.padding_bytes = static_cast<double>(stride - l.weight_bytes - l.state_bytes) / d;
    // SM3's column accumulators: the table's current and next, dim fp32 each (embedding_collection.cc).
    const double table_state = w.row_optimizer.kind == OptimizerKind::kSm3 ? 2.0 * d * 4 : 0.0;
    b.table_state_bytes = t.num_rows > 0 ? table_state / (static_cast<double>(t.num_rows) * d) : 0.0;
    out.tables.push_back(b);
    out.parameters += t.num_rows * t.dim;
    bytes += static_cast<double>(stride) * static_cast<double>(t.num_rows) + table_state;
  }
  out.total = out.parameters > 0 ? bytes / static_cast<double>(out.parameters) : 0.0;
  return out;
}

}  // namespace leanemb::plan
