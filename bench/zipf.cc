// Zipf id streams. Invariant: every value produced is a pure function of (options, batch index);
// no global or shared RNG state exists, so batches can be generated in any order or in parallel.
#include "zipf.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

namespace leanemb::bench {

namespace {

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t mix(uint64_t x) {
  uint64_t s = x;
  return splitmix64(&s);
}

double next_u01(uint64_t* state) { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }

// expm1(x) / x, accurate near 0.
double helper2(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x)); }
// log1p(x) / x, accurate near 0.
double helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x)); }

}  // namespace

uint64_t derive_seed(uint64_t seed, uint64_t index) { return mix(mix(seed ^ 0x7a697066ull) + index); }

// ---- RowPermutation ---------------------------------------------------------------------------

RowPermutation::RowPermutation(int64_t n, uint64_t seed) : n_(n) {
  int bits = 2;
  while (bits < 62 && (int64_t{1} << bits) < n) ++bits;
  if (bits % 2) ++bits;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t s = seed ^ 0x7065726d75746521ull;
  for (uint64_t& k : keys_) k = splitmix64(&s);
}

int64_t RowPermutation::operator()(int64_t x) const {
  uint64_t v = static_cast<uint64_t>(x);
  // Cycle walking: the Feistel network permutes [0, 2^bits); re-encrypting values that land at or
  // beyond n gives a permutation of [0, n). 2^bits < 4n, so the expected walk is < 4 rounds.
  do {
    uint64_t l = v >> half_bits_, r = v & half_mask_;
    for (uint64_t k : keys_) {
      const uint64_t f = mix(r ^ k) & half_mask_;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    v = (l << half_bits_) | r;
  } while (v >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(v);
}

// ---- ZipfSampler (rejection-inversion, Hoermann & Derflinger 1996) ---------------------------

ZipfSampler::ZipfSampler(int64_t n, double s) : n_(n), s_(s) {
  if (n_ < 1 || !(s_ > 0.0)) {  // unused (uniform); keep the object well-defined
    n_ = std::max<int64_t>(n_, 1);
    s_ = 1.0;
  }
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(static_cast<double>(n_) + 0.5);
  cut_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const { return std::exp(-s_ * std::log(x)); }

double ZipfSampler::h_integral(double x) const {
  const double log_x = std::log(x);
  return helper2((1.0 - s_) * log_x) * log_x;
}

double ZipfSampler::h_integral_inverse(double x) const {
  double t = x * (1.0 - s_);
  if (t < -1.0) t = -1.0;  // guards rounding at the far end of the support
  return std::exp(helper1(t) * x);
}

int64_t ZipfSampler::try_sample(double u01) const {
  const double u = h_integral_n_ + u01 * (h_integral_x1_ - h_integral_n_);
  const double x = h_integral_inverse(u);
  int64_t k = static_cast<int64_t>(x + 0.5);
  k = std::clamp<int64_t>(k, 1, n_);
  if (static_cast<double>(k) - x <= cut_ || u >= h_integral(static_cast<double>(k) + 0.5) - h(static_cast<double>(k)))
    return k;
  return 0;
}

// ---- IdGenerator ------------------------------------------------------------------------------

IdGenerator::IdGenerator(const IdStreamOptions& o)
    : options_(o), uniform_(o.alpha <= 1.0), zipf_(o.num_rows, o.alpha), perm_(o.num_rows, derive_seed(o.seed, ~uint64_t{0})) {}

Result<IdGenerator> IdGenerator::create(const IdStreamOptions& o) {
  if (o.num_rows <= 0 || o.num_rows >= (int64_t{1} << 62))
    return invalid_argument("id stream: num_rows must be in [1, 2^62), got " + std::to_string(o.num_rows));
  if (o.batch_size <= 0) return invalid_argument("id stream: batch_size must be > 0, got " + std::to_string(o.batch_size));
  if (o.bag_size <= 0 || o.bag_size > o.num_rows)
    return invalid_argument("id stream: bag_size must be in [1, num_rows = " + std::to_string(o.num_rows) +
                            "] (bags hold distinct ids), got " + std::to_string(o.bag_size));
  if (!std::isfinite(o.alpha)) return invalid_argument("id stream: alpha must be finite");
  return IdGenerator(o);
}

// A uniform row in [0, n) without modulo bias worth caring about (n < 2^62, 64 random bits).
static int64_t uniform_row(uint64_t* state, int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(splitmix64(state)) * static_cast<uint64_t>(n)) >> 64);
}

int64_t IdGenerator::draw_rank(uint64_t* state) const {
  if (uniform_) return uniform_row(state, options_.num_rows);
  for (;;) {
    const int64_t k = zipf_.try_sample(next_u01(state));
    if (k > 0) return k - 1;
  }
}

IdBatch IdGenerator::batch(int64_t index) const {
  const int64_t B = options_.batch_size, L = options_.bag_size, n = options_.num_rows;
  IdBatch out;
  out.ids.resize(static_cast<size_t>(B * L));
  out.offsets.resize(static_cast<size_t>(B + 1));
  uint64_t state = derive_seed(options_.seed, static_cast<uint64_t>(index));
  std::unordered_set<int64_t> seen;  // only for long bags; short bags use a linear scan
  const bool linear = L <= 64;
  for (int64_t b = 0; b < B; ++b) {
    out.offsets[static_cast<size_t>(b)] = b * L;
    int64_t* bag = out.ids.data() + b * L;
    int64_t have = 0;
    if (!linear) seen.clear();
    auto add_if_new = [&](int64_t rank) {
      if (linear) {
        for (int64_t i = 0; i < have; ++i)
          if (bag[i] == rank) return;
      } else if (!seen.insert(rank).second) {
        return;
      }
      bag[have++] = rank;
    };
    const int64_t max_draws = 64 * L;
    for (int64_t d = 0; d < max_draws && have < L; ++d) add_if_new(draw_rank(&state));
    while (have < L) add_if_new(uniform_row(&state, n));  // extreme alpha: complete uniformly
    // Ranks -> rows (uniform draws are rows already; permuting them is harmless but wasted).
    if (!uniform_)
      for (int64_t i = 0; i < L; ++i) bag[i] = perm_(bag[i]);
  }
  out.offsets[static_cast<size_t>(B)] = B * L;
  return out;
}

Result<std::vector<IdBatch>> generate_id_stream(const IdStreamOptions& options, int64_t num_batches) {
  LEANEMB_ASSIGN_OR_RETURN(IdGenerator gen, IdGenerator::create(options));
  if (num_batches <= 0) return invalid_argument("id stream: num_batches must be > 0");
  std::vector<IdBatch> out(static_cast<size_t>(num_batches));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < num_batches; ++i) out[static_cast<size_t>(i)] = gen.batch(i);
  return out;
}

}  // namespace leanemb::bench
