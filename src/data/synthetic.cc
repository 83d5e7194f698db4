// Synthetic data with a planted factorization-machine teacher. Invariant: every value of a row
// (features, teacher components, label) is a pure function of (options, split, row index); the
// output is produced in fixed chunks written in order, so files are byte-identical for any
// thread count.
#include "leanemb/data_synthetic.h"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "core/enum_names.h"
#include "core/rng.h"
#include "data/binary_format.h"
#include "data/io.h"
#include "data/metrics.h"
#include "data/schema.h"
#include "data/tsv.h"

namespace leanemb {
template <>
struct EnumNames<data::OutputFormat> {
  static constexpr std::string_view kWhat = "output format";
  static constexpr EnumName<data::OutputFormat> kNames[] = {{data::OutputFormat::kTsv, "tsv", ""},
                                                            {data::OutputFormat::kBinary, "bin", ""}};
};
}  // namespace leanemb

namespace leanemb::data {

namespace {

constexpr uint64_t kSplitTrain = 1, kSplitEval = 2, kSplitPilot = 3;
constexpr int64_t kPilotRows = 16384;
constexpr int64_t kChunkRows = 8192;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

struct Rng {
  uint64_t s;
  uint64_t next() { return mix64(s += kGolden); }
  double u01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
  double normal() {  // Box-Muller; always consumes two draws
    const double u1 = 1.0 - u01(), u2 = u01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

double hash_u11(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0; }  // [-1, 1)

// Zipf ranks over [0, n) by rejection-inversion (Hoermann & Derflinger 1996), O(1) per draw
// without tables; the same method as bench/zipf.cc (src/ must not depend on bench/).
class Zipf {
 public:
  Zipf(int64_t n, double s) : n_(n), s_(s) {
    if (s_ <= 0.0) return;
    h_integral_x1_ = h_integral(1.5) - 1.0;
    h_integral_n_ = h_integral(static_cast<double>(n_) + 0.5);
    cut_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
  }
  int64_t sample(Rng* rng) const {
    if (s_ <= 0.0) return static_cast<int64_t>(rng->below(static_cast<uint64_t>(n_)));
    while (true) {
      const double u = h_integral_n_ + rng->u01() * (h_integral_x1_ - h_integral_n_);
      const double x = h_integral_inverse(u);
      const int64_t k = std::clamp<int64_t>(static_cast<int64_t>(x + 0.5), 1, n_);
      const double kd = static_cast<double>(k);
      if (kd - x <= cut_ || u >= h_integral(kd + 0.5) - h(kd)) return k - 1;
    }
  }

 private:
  static double helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x)); }
  static double helper2(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x)); }
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  double h_integral(double x) const {
    const double log_x = std::log(x);
    return helper2((1.0 - s_) * log_x) * log_x;
  }
  double h_integral_inverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(helper1(t) * x);
  }
  int64_t n_;
  double s_;
  double h_integral_x1_ = 0, h_integral_n_ = 0, cut_ = 0;
};

