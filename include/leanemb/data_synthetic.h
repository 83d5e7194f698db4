// Synthetic CTR data with a planted teacher (leanemb gen-data).
//
// Rows look like Criteo: num_dense non-negative integer columns (some empty; column I2 is
// sometimes negative, as in Criteo) and num_sparse categorical columns of 8-digit hex values.
// Feature f draws ranks from a Zipf(zipf) law over [0, vocab[f]) (zipf = 0: uniform) and writes
// rank r as the hex of a fixed bijection of 32 bits, so hot values are scattered. A field is
// empty with probability sparse_missing_rate, otherwise it holds 1..multi_hot_max values
// (uniform length).
//
// The teacher is a factorization machine on what a model sees (transformed dense values, the
// categorical values):
//   z = a_d * std(w . dense) + a_s * std(sum_f sum_{id in bag f} s_f[id])
//     + a_p * std(sum_{f<g} <V_f, V_g>),   V_f = sum_{id in bag f} v_f[id]  (k = latent_dim)
//   logit = scale * z + bias,  p = sigmoid(logit),  label ~ Bernoulli(sigmoid(logit + noise))
// std() standardizes each term with its mean and deviation on a pilot sample; a_d^2, a_s^2, a_p^2
// are the terms' shares of the variance, GenOptions' dense_weight, first_order_weight and
// pairwise_weight normalized to sum 1 (defaults 0.2, 0.3, 0.5). scale and bias are calibrated on
// the pilot so that the
// mean label rate is target_label_rate and the expected AUC of p is target_auc. Parameters
// (w, s, v) are counter-based hashes of (seed, feature, rank): nothing is stored per id.
//
// Everything is a pure function of the options: rows are keyed by (seed, split, row index), so
// the output does not depend on the thread count. meta.json records the options, the
// vocabulary sizes, label rates and teacher_auc / teacher_logloss measured on the eval split
// from p (what the best possible model would score).
//
// Thread safety: generate_dataset uses up to num_threads OpenMP threads internally; calls on
// distinct output directories may run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::data {

enum class OutputFormat : uint8_t { kTsv, kBinary };
std::string_view output_format_name(OutputFormat f);          // "tsv" | "bin"
Result<OutputFormat> parse_output_format(std::string_view s);  // errors: InvalidArgument

struct GenOptions {
  std::string out_dir;               // created if missing
  int64_t train_rows = 1000000;      // rows of DIR/train.{tsv|bin}
  int64_t eval_rows = 100000;        // rows of DIR/eval.{tsv|bin}
  uint64_t seed = 1;
  int num_dense = 13;
  int num_sparse = 26;
  std::vector<int64_t> vocab = {10000};  // one value for all features, or num_sparse values
  double zipf = 1.05;                // Zipf exponent of the ranks; 0 = uniform
  int multi_hot_max = 1;             // values per non-empty field: uniform in [1, multi_hot_max]
  OutputFormat format = OutputFormat::kTsv;
  int latent_dim = 4;                // k of the teacher's latent vectors, in [1, 16]
  double noise_std = 0.0;            // N(0, noise_std) added to the logit of the label draw only
  // Shares of the logit variance of the standardized teacher terms (dense, first order,
  // pairwise), normalized to sum 1 (a term's weight is the square root of its share). >= 0, not
  // all 0.
  double dense_weight = 0.2;
  double first_order_weight = 0.3;
  double pairwise_weight = 0.5;
  double target_label_rate = 0.25;   // mean of p, in (0, 1)
  double target_auc = 0.80;          // expected AUC of p, in (0.5, 1)
  double dense_missing_rate = 0.05;  // probability a dense field is empty
  double sparse_missing_rate = 0.02; // probability a categorical field is empty
  int num_threads = 0;               // OpenMP threads; 0 = OpenMP's default
  // Receives progress lines (about one per second for long runs); null = none.
  std::function<void(const std::string&)> progress;
  // Instead of `progress` when set (a terminal's progress line, core/progress.h): the split
  // ("train", "eval"), its rows written and its rows, every few chunks and once at its end.
  std::function<void(const char* split, int64_t done, int64_t rows)> progress_rows;
};

struct GenReport {
  std::string train_path, eval_path, meta_path;
  double train_label_rate = 0.0;
  double eval_label_rate = 0.0;
  // On the eval split, from the teacher's p; only when has_teacher_metrics (the eval split has
  // both labels), else null in meta.json.
  bool has_teacher_metrics = false;
  double teacher_auc = 0.0;
  double teacher_logloss = 0.0;
  double scale = 0.0, bias = 0.0;  // calibrated logit = scale * z + bias
  double seconds = 0.0;
};

// Checks the options. Errors: InvalidArgument naming the option.
Status validate_gen_options(const GenOptions& options);

// Writes DIR/train.*, DIR/eval.* and DIR/meta.json (each via a temporary file and rename).
// Errors: InvalidArgument (options), IoError.
Result<GenReport> generate_dataset(const GenOptions& options);

// The teacher's probabilities p [eval_rows] of the eval split, recomputed from the options
// (what generate_dataset used for teacher_auc). Errors: InvalidArgument (options).
Result<std::vector<float>> teacher_eval_probabilities(const GenOptions& options);

}  // namespace leanemb::data
