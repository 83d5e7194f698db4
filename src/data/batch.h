// Batch: B records in training layout. Labels [B] and dense features [B, num_dense] (row-major)
// in fp32; each sparse feature a jagged list in PyTorch EmbeddingBag convention: ids [nnz]
// int64 and offsets [B + 1] int64 (offsets[0] = 0, bag b = ids[offsets[b] .. offsets[b+1])).
// An empty categorical field is an empty bag; nothing is padded.
//
// Ownership: the Batch owns its arrays; sparse_batch() returns views into them that are valid
// until the batch is next modified. A reused Batch keeps its vectors' capacity, so filling it
// again allocates nothing once it has held the largest batch (steady state).
// Thread safety: a value; not shared between threads while it is being filled.
#pragma once

#include <cstdint>
#include <vector>

#include "data/schema.h"
#include "leanemb/embedding.h"

namespace leanemb::data {

struct SparseColumn {
  std::vector<int64_t> ids;      // [nnz] row ids (see IdMode)
  std::vector<int64_t> offsets;  // [B + 1]
  bool operator==(const SparseColumn&) const = default;
};

struct Batch {
  int64_t batch_size = 0;          // B
  int num_dense = 0;
  int64_t epoch = 0;               // epoch the records came from
  std::vector<float> labels;       // [B] 0 or 1
  std::vector<float> dense;        // [B, num_dense] row-major
  std::vector<SparseColumn> sparse;  // [num_sparse]

  // Empties the batch for `num_dense` / `num_sparse` features (capacity is kept).
  void clear(int num_dense_features, int num_sparse_features);
  // Appends one record, mapping its hashes to ids with `ids` (built from the schema).
  // REQUIRES: the record matches the schema, and clear() was called with its counts.
  void append(const Record& r, const IdMapper& ids);

  // Views of the sparse features for EmbeddingCollection (weights empty). Valid until the batch
  // changes. The second form reuses out->features' capacity.
  SparseBatch sparse_batch() const;
  void sparse_batch(SparseBatch* out) const;

  bool operator==(const Batch&) const = default;
};

}  // namespace leanemb::data
