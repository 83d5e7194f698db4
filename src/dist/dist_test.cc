// Tests of src/dist: the collectives over a local-thread world of 1, 2, 3 and 4 ranks (bytes,
// determinism of all_reduce, deadlines that name the missing rank, mismatched calls), the
// fixed-order reduction, ShardPlan's mappings, and the payload codecs against their documented
// error bounds. The same collectives across real processes: mpi_check_main.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "dist/communicator.h"
#include "dist/dist_testing.h"
#include "dist/local_comm.h"
#include "dist/mpi_comm.h"
#include "dist/payload.h"
#include "table/shard_plan.h"

namespace leanemb::dist {
namespace {

using test_util::expect_all_ok;
using test_util::mismatch;
using test_util::run_world;

// The message size from src to dst in the all_to_all_v tests: includes zeros.
int64_t msg_len(int src, int dst) { return (src * 3 + dst * 5) % 4 * 7; }
uint8_t msg_byte(int src, int dst, int64_t i) { return static_cast<uint8_t>(src * 131 + dst * 17 + i * 7); }

// Random floats over many magnitudes and both signs, so that the order of addition matters.
std::vector<float> wide_floats(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return v;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

// Whether `msg` says "<prefix> waiting for rank R" or "... waiting for ranks A, R, B": under
// heavy load another slow rank may be listed too, which is true and not a failure.
bool names_missing_rank(const std::string& msg, const std::string& prefix, int r) {
  const size_t at = msg.find(prefix + " waiting for rank");
  if (at == std::string::npos) return false;
  size_t i = msg.find_first_of("0123456789", at + prefix.size());
  while (i != std::string::npos && i < msg.size()) {
    size_t end = i;
    while (end < msg.size() && std::isdigit(static_cast<unsigned char>(msg[end]))) ++end;
    if (std::stoi(msg.substr(i, end - i)) == r) return true;
    if (msg.compare(end, 2, ", ") != 0) return false;
    i = end + 2;
  }
  return false;
}

// ---- collectives -------------------------------------------------------------------------

// Every byte reaches its destination at the right place, empty messages included, for P = 1, 2, 4.
TEST(LocalCommTest, AllToAllVMovesEveryByteIncludingEmptyMessages) {
  for (int p : {1, 2, 4}) {
    auto st = run_world(p, [p](Communicator& c) -> Status {
      const int me = c.rank();
      std::vector<int64_t> sc(static_cast<size_t>(p)), rc(static_cast<size_t>(p));
      std::vector<uint8_t> send;
      for (int d = 0; d < p; ++d) {
        sc[static_cast<size_t>(d)] = msg_len(me, d);
        rc[static_cast<size_t>(d)] = msg_len(d, me);
        for (int64_t i = 0; i < msg_len(me, d); ++i) send.push_back(msg_byte(me, d, i));
      }
      std::vector<uint8_t> recv(static_cast<size_t>(std::accumulate(rc.begin(), rc.end(), int64_t{0})), 0xEE);
      LEANEMB_RETURN_IF_ERROR(c.all_to_all_v(send, sc, recv, rc));
      size_t off = 0;
      for (int s = 0; s < p; ++s) {
        for (int64_t i = 0; i < msg_len(s, me); ++i, ++off) {
          if (recv[off] != msg_byte(s, me, i)) return mismatch("byte " + std::to_string(i) + " from rank " + std::to_string(s));
        }
      }
      return Status::ok_status();
    });
    expect_all_ok(st);
  }
}

// all_to_all_v_alloc learns the sizes from the senders and delivers the same bytes.
TEST(LocalCommTest, AllToAllVAllocLearnsTheReceiveCounts) {
  const int p = 4;
  auto st = run_world(p, [](Communicator& c) -> Status {
    const int me = c.rank();
    std::vector<int64_t> sc;
    std::vector<uint8_t> send;
    for (int d = 0; d < p; ++d) {
      sc.push_back(msg_len(me, d));
      for (int64_t i = 0; i < msg_len(me, d); ++i) send.push_back(msg_byte(me, d, i));
    }
    std::vector<uint8_t> recv;
    std::vector<int64_t> rc;
    LEANEMB_RETURN_IF_ERROR(c.all_to_all_v_alloc(send, sc, &recv, &rc));
    size_t off = 0;
    for (int s = 0; s < p; ++s) {
      if (rc[static_cast<size_t>(s)] != msg_len(s, me)) return mismatch("count from rank " + std::to_string(s));
      for (int64_t i = 0; i < msg_len(s, me); ++i, ++off) {
        if (recv[off] != msg_byte(s, me, i)) return mismatch("byte from rank " + std::to_string(s));
      }
    }
    return off == recv.size() ? Status::ok_status() : mismatch("total size");
  });
  expect_all_ok(st);
}

// all_reduce(sum) gives every rank the same bits as reduce_in_fixed_order over the per-rank
// inputs, on every run, whatever order the ranks arrive in (random per-rank delays).
TEST(LocalCommTest, AllReduceSumIsBitIdenticalAcrossRunsAndMatchesTheFixedTree) {
  for (int p : {1, 2, 3, 4}) {
    const size_t n = 37;  // not a multiple of P: uneven slices, some empty for small n
    std::vector<std::vector<float>> inputs;
    std::vector<std::span<const float>> parts;
    for (int r = 0; r < p; ++r) inputs.push_back(wide_floats(100 + static_cast<uint64_t>(r), n));
    for (auto& v : inputs) parts.emplace_back(v);
    std::vector<float> expected(n);
    Communicator::reduce_in_fixed_order(parts, expected, ReduceOp::kSum);
    for (int run = 0; run < 5; ++run) {
      auto st = run_world(p, [&, run](Communicator& c) -> Status {
        std::mt19937 rng(static_cast<uint32_t>(run * 10 + c.rank()));
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
        std::vector<float> data = inputs[static_cast<size_t>(c.rank())];
        LEANEMB_RETURN_IF_ERROR(c.all_reduce(std::span<float>(data), ReduceOp::kSum));
        return same_bits(data, expected) ? Status::ok_status() : mismatch("sum differs from the fixed tree");
      });
      expect_all_ok(st);
    }
  }
}

// double and int64 sums, and max (NaN wins for floats), reduce like the fixed-order reference.
TEST(LocalCommTest, AllReduceHandlesDoubleInt64AndMax) {
  const int p = 4;
  auto st = run_world(p, [](Communicator& c) -> Status {
    const int r = c.rank();
    std::vector<double> d = {0.1 * r, 1e300 * (r % 2 ? 1 : -1), static_cast<double>(r)};
    LEANEMB_RETURN_IF_ERROR(c.all_reduce(std::span<double>(d), ReduceOp::kSum));
    if (d[0] != (0.0 + 0.1) + (0.2 + 0.30000000000000004) || d[1] != 0.0 || d[2] != 6.0) return mismatch("double sum");
    std::vector<int64_t> i = {int64_t{1} << 40, -r, std::numeric_limits<int64_t>::max()};
    LEANEMB_RETURN_IF_ERROR(c.all_reduce(std::span<int64_t>(i), ReduceOp::kSum));
    if (i[0] != int64_t{4} << 40 || i[1] != -6 || i[2] != -4) return mismatch("int64 sum (wraps)");
    std::vector<int64_t> m = {-r, r * 10};
    LEANEMB_RETURN_IF_ERROR(c.all_reduce(std::span<int64_t>(m), ReduceOp::kMax));
    if (m[0] != 0 || m[1] != 30) return mismatch("int64 max");
    std::vector<float> f = {static_cast<float>(r), r == 2 ? std::nanf("") : 1.0f};
    LEANEMB_RETURN_IF_ERROR(c.all_reduce(std::span<float>(f), ReduceOp::kMax));
    if (f[0] != 3.0f || !std::isnan(f[1])) return mismatch("float max");
    return Status::ok_status();
  });
  expect_all_ok(st);
}

// The fixed order is a pairwise tree for P a power of two and rank order otherwise: values
// where the two orders round differently tell them apart.
TEST(FixedOrderReduceTest, IsAPairwiseTreeForPowersOfTwoAndRankOrderOtherwise) {
  const std::vector<float> x = {1e8f, 1.0f, -1e8f, 1.0f, 3.0f};
  auto reduce = [&](size_t p) {
    std::vector<std::span<const float>> parts;
    for (size_t r = 0; r < p; ++r) parts.emplace_back(&x[r], 1);
    float out = 0;
    Communicator::reduce_in_fixed_order(parts, std::span<float>(&out, 1), ReduceOp::kSum);
    return out;
  };
  EXPECT_EQ(reduce(4), (1e8f + 1.0f) + (-1e8f + 1.0f));  // 0: both 1s are absorbed
  EXPECT_EQ(reduce(4), 0.0f);
  EXPECT_EQ(reduce(5), (((1e8f + 1.0f) + -1e8f) + 1.0f) + 3.0f);  // rank order: 4
  EXPECT_EQ(reduce(5), 4.0f);
  EXPECT_EQ(reduce(1), 1e8f);
  // P = 8 over random data equals the explicit tree.
  const auto v = wide_floats(7, 8);
  std::vector<std::span<const float>> parts;
  for (size_t r = 0; r < 8; ++r) parts.emplace_back(&v[r], 1);
  float out = 0;
  Communicator::reduce_in_fixed_order(parts, std::span<float>(&out, 1), ReduceOp::kSum);
  const float tree = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  EXPECT_EQ(std::bit_cast<uint32_t>(out), std::bit_cast<uint32_t>(tree));
}

// broadcast copies the root's bytes to every rank, for every root.
TEST(LocalCommTest, BroadcastCopiesTheRootsBytesToEveryRank) {
  const int p = 4;
  auto st = run_world(p, [](Communicator& c) -> Status {
    for (int root = 0; root < p; ++root) {
      std::vector<uint8_t> data(100, static_cast<uint8_t>(c.rank()));
      if (c.rank() == root) {
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 3 + static_cast<size_t>(root));
      }
      LEANEMB_RETURN_IF_ERROR(c.broadcast(data, root));
      for (size_t i = 0; i < data.size(); ++i) {
        if (data[i] != static_cast<uint8_t>(i * 3 + static_cast<size_t>(root))) return mismatch("root " + std::to_string(root));
      }
    }
    return Status::ok_status();
  });
  expect_all_ok(st);
}

// No rank leaves a barrier before every rank has entered it (late ranks sleep before entering).
TEST(LocalCommTest, BarrierReleasesNoRankBeforeAllArrive) {
  const int p = 4;
  std::atomic<int> arrived{0};
  auto st = run_world(p, [&](Communicator& c) -> Status {
    for (int round = 1; round <= 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(c.rank() == round ? 20 : 0));
      arrived.fetch_add(1);
      LEANEMB_RETURN_IF_ERROR(c.barrier());
      if (arrived.load() < p * round) return mismatch("left barrier " + std::to_string(round) + " early");
      LEANEMB_RETURN_IF_ERROR(c.barrier());  // nobody starts the next round before all checked
    }
    return Status::ok_status();
  });
  expect_all_ok(st);
}

// A rank that never calls the collective makes every rank waiting for it fail with Internal,
// and the message names the collective and the missing rank (all_to_all_v, all_reduce,
// barrier with a missing non-root; broadcast with a missing root).
TEST(LocalCommTest, AbsentRankMakesTheOthersFailNamingIt) {
  struct Case {
    int p, absent;
    const char* name;
    std::function<Status(Communicator&)> call;
  };
  auto a2a = [](Communicator& c) {
    std::vector<int64_t> counts(static_cast<size_t>(c.size()), 4);
    std::vector<uint8_t> send(static_cast<size_t>(4 * c.size())), recv(send.size());
    return c.all_to_all_v(send, counts, recv, counts);
  };
  auto reduce = [](Communicator& c) {
    std::vector<float> v(10, 1.0f);
    return c.all_reduce(std::span<float>(v), ReduceOp::kSum);
  };
  auto bcast = [](Communicator& c) {
    std::vector<uint8_t> v(8);
    return c.broadcast(v, 1);
  };
  const std::vector<Case> cases = {
      {2, 1, "all_to_all_v", a2a}, {4, 2, "all_to_all_v", a2a}, {2, 1, "all_reduce", reduce},
      {4, 3, "all_reduce", reduce}, {4, 1, "barrier", [](Communicator& c) { return c.barrier(); }},
      {4, 1, "broadcast", bcast}};
  for (const Case& k : cases) {
    auto st = run_world(k.p, [&](Communicator& c) { return c.rank() == k.absent ? Status::ok_status() : k.call(c); }, 200);
    for (int r = 0; r < k.p; ++r) {
      if (r == k.absent) continue;
      const Status& s = st[static_cast<size_t>(r)];
      SCOPED_TRACE(std::string(k.name) + " P=" + std::to_string(k.p) + " rank " + std::to_string(r));
      EXPECT_EQ(s.code(), StatusCode::kInternal) << s.to_string();
      EXPECT_TRUE(names_missing_rank(s.message(), std::string(k.name) + " timed out after 200 ms", k.absent)) << s.message();
      EXPECT_NE(s.message().find("rank " + std::to_string(r) + " of " + std::to_string(k.p)), std::string::npos) << s.message();
    }
  }
}

// After a failed collective every later call fails with FailedPrecondition quoting the failure.
TEST(LocalCommTest, FailedCommunicatorStaysUnusable) {
  auto st = run_world(2, [](Communicator& c) -> Status {
    if (c.rank() == 1) return Status::ok_status();
    Status first = c.barrier();
    if (first.ok()) return mismatch("barrier without rank 1 succeeded");
    Status again = c.barrier();
    if (again.code() != StatusCode::kFailedPrecondition || again.message().find("waiting for rank 1") == std::string::npos) {
      return mismatch("second call: " + again.to_string());
    }
    return c.failure().ok() ? mismatch("failure() is OK") : Status::ok_status();
  }, 100);
  expect_all_ok(st);
}

// Ranks in different collectives get an error naming the other collective, not a timeout or
// a silent exchange of the wrong bytes; a size mismatch names the sender and both sizes.
TEST(LocalCommTest, MismatchedCallsAreReported) {
  auto st = run_world(2, [](Communicator& c) -> Status {
    std::vector<float> v(4, 1.0f);
    return c.rank() == 0 ? c.all_reduce(std::span<float>(v), ReduceOp::kSum) : c.barrier();
  });
  EXPECT_NE(st[0].message().find("rank 1 is in barrier #0"), std::string::npos) << st[0].to_string();
  EXPECT_NE(st[1].message().find("rank 0 is in all_reduce #0"), std::string::npos) << st[1].to_string();
  st = run_world(2, [](Communicator& c) -> Status {
    std::vector<uint8_t> v(c.rank() == 0 ? 8 : 4);
    return c.broadcast(v, 0);
  });
  EXPECT_TRUE(st[0].ok());
  EXPECT_NE(st[1].message().find("rank 0 sent 8 bytes where 4 were expected"), std::string::npos) << st[1].to_string();
}

// Malformed arguments are rejected with InvalidArgument before anything is sent.
TEST(LocalCommTest, MalformedArgumentsAreInvalid) {
  auto comm = std::move(make_communicator("local")).value();
  std::vector<uint8_t> buf(4);
  const std::vector<int64_t> two = {2, 2}, four = {4}, neg = {-1};
  EXPECT_EQ(comm->all_to_all_v(buf, two, buf, two).code(), StatusCode::kInvalidArgument);  // P = 1
  EXPECT_EQ(comm->all_to_all_v(buf, neg, buf, neg).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->all_to_all_v(std::span<uint8_t>(buf).first(2), four, buf, four).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->broadcast(buf, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm->all_to_all_v(buf, four, buf, four).ok());  // and the communicator still works
  EXPECT_EQ(make_communicator("nccl").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_communicator("local", CommOptions{0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LocalWorld::create(0).status().code(), StatusCode::kInvalidArgument);
  auto world = std::move(LocalWorld::create(2)).value();
  EXPECT_TRUE(world->communicator(1).ok());
  EXPECT_EQ(world->communicator(1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(world->communicator(2).status().code(), StatusCode::kOutOfRange);
}

// make_communicator("local") is a world of one rank where every collective is a local copy.
TEST(LocalCommTest, FactoryMakesASingleRankWorld) {
  auto comm = std::move(make_communicator("local")).value();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "local");
  std::vector<float> v = {1.5f, -2.0f};
  EXPECT_TRUE(comm->all_reduce(std::span<float>(v), ReduceOp::kSum).ok());
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  std::vector<uint8_t> send = {1, 2, 3}, recv(3);
  const std::vector<int64_t> n = {3};
  EXPECT_TRUE(comm->all_to_all_v(send, n, recv, n).ok());
  EXPECT_EQ(recv, send);
  EXPECT_TRUE(comm->barrier().ok());
  EXPECT_EQ(comm->stats().bytes_sent, 0u);  // self-messages are not counted
}

// "mpi" is Unimplemented in a build without MPI, and FailedPrecondition before MPI_Init in a
// build with it (the factory never initializes MPI itself).
TEST(LocalCommTest, MpiKindNeedsMpiInTheBuildAndAnMpiRuntime) {
  auto comm = make_communicator("mpi");
  EXPECT_EQ(comm.status().code(), mpi_available() ? StatusCode::kFailedPrecondition : StatusCode::kUnimplemented)
      << comm.status().to_string();
}

// stats() counts the bytes and messages this rank sent to other ranks, not to itself.
TEST(LocalCommTest, StatsCountBytesSentToPeers) {
  auto st = run_world(2, [](Communicator& c) -> Status {
    // rank 0 sends 3 bytes to itself and 5 to rank 1; rank 1 sends 5 to rank 0 and 2 to itself.
    const std::vector<int64_t> counts = c.rank() == 0 ? std::vector<int64_t>{3, 5} : std::vector<int64_t>{5, 2};
    std::vector<uint8_t> send(static_cast<size_t>(counts[0] + counts[1])), recv(send.size());
    LEANEMB_RETURN_IF_ERROR(c.all_to_all_v(send, counts, recv, counts));
    const CommStats& s = c.stats();
    if (s.bytes_sent != 5 || s.bytes_received != 5 || s.messages_sent != 1 || s.collectives != 1) return mismatch("stats");
    return Status::ok_status();
  });
  expect_all_ok(st);
}

// ---- ShardPlan -----------------------------------------------------------------------------

ShardPlan make_plan(int p, std::vector<TableShardSpec> tables, TableAssign assign = TableAssign::kRoundRobin) {
  auto plan = ShardPlan::create(ShardPlanOptions{p, std::move(tables), assign});
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  return std::move(plan).value();
}

// Every global row maps to exactly one (owner, local row) inside the owner's local rows and
// back, and the ranks' local row counts add up to the table, for every kind, P and row count
// (including fewer rows than ranks).
TEST(ShardPlanTest, EveryRowRoundTripsThroughOwnerAndLocalRow) {
  for (ShardingKind kind : {ShardingKind::kTableWise, ShardingKind::kRowModulo, ShardingKind::kRowRange}) {
    for (int p : {1, 2, 3, 4, 7}) {
      for (int64_t n : {1, 2, 5, 64, 101}) {
        SCOPED_TRACE(std::string(sharding_kind_name(kind)) + " P=" + std::to_string(p) + " N=" + std::to_string(n));
        const ShardPlan plan = make_plan(p, {TableShardSpec{n, 1, kind, -1}, TableShardSpec{n, 1, kind, -1}});
        for (int t = 0; t < 2; ++t) {
          int64_t total = 0;
          for (int r = 0; r < p; ++r) total += plan.local_num_rows(t, r);
          EXPECT_EQ(total, n);
          std::set<std::pair<int, int64_t>> seen;
          for (int64_t row = 0; row < n; ++row) {
            const int o = plan.owner(t, row);
            const int64_t l = plan.local_row(t, row);
            ASSERT_TRUE(plan.check_local_row(t, o, l).ok()) << "row " << row;
            EXPECT_EQ(plan.global_row(t, o, l), row);
            EXPECT_TRUE(seen.insert({o, l}).second) << "row " << row << " shares a slot";
          }
        }
      }
    }
  }
}

// The row-wise kinds follow their formulas: modulo spreads consecutive rows, ranges give the
// first N % P ranks one extra contiguous row.
TEST(ShardPlanTest, RowWiseKindsFollowTheirFormulas) {
  const ShardPlan plan = make_plan(3, {{10, 1, ShardingKind::kRowModulo, -1}, {10, 1, ShardingKind::kRowRange, -1}});
  EXPECT_EQ(plan.owner(0, 7), 1);
  EXPECT_EQ(plan.local_row(0, 7), 2);
  EXPECT_EQ(plan.local_num_rows(0, 0), 4);
  EXPECT_EQ(plan.local_num_rows(0, 2), 3);
  // ranges: [0, 4) [4, 7) [7, 10)
  EXPECT_EQ(plan.owner(1, 3), 0);
  EXPECT_EQ(plan.owner(1, 4), 1);
  EXPECT_EQ(plan.owner(1, 9), 2);
  EXPECT_EQ(plan.local_row(1, 8), 1);
  EXPECT_EQ(plan.global_row(1, 1, 2), 6);
  EXPECT_EQ(plan.table_owner(1), -1);
}

// Table-wise tables get owners round-robin, or largest-first onto the least loaded rank; an
// explicit owner is kept and counts toward its rank's load.
TEST(ShardPlanTest, TableWiseOwnersAreRoundRobinOrBalancedBySize) {
  auto tw = [](int64_t rows, int64_t dim, int owner = -1) { return TableShardSpec{rows, dim, ShardingKind::kTableWise, owner}; };
  const ShardPlan rr = make_plan(2, {tw(5, 1), tw(5, 1), tw(5, 1)});
  EXPECT_EQ(rr.table_owner(0), 0);
  EXPECT_EQ(rr.table_owner(1), 1);
  EXPECT_EQ(rr.table_owner(2), 0);
  // Sizes 100, 60, 50, 10 (rows * dim), table 3 pinned to rank 1 with 80.
  const ShardPlan bs = make_plan(2, {tw(10, 10), tw(60, 1), tw(25, 2), tw(80, 1, 1)}, TableAssign::kBySize);
  EXPECT_EQ(bs.table_owner(3), 1);
  EXPECT_EQ(bs.table_owner(0), 0);  // 100 -> rank 0 (loads 0 vs 80)
  EXPECT_EQ(bs.table_owner(1), 1);  // 60 -> rank 1 (100 vs 80)
  EXPECT_EQ(bs.table_owner(2), 0);  // 50 -> rank 0 (100 vs 140)
  EXPECT_EQ(bs.owner(0, 9), 0);
  EXPECT_EQ(bs.local_num_rows(0, 1), 0);
}

// Invalid plans are rejected with the table named; out-of-range rows are OutOfRange.
TEST(ShardPlanTest, InvalidPlansAndRowsAreRejected) {
  auto err = [](int p, TableShardSpec s) { return ShardPlan::create(ShardPlanOptions{p, {s}}).status(); };
  EXPECT_EQ(err(0, {5, 1, ShardingKind::kRowModulo, -1}).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(err(2, {0, 1, ShardingKind::kRowModulo, -1}).message().find("table 0: num_rows"), std::string::npos);
  EXPECT_EQ(err(2, {5, 0, ShardingKind::kRowModulo, -1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err(2, {5, 1, ShardingKind::kTableWise, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err(2, {5, 1, ShardingKind::kRowRange, 0}).code(), StatusCode::kInvalidArgument);
  const ShardPlan plan = make_plan(2, {{5, 1, ShardingKind::kRowModulo, -1}});
  EXPECT_EQ(plan.check_row(0, 5).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(plan.check_row(0, -1).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(plan.check_row(1, 0).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(plan.check_local_row(0, 1, 2).code(), StatusCode::kOutOfRange);  // rank 1 holds rows 1, 3
  EXPECT_EQ(parse_sharding_kind("row_range").value(), ShardingKind::kRowRange);
  EXPECT_FALSE(parse_sharding_kind("diagonal").ok());
}

// ---- payloads ------------------------------------------------------------------------------

std::vector<float> roundtrip(DType t, int64_t dim, const std::vector<float>& in) {
  std::vector<uint8_t> wire(in.size() / static_cast<size_t>(dim) * payload_bytes_per_row(t, dim));
  EXPECT_TRUE(encode_rows(t, dim, in, wire).ok());
  std::vector<float> out(in.size());
  EXPECT_TRUE(decode_rows(t, dim, wire, out).ok());
  return out;
}

// Values spanning normal and subnormal ranges of every payload dtype, both signs.
std::vector<float> magnitudes_sweep(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-140, 60);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return v;
}

// fp32 payloads are bit-exact, specials (NaN payload, Inf, -0, subnormals) included.
TEST(PayloadTest, Fp32IsBitExact) {
  std::vector<float> v = magnitudes_sweep(1, 96);
  v[0] = std::nanf("0x123");
  v[1] = -std::numeric_limits<float>::infinity();
  v[2] = -0.0f;
  v[3] = std::numeric_limits<float>::denorm_min();
  const auto out = roundtrip(DType::kF32, 8, v);
  EXPECT_EQ(std::memcmp(out.data(), v.data(), v.size() * 4), 0);
}

// bf16 and fp16 stay within their documented bounds (relative in the normal range, absolute
// below it); values beyond fp16's range become Inf.
TEST(PayloadTest, HalfPrecisionStaysWithinDocumentedBounds) {
  const std::vector<float> v = magnitudes_sweep(2, 20000);
  const auto bf = roundtrip(DType::kBF16, 4, v);
  const auto hf = roundtrip(DType::kF16, 4, v);
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = v[i], ax = std::fabs(x);
    const float bf_bound = ax >= 0x1p-126f ? 0x1p-8f * ax : 0x1p-134f;
    EXPECT_LE(std::fabs(bf[i] - x), bf_bound) << x;
    if (ax >= 65520.0f) {
      EXPECT_TRUE(std::isinf(hf[i]) && std::signbit(hf[i]) == std::signbit(x)) << x;
    } else {
      const float hf_bound = ax >= 0x1p-14f ? 0x1p-11f * ax : 0x1p-25f;
      EXPECT_LE(std::fabs(hf[i] - x), hf_bound) << x;
    }
  }
}

// Ties round to the even neighbour (RNE, not truncation or ties-away).
TEST(PayloadTest, HalfPrecisionRoundsTiesToEven) {
  const std::vector<float> v = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
  const auto bf = roundtrip(DType::kBF16, 1, v);
  const auto hf = roundtrip(DType::kF16, 1, v);
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(hf[2], 1.0f);
  EXPECT_EQ(hf[3], 1.0f + 0x1p-9f);
}

// int8 rows stay within half a quantization step of their own range (plus fp32 rounding), a
// constant row is exact, and a row with a NaN or Inf decodes to all NaN.
TEST(PayloadTest, Int8StaysWithinHalfAStepPerRow) {
  const int64_t dim = 37;
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const float center = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20) * (rng() % 2 ? 1.f : -1.f);
    const float spread = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    std::uniform_real_distribution<float> u(center - spread, center + spread);
    std::vector<float> v(static_cast<size_t>(dim) * 3);
    for (auto& x : v) x = u(rng);
    std::fill(v.begin() + dim, v.begin() + 2 * dim, center);  // row 1: constant
    const auto out = roundtrip(DType::kInt8Rowwise, dim, v);
    for (int64_t r = 0; r < 3; ++r) {
      const auto row = std::span<const float>(v).subspan(static_cast<size_t>(r * dim), static_cast<size_t>(dim));
      const float lo = *std::min_element(row.begin(), row.end()), hi = *std::max_element(row.begin(), row.end());
      const float bound = (hi - lo) / 510.0f + 0x1p-20f * std::max(std::fabs(lo), std::fabs(hi));
      for (int64_t j = 0; j < dim; ++j) {
        const size_t i = static_cast<size_t>(r * dim + j);
        ASSERT_LE(std::fabs(out[i] - v[i]), bound) << "trial " << trial << " row " << r;
        if (r == 1) {
          ASSERT_EQ(out[i], v[i]);
        }
      }
    }
  }
  std::vector<float> bad = {1.0f, std::numeric_limits<float>::infinity(), 2.0f, 3.0f};
  const auto dec = roundtrip(DType::kInt8Rowwise, 2, bad);
  EXPECT_TRUE(std::isnan(dec[0]) && std::isnan(dec[1]));
  EXPECT_EQ(dec[2], 2.0f);  // the next row is unaffected
  EXPECT_EQ(dec[3], 3.0f);
}

// Sizes: bytes per row per dtype, and mismatched buffers are InvalidArgument.
TEST(PayloadTest, SizesAreCheckedAndNamed) {
  EXPECT_EQ(payload_bytes_per_row(DType::kF32, 10), 40u);
  EXPECT_EQ(payload_bytes_per_row(DType::kBF16, 10), 20u);
  EXPECT_EQ(payload_bytes_per_row(DType::kF16, 10), 20u);
  EXPECT_EQ(payload_bytes_per_row(DType::kInt8Rowwise, 10), 18u);
  std::vector<float> rows(20);
  std::vector<uint8_t> wire(35);
  EXPECT_EQ(encode_rows(DType::kInt8Rowwise, 10, rows, wire).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(encode_rows(DType::kF32, 3, rows, wire).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_rows(DType::kBF16, 0, wire, rows).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_dtype("bf16", DTypeUse::kPayload).value(), DType::kBF16);
  EXPECT_EQ(dtype_name(DType::kInt8Rowwise), "int8");
  EXPECT_FALSE(parse_dtype("fp8", DTypeUse::kPayload).ok());
}

}  // namespace
}  // namespace leanemb::dist