// Walker/Vose alias table over ranks [0, n) with weights (k + 1)^-s: one 64-bit draw per
// sample (the high half of draw * n picks a column, the low half decides column or alias).
// Built for vocabularies up to kMaxAliasRows; larger ones use the rejection sampler above.
class AliasTable {
 public:
  AliasTable(int64_t n, double s) : threshold_(static_cast<size_t>(n)), alias_(static_cast<size_t>(n)) {
    std::vector<double> p(static_cast<size_t>(n));
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k) sum += p[static_cast<size_t>(k)] = std::pow(static_cast<double>(k + 1), -s);
    std::vector<uint32_t> small, large;
    for (int64_t k = n - 1; k >= 0; --k) {
      double& q = p[static_cast<size_t>(k)];
      q *= static_cast<double>(n) / sum;
      (q < 1.0 ? small : large).push_back(static_cast<uint32_t>(k));
    }
    while (!small.empty() && !large.empty()) {
      const uint32_t a = small.back(), b = large.back();
      small.pop_back();
      set(a, p[a], b);
      p[b] -= 1.0 - p[a];
      if (p[b] < 1.0) {
        large.pop_back();
        small.push_back(b);
      }
    }
    for (uint32_t k : small) set(k, 1.0, k);  // rounding leftovers: full columns
    for (uint32_t k : large) set(k, 1.0, k);
  }
  int64_t sample(Rng* rng) const {
    const unsigned __int128 m = static_cast<unsigned __int128>(rng->next()) * threshold_.size();
    const size_t col = static_cast<size_t>(m >> 64);
    return static_cast<uint64_t>(m) < threshold_[col] ? static_cast<int64_t>(col) : alias_[col];
  }

 private:
  void set(uint32_t k, double p, uint32_t alias) {
    threshold_[k] = p >= 1.0 ? ~uint64_t{0} : static_cast<uint64_t>(p * 0x1.0p64);
    alias_[k] = alias;
  }
  std::vector<uint64_t> threshold_;  // column k keeps k when the low draw is below this
  std::vector<uint32_t> alias_;
};

constexpr int64_t kMaxAliasRows = int64_t{1} << 21;
constexpr int64_t kMaxAliasTotal = int64_t{1} << 24;  // entries over all distinct vocabularies

// Ranks of one feature: a (shared) alias table when it fits, rejection-inversion otherwise.
class RankSampler {
 public:
  RankSampler(std::shared_ptr<const AliasTable> table, int64_t n, double s) : table_(std::move(table)), zipf_(n, s) {}
  int64_t sample(Rng* rng) const { return table_ ? table_->sample(rng) : zipf_.sample(rng); }

 private:
  std::shared_ptr<const AliasTable> table_;
  Zipf zipf_;
};

// One generated row; vectors are reused between rows.
struct Row {
  float label = 0.0f;
  float p = 0.0f;                  // teacher probability
  std::vector<int64_t> raw_dense;  // [num_dense], INT64_MIN = empty
  std::vector<float> dense;        // [num_dense] transformed
  std::vector<uint32_t> counts;    // [num_sparse]
  std::vector<uint64_t> values;    // [sum(counts)] the categorical values (as written in hex)
  double z[3] = {0, 0, 0};         // raw teacher components: dense, first order, pairwise
  double noise = 0.0;
  double u_label = 0.0;
};

class Generator {
 public:
  explicit Generator(const GenOptions& o) : o_(o) {
    const size_t ns = static_cast<size_t>(o.num_sparse);
    std::map<int64_t, std::shared_ptr<const AliasTable>> tables;
    int64_t table_entries = 0;
    for (size_t f = 0; f < ns; ++f) {
      const int64_t n = o.vocab.size() == 1 ? o.vocab[0] : o.vocab[f];
      vocab_.push_back(n);
      std::shared_ptr<const AliasTable>& t = tables[n];
      if (!t && o.zipf > 0.0 && n <= kMaxAliasRows && table_entries + n <= kMaxAliasTotal) {
        t = std::make_shared<AliasTable>(n, o.zipf);
        table_entries += n;
      }
      ranks_.emplace_back(t, n, o.zipf);
    }
    key_ = mix64(o.seed ^ 0x67656e2d64617461ull);
    for (int j = 0; j < o.num_dense; ++j) {
      w_.push_back(hash_u11(mix64(key_ ^ (0x100000000ull + static_cast<uint64_t>(j)))));
      log_span_.push_back(2.0 + 4.0 * (hash_u11(mix64(key_ ^ (0x200000000ull + static_cast<uint64_t>(j)))) + 1.0));
    }
  }

