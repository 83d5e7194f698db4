// EmbeddingTables' bf16 outputs and output gradients (leanemb/tables.h, "bf16 outputs and output
// gradients"): forward and accumulate called over consecutive chunks of bags through the
// caller's fp32 scratch, rounding (forward) or widening (gradients) each chunk, so that no layer
// of the stack needs a 16-bit path of its own.
#include <algorithm>
#include <string>
#include <vector>

#include "core/half.h"
#include "leanemb/communicator.h"
#include "leanemb/tables.h"

namespace leanemb {
namespace {

// The sequence (kNone) features and their dims, in feature order.
struct SeqFeatures {
  std::vector<size_t> feature;
  std::vector<int64_t> dim;
};
SeqFeatures seq_features(const CollectionOptions& o) {
  SeqFeatures s;
  for (size_t f = 0; f < o.features.size(); ++f) {
    if (o.features[f].pooling != PoolingMode::kNone) continue;
    s.feature.push_back(f);
    s.dim.push_back(o.tables[static_cast<size_t>(o.features[f].table)].dim);
  }
  return s;
}

// The offsets this file reads must describe the batch (forward checks the rest per chunk).
Status check_offsets(const SparseBatch& batch, size_t num_features, const char* what) {
  if (batch.batch_size < 0 || batch.features.size() != num_features)
    return invalid_argument(std::string(what) + ": the batch has " + std::to_string(batch.features.size()) + " features, the tables " +
                            std::to_string(num_features));
  for (size_t f = 0; f < batch.features.size(); ++f) {
    const FeatureInput& in = batch.features[f];
    bool ok = in.offsets.size() == static_cast<size_t>(batch.batch_size) + 1 && in.offsets[0] == 0 &&
              in.offsets.back() == static_cast<int64_t>(in.ids.size());
    for (size_t b = 1; ok && b < in.offsets.size(); ++b) ok = in.offsets[b] >= in.offsets[b - 1];
    if (!ok)
      return invalid_argument(std::string(what) + ": feature " + std::to_string(f) +
                              "'s offsets are not B + 1 non-decreasing values from 0 to the number of ids");
  }
  return Status();
}

// Output floats of bag b: pooled_dim plus each sequence feature's ids x dim.
int64_t bag_floats(const SparseBatch& batch, const SeqFeatures& sf, int64_t pooled_dim, int64_t b) {
  int64_t n = pooled_dim;
  for (size_t s = 0; s < sf.feature.size(); ++s) {
    const auto& off = batch.features[sf.feature[s]].offsets;
    n += (off[static_cast<size_t>(b + 1)] - off[static_cast<size_t>(b)]) * sf.dim[s];
  }
  return n;
}

// The ends of the chunks covering bags [b0, b1): each the longest run of the next bags whose
// outputs fit in `cap` floats.
Result<std::vector<int64_t>> chunk_ends(const SparseBatch& batch, const SeqFeatures& sf, int64_t pooled_dim, int64_t b0,
                                        int64_t b1, size_t cap, const char* what) {
  std::vector<int64_t> ends;
  int64_t used = 0;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t n = bag_floats(batch, sf, pooled_dim, b);
    if (static_cast<size_t>(n) > cap)
      return invalid_argument(std::string(what) + ": bag " + std::to_string(b) + "'s outputs are " + std::to_string(n) +
                              " floats, the scratch holds " + std::to_string(cap));
    if (b > b0 && static_cast<size_t>(used + n) > cap) {
      ends.push_back(b);
      used = 0;
    }
    used += n;
  }
  if (b1 > b0) ends.push_back(b1);
  return ends;
}

// Bags [b0, b1) of `batch` as a batch of their own; *offsets holds the rebased offsets.
SparseBatch sub_batch(const SparseBatch& batch, int64_t b0, int64_t b1, std::vector<std::vector<int64_t>>* offsets) {
  SparseBatch sb;
  sb.batch_size = b1 - b0;
  offsets->resize(batch.features.size());
  for (size_t f = 0; f < batch.features.size(); ++f) {
    const FeatureInput& in = batch.features[f];
    const int64_t lo = in.offsets[static_cast<size_t>(b0)], hi = in.offsets[static_cast<size_t>(b1)];
    auto& off = (*offsets)[f];
    off.clear();
    for (int64_t b = b0; b <= b1; ++b) off.push_back(in.offsets[static_cast<size_t>(b)] - lo);
    const auto n = static_cast<size_t>(hi - lo);
    sb.features.push_back(FeatureInput{in.ids.subspan(static_cast<size_t>(lo), n), off,
                                       in.weights.empty() ? std::span<const float>() : in.weights.subspan(static_cast<size_t>(lo), n)});
  }
  return sb;
}

// Sharded collections: every rank makes as many calls as the rank with the most chunks (the
// others end with empty ones), and a rank's error fails every rank before any call.
Status agree_on_chunks(dist::Communicator* comm, const Status& mine, std::vector<int64_t>* ends, int64_t b1, const char* what) {
  if (comm == nullptr) return mine;
  int64_t v[2] = {mine.ok() ? static_cast<int64_t>(ends->size()) : 0, mine.ok() ? 0 : 1};
  LEANEMB_RETURN_IF_ERROR(comm->all_reduce(std::span<int64_t>(v, 2), dist::ReduceOp::kMax));
  if (!mine.ok()) return mine;
  if (v[1] != 0) return invalid_argument(std::string(what) + ": another rank's batch does not fit its scratch");
  while (static_cast<int64_t>(ends->size()) < v[0]) ends->push_back(b1);
  return Status();
}

// Sizes of bf16 buffers for bags [b0, b1): pooled [b1 - b0, pooled_dim], each sequence feature
// [ids of those bags, dim].
Status check_sizes(const SparseBatch& batch, const SeqFeatures& sf, int64_t pooled_dim, int64_t b0, int64_t b1, size_t pooled,
                   std::span<const size_t> seq, const char* what) {
  if (pooled != static_cast<size_t>((b1 - b0) * pooled_dim))
    return invalid_argument(std::string(what) + ": the pooled buffer has " + std::to_string(pooled) + " elements, expected " +
                            std::to_string((b1 - b0) * pooled_dim));
  if (seq.size() != sf.feature.size())
    return invalid_argument(std::string(what) + ": " + std::to_string(seq.size()) + " sequence buffers for " +
                            std::to_string(sf.feature.size()) + " sequence features");
  for (size_t s = 0; s < seq.size(); ++s) {
    const auto& off = batch.features[sf.feature[s]].offsets;
    const auto want = static_cast<size_t>((off[static_cast<size_t>(b1)] - off[static_cast<size_t>(b0)]) * sf.dim[s]);
    if (seq[s] != want)
      return invalid_argument(std::string(what) + ": sequence buffer " + std::to_string(s) + " has " + std::to_string(seq[s]) +
                              " elements, expected " + std::to_string(want));
  }
  return Status();
}

// Scalar loops, not amp::pack / unpack: src/table must not need src/amp (the tsan preset builds
// the tables without it).
void to_bf16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16_rne(in[i]);
}
void from_bf16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

}  // namespace

