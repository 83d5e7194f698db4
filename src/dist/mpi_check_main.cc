// dist_mpi_check: the collectives of the mpi backend across real processes.
//
//   mpirun -np P dist_mpi_check
//       all_to_all_v (empty and multi-megabyte messages), all_to_all_v_alloc, all_reduce (float /
//       double / int64, sum / max) against reduce_in_fixed_order over every rank's inputs (each
//       rank regenerates all inputs from their seeds), broadcast from every root, barrier.
//       Then a ShardedEmbeddingCollection trained for a few steps (fp32 payloads, Adagrad):
//       pooled outputs and fat rows bit-identical to a single-process EmbeddingCollection on
//       the concatenated batches (every rank trains that reference itself).
//       Silent on success (exit 0); prints each mismatch and exits 1.
//   mpirun -np P dist_mpi_check --dead-rank R --mode sleep|exit --timeout-ms T --done-dir DIR
//       After a first barrier, rank R stops answering: `sleep` waits (until every other rank
//       has written DIR/done.<rank>, at most 60 s) and exits 0; `exit` kills itself (SIGKILL).
//       The other ranks run an all_reduce that must fail with Internal naming rank R; each
//       prints its error to stderr, writes DIR/done.<rank> and exits 1 (2 if the collective
//       did not fail as it should). tests/mpi_dead_rank.sh runs and checks this.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/mpi_comm.h"
#include "dist/sharded_collection.h"

namespace leanemb::dist {
namespace {

int g_errors = 0;

void fail(int rank, const std::string& what) {
  std::fprintf(stderr, "dist_mpi_check: rank %d: FAIL: %s\n", rank, what.c_str());
  ++g_errors;
}

bool check_ok(int rank, const Status& st, const char* what) {
  if (st.ok()) return true;
  fail(rank, std::string(what) + ": " + st.to_string());
  return false;
}

int64_t msg_len(int src, int dst, int big) { return big ? (3 << 20) + src * 1000 + dst : (src * 3 + dst * 5) % 4 * 7; }
uint8_t msg_byte(int src, int dst, int64_t i) { return static_cast<uint8_t>(src * 131 + dst * 17 + i * 7); }

std::vector<float> wide_floats(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return v;
}

void check_all_to_all(Communicator& c, int big) {
  const int p = c.size(), me = c.rank();
  std::vector<int64_t> sc, rc;
  std::vector<uint8_t> send;
  for (int d = 0; d < p; ++d) {
    sc.push_back(msg_len(me, d, big));
    rc.push_back(msg_len(d, me, big));
    for (int64_t i = 0; i < msg_len(me, d, big); ++i) send.push_back(msg_byte(me, d, i));
  }
  std::vector<uint8_t> recv(static_cast<size_t>(std::accumulate(rc.begin(), rc.end(), int64_t{0})));
  if (!check_ok(me, c.all_to_all_v(send, sc, recv, rc), "all_to_all_v")) return;
  std::vector<uint8_t> recv2;
  std::vector<int64_t> rc2;
  if (!check_ok(me, c.all_to_all_v_alloc(send, sc, &recv2, &rc2), "all_to_all_v_alloc")) return;
  if (rc2 != rc || recv2 != recv) fail(me, "all_to_all_v_alloc differs from all_to_all_v");
  size_t off = 0;
  for (int s = 0; s < p; ++s) {
    for (int64_t i = 0; i < msg_len(s, me, big); ++i, ++off) {
      if (recv[off] != msg_byte(s, me, i)) {
        fail(me, "all_to_all_v byte " + std::to_string(i) + " from rank " + std::to_string(s));
        return;
      }
    }
  }
}

void check_all_reduce(Communicator& c) {
  const int p = c.size(), me = c.rank();
  for (size_t n : {size_t{1}, size_t{37}, size_t{100000}}) {
    std::vector<std::vector<float>> inputs;
    std::vector<std::span<const float>> parts;
    for (int r = 0; r < p; ++r) inputs.push_back(wide_floats(1000 * n + static_cast<uint64_t>(r), n));
    for (auto& v : inputs) parts.emplace_back(v);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::vector<float> expected(n);
      Communicator::reduce_in_fixed_order(parts, expected, op);
      std::vector<float> data = inputs[static_cast<size_t>(me)];
      if (!check_ok(me, c.all_reduce(std::span<float>(data), op), "all_reduce float")) return;
      if (std::memcmp(data.data(), expected.data(), n * sizeof(float)) != 0) {
        fail(me, "all_reduce float (n=" + std::to_string(n) + ") differs from reduce_in_fixed_order");
      }
    }
  }
  std::vector<double> d = {0.5 * me, 1.0};
  std::vector<int64_t> i = {int64_t{1} << 40, -me};
  if (!check_ok(me, c.all_reduce(std::span<double>(d), ReduceOp::kSum), "all_reduce double")) return;
  if (!check_ok(me, c.all_reduce(std::span<int64_t>(i), ReduceOp::kSum), "all_reduce int64")) return;
  if (d[0] != 0.25 * p * (p - 1) || d[1] != p) fail(me, "all_reduce double sum");
  if (i[0] != (int64_t{1} << 40) * p || i[1] != -static_cast<int64_t>(p) * (p - 1) / 2) fail(me, "all_reduce int64 sum");
}

void check_broadcast_and_barrier(Communicator& c) {
  const int p = c.size(), me = c.rank();
  for (int root = 0; root < p; ++root) {
    std::vector<uint8_t> data(1000, 0);
    if (me == root) {
      for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k + static_cast<size_t>(root));
    }
    if (!check_ok(me, c.broadcast(data, root), "broadcast")) return;
    for (size_t k = 0; k < data.size(); ++k) {
      if (data[k] != static_cast<uint8_t>(k + static_cast<size_t>(root))) {
        fail(me, "broadcast from root " + std::to_string(root));
        break;
      }
    }
  }
  check_ok(me, c.barrier(), "barrier");
}