  // Features and raw teacher components of row `index` of `split`.
  void row(uint64_t split, int64_t index, Row* r) const {
    Rng rng{mix64(mix64(key_ + split * kGolden) ^ static_cast<uint64_t>(index))};
    r->u_label = rng.u01();
    if (o_.noise_std > 0.0) r->noise = rng.normal();
    else rng.s += 2 * kGolden;  // the two draws normal() would take
    const size_t nd = static_cast<size_t>(o_.num_dense), ns = static_cast<size_t>(o_.num_sparse);
    r->raw_dense.resize(nd);
    r->dense.resize(nd);
    double zd = 0.0;
    for (size_t j = 0; j < nd; ++j) {
      const double u = rng.u01(), v = rng.u01();
      int64_t x;
      if (u < o_.dense_missing_rate) x = INT64_MIN;
      else if (j == 1 && u > 0.97) x = -1 - static_cast<int64_t>(v * 3.0);  // Criteo's I2 dips below 0
      else x = static_cast<int64_t>(std::exp(v * log_span_[j])) - 1;
      r->raw_dense[j] = x;
      r->dense[j] = transform_dense(x == INT64_MIN ? 0.0 : static_cast<double>(x));
      zd += w_[j] * r->dense[j];
    }
    r->counts.resize(ns);
    r->values.clear();
    const int k = o_.latent_dim;
    double sum_v[16] = {0}, sum_sq = 0.0, zs = 0.0;
    for (size_t f = 0; f < ns; ++f) {
      uint32_t n = 0;
      if (rng.u01() >= o_.sparse_missing_rate) n = 1 + static_cast<uint32_t>(rng.below(static_cast<uint64_t>(o_.multi_hot_max)));
      r->counts[f] = n;
      double vf[16] = {0};
      for (uint32_t i = 0; i < n; ++i) {
        const uint64_t rank = static_cast<uint64_t>(ranks_[f].sample(&rng));
        // A bijection of 32 bits: distinct ranks give distinct values.
        r->values.push_back(fmix32(static_cast<uint32_t>(rank) ^ static_cast<uint32_t>(key_ >> 32) ^ static_cast<uint32_t>(f * 0x2545f491u)));
        const uint64_t h = mix64(key_ ^ (static_cast<uint64_t>(f + 1) << 44) ^ rank);
        zs += hash_u11(h);
        for (int c = 0; c < k; c += 4) {
          const uint64_t hv = mix64(h + static_cast<uint64_t>(c / 4 + 1) * kGolden);
          for (int l = 0; l < 4 && c + l < k; ++l)
            vf[c + l] += static_cast<double>((hv >> (16 * l)) & 0xffff) * (2.0 / 65535.0) - 1.0;
        }
      }
      for (int c = 0; c < k; ++c) {
        sum_v[c] += vf[c];
        sum_sq += vf[c] * vf[c];
      }
    }
    double all_sq = 0.0;
    for (int c = 0; c < k; ++c) all_sq += sum_v[c] * sum_v[c];
    r->z[0] = zd;
    r->z[1] = zs;
    r->z[2] = 0.5 * (all_sq - sum_sq);
  }

  // Standardized combination of the components (pilot statistics).
  double combine(const Row& r) const {
    double z = 0.0;
    for (int c = 0; c < 3; ++c)
      if (weight_[c] != 0.0) z += weight_[c] * (r.z[c] - mean_[c]) / sd_[c];
    return z;
  }

  // Label and probability of a row with the calibrated scale and bias.
  void finish(Row* r) const {
    const double logit = scale_ * combine(*r) + bias_;
    r->p = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
    const double noisy = o_.noise_std > 0.0 ? logit + o_.noise_std * r->noise : logit;
    r->label = r->u_label < 1.0 / (1.0 + std::exp(-noisy)) ? 1.0f : 0.0f;
  }

