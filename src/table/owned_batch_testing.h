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
  // Bags [b0, b1) of this batch, offsets rebased (a rank's slice of a global batch).
  OwnedBatch slice(int64_t b0, int64_t b1) const {
    OwnedBatch s;
    s.B = b1 - b0;
    for (size_t f = 0; f < ids.size(); ++f) {
      const int64_t lo = offsets[f][static_cast<size_t>(b0)], hi = offsets[f][static_cast<size_t>(b1)];
      s.ids.emplace_back(ids[f].begin() + lo, ids[f].begin() + hi);
      std::vector<int64_t> off;
      for (int64_t b = b0; b <= b1; ++b) off.push_back(offsets[f][static_cast<size_t>(b)] - lo);
      s.offsets.push_back(off);
      s.weights.emplace_back(weights[f].empty() ? std::vector<float>()
                                                : std::vector<float>(weights[f].begin() + lo, weights[f].begin() + hi));
    }
    return s;
  }
};

}  // namespace leanemb::testing_util
