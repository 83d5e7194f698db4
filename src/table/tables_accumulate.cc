// EmbeddingTables' default gradient accumulation (leanemb/tables.h): the micro-batches'
// gradients are copied into the whole batch's gradient arrays and apply_accumulated calls
// backward_update once. Exact for every layer (it is the one-shot update), but it keeps the
// whole batch's gradients (host heap): a layer that can sum by row overrides it
// (EmbeddingCollection; a sharded collection does not yet).
#include <algorithm>

#include "leanemb/tables.h"

namespace leanemb {

struct EmbeddingTables::CopiedGradients {
  SparseBatch batch;
  UpdateOptions update;
  int64_t next_bag = 0;
  std::vector<float> pooled;              // [B, pooled_dim]
  std::vector<std::vector<float>> seq;    // per sequence feature [nnz, dim]
  std::vector<int64_t> seq_dim;           // per sequence feature: its dim
  std::vector<size_t> seq_feature;        // per sequence feature: its feature index
};

EmbeddingTables::EmbeddingTables() = default;
EmbeddingTables::~EmbeddingTables() = default;

Status EmbeddingTables::begin_accumulation(const SparseBatch& batch, const UpdateOptions& update) {
  if (copied_) return failed_precondition("begin_accumulation: an accumulation is open (apply_accumulated or discard_accumulation first)");
  LEANEMB_RETURN_IF_ERROR(validate(batch));
  if (batch.features.size() != options().features.size())
    return invalid_argument("begin_accumulation: the batch has " + std::to_string(batch.features.size()) + " features, the tables " +
                            std::to_string(options().features.size()));
  auto c = std::make_unique<CopiedGradients>();
  c->batch = batch;
  c->update = update;
  c->pooled.assign(static_cast<size_t>(batch.batch_size * pooled_dim()), 0.0f);
  for (size_t f = 0; f < options().features.size(); ++f) {
    const FeatureOptions& fo = options().features[f];
    if (fo.pooling != PoolingMode::kNone) continue;
    const int64_t dim = options().tables[static_cast<size_t>(fo.table)].dim;
    c->seq.emplace_back(batch.features[f].ids.size() * static_cast<size_t>(dim), 0.0f);
    c->seq_dim.push_back(dim);
    c->seq_feature.push_back(f);
  }
  copied_ = std::move(c);
  return Status();
}

Status EmbeddingTables::accumulate(int64_t bag_begin, int64_t bag_end, std::span<const float> grad_pooled,
                                   std::span<const std::span<const float>> grad_seq) {
  if (!copied_) return failed_precondition("accumulate: no accumulation is open (begin_accumulation first)");
  CopiedGradients& c = *copied_;
  if (bag_begin != c.next_bag || bag_end < bag_begin || bag_end > c.batch.batch_size)
    return invalid_argument("accumulate: bags [" + std::to_string(bag_begin) + ", " + std::to_string(bag_end) +
                            ") are not the next ones (bag " + std::to_string(c.next_bag) + " is next)");
  const auto pd = static_cast<size_t>(pooled_dim());
  if (grad_pooled.size() != static_cast<size_t>(bag_end - bag_begin) * pd)
    return invalid_argument("accumulate: grad_pooled has " + std::to_string(grad_pooled.size()) + " floats, expected " +
                            std::to_string(static_cast<size_t>(bag_end - bag_begin) * pd));
  if (grad_seq.size() != c.seq.size()) return invalid_argument("accumulate: one gradient per sequence feature expected");
  for (size_t s = 0; s < c.seq.size(); ++s) {
    const auto& off = c.batch.features[c.seq_feature[s]].offsets;
    const auto lo = static_cast<size_t>(off[static_cast<size_t>(bag_begin)] * c.seq_dim[s]);
    const auto hi = static_cast<size_t>(off[static_cast<size_t>(bag_end)] * c.seq_dim[s]);
    if (grad_seq[s].size() != hi - lo)
      return invalid_argument("accumulate: sequence gradient " + std::to_string(s) + " has " + std::to_string(grad_seq[s].size()) +
                              " floats, expected " + std::to_string(hi - lo));
  }
  std::copy(grad_pooled.begin(), grad_pooled.end(), c.pooled.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(bag_begin) * pd));
  for (size_t s = 0; s < c.seq.size(); ++s) {
    const auto& off = c.batch.features[c.seq_feature[s]].offsets;
    const auto lo = static_cast<std::ptrdiff_t>(off[static_cast<size_t>(bag_begin)] * c.seq_dim[s]);
    std::copy(grad_seq[s].begin(), grad_seq[s].end(), c.seq[s].begin() + lo);
  }
  c.next_bag = bag_end;
  return Status();
}

Result<UpdateReport> EmbeddingTables::apply_accumulated() {
  if (!copied_) return failed_precondition("apply_accumulated: no accumulation is open (begin_accumulation first)");
  if (copied_->next_bag != copied_->batch.batch_size)
    return failed_precondition("apply_accumulated: bags [" + std::to_string(copied_->next_bag) + ", " +
                               std::to_string(copied_->batch.batch_size) + ") have no gradients yet");
  const std::unique_ptr<CopiedGradients> c = std::move(copied_);
  std::vector<std::span<const float>> seq(c->seq.begin(), c->seq.end());
  return backward_update(c->batch, c->pooled, seq, c->update);
}

void EmbeddingTables::discard_accumulation() { copied_.reset(); }

}  // namespace leanemb