  void calibrate() {
    std::vector<Row> pilot(static_cast<size_t>(kPilotRows));
    for (int64_t i = 0; i < kPilotRows; ++i) row(kSplitPilot, i, &pilot[static_cast<size_t>(i)]);
    const double share[3] = {o_.num_dense > 0 ? o_.dense_weight : 0.0, o_.num_sparse > 0 ? o_.first_order_weight : 0.0,
                             o_.num_sparse > 1 ? o_.pairwise_weight : 0.0};
    double total = 0.0;
    for (int c = 0; c < 3; ++c) {
      double m = 0.0, q = 0.0;
      for (const Row& r : pilot) m += r.z[c];
      m /= kPilotRows;
      for (const Row& r : pilot) q += (r.z[c] - m) * (r.z[c] - m);
      mean_[c] = m;
      sd_[c] = std::sqrt(q / kPilotRows);
      weight_[c] = sd_[c] > 1e-12 ? share[c] : 0.0;
      total += weight_[c];
    }
    for (double& w : weight_) w = total > 0.0 ? std::sqrt(w / total) : 0.0;
    std::vector<double> z(pilot.size());
    for (size_t i = 0; i < pilot.size(); ++i) z[i] = combine(pilot[i]);
    std::sort(z.begin(), z.end());
    // Expected AUC increases with scale; bias keeps the mean rate on target for each scale.
    double lo = 1e-3, hi = 50.0;
    for (int it = 0; it < 40; ++it) {
      const double mid = 0.5 * (lo + hi);
      (expected_auc(z, mid, solve_bias(z, mid)) < o_.target_auc ? lo : hi) = mid;
    }
    scale_ = 0.5 * (lo + hi);
    bias_ = solve_bias(z, scale_);
  }

  double scale() const { return scale_; }
  double bias() const { return bias_; }

 private:
  // The bias b with mean(sigmoid(scale z + b)) = target rate: Newton steps (the mean is
  // increasing in b), falling back to bisection inside the bracket when a step leaves it.
  double solve_bias(const std::vector<double>& z, double scale) const {
    const double t = o_.target_label_rate, n = static_cast<double>(z.size());
    double lo = -60.0, hi = 60.0, b = std::log(t / (1.0 - t));
    for (int it = 0; it < 60; ++it) {
      double m = 0.0, d = 0.0;
      for (double x : z) {
        const double p = 1.0 / (1.0 + std::exp(-(scale * x + b)));
        m += p;
        d += p * (1.0 - p);
      }
      const double f = m / n - t;
      if (std::abs(f) < 1e-12) break;
      (f < 0 ? lo : hi) = b;
      const double next = b - f / (d / n);
      b = d > 0.0 && next > lo && next < hi ? next : 0.5 * (lo + hi);
    }
    return b;
  }

  // E[AUC] of scores z (sorted ascending) when labels ~ Bernoulli(sigmoid(scale z + bias)):
  // sum over pairs i above j of p_i (1 - p_j), ties one half, over all pairs' weight.
  static double expected_auc(const std::vector<double>& z, double scale, double bias) {
    double neg_below = 0.0, num = 0.0, sum_p = 0.0, sum_q = 0.0, self = 0.0;
    for (size_t i = 0; i < z.size();) {
      size_t j = i;
      double gp = 0.0, gq = 0.0;
      for (; j < z.size() && z[j] == z[i]; ++j) {
        const double p = 1.0 / (1.0 + std::exp(-(scale * z[j] + bias)));
        gp += p;
        gq += 1.0 - p;
        self += p * (1.0 - p);
      }
      num += gp * neg_below + 0.5 * (gp * gq);
      neg_below += gq;
      sum_p += gp;
      sum_q += gq;
      i = j;
    }
    num -= 0.5 * self;  // a sample is never paired with itself
    return num / (sum_p * sum_q - self);
  }

  const GenOptions& o_;
  std::vector<int64_t> vocab_;
  std::vector<RankSampler> ranks_;
  std::vector<double> w_, log_span_;
  uint64_t key_ = 0;
  double mean_[3] = {0, 0, 0}, sd_[3] = {1, 1, 1}, weight_[3] = {0, 0, 0};
  double scale_ = 1.0, bias_ = 0.0;
};

