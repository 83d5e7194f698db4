// Size functions of EmbeddingCollection's per-step buffers: what backward_update allocates for
// one table's ids. backward.cc allocates with exactly these, and the memory model in src/plan
// predicts with them (so there is one copy of each formula).
//
// `num_ids` is a table's ids in the batch (all features that look it up), `num_unique` the
// distinct rows among them (U <= num_ids). Bytes are what a buffer needs; StepBuffers adds
// headroom (step_buffer_alloc_bytes) because its buffers are kept and grown between steps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace leanemb {

// Bytes a StepBuffers slot allocates for a request of `bytes`: 1/8 headroom, at least 64.
inline size_t step_buffer_alloc_bytes(size_t bytes) { return std::max<size_t>(bytes + bytes / 8, 64); }
// The same when no request can exceed `most_bytes` (a buffer over at most all of a table's
// rows): the headroom stops there.
inline size_t step_buffer_alloc_bytes(size_t bytes, size_t most_bytes) {
  return std::max(bytes, std::min(step_buffer_alloc_bytes(bytes), most_bytes));
}

// One table's dedup buffers (kWorkspace, kept between steps).
struct DedupBufferBytes {
  size_t keys = 0;          // [n] uint64 sort keys (row << 32 | position)
  size_t runs = 0;          // [n + 1] int64: radix scratch, then run starts
  size_t src_ptr = 0;       // [n] gradient pointers in position order
  size_t scale = 0;         // [n] float scales in position order
  size_t sorted_ptr = 0;    // [n] the same sorted by row
  size_t sorted_scale = 0;  // [n]
  size_t rows = 0;          // [U] int64 unique rows
};
inline DedupBufferBytes dedup_buffer_bytes(int64_t num_ids, int64_t num_unique) {
  const size_t n = static_cast<size_t>(num_ids), u = static_cast<size_t>(num_unique);
  return DedupBufferBytes{n * 8, (n + 1) * 8, n * sizeof(float*), n * 4, n * sizeof(float*), n * 4, u * 8};
}

// A dynamic table's id buffers (kWorkspace, kept): raw ids and rows of the forward and of the
// backward, [n] int64 each (dynamic_tables.cc, map_dynamic).
inline constexpr int kDynamicIdBuffers = 4;
inline size_t dynamic_id_buffer_bytes(int64_t num_ids) { return static_cast<size_t>(num_ids) * 8; }

// A cached table's remap buffers (kWorkspace, kept): the step's rows and their cache slots, [n]
// int64 each (row_mapping.cc, remap); prefetch() adds one more of [n] for the next batch's rows.
inline constexpr int kCacheRemapBuffers = 2;
inline size_t cache_remap_buffer_bytes(int64_t num_ids) { return static_cast<size_t>(num_ids) * 8; }

// A dynamic table's host bytes (category row_cache): the IdMap of each partition this process
// holds (tiered::IdMap::allocated_bytes) and the row -> raw id keys ([num_rows] int64).
// `num_rows` and `held_partitions` as in TableOptions (0: every partition). Defined in
// dynamic_tables.cc, beside the code that allocates them.
struct TableDynamicOptions;
size_t dynamic_table_host_bytes(const TableDynamicOptions& d, int64_t num_rows, uint32_t held_partitions);

// The two-pass (checked) path's reduced gradients [U, dim] fp32 (kGradients, kept).
inline size_t reduced_grad_bytes(int64_t num_unique, int64_t dim) { return static_cast<size_t>(num_unique * dim) * 4; }

// Gradient accumulation over micro-batches (EmbeddingTables::begin_accumulation): per table the
// step's distinct rows [U] int64 (kWorkspace) and their summed gradients [U, dim] fp32
// (kGradients), kept between steps as StepBuffers (step_buffer_alloc_bytes on top).
struct AccumulationBytes {
  size_t rows = 0;
  size_t sums = 0;
};
inline AccumulationBytes accumulation_bytes(int64_t num_unique, int64_t dim) {
  const size_t u = static_cast<size_t>(num_unique);
  return AccumulationBytes{u * 8, u * static_cast<size_t>(dim) * 4};
}

// A table split across tiers (weights and optimizer state in different tiers) stages its touched
// fat rows on the device for the update (kWorkspace, freed at the end of the step).
struct StagingBytes {
  size_t fat = 0;    // [U, stride_bytes] fat rows
  size_t slots = 0;  // [U] int64 slot numbers
};
inline StagingBytes staging_bytes(int64_t num_unique, size_t stride_bytes) {
  const size_t u = static_cast<size_t>(num_unique);
  return StagingBytes{u * stride_bytes, u * 8};
}

// A table split across tiers stores its weights [rows, split_weight_stride] in the weights tier
// and its optimizer state [rows, split_state_stride] in the state tier (each padded to 8 bytes).
inline size_t split_weight_stride(size_t weight_bytes) { return (weight_bytes + 7) / 8 * 8; }
inline size_t split_state_stride(size_t state_bytes) { return (state_bytes + 7) / 8 * 8; }

}  // namespace leanemb
