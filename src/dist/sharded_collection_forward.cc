// ShardedEmbeddingCollection::forward and prefetch: every id goes to its owner, the owners
// serve the rows, the requester pools them (invariants and wire formats:
// sharded_collection_internal.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "dist/sharded_collection.h"
#include "dist/sharded_collection_internal.h"

namespace leanemb::dist {

using sharded_internal::append_bytes;
using sharded_internal::append_uint;
using sharded_internal::displacements;
using sharded_internal::ByteReader;
using sharded_internal::widen_uint;

void ShardedEmbeddingCollection::Impl::route(const SparseBatch& batch, bool valid, Requests* rp) const {
  const auto p = static_cast<size_t>(comm->size());
  const auto nf = static_cast<size_t>(num_features);
  Requests& r = *rp;
  r.per_owner.resize(p);
  for (auto& v : r.per_owner) v.assign(nf, 0);
  r.owner_of.resize(nf);
  for (auto& v : r.owner_of) v.clear();
  if (!valid) return;  // empty requests: this rank still takes part
  for (size_t f = 0; f < nf; ++f) {
    const int t = feature_table[f];
    r.owner_of[f].reserve(batch.features[f].ids.size());
    for (int64_t id : batch.features[f].ids) {
      const int o = owner(t, id);
      r.per_owner[static_cast<size_t>(o)].push_back(owner_id(t, id));
      ++r.per_owner[static_cast<size_t>(o)][f];
      r.owner_of[f].push_back(o);
    }
  }
}

Status ShardedEmbeddingCollection::Impl::exchange_requests(const SparseBatch& batch, bool valid, Served* out) {
  const auto p = static_cast<size_t>(comm->size());
  const auto nf = static_cast<size_t>(num_features);
  Scratch& sc = *scratch;
  route(batch, valid, &sc.req);
  sc.begin_send(p);
  for (size_t o = 0; o < p; ++o) {
    const size_t before = sc.send.size();
    const std::span<const int64_t> all(sc.req.per_owner[o]);
    append_bytes(&sc.send, all.first(nf));  // [F] counts
    append_uint(&sc.send, all.subspan(nf), id_bytes);
    sc.send_counts[o] = static_cast<int64_t>(sc.send.size() - before);
  }
  LEANEMB_RETURN_IF_ERROR(comm->all_to_all_v_alloc(sc.send, sc.send_counts, &sc.recv, &sc.recv_counts));
  // Parse every requester's message, then lay the ids out per table in (feature, requester)
  // order: the order of the concatenated global batch.
  out->counts.resize(p);
  out->first.assign(p, std::vector<size_t>(nf, 0));
  std::vector<std::vector<std::span<const uint8_t>>> raw(p, std::vector<std::span<const uint8_t>>(nf));
  const std::vector<int64_t> disp = displacements(sc.recv_counts);
  for (size_t q = 0; q < p; ++q) {
    ByteReader rd(std::span<const uint8_t>(sc.recv).subspan(static_cast<size_t>(disp[q]), static_cast<size_t>(sc.recv_counts[q])));
    bool ok = rd.array(nf, &out->counts[q]);
    for (size_t f = 0; f < nf && ok; ++f)
      ok = out->counts[q][f] >= 0 && rd.view(static_cast<size_t>(out->counts[q][f]) * id_bytes, &raw[q][f]);
    if (!ok || !rd.done()) return internal_error("dist: malformed request from rank " + std::to_string(q));
  }
  auto& table_ids = sc.table_ids;
  table_ids.resize(static_cast<size_t>(num_tables));
  for (auto& v : table_ids) v.clear();
  for (size_t f = 0; f < nf; ++f) {
    auto& ids = table_ids[static_cast<size_t>(feature_table[f])];
    for (size_t q = 0; q < p; ++q) {
      out->first[q][f] = ids.size();
      widen_uint(raw[q][f], static_cast<size_t>(out->counts[q][f]), id_bytes, &ids);
    }
  }
  return Status::ok_status();
}

SparseBatch ShardedEmbeddingCollection::Impl::rows_batch(std::vector<std::vector<int64_t>>* offsets) const {
  static const int64_t kEmpty[2] = {0, 0};
  SparseBatch lb;
  lb.batch_size = 1;
  for (int f = 0; f < num_features; ++f) lb.features.push_back({{}, std::span<const int64_t>(kEmpty, 2), {}});
  offsets->resize(static_cast<size_t>(num_tables));
  for (int t = 0; t < num_tables; ++t) {
    const auto& ids = scratch->table_ids[static_cast<size_t>(t)];
    (*offsets)[static_cast<size_t>(t)] = {0, static_cast<int64_t>(ids.size())};
    lb.features.push_back({ids, (*offsets)[static_cast<size_t>(t)], {}});
  }
  return lb;
}

Status ShardedEmbeddingCollection::Impl::serve(ForwardMode mode, Served* out) {
  // One sequence lookup per table ("rows" features); the global features get empty bags.
  std::vector<std::vector<int64_t>> offsets;
  const SparseBatch lb = rows_batch(&offsets);
  std::vector<std::span<float>> seq_out;
  out->table_rows.resize(static_cast<size_t>(num_tables));
  out->rows = 0;
  for (int t = 0; t < num_tables; ++t) {
    const auto ts = static_cast<size_t>(t);
    const size_t n = scratch->table_ids[ts].size();
    out->table_rows[ts].resize(n * static_cast<size_t>(local->layout(t).dim));
    seq_out.emplace_back(out->table_rows[ts]);
    out->rows += static_cast<int64_t>(n);
  }
  std::vector<float> unused(static_cast<size_t>(local->pooled_dim()));
  return local->forward(lb, unused, seq_out, mode);
}

Status ShardedEmbeddingCollection::Impl::encode_replies(const Served& served, PVec<uint8_t>* send,
                                                        std::vector<int64_t>* send_counts) const {
  const DType pd = options.forward_payload;
  send->clear();
  for (size_t q = 0; q < served.counts.size(); ++q) {
    const size_t before = send->size();
    for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
      const auto t = static_cast<size_t>(feature_table[f]);
      const auto dim = static_cast<size_t>(feature_dim[f]);
      const auto n = static_cast<size_t>(served.counts[q][f]);
      const size_t at = send->size();
      send->resize(at + n * payload_bytes_per_row(pd, feature_dim[f]));
      const auto rows = std::span<const float>(served.table_rows[t]).subspan(served.first[q][f] * dim, n * dim);
      LEANEMB_RETURN_IF_ERROR(encode_rows(pd, feature_dim[f], rows, std::span<uint8_t>(*send).subspan(at)));
    }
    (*send_counts)[q] = static_cast<int64_t>(send->size() - before);
  }
  return Status::ok_status();
}