// Writes one split; fills labels / probs [rows] when they are non-null.
Status write_split(const GenOptions& o, const Generator& gen, uint64_t split, int64_t rows, const std::string& path,
                   const char* name, int64_t* positives, std::vector<float>* labels, std::vector<float>* probs) {
  std::unique_ptr<BinaryWriter> bin;
  std::unique_ptr<OutputFile> tsv;
  if (o.format == OutputFormat::kBinary) {
    LEANEMB_ASSIGN_OR_RETURN(bin, BinaryWriter::create(path, o.num_dense, o.num_sparse));
  } else {
    LEANEMB_ASSIGN_OR_RETURN(OutputFile f, OutputFile::create(path));
    tsv = std::make_unique<OutputFile>(std::move(f));
  }
  const int threads = o.num_threads > 0 ? o.num_threads : omp_get_max_threads();
  const int64_t num_chunks = (rows + kChunkRows - 1) / kChunkRows;
  const int64_t wave = 2 * static_cast<int64_t>(threads);
  std::vector<std::string> text(static_cast<size_t>(wave));
  std::vector<std::vector<uint8_t>> bytes(static_cast<size_t>(wave));
  std::vector<int64_t> pos(static_cast<size_t>(wave));
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  *positives = 0;
  if (o.progress_rows) o.progress_rows(name, 0, rows);  // the split starts (its line's clock)
  for (int64_t c0 = 0; c0 < num_chunks; c0 += wave) {
    const int64_t c1 = std::min(num_chunks, c0 + wave);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t c = c0; c < c1; ++c) {
      const size_t slot = static_cast<size_t>(c - c0);
      text[slot].clear();
      bytes[slot].clear();
      pos[slot] = 0;
      Row r;
      Record rec;
      for (int64_t i = c * kChunkRows; i < std::min(rows, (c + 1) * kChunkRows); ++i) {
        gen.row(split, i, &r);
        gen.finish(&r);
        pos[slot] += r.label > 0.5f;
        if (labels) (*labels)[static_cast<size_t>(i)] = r.label;
        if (probs) (*probs)[static_cast<size_t>(i)] = r.p;
        if (tsv) {
          append_tsv_line(r.label, r.raw_dense, r.counts, r.values, &text[slot]);
          continue;
        }
        rec.label = r.label;
        rec.dense = r.dense;
        rec.counts = r.counts;
        rec.hashes.resize(r.values.size());
        size_t k = 0;
        for (size_t f = 0; f < r.counts.size(); ++f)
          for (uint32_t n = 0; n < r.counts[f]; ++n, ++k) rec.hashes[k] = hash_categorical(r.values[k], static_cast<int>(f));
        encode_record(rec, &bytes[slot]);
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      const size_t slot = static_cast<size_t>(c - c0);
      *positives += pos[slot];
      const int64_t n = std::min(rows, (c + 1) * kChunkRows) - c * kChunkRows;
      if (tsv) LEANEMB_RETURN_IF_ERROR(tsv->write(text[slot]));
      else LEANEMB_RETURN_IF_ERROR(bin->add_encoded(bytes[slot], static_cast<uint64_t>(n)));
    }
    if (o.progress_rows) {  // the caller rate-limits; every chunk group, and the split's end
      o.progress_rows(name, std::min(rows, c1 * kChunkRows), rows);
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (o.progress && std::chrono::duration<double>(now - last_report).count() >= 1.0) {
      last_report = now;
      const int64_t done = std::min(rows, c1 * kChunkRows);
      const double secs = std::chrono::duration<double>(now - t0).count();
      char buf[160];
      std::snprintf(buf, sizeof buf, "gen-data: %s %lld / %lld rows (%.2f M rows/s)", name, static_cast<long long>(done),
                    static_cast<long long>(rows), static_cast<double>(done) / secs * 1e-6);
      o.progress(buf);
    }
  }
  if (tsv) return tsv->commit();
  return bin->finish();
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back as v
  return std::string(buf, res.ptr);
}

std::string meta_json(const GenOptions& o, const GenReport& r, const std::vector<int64_t>& vocab, bool have_teacher) {
  const std::string ext = o.format == OutputFormat::kBinary ? "bin" : "tsv";
  std::string vs;
  for (size_t i = 0; i < vocab.size(); ++i) vs += (i ? ", " : "") + std::to_string(vocab[i]);
  std::string j = "{\n";
  auto add = [&](const std::string& key, const std::string& value, bool last = false) {
    j += "  \"" + key + "\": " + value + (last ? "\n" : ",\n");
  };
  add("generator", "\"leanemb gen-data\"");
  add("format", "\"" + ext + "\"");
  add("train_file", "\"train." + ext + "\"");
  add("eval_file", "\"eval." + ext + "\"");
  add("seed", std::to_string(o.seed));
  add("train_rows", std::to_string(o.train_rows));
  add("eval_rows", std::to_string(o.eval_rows));
  add("num_dense", std::to_string(o.num_dense));
  add("num_sparse", std::to_string(o.num_sparse));
  add("vocab_sizes", "[" + vs + "]");
  add("zipf", json_number(o.zipf));
  add("multi_hot_max", std::to_string(o.multi_hot_max));
  add("latent_dim", std::to_string(o.latent_dim));
  add("noise_std", json_number(o.noise_std));
  add("dense_weight", json_number(o.dense_weight));
  add("first_order_weight", json_number(o.first_order_weight));
  add("pairwise_weight", json_number(o.pairwise_weight));
  add("dense_missing_rate", json_number(o.dense_missing_rate));
  add("sparse_missing_rate", json_number(o.sparse_missing_rate));
  add("target_label_rate", json_number(o.target_label_rate));
  add("target_auc", json_number(o.target_auc));
  add("teacher_scale", json_number(r.scale));
  add("teacher_bias", json_number(r.bias));
  add("dense_transform", "\"log1p(max(x, 0))\"");
  add("categorical_hash", "\"XXH3_64bits_withSeed(u64 little-endian value, seed = feature index)\"");
  add("label_rate", json_number(r.train_label_rate));
  add("train_label_rate", json_number(r.train_label_rate));
  add("eval_label_rate", json_number(r.eval_label_rate));
  add("teacher_auc", have_teacher ? json_number(r.teacher_auc) : "null");
  add("teacher_logloss", have_teacher ? json_number(r.teacher_logloss) : "null", true);
  return j + "}\n";
}

}  // namespace