int64_t EmbeddingTables::bf16_min_scratch_floats(const SparseBatch& batch) const {
  if (!check_offsets(batch, options().features.size(), "bf16_min_scratch_floats").ok()) return 0;
  const SeqFeatures sf = seq_features(options());
  int64_t most = 0;
  for (int64_t b = 0; b < batch.batch_size; ++b) most = std::max(most, bag_floats(batch, sf, pooled_dim(), b));
  return most;
}

Status EmbeddingTables::forward_bf16(const SparseBatch& batch, std::span<uint16_t> pooled_out,
                                     std::span<const std::span<uint16_t>> seq_out, std::span<float> scratch, ForwardMode mode) {
  const char* what = "forward_bf16";
  const SeqFeatures sf = seq_features(options());
  const int64_t pd = pooled_dim();
  Status mine = check_offsets(batch, options().features.size(), what);
  std::vector<size_t> seq_sizes;
  for (const auto& s : seq_out) seq_sizes.push_back(s.size());
  if (mine.ok()) mine = check_sizes(batch, sf, pd, 0, batch.batch_size, pooled_out.size(), seq_sizes, what);
  std::vector<int64_t> ends;
  if (mine.ok()) {
    auto e = chunk_ends(batch, sf, pd, 0, batch.batch_size, scratch.size(), what);
    if (e.ok()) ends = std::move(e).value();
    mine = e.status();
  }
  LEANEMB_RETURN_IF_ERROR(agree_on_chunks(world_size() > 1 ? communicator() : nullptr, mine, &ends, batch.batch_size, what));
  std::vector<std::vector<int64_t>> offsets;
  std::vector<std::span<float>> seq(sf.feature.size());
  int64_t c0 = 0;
  for (const int64_t c1 : ends) {
    const SparseBatch sb = sub_batch(batch, c0, c1, &offsets);
    size_t at = static_cast<size_t>((c1 - c0) * pd);
    const std::span<float> pooled = scratch.first(at);
    for (size_t s = 0; s < seq.size(); ++s) {
      const size_t n = sb.features[sf.feature[s]].ids.size() * static_cast<size_t>(sf.dim[s]);
      seq[s] = scratch.subspan(at, n);
      at += n;
    }
    LEANEMB_RETURN_IF_ERROR(forward(sb, pooled, seq, mode));
    to_bf16(pooled.data(), pooled.size(), pooled_out.data() + c0 * pd);
    for (size_t s = 0; s < seq.size(); ++s) {
      const int64_t lo = batch.features[sf.feature[s]].offsets[static_cast<size_t>(c0)];
      to_bf16(seq[s].data(), seq[s].size(), seq_out[s].data() + lo * sf.dim[s]);
    }
    c0 = c1;
  }
  return Status();
}

