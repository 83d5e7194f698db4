// Synthetic id streams for benchmarks, shaped like production traffic (as FBGEMM's TBE benchmark
// generator): per bag, L distinct row ids whose popularity follows Zipf(alpha) over ranks
// 1..num_rows; rank k is mapped to a row through a fixed pseudo-random permutation of the rows so
// that hot rows are scattered over the table instead of packed at its start. alpha <= 1 means
// uniform ids (FBGEMM's convention).
//
// Differences from FBGEMM's generator, on purpose:
//   * ranks come from the Zipf law truncated to [1, num_rows] (exact rejection-inversion
//     sampling, Hoermann & Derflinger 1996), not from the unbounded law folded with `% E`; with
//     alpha = 1.05 folding would add a near-uniform floor holding ~half of all draws;
//   * every bag holds L *distinct* ids (FBGEMM keeps the L smallest of 3L draws, which can
//     repeat); a bag whose first 64 * L draws give fewer than L distinct ranks is completed with
//     uniform draws (only happens for extreme alpha).
//
// Cost: O(1) per id (no per-draw table); the permutation is a 4-round Feistel network with
// cycle walking, so it needs no O(rows) memory either. Everything is a pure function of
// (options, seed, batch index): two runs, or two processes (leanemb bench and
// bench/peer_torch.py through the Python module), produce the same arrays.
//
// Thread safety: all functions are pure; IdGenerator objects are not shared between threads.
#pragma once

#include <cstdint>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::bench {

struct IdStreamOptions {
  int64_t num_rows = 0;    // table rows E (> 0)
  int64_t batch_size = 0;  // bags per batch B (> 0)
  int64_t bag_size = 0;    // ids per bag L (0 < L <= num_rows)
  double alpha = 0.0;      // Zipf exponent; <= 1 means uniform
  uint64_t seed = 0;       // stream seed; the permutation also derives from it
};

// One feature's lookups for one batch, in PyTorch EmbeddingBag convention.
struct IdBatch {
  std::vector<int64_t> ids;      // [B * L] row ids in [0, num_rows)
  std::vector<int64_t> offsets;  // [B + 1] offsets[b] = b * L
};

// A bijection of [0, n) from a 4-round Feistel network over the smallest even-bit power of two
// >= n, cycle-walked into [0, n) (expected < 4 rounds of walking).
class RowPermutation {
 public:
  RowPermutation(int64_t n, uint64_t seed);
  int64_t operator()(int64_t x) const;

 private:
  int64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[4];
};

// Exact sampler of the Zipf law truncated to ranks [1, n]: P(k) ~ k^-s (s > 0), by
// rejection-inversion; O(1) expected time per draw, no table.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double s);
  // u01: a uniform double in [0, 1) from the caller's RNG. Returns a rank in [1, n], or 0 when
  // the candidate is rejected (call again with a fresh number; acceptance is > 90%).
  int64_t try_sample(double u01) const;

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_integral_inverse(double x) const;
  int64_t n_;
  double s_;
  double h_integral_x1_;
  double h_integral_n_;
  double cut_;
};

// Generates the batches of one feature's stream.
class IdGenerator {
 public:
  // Errors: InvalidArgument for num_rows <= 0, batch_size <= 0, bag_size <= 0 or > num_rows, or
  // num_rows >= 2^62.
  static Result<IdGenerator> create(const IdStreamOptions& options);
  // Batch number `index` of the stream (any order; batches are independent).
  IdBatch batch(int64_t index) const;
  const IdStreamOptions& options() const { return options_; }

 private:
  IdGenerator(const IdStreamOptions& o);
  int64_t draw_rank(uint64_t* state) const;
  IdStreamOptions options_;
  bool uniform_;
  ZipfSampler zipf_;
  RowPermutation perm_;
};

// `num_batches` distinct batches 0..num_batches-1 of the stream described by `options`.
Result<std::vector<IdBatch>> generate_id_stream(const IdStreamOptions& options, int64_t num_batches);

// Seed of feature/table `index` derived from a run seed (so tables get independent streams).
uint64_t derive_seed(uint64_t seed, uint64_t index);

}  // namespace leanemb::bench