std::vector<int64_t> ShardedEmbeddingCollection::Impl::reply_counts(const Requests& req) const {
  std::vector<int64_t> counts(req.per_owner.size(), 0);
  for (size_t o = 0; o < counts.size(); ++o) {
    for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
      counts[o] += req.per_owner[o][f] * static_cast<int64_t>(payload_bytes_per_row(options.forward_payload, feature_dim[f]));
    }
  }
  return counts;
}

Status ShardedEmbeddingCollection::Impl::pool(const SparseBatch& batch, const Requests& req, std::span<const uint8_t> replies,
                                              const std::vector<int64_t>& counts, std::span<float> pooled_out,
                                              std::span<const std::span<float>> seq_out) const {
  const DType pd = options.forward_payload;
  const size_t p = req.per_owner.size();
  const std::vector<int64_t> disp = displacements(counts);
  std::vector<size_t> block_at(disp.begin(), disp.end() - 1);
  const int64_t ldo = global_pooled_dim;
  size_t seq_index = 0;
  for (size_t f = 0; f < static_cast<size_t>(num_features); ++f) {
    const int64_t dim = feature_dim[f];
    const auto d = static_cast<size_t>(dim);
    auto& rows = scratch->owner_rows;  // this feature's rows from each owner
    rows.resize(p);
    for (size_t o = 0; o < p; ++o) {
      const auto n = static_cast<size_t>(req.per_owner[o][f]);
      const size_t bytes = n * payload_bytes_per_row(pd, dim);
      rows[o].resize(n * d);
      LEANEMB_RETURN_IF_ERROR(decode_rows(pd, dim, replies.subspan(block_at[o], bytes), rows[o]));
      block_at[o] += bytes;
    }
    std::vector<size_t> next(p, 0);
    const FeatureInput& in = batch.features[f];
    if (is_seq(f)) {  // the rows themselves, in position order
      float* out = seq_out[seq_index++].data();
      for (size_t i = 0; i < in.ids.size(); ++i) {
        const auto o = static_cast<size_t>(req.owner_of[f][i]);
        std::memcpy(out + i * d, rows[o].data() + next[o]++ * d, d * 4);
      }
      continue;
    }
    const float* w = in.weights.empty() ? nullptr : in.weights.data();
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      float* out = pooled_out.data() + b * ldo + global_offset[f];
      std::fill(out, out + dim, 0.0f);
      const int64_t lo = in.offsets[static_cast<size_t>(b)], hi = in.offsets[static_cast<size_t>(b + 1)];
      for (int64_t i = lo; i < hi; ++i) {
        const auto o = static_cast<size_t>(req.owner_of[f][static_cast<size_t>(i)]);
        const float* x = rows[o].data() + next[o]++ * d;
        if (w) {
          const float wi = w[i];
          for (size_t j = 0; j < d; ++j) out[j] += wi * x[j];
        } else {
          for (size_t j = 0; j < d; ++j) out[j] += x[j];
        }
      }
      if (pooling[f] == PoolingMode::kMean && hi > lo) {
        const float n = static_cast<float>(hi - lo);
        for (size_t j = 0; j < d; ++j) out[j] /= n;
      }
    }
  }
  return Status::ok_status();
}