Status EmbeddingTables::accumulate_bf16(const SparseBatch& batch, int64_t bag_begin, int64_t bag_end,
                                        std::span<const uint16_t> grad_pooled, std::span<const std::span<const uint16_t>> grad_seq,
                                        std::span<float> scratch) {
  const char* what = "accumulate_bf16";
  const SeqFeatures sf = seq_features(options());
  const int64_t pd = pooled_dim();
  LEANEMB_RETURN_IF_ERROR(check_offsets(batch, options().features.size(), what));
  if (bag_begin < 0 || bag_end < bag_begin || bag_end > batch.batch_size)
    return invalid_argument(std::string(what) + ": bags [" + std::to_string(bag_begin) + ", " + std::to_string(bag_end) +
                            ") are not bags of the batch");
  std::vector<size_t> seq_sizes;
  for (const auto& s : grad_seq) seq_sizes.push_back(s.size());
  LEANEMB_RETURN_IF_ERROR(check_sizes(batch, sf, pd, bag_begin, bag_end, grad_pooled.size(), seq_sizes, what));
  LEANEMB_ASSIGN_OR_RETURN(const std::vector<int64_t> ends, chunk_ends(batch, sf, pd, bag_begin, bag_end, scratch.size(), what));
  std::vector<std::span<const float>> seq(sf.feature.size());
  int64_t c0 = bag_begin;
  for (const int64_t c1 : ends) {
    size_t at = static_cast<size_t>((c1 - c0) * pd);
    from_bf16(grad_pooled.data() + (c0 - bag_begin) * pd, at, scratch.data());
    const std::span<const float> pooled = scratch.first(at);
    for (size_t s = 0; s < seq.size(); ++s) {
      const auto& off = batch.features[sf.feature[s]].offsets;
      const int64_t lo = off[static_cast<size_t>(c0)], hi = off[static_cast<size_t>(c1)];
      const auto n = static_cast<size_t>((hi - lo) * sf.dim[s]);
      from_bf16(grad_seq[s].data() + (lo - off[static_cast<size_t>(bag_begin)]) * sf.dim[s], n, scratch.data() + at);
      seq[s] = scratch.subspan(at, n);
      at += n;
    }
    LEANEMB_RETURN_IF_ERROR(accumulate(c0, c1, pooled, seq));
    c0 = c1;
  }
  // An empty micro-batch still tells the accumulation where the next one starts.
  if (ends.empty()) return accumulate(bag_begin, bag_end, {}, std::vector<std::span<const float>>(sf.feature.size()));
  return Status();
}

Result<UpdateReport> EmbeddingTables::backward_update_bf16(const SparseBatch& batch, std::span<const uint16_t> grad_pooled,
                                                           std::span<const std::span<const uint16_t>> grad_seq,
                                                           std::span<float> scratch, const UpdateOptions& update) {
  LEANEMB_RETURN_IF_ERROR(begin_accumulation(batch, update));
  Status st = accumulate_bf16(batch, 0, batch.batch_size, grad_pooled, grad_seq, scratch);
  if (world_size() > 1 && communicator() != nullptr) {  // apply is collective: every rank or none
    int64_t failed = st.ok() ? 0 : 1;
    const Status r = communicator()->all_reduce(std::span<int64_t>(&failed, 1), dist::ReduceOp::kMax);
    if (st.ok() && !r.ok()) st = r;
    if (st.ok() && failed != 0) st = invalid_argument("backward_update_bf16: another rank's gradients failed");
  }
  if (!st.ok()) {
    discard_accumulation();
    return st;
  }
  return apply_accumulated();
}

}  // namespace leanemb
