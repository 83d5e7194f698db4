// The collectives on top of the backends' exchange() rounds, and the fixed-order reduction.
//
// Invariant: every collective is a fixed sequence of rounds that depends only on the call's
// arguments that all ranks agree on (size, root, element count), so the rounds of one call
// carry the same sequence numbers on every rank. all_reduce: round 1 sends slice k of the
// buffer to rank k; rank k reduces the P copies of its slice with reduce_in_fixed_order();
// round 2 sends each reduced slice to every rank.
#include "dist/communicator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "dist/local_comm.h"
#include "dist/mpi_comm.h"

namespace leanemb::dist {

std::string_view collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllToAllV: return "all_to_all_v";
    case CollectiveKind::kAllToAllVCounts: return "all_to_all_v (counts)";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown collective";
}

namespace {

template <typename T>
std::span<const uint8_t> as_bytes_of(std::span<const T> s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size_bytes()};
}
template <typename T>
std::span<uint8_t> as_writable_bytes_of(std::span<T> s) {
  return {reinterpret_cast<uint8_t*>(s.data()), s.size_bytes()};
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

template <typename T>
inline T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::kSum) return a + b;
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return a < b ? b : a;
  } else {
    if (op == ReduceOp::kSum) {
      return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));  // wraps
    }
    return a < b ? b : a;
  }
}

template <typename T>
void reduce_fixed(std::span<const std::span<const T>> parts, std::span<T> out, ReduceOp op) {
  const size_t p = parts.size();
  const size_t n = out.size();
  LEANEMB_CHECK(p >= 1, "reduce_in_fixed_order needs at least one part");
  for (const auto& part : parts) LEANEMB_CHECK(part.size() == n, "reduce_in_fixed_order: part size differs from out");
  if (!std::has_single_bit(p)) {
    // Rank order. out may alias no part (parts are const), so accumulate in place.
    std::copy(parts[0].begin(), parts[0].end(), out.begin());
    for (size_t r = 1; r < p; ++r) {
      const T* x = parts[r].data();
      for (size_t i = 0; i < n; ++i) out[i] = combine(out[i], x[i], op);
    }
    return;
  }
  if (p == 1) {
    std::copy(parts[0].begin(), parts[0].end(), out.begin());
    return;
  }
  // Pairwise tree, a block of elements at a time: level 1 combines neighbouring parts into
  // work rows, later levels combine work rows r and r + s.
  constexpr size_t kBlock = 512;
  std::vector<T> work((p / 2) * kBlock);
  for (size_t i0 = 0; i0 < n; i0 += kBlock) {
    const size_t len = std::min(kBlock, n - i0);
    for (size_t r = 0; r < p; r += 2) {
      T* w = work.data() + (r / 2) * kBlock;
      const T* a = parts[r].data() + i0;
      const T* b = parts[r + 1].data() + i0;
      for (size_t j = 0; j < len; ++j) w[j] = combine(a[j], b[j], op);
    }
    // Work row q holds the tree over parts [2q, 2q + 2); combine rows q and q + s/2 at level s.
    for (size_t s = 2; s < p; s *= 2) {
      for (size_t r = 0; r < p; r += 2 * s) {
        T* a = work.data() + (r / 2) * kBlock;
        const T* b = work.data() + ((r + s) / 2) * kBlock;
        for (size_t j = 0; j < len; ++j) a[j] = combine(a[j], b[j], op);
      }
    }
    std::copy(work.begin(), work.begin() + static_cast<ptrdiff_t>(len), out.begin() + static_cast<ptrdiff_t>(i0));
  }
}

}  // namespace

void Communicator::reduce_in_fixed_order(std::span<const std::span<const float>> parts, std::span<float> out, ReduceOp op) {
  reduce_fixed(parts, out, op);
}
void Communicator::reduce_in_fixed_order(std::span<const std::span<const double>> parts, std::span<double> out, ReduceOp op) {
  reduce_fixed(parts, out, op);
}
void Communicator::reduce_in_fixed_order(std::span<const std::span<const int64_t>> parts, std::span<int64_t> out, ReduceOp op) {
  reduce_fixed(parts, out, op);
}

Communicator::Communicator(int rank, int size, CommOptions options)
    : rank_(rank), size_(size), options_(options) {
  LEANEMB_CHECK(size >= 1 && rank >= 0 && rank < size, "communicator rank out of range");
  LEANEMB_CHECK(options.timeout_ms > 0, "CommOptions::timeout_ms must be positive");
}

