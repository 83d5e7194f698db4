// The id stream's model (plan/memory_model.h): distinct rows of Zipf draws, the head's share of
// the id mass, an LRU cache's misses per step, and the bytes a checkpoint writes. Split from
// memory_model.cc, which sizes the allocations.
#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "leanemb/optimizer.h"
#include "tiered/sizes.h"

namespace leanemb::plan {

namespace {
// Calls f(first_rank, count, p_unnormalized) over geometric buckets of ranks 1..vocab (ranks
// within a bucket get the bucket's first probability; exact for small ranks).
template <typename F>
void for_rank_buckets(int64_t vocab, double zipf, F&& f, int64_t width_divisor = 4096) {
  int64_t r = 1;
  while (r <= vocab) {
    const int64_t width = std::max<int64_t>(1, r / width_divisor);
    const int64_t cnt = std::min(width, vocab - r + 1);
    f(r, cnt, zipf == 0.0 ? 1.0 : std::pow(static_cast<double>(r), -zipf));
    r += cnt;
  }
}
}  // namespace

Result<CheckpointBytes> checkpoint_bytes(const Workload& w, int64_t every) {
  CheckpointBytes b;
  for (const TableSpec& t : w.tables) {
    LEANEMB_ASSIGN_OR_RETURN(RowLayout l, make_row_layout(t.dim, w.row_dtype, w.row_optimizer));
    // Linked (Workload::link_store_rows): every checkpoint holds the places of the rows written
    // so far (table/linked_tables.h: a varint gap, file and offset each, 7 bytes at most here), and
    // no row: the store's files are linked.
    const bool linked = links_rows(w, t);
    const double stride = linked ? 7.0 : static_cast<double>(l.stride_bytes);
    b.full += static_cast<uint64_t>(static_cast<double>(t.num_rows) * stride);
    // The bytes of the distinct rows `steps` steps change: each fat row and its row number, a
    // varint gap (table/delta_rows.h: 7 bits per byte of the mean gap); every row when the ids'
    // vocabulary and skew are unknown.
    auto changed_bytes = [&](int64_t steps) {
      const double ids = static_cast<double>(steps) * static_cast<double>(w.batch_size) * t.mean_ids_per_sample;
      const double rows = t.vocab > 0 || t.zipf > 0
                              ? expected_unique_rows(static_cast<int64_t>(std::min(ids, 9e18)), t.vocab > 0 ? t.vocab : t.num_rows, t.zipf, t.num_rows)
                              : static_cast<double>(t.num_rows);
      const double gap = rows > 0 ? static_cast<double>(t.num_rows) / rows : 1.0;
      return rows * (linked ? stride : static_cast<double>(l.stride_bytes) + std::max(1.0, std::ceil(std::log2(gap + 1.0) / 7.0)));
    };
    // A linked table's increment holds the places of every row written by then: at most the run's.
    b.incremental += changed_bytes(linked && w.run_steps > 0 ? w.run_steps : std::max<int64_t>(every, 1));
    if (w.run_steps > 0) b.sparse_base = std::max(0.0, b.sparse_base) + changed_bytes(w.run_steps);
  }
  return b;
}

double expected_unique_rows(int64_t n, int64_t vocab, double zipf, int64_t num_rows) {
  if (n <= 0 || vocab <= 0 || num_rows <= 0) return 0.0;
  double h = 0.0;
  for_rank_buckets(vocab, zipf, [&](int64_t, int64_t cnt, double p) { h += static_cast<double>(cnt) * p; });
  double ranks = 0.0;
  for_rank_buckets(vocab, zipf, [&](int64_t, int64_t cnt, double p) {
    ranks += static_cast<double>(cnt) * -std::expm1(static_cast<double>(n) * std::log1p(-p / h));
  });
  // Distinct ranks hashed into num_rows rows: balls into bins.
  const double rows = static_cast<double>(num_rows);
  return std::min(rows, -rows * std::expm1(-ranks / rows));
}

double first_touches_per_step(int64_t n, int64_t run_steps, int64_t vocab, double zipf, int64_t num_rows) {
  if (n <= 0 || run_steps <= 0) return 0.0;
  const int64_t half = run_steps / 2;
  auto unique_after = [&](int64_t steps) {
    return expected_unique_rows(static_cast<int64_t>(std::min(9e18, static_cast<double>(n) * static_cast<double>(steps))), vocab, zipf, num_rows);
  };
  return (unique_after(run_steps) - unique_after(half)) / static_cast<double>(run_steps - half);
}

double zipf_head_mass(int64_t vocab, double zipf, int64_t cached_rows) {
  if (vocab <= 0) return 1.0;
  if (cached_rows >= vocab) return 1.0;
  double h = 0.0, head = 0.0;
  for_rank_buckets(vocab, zipf, [&](int64_t r, int64_t cnt, double p) {
    h += static_cast<double>(cnt) * p;
    if (r <= cached_rows) head += static_cast<double>(std::min<int64_t>(cnt, cached_rows - r + 1)) * p;
  });
  return h > 0 ? head / h : 0.0;
}

double lru_misses_per_step(int64_t n, int64_t vocab, double zipf, int64_t capacity) {
  return lru_steady_state(n, vocab, zipf, capacity).misses_per_step;
}

LruSteadyState lru_steady_state(int64_t n, int64_t vocab, double zipf, int64_t capacity) {
  if (n <= 0 || vocab <= 0 || capacity >= vocab) return {};
  struct Bucket {
    double cnt, log_miss;  // ranks in the bucket, log(1 - q) of each
  };
  // Ranks in buckets of width r / 256 (about 256 per factor e of rank: a few thousand for 1e9
  // ranks; the planner calls this for every candidate).
  constexpr int64_t kWidthDivisor = 256;
  double h = 0.0;
  for_rank_buckets(vocab, zipf, [&](int64_t, int64_t cnt, double p) { h += static_cast<double>(cnt) * p; }, kWidthDivisor);
  std::vector<Bucket> buckets;
  // log(1 - q) = n log(1 - p / h), where q = 1 - (1 - p/h)^n.
  for_rank_buckets(vocab, zipf, [&](int64_t, int64_t cnt, double p) {
    buckets.push_back({static_cast<double>(cnt), static_cast<double>(n) * std::log1p(-p / h)});
  }, kWidthDivisor);
  // Rows cached after T steps: sum cnt (1 - (1 - q)^T), increasing in T; bisect on log T.
  const double cap = static_cast<double>(std::max<int64_t>(capacity, 0));
  auto occupied = [&](double t) {
    double s = 0.0;
    for (const Bucket& b : buckets) s += b.cnt * -std::expm1(t * b.log_miss);
    return s;
  };
  double lo = 0.0, hi = 1.0;
  while (occupied(hi) < cap && hi < 1e18) hi *= 2;
  for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (occupied(mid) < cap ? lo : hi) = mid;
  }
  const double t = 0.5 * (lo + hi);
  double misses = 0.0;
  for (const Bucket& b : buckets) misses += b.cnt * -std::expm1(b.log_miss) * std::exp(t * b.log_miss);
  return {misses, t};
}

double accumulation_extra_rows(const TableSpec& t, int64_t rows, int64_t ids, int64_t unique, int64_t n,
                               int64_t micro_batches, Estimate est) {
  const double bound = static_cast<double>(std::min(n, unique));
  const double u = est == Estimate::kExpected && unique < ids
                       ? std::min(bound, expected_unique_rows(n, t.vocab > 0 ? t.vocab : t.num_rows, t.zipf, rows))
                       : bound;
  return std::max(0.0, static_cast<double>(micro_batches) * u - static_cast<double>(unique));
}

}  // namespace leanemb::plan
