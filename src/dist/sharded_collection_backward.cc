// ShardedEmbeddingCollection::backward_update: each bag's gradient goes to the owners of its
// ids, found-inf and errors are agreed by every rank, each owner updates its rows (invariants
// and wire formats: sharded_collection_internal.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <new>
#include <string>

#include "dist/sharded_collection.h"
#include "dist/sharded_collection_internal.h"

namespace leanemb::dist {

using sharded_internal::all_finite;
using sharded_internal::max_abs_of;
using sharded_internal::append_bytes;
using sharded_internal::append_uint;
using sharded_internal::displacements;
using sharded_internal::ByteReader;
using sharded_internal::widen_uint;

void ShardedEmbeddingCollection::Impl::split_gradients(const SparseBatch& batch, std::span<const float> grad_pooled,
                                                       std::span<const std::span<const float>> grad_seq, bool valid,
                                                       std::vector<BagGradients>* outp) const {
  const auto p = static_cast<size_t>(comm->size());
  const auto nf = static_cast<size_t>(num_features);
  std::vector<BagGradients>& out = *outp;
  while (out.size() < p) out.emplace_back(resource.get());
  for (auto& o : out) {
    o.bags.assign(nf, 0);
    o.scaled.assign(nf, 0);
    o.counts.clear();
    o.rows.clear();
    o.scales.clear();
    o.grads.resize(nf);
    for (auto& g : o.grads) g.clear();
  }
  if (!valid) return;  // empty messages: this rank still takes part
  const int64_t ldo = global_pooled_dim;
  std::vector<int64_t> in_bag(p, 0);
  std::vector<size_t> touched;
  size_t seq_index = 0;
  for (size_t f = 0; f < nf; ++f) {
    const FeatureInput& in = batch.features[f];
    const int t = feature_table[f];
    const auto d = static_cast<size_t>(feature_dim[f]);
    // Scales other than 1 exist only with per-id weights or mean pooling.
    const int64_t scaled = pooling[f] == PoolingMode::kMean || !in.weights.empty() ? 1 : 0;
    for (auto& o : out) o.scaled[f] = scaled;
    if (is_seq(f)) {  // each position is a bag of one id with its own gradient row
      const float* g = grad_seq[seq_index++].data();
      for (size_t i = 0; i < in.ids.size(); ++i) {
        const int64_t id = in.ids[i];
        BagGradients& m = out[static_cast<size_t>(owner(t, id))];
        m.rows.push_back(owner_id(t, id));
        if (scaled) m.scales.push_back(in.weights[i]);
        m.counts.push_back(1);
        m.grads[f].insert(m.grads[f].end(), g + i * d, g + (i + 1) * d);
        ++m.bags[f];
      }
      continue;
    }
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      const int64_t lo = in.offsets[static_cast<size_t>(b)], hi = in.offsets[static_cast<size_t>(b + 1)];
      // The single-process backward's scale of each contribution, bit for bit.
      const float inv_len = pooling[f] == PoolingMode::kMean ? 1.0f / static_cast<float>(hi - lo) : 1.0f;
      touched.clear();
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t id = in.ids[static_cast<size_t>(i)];
        const auto o = static_cast<size_t>(owner(t, id));
        const float w = in.weights.empty() ? 1.0f : in.weights[static_cast<size_t>(i)];
        out[o].rows.push_back(owner_id(t, id));
        if (scaled) out[o].scales.push_back(pooling[f] == PoolingMode::kMean ? w * inv_len : w);
        if (in_bag[o]++ == 0) touched.push_back(o);
      }
      const float* g = grad_pooled.data() + b * ldo + global_offset[f];
      for (size_t o : touched) {
        out[o].counts.push_back(in_bag[o]);
        out[o].grads[f].insert(out[o].grads[f].end(), g, g + d);
        ++out[o].bags[f];
        in_bag[o] = 0;
      }
    }
  }
}
Status ShardedEmbeddingCollection::Impl::serialize(const std::vector<BagGradients>& out, PVec<uint8_t>* send,
                                                   std::vector<int64_t>* send_counts) const {
  const DType pd = options.backward_payload;
  for (size_t o = 0; o < out.size(); ++o) {
    const size_t before = send->size();
    const BagGradients& m = out[o];
    append_bytes(send, std::span<const int64_t>(m.bags));
    append_bytes(send, std::span<const int64_t>(m.scaled));
    append_uint(send, std::span<const int64_t>(m.counts), 4);  // ids per bag
    append_uint(send, std::span<const int64_t>(m.rows), id_bytes);
    append_bytes(send, std::span<const float>(m.scales));
    for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
      const size_t at = send->size();
      send->resize(at + static_cast<size_t>(out[o].bags[f]) * payload_bytes_per_row(pd, feature_dim[f]));
      LEANEMB_RETURN_IF_ERROR(encode_rows(pd, feature_dim[f], out[o].grads[f], std::span<uint8_t>(*send).subspan(at)));
    }
    (*send_counts)[o] = static_cast<int64_t>(send->size() - before);
  }
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::Impl::parse_gradients(std::span<const uint8_t> recv, const std::vector<int64_t>& counts,
                                                         std::vector<BagGradients>* in) const {
  const DType pd = options.backward_payload;
  const auto nf = static_cast<size_t>(num_features);
  const std::vector<int64_t> disp = displacements(counts);
  while (in->size() < counts.size()) in->emplace_back(resource.get());
  for (size_t q = 0; q < counts.size(); ++q) {
    ByteReader rd(recv.subspan(static_cast<size_t>(disp[q]), static_cast<size_t>(counts[q])));
    BagGradients& m = (*in)[q];
    bool ok = rd.array(nf, &m.bags) && rd.array(nf, &m.scaled);
    int64_t num_bags = 0, num_ids = 0, num_scaled = 0;
    for (size_t f = 0; f < nf && ok; ++f) {
      ok = m.bags[f] >= 0 && (m.scaled[f] == 0 || m.scaled[f] == 1);
      num_bags += m.bags[f];
    }
    std::span<const uint8_t> raw;
    m.counts.clear();
    m.rows.clear();
    ok = ok && rd.view(static_cast<size_t>(num_bags) * 4, &raw);
    if (ok) widen_uint(raw, static_cast<size_t>(num_bags), 4, &m.counts);
    size_t bag = 0;
    for (size_t f = 0; f < nf && ok; ++f) {
      for (int64_t k = 0; k < m.bags[f] && ok; ++k, ++bag) {
        ok = m.counts[bag] > 0;
        num_ids += m.counts[bag];
        if (m.scaled[f]) num_scaled += m.counts[bag];
      }
    }
    ok = ok && rd.view(static_cast<size_t>(num_ids) * id_bytes, &raw);
    if (ok) widen_uint(raw, static_cast<size_t>(num_ids), id_bytes, &m.rows);
    ok = ok && rd.array(static_cast<size_t>(num_scaled), &m.scales);
    m.raw.resize(nf);
    for (size_t f = 0; f < nf && ok; ++f) {
      const auto n = static_cast<size_t>(m.bags[f]);
      ok = rd.view(n * payload_bytes_per_row(pd, feature_dim[f]), &m.raw[f]);
    }
    if (!ok || !rd.done()) return internal_error("dist: backward_update: malformed gradients from rank " + std::to_string(q));
  }
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::Impl::assemble_local(const std::vector<BagGradients>& in, bool check_finite,
                                                        int64_t* nonfinite) {
  // Per feature, the bags of rank 0, 1, ..., padded with empty bags to a common count.
  const DType pd = options.backward_payload;
  const auto nf = static_cast<size_t>(num_features);
  const int64_t ldo = local->pooled_dim();
  int64_t local_bags = 0;
  stats.bags_received = 0;
  for (size_t f = 0; f < nf; ++f) {
    int64_t n = 0;
    for (const BagGradients& m : in) n += m.bags[f];
    local_bags = std::max(local_bags, n);
    stats.bags_received += n;
  }
  auto& ids = scratch->ids;
  auto& offsets = scratch->offsets;
  auto& weights = scratch->weights;
  ids.resize(nf);
  offsets.resize(nf);
  weights.resize(nf);
  // Every element is written below (a received gradient, or 0 for a padding bag), so the
  // buffer is not cleared first.
  PVec<float>& grads = scratch->grads;
  grads.resize(static_cast<size_t>(local_bags * ldo));
  std::vector<size_t> bag_cursor(in.size(), 0), id_cursor(in.size(), 0), scale_cursor(in.size(), 0);
  for (size_t f = 0; f < nf; ++f) {
    ids[f].clear();
    offsets[f].clear();
    weights[f].clear();
    const auto d = static_cast<size_t>(feature_dim[f]);
    const size_t row_bytes = payload_bytes_per_row(pd, feature_dim[f]);
    const int64_t off = local->pooled_offset(static_cast<int>(f));
    offsets[f].push_back(0);
    for (size_t q = 0; q < in.size(); ++q) {
      const BagGradients& m = in[q];
      const auto first = static_cast<int64_t>(offsets[f].size() - 1);
      for (int64_t k = 0; k < m.bags[f]; ++k) {
        const int64_t c = m.counts[bag_cursor[q]++];
        for (int64_t i = 0; i < c; ++i, ++id_cursor[q]) {
          ids[f].push_back(m.rows[id_cursor[q]]);
          weights[f].push_back(m.scaled[f] ? m.scales[scale_cursor[q]++] : 1.0f);
        }
        offsets[f].push_back(static_cast<int64_t>(ids[f].size()));
      }
      // The bags' gradients, decoded into their rows of the local gradient.
      for (int64_t k = 0; k < m.bags[f]; ++k) {
        float* dst = grads.data() + (first + k) * ldo + off;
        LEANEMB_RETURN_IF_ERROR(decode_rows(pd, feature_dim[f], m.raw[f].subspan(static_cast<size_t>(k) * row_bytes, row_bytes),
                                            std::span<float>(dst, d)));
        // fp32 payloads are the bits the requester checked before sending.
        if (check_finite && pd != DType::kF32 && !all_finite(std::span<const float>(dst, d))) *nonfinite = 1;
      }
    }
    for (auto bag = static_cast<int64_t>(offsets[f].size() - 1); bag < local_bags; ++bag)
      std::fill_n(grads.data() + bag * ldo + off, d, 0.0f);
    offsets[f].resize(static_cast<size_t>(local_bags + 1), static_cast<int64_t>(ids[f].size()));
  }
  SparseBatch& lb = scratch->local_batch;
  lb.batch_size = local_bags;
  lb.features.clear();
  for (size_t f = 0; f < nf; ++f) lb.features.push_back({ids[f], offsets[f], weights[f]});
  scratch->no_ids.assign(static_cast<size_t>(local_bags + 1), 0);
  for (int t = 0; t < num_tables; ++t) lb.features.push_back({{}, scratch->no_ids, {}});
  return Status::ok_status();
}

namespace {
// SM3's column accumulators are global statistics: every rank starts a step with the same
// values and raises them to the nu of the rows it owns, so their max over the ranks is the
// single process's (max is exact: the same bits at every P). Collective; every rank has the same
// tables.
Status all_reduce_column_state(EmbeddingCollection& local, Communicator& comm) {
  for (int t = 0; t < local.num_tables(); ++t) {
    const std::span<float> col = local.column_state(t);
    if (!col.empty()) LEANEMB_RETURN_IF_ERROR(comm.all_reduce(col, ReduceOp::kMax));
  }
  return Status();
}
}  // namespace

Result<UpdateReport> ShardedEmbeddingCollection::backward_update(const SparseBatch& input, std::span<const float> grad_pooled,
                                                                 std::span<const std::span<const float>> grad_seq,
                                                                 const UpdateOptions& update) try {
  Impl& im = *impl_;
  Communicator& comm = *im.comm;
  const auto p = static_cast<size_t>(comm.size());
  const uint64_t sent0 = im.bytes_sent();
  table_internal::CheckedBatch cb;
  Status valid = im.begin_call(input, grad_pooled.size(), grad_seq, "backward_update", &cb);
  // After a kEval forward: refused through the agreement below, so that the ranks stay in step
  // even if they disagreed on the mode (the owners' collections refuse the update too).
  if (valid.ok() && im.eval_forward)
    valid = failed_precondition(
        "backward_update: the most recent forward was an evaluation forward (ForwardMode::kEval), which looks ids up "
        "without mapping them for an update; run a training forward (ForwardMode::kTrain) of the batch first");
  if (valid.ok() && !std::isfinite(update.grad_multiplier)) valid = invalid_argument("grad_multiplier is not finite");
  if (valid.ok() && !(update.max_abs_grad > 0)) valid = invalid_argument("max_abs_grad must be > 0 (+Inf: no bound)");
  // nonfinite: 1 an Inf/NaN gradient, 2 a finite one above max_abs_grad (summed over ranks: > 0
  // skips the step everywhere). The bound applies to each given gradient here, before the
  // exchange, so that every rank agrees before any owner updates; the owners' collections do
  // not apply it again (one rank skipping alone would put the ranks out of step).
  int64_t nonfinite = 0;
  if (valid.ok() && update.check_finite) {
    nonfinite = all_finite(grad_pooled) ? 0 : 1;
    for (const auto& s : grad_seq) nonfinite |= all_finite(s) ? 0 : 1;
    if (nonfinite == 0 && std::isfinite(update.max_abs_grad)) {
      const double lim = static_cast<double>(update.max_abs_grad) / std::fabs(static_cast<double>(update.grad_multiplier));
      nonfinite = max_abs_of(grad_pooled) > lim ? 2 : 0;
      for (const auto& s : grad_seq) nonfinite = max_abs_of(s) > lim ? 2 : nonfinite;
    }
  }
  const SparseBatch& batch = Impl::batch_or_none(valid, cb);

  // 1. Per owner: bags per feature, ids per bag, ids, scales, bag gradients.
  Impl::Scratch& sc = *im.scratch;
  sc.begin_send(p);
  im.split_gradients(batch, grad_pooled, grad_seq, valid.ok(), &sc.out_bags);
  uint64_t payload = 0;  // the encoded gradients
  for (size_t o = 0; o < p; ++o) {
    if (static_cast<int>(o) == comm.rank()) continue;
    for (size_t f = 0; f < sc.out_bags[o].grads.size(); ++f)
      payload += static_cast<uint64_t>(sc.out_bags[o].bags[f]) * payload_bytes_per_row(im.options.backward_payload, im.feature_dim[f]);
  }
  LEANEMB_RETURN_IF_ERROR(im.serialize(sc.out_bags, &sc.send, &sc.send_counts));
  LEANEMB_RETURN_IF_ERROR(comm.all_to_all_v_alloc(sc.send, sc.send_counts, &sc.recv, &sc.recv_counts));

  // 2. Parse and decode; found-inf (given and decoded gradients) and errors agreed by all ranks.
  std::vector<Impl::BagGradients>& in = sc.in_bags;
  Status parsed = im.parse_gradients(sc.recv, sc.recv_counts, &in);
  if (parsed.ok() && valid.ok()) parsed = im.assemble_local(in, update.check_finite, &nonfinite);
  std::vector<int64_t> extra = {nonfinite & 1, nonfinite >> 1};
  LEANEMB_RETURN_IF_ERROR(im.agree(valid.ok() ? parsed : valid, "backward_update", &extra));
  UpdateReport report;
  if (extra[0] || extra[1]) {
    report.skipped_nonfinite = true;  // on every rank: no row, no state, no step changes
    report.skipped_huge_grad = extra[0] == 0;
  } else {
    // 3. The owner's update over the received bags, requesters in rank order.
    const std::vector<std::span<const float>> no_seq_grads(static_cast<size_t>(im.num_tables));
    // A local failure here (a budget, a cache's I/O) is this rank's alone: the others have
    // updated. Agreement keeps the ranks in step; the run must stop (the error is returned).
    UpdateOptions owner = update;
    owner.max_abs_grad = INFINITY;  // checked above, on every rank alike
    auto local = im.local->backward_update(sc.local_batch, sc.grads, no_seq_grads, owner);
    LEANEMB_RETURN_IF_ERROR(im.agree(local.status(), "backward_update"));
    LEANEMB_RETURN_IF_ERROR(all_reduce_column_state(*im.local, *im.comm));
    report = local.value();
    report.lookups = 0;
    for (const auto& f : batch.features) report.lookups += static_cast<int64_t>(f.ids.size());
  }
  im.stats.backward_bytes_sent = im.bytes_sent() - sent0;
  im.stats.backward_payload_bytes_sent = payload;
  im.totals.bytes_sent += im.stats.backward_bytes_sent;
  im.totals.payload_bytes_sent += payload;
  ++im.totals.backward_calls;
  return report;
} catch (const std::bad_alloc&) {
  return resource_exhausted("dist: backward_update: the communication buffers (kCommBuffers) exceed their allocator's budget");
}

}  // namespace leanemb::dist