std::string_view output_format_name(OutputFormat f) { return enum_name(f); }
Result<OutputFormat> parse_output_format(std::string_view s) { return parse_enum<OutputFormat>(s); }

Status validate_gen_options(const GenOptions& o) {
  auto bad = [](const std::string& m) { return invalid_argument("gen-data: " + m); };
  if (o.train_rows < 0 || o.eval_rows < 0 || o.train_rows + o.eval_rows == 0)
    return bad("train_rows and eval_rows must be >= 0 and not both 0");
  if (o.num_dense < 0 || o.num_dense > 4096 || o.num_sparse < 0 || o.num_sparse > 4096 || o.num_dense + o.num_sparse == 0)
    return bad("num_dense and num_sparse must be in [0, 4096] and not both 0");
  if (o.num_sparse > 0 && o.vocab.size() != 1 && o.vocab.size() != static_cast<size_t>(o.num_sparse))
    return bad("vocab needs 1 or num_sparse (" + std::to_string(o.num_sparse) + ") values, got " + std::to_string(o.vocab.size()));
  for (int64_t v : o.vocab)
    if (v < 1 || v > (int64_t{1} << 32)) return bad("vocab sizes must be in [1, 2^32], got " + std::to_string(v));
  if (!(o.zipf >= 0.0 && o.zipf <= 10.0)) return bad("zipf must be in [0, 10] (0 = uniform)");
  if (o.multi_hot_max < 1 || o.multi_hot_max > 4096) return bad("multi_hot_max must be in [1, 4096]");
  if (o.latent_dim < 1 || o.latent_dim > 16) return bad("latent_dim must be in [1, 16]");
  if (!(o.noise_std >= 0.0 && o.noise_std <= 100.0)) return bad("noise_std must be in [0, 100]");
  if (!(o.dense_weight >= 0.0 && o.first_order_weight >= 0.0 && o.pairwise_weight >= 0.0) ||
      !(o.dense_weight + o.first_order_weight + o.pairwise_weight > 0.0) ||
      !std::isfinite(o.dense_weight + o.first_order_weight + o.pairwise_weight))
    return bad("dense_weight, first_order_weight and pairwise_weight must be finite, >= 0 and not all 0");
  if (!(o.target_label_rate > 0.0 && o.target_label_rate < 1.0)) return bad("target_label_rate must be in (0, 1)");
  if (!(o.target_auc > 0.5 && o.target_auc < 1.0)) return bad("target_auc must be in (0.5, 1)");
  if (!(o.dense_missing_rate >= 0.0 && o.dense_missing_rate <= 1.0) ||
      !(o.sparse_missing_rate >= 0.0 && o.sparse_missing_rate <= 1.0))
    return bad("missing rates must be in [0, 1]");
  if (o.num_threads < 0) return bad("num_threads must be >= 0");
  return Status::ok_status();
}

