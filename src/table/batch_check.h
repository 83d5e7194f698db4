// Validation of untrusted batches at the EmbeddingCollection API under a BoundsCheckMode.
#pragma once

#include <cstdint>
#include <vector>

#include "leanemb/embedding.h"
#include "leanemb/memory.h"

namespace leanemb::table_internal {

struct FeatureMeta {
  std::string name;
  std::string table_name;
  int64_t num_rows = 0;
  PoolingMode pooling = PoolingMode::kSum;
  bool raw_ids = false;  // a dynamic table's feature: ids are raw values, not range-checked
};

// The batch to compute on: the caller's (when nothing was dropped) or a filtered copy whose
// arrays live in `owned` (BoundsCheckMode::kSkip dropped ids).
struct CheckedBatch {
  const SparseBatch* batch = nullptr;
  SparseBatch filtered;
  std::vector<Allocation> owned;
  uint64_t num_dropped = 0;
};

// Checks shapes, offsets, weights (finite) and ids (except raw ids of dynamic tables). With kError any bad id fails the batch;
// with kSkip bad ids are removed (shape errors still fail). Errors name the feature, bag and
// position. Filtered copies are allocated from `alloc` (category workspace).
Status check_batch(const SparseBatch& batch, const std::vector<FeatureMeta>& features, BoundsCheckMode mode,
                   Allocator* alloc, CheckedBatch* out);

}  // namespace leanemb::table_internal
