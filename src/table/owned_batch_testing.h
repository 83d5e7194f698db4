// Test helper (tests only): a SparseBatch that owns its arrays.
#pragma once

#include <cstdint>
#include <vector>

#include "leanemb/embedding.h"

namespace leanemb::testing_util {

// Owns the arrays of a batch (one entry per feature); view() borrows them.
struct OwnedBatch {
  int64_t B = 0;
  std::vector<std::vector<int64_t>> ids, offsets;
  std::vector<std::vector<float>> weights;
  SparseBatch view() const {
    SparseBatch b;
    b.batch_size = B;
    for (size_t f = 0; f < ids.size(); ++f) b.features.push_back({ids[f], offsets[f], weights[f]});
    return b;
  }
};

}  // namespace leanemb::testing_util
