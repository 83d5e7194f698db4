#include "table/batch_check.h"

#include <cmath>
#include <string>

#include "kernels/kernels.h"

namespace leanemb::table_internal {

namespace {

std::string where(const FeatureMeta& f, int fi) {
  return "feature '" + f.name + "' (index " + std::to_string(fi) + ", table '" + f.table_name + "')";
}

// Bag that holds position i (offsets already validated).
int64_t bag_of(std::span<const int64_t> offsets, int64_t i) {
  int64_t lo = 0, hi = static_cast<int64_t>(offsets.size()) - 2;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

Status check_shape(const FeatureInput& in, int64_t batch_size, const FeatureMeta& f, int fi) {
  const int64_t nnz = static_cast<int64_t>(in.ids.size());
  if (static_cast<int64_t>(in.offsets.size()) != batch_size + 1)
    return invalid_argument(where(f, fi) + ": offsets has " + std::to_string(in.offsets.size()) +
                            " entries, expected batch_size + 1 = " + std::to_string(batch_size + 1));
  if (in.offsets[0] != 0)
    return invalid_argument(where(f, fi) + ": offsets[0] = " + std::to_string(in.offsets[0]) + ", expected 0");
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t lo = in.offsets[b], hi = in.offsets[b + 1];
    if (hi < lo)
      return invalid_argument(where(f, fi) + ": offsets not monotone at bag " + std::to_string(b) + ": offsets[" +
                              std::to_string(b + 1) + "] = " + std::to_string(hi) + " < offsets[" +
                              std::to_string(b) + "] = " + std::to_string(lo));
    if (hi > nnz)
      return invalid_argument(where(f, fi) + ": offsets[" + std::to_string(b + 1) + "] = " + std::to_string(hi) +
                              " is beyond the " + std::to_string(nnz) + " ids");
  }
  if (in.offsets[batch_size] != nnz)
    return invalid_argument(where(f, fi) + ": last offset " + std::to_string(in.offsets[batch_size]) +
                            " != number of ids " + std::to_string(nnz));
  if (!in.weights.empty()) {
    // Sequence lookups return plain rows, so a weight could only scale the gradient: refuse it
    // rather than train with a gradient that disagrees with the forward.
    if (f.pooling == PoolingMode::kNone)
      return invalid_argument(where(f, fi) + ": per-id weights are not supported for sequence (pooling none) features");
    if (in.weights.size() != in.ids.size())
      return invalid_argument(where(f, fi) + ": " + std::to_string(in.weights.size()) + " per-id weights for " +
                              std::to_string(nnz) + " ids");
    for (int64_t i = 0; i < nnz; ++i)
      if (!std::isfinite(in.weights[i]))
        return invalid_argument(where(f, fi) + ": bag " + std::to_string(bag_of(in.offsets, i)) + ", position " +
                                std::to_string(i) + ": per-id weight is not finite");
  }
  return Status();
}

}  // namespace

Status check_batch(const SparseBatch& batch, const std::vector<FeatureMeta>& features, BoundsCheckMode mode,
                   Allocator* alloc, CheckedBatch* out) {
  out->batch = &batch;
  out->num_dropped = 0;
  if (batch.batch_size < 0) return invalid_argument("batch_size " + std::to_string(batch.batch_size) + " < 0");
  if (batch.features.size() != features.size())
    return invalid_argument("batch has " + std::to_string(batch.features.size()) + " features, the collection has " +
                            std::to_string(features.size()));
  std::vector<int> needs_filter;
  for (size_t fi = 0; fi < features.size(); ++fi) {
    const FeatureInput& in = batch.features[fi];
    const FeatureMeta& f = features[fi];
    LEANEMB_RETURN_IF_ERROR(check_shape(in, batch.batch_size, f, static_cast<int>(fi)));
    if (f.raw_ids) continue;  // any int64 value is a valid raw id
    // Count first (a vectorized scan with no early exit); look for the first bad id only if any.
    const int64_t bad = kernels::count_outside(in.ids.data(), static_cast<int64_t>(in.ids.size()), f.num_rows);
    if (bad == 0) continue;
    if (mode == BoundsCheckMode::kError) {
      size_t i = 0;
      while (in.ids[i] >= 0 && in.ids[i] < f.num_rows) ++i;
      return out_of_range(where(f, static_cast<int>(fi)) + ": bag " +
                          std::to_string(bag_of(in.offsets, static_cast<int64_t>(i))) + ", position " +
                          std::to_string(i) + ": id " + std::to_string(in.ids[i]) + " is outside [0, " +
                          std::to_string(f.num_rows) + ")");
    }
    needs_filter.push_back(static_cast<int>(fi));
  }
  if (needs_filter.empty()) return Status();

  // kSkip: copy the affected features without their bad ids.
  out->filtered.batch_size = batch.batch_size;
  out->filtered.features = batch.features;
  for (int fi : needs_filter) {
    const FeatureInput& in = batch.features[fi];
    const int64_t nnz = static_cast<int64_t>(in.ids.size());
    LEANEMB_ASSIGN_OR_RETURN(Allocation ids, alloc->allocate(static_cast<size_t>(std::max<int64_t>(nnz, 1)) * 8, Category::kWorkspace));
    LEANEMB_ASSIGN_OR_RETURN(Allocation offs, alloc->allocate(static_cast<size_t>(batch.batch_size + 1) * 8, Category::kWorkspace));
    Allocation wts;
    if (!in.weights.empty()) {
      LEANEMB_ASSIGN_OR_RETURN(wts, alloc->allocate(static_cast<size_t>(std::max<int64_t>(nnz, 1)) * 4, Category::kWorkspace));
    }
    int64_t* new_ids = ids.as<int64_t>();
    int64_t* new_offs = offs.as<int64_t>();
    float* new_w = wts.as<float>();
    int64_t n = 0;
    new_offs[0] = 0;
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      for (int64_t i = in.offsets[b]; i < in.offsets[b + 1]; ++i) {
        if (in.ids[i] < 0 || in.ids[i] >= features[fi].num_rows) {
          ++out->num_dropped;
          continue;
        }
        if (new_w) new_w[n] = in.weights[i];
        new_ids[n++] = in.ids[i];
      }
      new_offs[b + 1] = n;
    }
    FeatureInput& f = out->filtered.features[fi];
    f.ids = std::span<const int64_t>(new_ids, static_cast<size_t>(n));
    f.offsets = std::span<const int64_t>(new_offs, static_cast<size_t>(batch.batch_size + 1));
    f.weights = new_w ? std::span<const float>(new_w, static_cast<size_t>(n)) : std::span<const float>();
    out->owned.push_back(std::move(ids));
    out->owned.push_back(std::move(offs));
    if (!wts.empty()) out->owned.push_back(std::move(wts));
  }
  out->batch = &out->filtered;
  return Status();
}

}  // namespace leanemb::table_internal
