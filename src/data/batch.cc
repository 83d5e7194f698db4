#include "data/batch.h"

namespace leanemb::data {

void Batch::clear(int num_dense_features, int num_sparse_features) {
  batch_size = 0;
  num_dense = num_dense_features;
  labels.clear();
  dense.clear();
  sparse.resize(static_cast<size_t>(num_sparse_features));
  for (SparseColumn& c : sparse) {
    c.ids.clear();
    c.offsets.assign(1, 0);
  }
}

void Batch::append(const Record& r, const IdMapper& map) {
  labels.push_back(r.label);
  dense.insert(dense.end(), r.dense.begin(), r.dense.end());
  const uint64_t* h = r.hashes.data();
  const uint32_t* counts = r.counts.data();
  SparseColumn* cols = sparse.data();
  for (size_t f = 0; f < sparse.size(); ++f) {
    SparseColumn& c = cols[f];
    for (const uint64_t* end = h + counts[f]; h != end; ++h) c.ids.push_back(map(f, *h));
    c.offsets.push_back(static_cast<int64_t>(c.ids.size()));
  }
  ++batch_size;
}

SparseBatch Batch::sparse_batch() const {
  SparseBatch out;
  sparse_batch(&out);
  return out;
}

void Batch::sparse_batch(SparseBatch* out) const {
  out->batch_size = batch_size;
  out->features.resize(sparse.size());
  for (size_t f = 0; f < sparse.size(); ++f) out->features[f] = FeatureInput{sparse[f].ids, sparse[f].offsets, {}};
}

}  // namespace leanemb::data