// The buffers grow through AccountedResource, which throws std::bad_alloc when the comm
// allocator refuses (a budget): reported as ResourceExhausted. The other ranks then fail in the
// collective this rank no longer makes (its timeout), so the run ends, as an out-of-memory
// inside a collective must.
Status ShardedEmbeddingCollection::forward(const SparseBatch& input, std::span<float> pooled_out,
                                           std::span<const std::span<float>> seq_out, ForwardMode mode) try {
  Impl& im = *impl_;
  im.eval_forward = mode == ForwardMode::kEval;
  Communicator& comm = *im.comm;
  const auto p = static_cast<size_t>(comm.size());
  const uint64_t sent0 = im.bytes_sent();
  table_internal::CheckedBatch cb;
  const Status valid = im.begin_call(input, pooled_out.size(), seq_out, "forward", &cb);
  const SparseBatch& batch = Impl::batch_or_none(valid, cb);

  // 1. Requests: per owner, [F] counts then the ids, in (feature, bag, position) order.
  Impl::Scratch& sc = *im.scratch;
  Impl::Served& served = sc.served;
  LEANEMB_RETURN_IF_ERROR(im.exchange_requests(batch, valid.ok(), &served));

  // 2. Serve the requests (in this call's mode: every rank passes the same one); every rank
  // learns whether every rank succeeded.
  const Status lookup = im.serve(mode, &served);
  LEANEMB_RETURN_IF_ERROR(im.agree(valid.ok() ? lookup : valid, "forward"));

  // 3. Replies: to each requester, per feature, its rows in request order; then pool.
  auto& send = sc.send;
  auto& send_counts = sc.send_counts;
  LEANEMB_RETURN_IF_ERROR(im.encode_replies(served, &send, &send_counts));
  uint64_t payload = 0;  // the replies are encoded rows only
  for (size_t q = 0; q < p; ++q)
    if (static_cast<int>(q) != comm.rank()) payload += static_cast<uint64_t>(send_counts[q]);
  const std::vector<int64_t> counts = im.reply_counts(sc.req);
  sc.recv.resize(static_cast<size_t>(displacements(counts)[p]));
  LEANEMB_RETURN_IF_ERROR(comm.all_to_all_v(send, send_counts, sc.recv, counts));
  LEANEMB_RETURN_IF_ERROR(im.pool(batch, sc.req, sc.recv, counts, pooled_out, seq_out));
  im.stats.forward_bytes_sent = im.bytes_sent() - sent0;
  im.stats.forward_payload_bytes_sent = payload;
  im.stats.rows_served = served.rows;
  im.totals.bytes_sent += im.stats.forward_bytes_sent;
  im.totals.payload_bytes_sent += payload;
  ++im.totals.forward_calls;
  return Status::ok_status();
} catch (const std::bad_alloc&) {
  return resource_exhausted("dist: forward: the communication buffers (kCommBuffers) exceed their allocator's budget");
}

Status ShardedEmbeddingCollection::prefetch(const SparseBatch& next) try {
  Impl& im = *impl_;
  im.ensure_reserved();
  table_internal::CheckedBatch cb;
  const Status valid = im.check(next, &cb);
  Impl::Served served(im.resource.get());
  LEANEMB_RETURN_IF_ERROR(im.exchange_requests(Impl::batch_or_none(valid, cb), valid.ok(), &served));
  std::vector<std::vector<int64_t>> offsets;
  const Status started = im.local->prefetch(im.rows_batch(&offsets));
  return im.agree(valid.ok() ? started : valid, "prefetch");
} catch (const std::bad_alloc&) {
  return resource_exhausted("dist: prefetch: the communication buffers (kCommBuffers) exceed their allocator's budget");
}

}  // namespace leanemb::dist
