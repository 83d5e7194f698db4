// The rows a pruned serving table kept (`leanemb export --serving --prune-min-count`,
// docs/serve.md "Pruning"): a table of the trained model with R rows keeps K of them, stored as
// rows [0, K) in ascending order of their trained row number, and this sorted list of the K
// trained row numbers maps an id (a trained row) to its kept row by binary search. An id whose
// row was pruned is dropped from its bag, as fastText drops a word or n-gram that `quantize
// -cutoff` removed: a sum-pooled bag gets no contribution from it, a mean-pooled bag divides by
// the ids that remain, and a bag left empty pools to zeros.
//
// Memory: 8 bytes per kept row (the sorted int64 list) besides the K rows themselves; lookups
// cost log2(K) comparisons per id. No hash table: a sorted array is the smallest exact map and
// is what the checkpoint stores (blob "serve/kept/<table>").
//
// Ownership: a value type. Thread safety: const methods may be called from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace leanemb {

class PrunedRows {
 public:
  PrunedRows() = default;
  // REQUIRES: `kept` strictly ascending, values >= 0.
  explicit PrunedRows(std::vector<int64_t> kept) : kept_(std::move(kept)) {}

  int64_t num_kept() const { return static_cast<int64_t>(kept_.size()); }
  const std::vector<int64_t>& kept() const { return kept_; }
  size_t bytes() const { return kept_.size() * sizeof(int64_t); }

  // The kept row of trained row `row`, or -1 when it was pruned.
  int64_t find(int64_t row) const {
    const auto it = std::lower_bound(kept_.begin(), kept_.end(), row);
    return it != kept_.end() && *it == row ? static_cast<int64_t>(it - kept_.begin()) : -1;
  }

  // ids [nnz] with offsets [B + 1] (bag b = ids[offsets[b] .. offsets[b+1])) rewritten into
  // *out_ids / *out_offsets ([B + 1]): every id replaced by its kept row, pruned ids dropped.
  void remap(std::span<const int64_t> ids, std::span<const int64_t> offsets, std::vector<int64_t>* out_ids,
             std::vector<int64_t>* out_offsets) const {
    out_ids->clear();
    out_offsets->assign(1, 0);
    for (size_t b = 0; b + 1 < offsets.size(); ++b) {
      for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
        const int64_t k = find(ids[static_cast<size_t>(i)]);
        if (k >= 0) out_ids->push_back(k);
      }
      out_offsets->push_back(static_cast<int64_t>(out_ids->size()));
    }
  }

 private:
  std::vector<int64_t> kept_;
};

}  // namespace leanemb