// A global batch of `bags` bags for both features (ids skewed to repeat across ranks).
struct GlobalBatch {
  std::vector<std::vector<int64_t>> ids, offsets;
  SparseBatch slice(int64_t b0, int64_t b1, std::vector<std::vector<int64_t>>* offs) const {
    SparseBatch b;
    b.batch_size = b1 - b0;
    offs->assign(ids.size(), {});
    for (size_t f = 0; f < ids.size(); ++f) {
      const int64_t lo = offsets[f][static_cast<size_t>(b0)], hi = offsets[f][static_cast<size_t>(b1)];
      for (int64_t k = b0; k <= b1; ++k) (*offs)[f].push_back(offsets[f][static_cast<size_t>(k)] - lo);
      b.features.push_back({std::span<const int64_t>(ids[f]).subspan(static_cast<size_t>(lo), static_cast<size_t>(hi - lo)), (*offs)[f], {}});
    }
    return b;
  }
};

GlobalBatch make_batch(int step, int64_t bags, int64_t rows) {
  std::mt19937_64 rng(77 + static_cast<uint64_t>(step));
  GlobalBatch g;
  for (int f = 0; f < 2; ++f) {
    g.ids.emplace_back();
    g.offsets.push_back({0});
    for (int64_t b = 0; b < bags; ++b) {
      const int len = static_cast<int>(rng() % 5);
      for (int i = 0; i < len; ++i) {
        const double u = static_cast<double>(rng() % 1000) / 1000.0;
        g.ids.back().push_back(static_cast<int64_t>(u * u * static_cast<double>(rows)));
      }
      g.offsets.back().push_back(static_cast<int64_t>(g.ids.back().size()));
    }
  }
  return g;
}

void check_sharded(Communicator& c) {
  const int p = c.size(), me = c.rank();
  CollectionOptions o;
  OptimizerOptions opt;
  opt.kind = OptimizerKind::kAdagrad;
  opt.learning_rate = 0.1f;
  o.tables = {TableOptions{"t", 40, 6, DType::kF32, opt, {}, false, {}, {}, {}, {}}};
  o.features = {FeatureOptions{"sum", 0, PoolingMode::kSum}, FeatureOptions{"mean", 0, PoolingMode::kMean}};
  o.seed = 3;
  o.num_threads = 1;
  ShardedCollectionOptions so;
  so.collection = o;
  auto sharded = ShardedEmbeddingCollection::create(so, &c);
  auto ref = EmbeddingCollection::create(o);
  if (!check_ok(me, sharded.status(), "sharded create") || !check_ok(me, ref.status(), "reference create")) return;
  const int64_t bags_per_rank = 5, global_bags = bags_per_rank * p, pd = (*ref)->pooled_dim();
  for (int step = 0; step < 3; ++step) {
    const GlobalBatch g = make_batch(step, global_bags, 40);
    std::vector<std::vector<int64_t>> all_offs, my_offs;
    const SparseBatch all = g.slice(0, global_bags, &all_offs);
    const SparseBatch mine = g.slice(me * bags_per_rank, (me + 1) * bags_per_rank, &my_offs);
    std::vector<float> want(static_cast<size_t>(global_bags * pd)), got(static_cast<size_t>(bags_per_rank * pd));
    std::vector<float> grads = wide_floats(500 + static_cast<uint64_t>(step), want.size());
    for (float& x : grads) x = std::ldexp(x, -18);  // gradients of moderate size
    if (!check_ok(me, (*ref)->forward(all, want), "reference forward")) return;
    if (!check_ok(me, (*ref)->backward_update(all, grads).status(), "reference backward")) return;
    if (!check_ok(me, (*sharded)->forward(mine, got), "sharded forward")) return;
    if (std::memcmp(got.data(), want.data() + me * bags_per_rank * pd, got.size() * sizeof(float)) != 0) {
      fail(me, "sharded pooled output differs from the single process at step " + std::to_string(step));
    }
    const auto my_grads = std::span<const float>(grads).subspan(static_cast<size_t>(me * bags_per_rank * pd), got.size());
    if (!check_ok(me, (*sharded)->backward_update(mine, my_grads).status(), "sharded backward")) return;
  }
  const RowLayout& l = (*ref)->layout(0);
  const ShardPlan& plan = (*sharded)->plan();
  std::vector<uint8_t> mine(l.stride_bytes), want(l.stride_bytes);
  for (int64_t lr = 0; lr < plan.local_num_rows(0, me); ++lr) {
    const int64_t gr = plan.global_row(0, me, lr);
    if (!(*sharded)->local().read_raw_rows(0, lr, 1, mine).ok() || !(*ref)->read_raw_rows(0, gr, 1, want).ok() || mine != want) {
      fail(me, "sharded row " + std::to_string(gr) + " differs from the single process");
      return;
    }
  }
}

