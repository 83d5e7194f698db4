#include "dist/comm_sizes.h"

#include <algorithm>
#include <cmath>
#include <memory_resource>

namespace leanemb::dist {

namespace {

// Ids of a feature with n ids per call that go to an owner holding `share` of its table.
int64_t share_of(int64_t n, double share) {
  if (share <= 0.0 || n == 0) return 0;
  if (share >= 1.0) return n;
  // The balanced count with headroom for skew (relative, and the hottest rows' absolute share,
  // which does not shrink with the owner's share), plus three standard deviations of a binomial
  // draw (what an owner gets of n uniformly hashed ids varies that much on its own).
  const double mean = static_cast<double>(n) * share;
  const double sd = std::sqrt(mean * (1.0 - share));
  const double hot = static_cast<double>(n) * kCommHotShare;
  return std::min(n, static_cast<int64_t>(std::ceil(mean * kCommSkewSlack + hot + kCommSpreadSigmas * sd)));
}

// Bags of a feature that reach an owner with `ids` of its ids: a bag goes there when at least
// one of its ids does; a sequence position is a bag of one id.
int64_t bags_of(const CommFeature& f, int64_t ids) { return f.sequence ? ids : std::min(f.bags, ids); }

}  // namespace

CommBufferCounts comm_buffer_counts(const CommShape& s) {
  const auto p = static_cast<size_t>(s.world);
  const size_t nf = s.features.size();
  size_t nt = 0;
  for (const CommFeature& f : s.features) nt = std::max(nt, static_cast<size_t>(f.table) + 1);
  const auto share = [&](const CommFeature& f, size_t owner) {
    const size_t at = static_cast<size_t>(f.table) * p + owner;
    return at < s.owner_share.size() ? s.owner_share[at] : 0.0;
  };
  const auto fi = [](size_t v) { return static_cast<int64_t>(v); };
  const auto fpb = [&](const CommFeature& f) { return fi(payload_bytes_per_row(s.forward_payload, f.dim)); };
  const auto bpb = [&](const CommFeature& f) { return fi(payload_bytes_per_row(s.backward_payload, f.dim)); };
  const int64_t ib = fi(s.id_bytes), F = fi(nf);

  CommBufferCounts c;
  c.per_owner.assign(p, F);
  c.owner_of.resize(nf);
  c.out_counts.assign(p, 0);
  c.out_rows.assign(p, 0);
  c.out_scales.assign(p, 0);
  c.out_grads.assign(p, std::vector<int64_t>(nf, 0));
  c.owner_rows.assign(p, 0);
  c.table_ids.assign(nt, 0);
  c.table_rows.assign(nt, 0);
  c.local_ids.resize(nf);
  c.local_weights.resize(nf);
  c.local_offsets.resize(nf);
  // Requests and backward messages this rank sends (to every owner) and receives (from every
  // requester: all ranks pass slices of the same shape, so each sends this rank its share).
  int64_t send_req = 0, send_reply = 0, send_bwd = 0;
  int64_t recv_req = 0, recv_reply = 0, recv_bwd = 0;
  int64_t in_counts = 0, in_rows = 0, in_scales = 0, local_bags = 0;
  for (size_t o = 0; o < p; ++o) {
    send_req += 8 * F;
    send_bwd += 16 * F;  // [F] bags, [F] scaled
    recv_req += 8 * F;
    recv_bwd += 16 * F;
  }
  for (size_t k = 0; k < nf; ++k) {
    const CommFeature& f = s.features[k];
    c.owner_of[k] = f.max_ids;
    for (size_t o = 0; o < p; ++o) {  // this rank as the requester
      const int64_t ids = share_of(f.max_ids, share(f, o)), bags = bags_of(f, ids);
      c.per_owner[o] += ids;
      c.owner_rows[o] = std::max(c.owner_rows[o], ids * f.dim);
      c.out_counts[o] += bags;
      c.out_rows[o] += ids;
      if (f.scaled) c.out_scales[o] += ids;
      c.out_grads[o][k] = bags * f.dim;
      send_req += ids * ib;
      recv_reply += ids * fpb(f);
      send_bwd += bags * 4 + ids * ib + (f.scaled ? ids * 4 : 0) + bags * bpb(f);
    }
    // This rank as the owner: the same share from each of the P requesters.
    const int64_t in = share_of(f.max_ids, share(f, static_cast<size_t>(s.rank))), in_bags = bags_of(f, in);
    const int64_t all = fi(p) * in;
    c.table_ids[static_cast<size_t>(f.table)] += all;
    c.table_rows[static_cast<size_t>(f.table)] += all * f.dim;
    recv_req += all * ib;
    send_reply += all * fpb(f);
    recv_bwd += fi(p) * (in_bags * 4 + in * ib + (f.scaled ? in * 4 : 0) + in_bags * bpb(f));
    in_counts += in_bags;
    in_rows += in;
    if (f.scaled) in_scales += in;
    c.local_ids[k] = all;
    c.local_weights[k] = all;
    local_bags = std::max(local_bags, fi(p) * in_bags);
  }
  c.send = std::max({send_req, send_reply, send_bwd});
  c.recv = std::max({recv_req, recv_reply, recv_bwd});
  c.in_counts.assign(p, in_counts);
  c.in_rows.assign(p, in_rows);
  c.in_scales.assign(p, in_scales);
  int64_t pooled_dim = 0;  // the local collection's: every global feature is pooled there
  for (const CommFeature& f : s.features) pooled_dim += f.dim;
  for (size_t k = 0; k < nf; ++k) c.local_offsets[k] = local_bags + 1;
  c.local_grads = local_bags * pooled_dim;
  c.no_ids = local_bags + 1;
  return c;
}

std::vector<double> owner_shares(const ShardPlan& plan, std::span<const uint32_t> partitions) {
  const int P = plan.world_size(), T = plan.num_tables();
  std::vector<double> share(static_cast<size_t>(T) * static_cast<size_t>(P), 0.0);
  for (int t = 0; t < T; ++t) {
    const uint32_t g = static_cast<size_t>(t) < partitions.size() ? partitions[static_cast<size_t>(t)] : 0;
    for (int o = 0; o < P; ++o) {
      // Partition k is rank k * P / g's (ShardedEmbeddingCollection's owner()).
      // Rank o holds partitions [ceil(o * g / P), ceil((o + 1) * g / P)).
      const auto first = [&](int64_t r) { return (r * g + P - 1) / P; };
      const double mine = g > 0 ? static_cast<double>(first(o + 1) - first(o)) / g
                                : static_cast<double>(plan.local_num_rows(t, o)) / static_cast<double>(plan.num_rows(t));
      share[static_cast<size_t>(t) * static_cast<size_t>(P) + static_cast<size_t>(o)] = mine;
    }
  }
  return share;
}

size_t wire_id_bytes(const ShardPlan& plan, std::span<const uint32_t> partitions, bool wide_ids) {
  if (wide_ids) return 8;
  for (int t = 0; t < plan.num_tables(); ++t) {
    if (static_cast<size_t>(t) < partitions.size() && partitions[static_cast<size_t>(t)] > 0) return 8;
    for (int r = 0; r < plan.world_size(); ++r)
      if (plan.local_num_rows(t, r) > int64_t{UINT32_MAX}) return 8;
  }
  return 4;
}

std::vector<size_t> comm_buffer_allocations(const CommBufferCounts& c) {
  std::vector<size_t> out;
  const auto add = [&](int64_t n, size_t elem) {
    if (n > 0) out.push_back(static_cast<size_t>(n) * elem);
  };
  const auto add_all = [&](const std::vector<int64_t>& v, size_t elem, size_t outer) {
    add(static_cast<int64_t>(v.size()), outer);  // the array of vectors itself
    for (int64_t n : v) add(n, elem);
  };
  using V = std::pmr::vector<int64_t>;  // every pmr vector has the same size
  add_all(c.per_owner, 8, sizeof(V));
  add_all(c.owner_of, sizeof(int), sizeof(V));
  add(c.send, 1);
  add(c.recv, 1);
  add_all(c.table_ids, 8, sizeof(V));
  add_all(c.table_rows, 4, sizeof(V));
  add_all(c.owner_rows, 4, sizeof(V));
  for (size_t o = 0; o < c.out_counts.size(); ++o) {
    add(c.out_counts[o], 8);
    add(c.out_rows[o], 8);
    add(c.out_scales[o], 4);
    add_all(c.out_grads[o], 4, sizeof(V));
  }
  for (size_t q = 0; q < c.in_counts.size(); ++q) {
    add(c.in_counts[q], 8);
    add(c.in_rows[q], 8);
    add(c.in_scales[q], 4);
  }
  add_all(c.local_ids, 8, sizeof(V));
  add_all(c.local_weights, 4, sizeof(V));
  add_all(c.local_offsets, 8, sizeof(V));
  add(c.local_grads, 4);
  add(c.no_ids, 8);
  return out;
}

size_t comm_buffer_bytes(const CommBufferCounts& c) {
  size_t total = 0;
  for (size_t b : comm_buffer_allocations(c)) total += b;
  return total;
}

}  // namespace leanemb::dist