Result<GenReport> generate_dataset(const GenOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  LEANEMB_RETURN_IF_ERROR(validate_gen_options(o));
  if (o.out_dir.empty()) return invalid_argument("gen-data: an output directory is required");
  LEANEMB_RETURN_IF_ERROR(make_dirs(o.out_dir));
  Generator gen(o);
  gen.calibrate();
  GenReport rep;
  const std::string ext = o.format == OutputFormat::kBinary ? ".bin" : ".tsv";
  rep.train_path = o.out_dir + "/train" + ext;
  rep.eval_path = o.out_dir + "/eval" + ext;
  rep.meta_path = o.out_dir + "/meta.json";
  rep.scale = gen.scale();
  rep.bias = gen.bias();
  int64_t pos = 0;
  LEANEMB_RETURN_IF_ERROR(write_split(o, gen, kSplitTrain, o.train_rows, rep.train_path, "train", &pos, nullptr, nullptr));
  rep.train_label_rate = o.train_rows ? static_cast<double>(pos) / static_cast<double>(o.train_rows) : 0.0;
  std::vector<float> labels(static_cast<size_t>(o.eval_rows)), probs(static_cast<size_t>(o.eval_rows));
  LEANEMB_RETURN_IF_ERROR(write_split(o, gen, kSplitEval, o.eval_rows, rep.eval_path, "eval", &pos, &labels, &probs));
  rep.eval_label_rate = o.eval_rows ? static_cast<double>(pos) / static_cast<double>(o.eval_rows) : 0.0;
  auto auc = roc_auc(labels, probs);
  auto ll = mean_logloss(labels, probs);
  rep.has_teacher_metrics = auc.ok() && ll.ok();
  if (rep.has_teacher_metrics) {
    rep.teacher_auc = auc.value();
    rep.teacher_logloss = ll.value();
  }
  std::vector<int64_t> vocab;
  for (int f = 0; f < o.num_sparse; ++f) vocab.push_back(o.vocab.size() == 1 ? o.vocab[0] : o.vocab[static_cast<size_t>(f)]);
  LEANEMB_ASSIGN_OR_RETURN(OutputFile meta, OutputFile::create(rep.meta_path));
  LEANEMB_RETURN_IF_ERROR(meta.write(meta_json(o, rep, vocab, rep.has_teacher_metrics)));
  LEANEMB_RETURN_IF_ERROR(meta.commit());
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

Result<std::vector<float>> teacher_eval_probabilities(const GenOptions& o) {
  LEANEMB_RETURN_IF_ERROR(validate_gen_options(o));
  Generator gen(o);
  gen.calibrate();
  std::vector<float> p(static_cast<size_t>(o.eval_rows));
  Row r;
  for (int64_t i = 0; i < o.eval_rows; ++i) {
    gen.row(kSplitEval, i, &r);
    gen.finish(&r);
    p[static_cast<size_t>(i)] = r.p;
  }
  return p;
}

}  // namespace leanemb::data