Status Communicator::timeout_error(const Round& round, const std::vector<int>& missing_from,
                                   const std::vector<int>& missing_to) const {
  std::string msg = "dist: rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                    std::string(collective_name(round.kind)) + " timed out after " +
                    std::to_string(options_.timeout_ms) + " ms waiting for ";
  if (!missing_from.empty()) {
    msg += rank_list(missing_from);
    if (!missing_to.empty()) msg += " (and for " + rank_list(missing_to) + " to take its message)";
  } else {
    msg += rank_list(missing_to) + " to take its message";
  }
  return internal_error(std::move(msg));
}

Status Communicator::round_error(const Round& round, const std::string& what) const {
  return internal_error("dist: rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                        std::string(collective_name(round.kind)) + " #" + std::to_string(round.seq) + ": " + what);
}

Status Communicator::check_usable() const {
  if (failure_.ok()) return Status::ok_status();
  return failed_precondition("dist: communicator unusable after an earlier failure: " + failure_.message());
}

Communicator::Clock::time_point Communicator::deadline_from_now() const {
  return Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
}

Communicator::Round Communicator::make_round(CollectiveKind kind) {
  Round r;
  r.kind = kind;
  r.seq = next_seq_++;
  const auto p = static_cast<size_t>(size_);
  r.send.resize(p);
  r.recv.resize(p);
  r.send_to.assign(p, 0);
  r.recv_from.assign(p, 0);
  return r;
}

Status Communicator::run_round(Round& round, Clock::time_point deadline) {
  const auto me = static_cast<size_t>(rank_);
  if (round.send_to[me] && round.recv_from[me]) {
    LEANEMB_CHECK(round.send[me].size() == round.recv[me].size(), "self message size differs");
    if (!round.send[me].empty()) std::memcpy(round.recv[me].data(), round.send[me].data(), round.send[me].size());
  }
  round.send_to[me] = round.recv_from[me] = 0;
  const auto t0 = Clock::now();
  Status st = exchange(round, deadline);
  stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  if (!st.ok()) {
    failure_ = st;
    return st;
  }
  for (size_t r = 0; r < round.send.size(); ++r) {
    if (round.send_to[r]) {
      stats_.bytes_sent += round.send[r].size();
      ++stats_.messages_sent;
    }
    if (round.recv_from[r]) stats_.bytes_received += round.recv[r].size();
  }
  return st;
}

Status Communicator::all_to_all_v(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                                  std::span<uint8_t> recv, std::span<const int64_t> recv_counts) {
  LEANEMB_RETURN_IF_ERROR(check_usable());
  const auto p = static_cast<size_t>(size_);
  if (send_counts.size() != p || recv_counts.size() != p) {
    return invalid_argument("dist: all_to_all_v: send_counts and recv_counts need " + std::to_string(p) +
                            " entries, got " + std::to_string(send_counts.size()) + " and " +
                            std::to_string(recv_counts.size()));
  }
  int64_t send_total = 0, recv_total = 0;
  for (size_t r = 0; r < p; ++r) {
    if (send_counts[r] < 0 || recv_counts[r] < 0) {
      return invalid_argument("dist: all_to_all_v: negative count for rank " + std::to_string(r));
    }
    send_total += send_counts[r];
    recv_total += recv_counts[r];
  }
  if (static_cast<size_t>(send_total) != send.size() || static_cast<size_t>(recv_total) != recv.size()) {
    return invalid_argument("dist: all_to_all_v: counts sum to " + std::to_string(send_total) + " sent / " +
                            std::to_string(recv_total) + " received bytes but the buffers hold " +
                            std::to_string(send.size()) + " / " + std::to_string(recv.size()));
  }
  if (send_counts[static_cast<size_t>(rank_)] != recv_counts[static_cast<size_t>(rank_)]) {
    return invalid_argument("dist: all_to_all_v: rank " + std::to_string(rank_) + " sends itself " +
                            std::to_string(send_counts[static_cast<size_t>(rank_)]) + " bytes but expects " +
                            std::to_string(recv_counts[static_cast<size_t>(rank_)]));
  }
  return all_to_all_v_round(send, send_counts, recv, recv_counts, deadline_from_now());
}

Status Communicator::all_to_all_v_round(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                                        std::span<uint8_t> recv, std::span<const int64_t> recv_counts,
                                        Clock::time_point deadline) {
  Round round = make_round(CollectiveKind::kAllToAllV);
  size_t so = 0, ro = 0;
  for (size_t r = 0; r < send_counts.size(); ++r) {
    const auto sc = static_cast<size_t>(send_counts[r]);
    const auto rc = static_cast<size_t>(recv_counts[r]);
    round.send[r] = send.subspan(so, sc);
    round.recv[r] = recv.subspan(ro, rc);
    round.send_to[r] = round.recv_from[r] = 1;
    so += sc;
    ro += rc;
  }
  LEANEMB_RETURN_IF_ERROR(run_round(round, deadline));
  ++stats_.collectives;
  return Status::ok_status();
}

Status Communicator::all_to_all_v_alloc(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                                        std::vector<uint8_t>* recv, std::vector<int64_t>* recv_counts) {
  return all_to_all_v_alloc_impl(send, send_counts, recv, recv_counts);
}

Status Communicator::all_to_all_v_alloc(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                                        std::pmr::vector<uint8_t>* recv, std::vector<int64_t>* recv_counts) {
  return all_to_all_v_alloc_impl(send, send_counts, recv, recv_counts);
}

template <typename Bytes>
Status Communicator::all_to_all_v_alloc_impl(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                                             Bytes* recv, std::vector<int64_t>* recv_counts) {
  LEANEMB_RETURN_IF_ERROR(check_usable());
  const auto p = static_cast<size_t>(size_);
  if (send_counts.size() != p) {
    return invalid_argument("dist: all_to_all_v: send_counts needs " + std::to_string(p) + " entries, got " +
                            std::to_string(send_counts.size()));
  }
  int64_t send_total = 0;
  for (size_t r = 0; r < p; ++r) {
    if (send_counts[r] < 0) return invalid_argument("dist: all_to_all_v: negative count for rank " + std::to_string(r));
    send_total += send_counts[r];
  }
  if (static_cast<size_t>(send_total) != send.size()) {
    return invalid_argument("dist: all_to_all_v: send_counts sum to " + std::to_string(send_total) +
                            " bytes but send holds " + std::to_string(send.size()));
  }
  const auto deadline = deadline_from_now();
  recv_counts->assign(p, 0);
  Round counts = make_round(CollectiveKind::kAllToAllVCounts);
  for (size_t r = 0; r < p; ++r) {
    counts.send[r] = as_bytes_of(send_counts.subspan(r, 1));
    counts.recv[r] = as_writable_bytes_of(std::span<int64_t>(*recv_counts).subspan(r, 1));
    counts.send_to[r] = counts.recv_from[r] = 1;
  }
  LEANEMB_RETURN_IF_ERROR(run_round(counts, deadline));
  int64_t recv_total = 0;
  for (size_t r = 0; r < p; ++r) {
    if ((*recv_counts)[r] < 0) {
      failure_ = round_error(counts, "rank " + std::to_string(r) + " announced a negative byte count");
      return failure_;
    }
    recv_total += (*recv_counts)[r];
  }
  recv->resize(static_cast<size_t>(recv_total));
  return all_to_all_v_round(send, send_counts, std::span<uint8_t>(*recv), *recv_counts, deadline);
}

template <typename T>
Status Communicator::all_reduce_impl(std::span<T> data, ReduceOp op) {
  LEANEMB_RETURN_IF_ERROR(check_usable());
  const auto p = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  if (p == 1) {
    ++stats_.collectives;
    return Status::ok_status();
  }
  const size_t n = data.size();
  auto slice_begin = [&](size_t k) { return n * k / p; };
  const size_t my_begin = slice_begin(me), my_len = slice_begin(me + 1) - my_begin;
  const auto deadline = deadline_from_now();

  // Round 1 (reduce-scatter): slice k of every rank's data goes to rank k.
  std::vector<T> gathered(p * my_len);
  Round scatter = make_round(CollectiveKind::kAllReduce);
  for (size_t r = 0; r < p; ++r) {
    const size_t b = slice_begin(r), e = slice_begin(r + 1);
    scatter.send[r] = as_bytes_of(std::span<const T>(data.data() + b, e - b));
    scatter.recv[r] = as_writable_bytes_of(std::span<T>(gathered.data() + r * my_len, my_len));
    scatter.send_to[r] = scatter.recv_from[r] = 1;
  }
  LEANEMB_RETURN_IF_ERROR(run_round(scatter, deadline));
  std::vector<std::span<const T>> parts(p);
  for (size_t r = 0; r < p; ++r) parts[r] = std::span<const T>(gathered.data() + r * my_len, my_len);
  std::vector<T> reduced(my_len);
  reduce_fixed<T>(parts, reduced, op);

  // Round 2 (all-gather): the reduced slice k goes from rank k to everyone.
  Round gather = make_round(CollectiveKind::kAllReduce);
  for (size_t r = 0; r < p; ++r) {
    const size_t b = slice_begin(r), e = slice_begin(r + 1);
    gather.send[r] = as_bytes_of(std::span<const T>(reduced));
    gather.recv[r] = as_writable_bytes_of(data.subspan(b, e - b));
    gather.send_to[r] = gather.recv_from[r] = 1;
  }
  LEANEMB_RETURN_IF_ERROR(run_round(gather, deadline));
  ++stats_.collectives;
  return Status::ok_status();
}

Status Communicator::all_reduce(std::span<float> data, ReduceOp op) { return all_reduce_impl(data, op); }
Status Communicator::all_reduce(std::span<double> data, ReduceOp op) { return all_reduce_impl(data, op); }
Status Communicator::all_reduce(std::span<int64_t> data, ReduceOp op) { return all_reduce_impl(data, op); }

Status Communicator::broadcast(std::span<uint8_t> data, int root) {
  LEANEMB_RETURN_IF_ERROR(check_usable());
  if (root < 0 || root >= size_) {
    return invalid_argument("dist: broadcast: root " + std::to_string(root) + " out of range [0, " +
                            std::to_string(size_) + ")");
  }
  const auto deadline = deadline_from_now();
  Round round = make_round(CollectiveKind::kBroadcast);
  const auto p = static_cast<size_t>(size_);
  if (rank_ == root) {
    for (size_t r = 0; r < p; ++r) {
      round.send[r] = data;
      round.send_to[r] = static_cast<size_t>(root) != r;
    }
  } else {
    round.recv[static_cast<size_t>(root)] = data;
    round.recv_from[static_cast<size_t>(root)] = 1;
  }
  LEANEMB_RETURN_IF_ERROR(run_round(round, deadline));
  ++stats_.collectives;
  return Status::ok_status();
}

Status Communicator::barrier() {
  LEANEMB_RETURN_IF_ERROR(check_usable());
  const auto deadline = deadline_from_now();
  Round round = make_round(CollectiveKind::kBarrier);
  for (size_t r = 0; r < round.send.size(); ++r) round.send_to[r] = round.recv_from[r] = 1;
  LEANEMB_RETURN_IF_ERROR(run_round(round, deadline));
  ++stats_.collectives;
  return Status::ok_status();
}

std::string flagged_ranks(std::span<const int64_t> flags) {
  std::string s;
  for (size_t r = 0; r < flags.size(); ++r)
    if (flags[r] != 0) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

Status agree(Communicator& comm, const Status& mine, const std::string& what) {
  std::vector<int64_t> flags(static_cast<size_t>(comm.size()), 0);
  flags[static_cast<size_t>(comm.rank())] = mine.ok() ? 0 : 1;
  LEANEMB_RETURN_IF_ERROR(comm.all_reduce(std::span<int64_t>(flags), ReduceOp::kSum));
  const std::string failed = flagged_ranks(flags);
  if (!mine.ok())
    return Status(mine.code(), what + ": rank(s) " + failed + " failed; rank " + std::to_string(comm.rank()) + ": " + mine.message());
  if (!failed.empty()) return invalid_argument(what + ": rank(s) " + failed + " failed");
  return Status::ok_status();
}

Result<std::unique_ptr<Communicator>> make_communicator(std::string_view kind, const CommOptions& options) {
  if (options.timeout_ms <= 0) {
    return invalid_argument("dist: CommOptions::timeout_ms must be positive, got " + std::to_string(options.timeout_ms));
  }
  if (kind == "local") {
    LEANEMB_ASSIGN_OR_RETURN(auto world, LocalWorld::create(1, options));
    return world->communicator(0);
  }
  if (kind == "mpi") return make_mpi_communicator(options);
  return invalid_argument("dist: unknown communicator kind '" + std::string(kind) + "' (expected local or mpi)");
}

}  // namespace leanemb::dist