int run_checks() {
  auto comm = make_communicator("mpi", CommOptions{60000});
  if (!comm.ok()) {
    std::fprintf(stderr, "dist_mpi_check: %s\n", comm.status().to_string().c_str());
    return 1;
  }
  Communicator& c = **comm;
  check_all_to_all(c, 0);
  check_all_to_all(c, 1);
  check_all_reduce(c);
  check_broadcast_and_barrier(c);
  check_sharded(c);
  return g_errors == 0 ? 0 : 1;
}

int run_dead_rank(int dead, const std::string& mode, int64_t timeout_ms, const std::string& done_dir) {
  auto comm = make_communicator("mpi", CommOptions{timeout_ms});
  if (!comm.ok()) {
    std::fprintf(stderr, "dist_mpi_check: %s\n", comm.status().to_string().c_str());
    return 2;
  }
  Communicator& c = **comm;
  if (!check_ok(c.rank(), c.barrier(), "first barrier")) return 2;
  if (c.rank() == dead) {
    if (mode == "exit") raise(SIGKILL);
    // Stay alive (unresponsive) until every survivor has reported, so mpirun does not end the
    // job before they print.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      int done = 0;
      for (int r = 0; r < c.size(); ++r) done += std::filesystem::exists(done_dir + "/done." + std::to_string(r));
      if (done >= c.size() - 1 || std::chrono::steady_clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::fflush(nullptr);
    std::_Exit(0);
  }
  std::vector<float> v(1000, 1.0f);
  const Status st = c.all_reduce(std::span<float>(v), ReduceOp::kSum);
  int code = 1;
  if (st.ok()) {
    std::fprintf(stderr, "dist_mpi_check: rank %d: all_reduce succeeded without rank %d\n", c.rank(), dead);
    code = 2;
  } else {
    std::fprintf(stderr, "dist_mpi_check: rank %d: %s\n", c.rank(), st.to_string().c_str());
    if (st.code() != StatusCode::kInternal) code = 2;
  }
  std::fflush(stderr);
  std::ofstream(done_dir + "/done." + std::to_string(c.rank())) << code << "\n";
  return code;
}

}  // namespace
}  // namespace leanemb::dist

int main(int argc, char** argv) {
  using namespace leanemb::dist;
  auto rt = MpiRuntime::init(&argc, &argv);
  if (!rt.ok()) {
    std::fprintf(stderr, "dist_mpi_check: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  int dead = -1;
  int64_t timeout_ms = 1000;
  std::string mode = "sleep", done_dir = ".";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], val = argv[i + 1];
    if (key == "--dead-rank") dead = std::atoi(val.c_str());
    else if (key == "--mode") mode = val;
    else if (key == "--timeout-ms") timeout_ms = std::atoll(val.c_str());
    else if (key == "--done-dir") done_dir = val;
    else {
      std::fprintf(stderr, "dist_mpi_check: unknown option %s\n", key.c_str());
      return 2;
    }
  }
  return dead >= 0 ? run_dead_rank(dead, mode, timeout_ms, done_dir) : run_checks();
}
