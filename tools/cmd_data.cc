// `leanemb convert` (TSV -> binary records) and `leanemb gen-data` (synthetic data with a
// planted teacher); see docs/data.md. Values are taken as strings and parsed here so that every
// bad value gets a message naming the flag and exit code 2.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "data/convert.h"
#include "data/schema.h"
#include "data/synthetic.h"
#include "tools/commands.h"

namespace leanemb::tools {

namespace {

Result<int64_t> parse_count(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  const std::string what = flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'";
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno != 0 || end == v.c_str() || *end != '\0') {
    // Also an exact integer in scientific notation ("1e6").
    errno = 0;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || errno != 0 || end == v.c_str() || *end != '\0' || !std::isfinite(d) || d != std::floor(d) ||
        std::fabs(d) > 9e18)
      return invalid_argument(what);
    x = static_cast<long long>(d);
  }
  if (x < lo || x > hi) return invalid_argument(what);
  return static_cast<int64_t>(x);
}

Result<double> parse_real(const std::string& flag, const std::string& v, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || end == v.c_str() || *end != '\0' || !std::isfinite(d) || d < lo || d > hi)
    return invalid_argument(flag + " expects a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return d;
}

const CLI::Validator& non_empty() {
  static const CLI::Validator v([](std::string& s) { return s.empty() ? std::string("empty value") : std::string(); },
                                "NONEMPTY", "non-empty");
  return v;
}

void print_progress(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

// ---- convert ----------------------------------------------------------------------------------

struct ConvertArgs {
  std::string in, out, num_dense = "13", num_sparse = "26", max_malformed_rate = "0.001";
  bool quiet = false;
};

int run_convert(const ConvertArgs& a) {
  data::ConvertOptions o;
  o.input = a.in;
  o.output = a.out;
  auto nd = parse_count("--num-dense", a.num_dense, 0, 4096);
  auto ns = parse_count("--num-sparse", a.num_sparse, 0, 4096);
  auto rate = parse_real("--max-malformed-rate", a.max_malformed_rate, 0.0, 1.0);
  for (const Status& s : {nd.status(), ns.status(), rate.status()})
    if (!s.ok()) return report_error(s);
  o.num_dense = static_cast<int>(nd.value());
  o.num_sparse = static_cast<int>(ns.value());
  o.malformed.max_rate = rate.value();
  if (a.quiet) o.malformed.warn = [](const std::string&) {};
  auto rep = data::convert_to_binary(o);
  if (!rep.ok()) return report_error(rep.status());
  const data::DataStats& st = rep->stats;
  std::string kinds;
  for (int k = 0; k < data::kNumMalformedKinds; ++k)
    if (st.malformed_by_kind[static_cast<size_t>(k)] > 0)
      kinds += std::string(kinds.empty() ? "" : ", ") + std::string(data::malformed_kind_name(static_cast<data::MalformedKind>(k))) +
               " " + std::to_string(st.malformed_by_kind[static_cast<size_t>(k)]);
  std::printf("convert: %lld records from %s -> %s in %.2f s (%.2f M rows/s); %lld malformed lines skipped%s%s%s\n",
              static_cast<long long>(rep->records), a.in.c_str(), a.out.c_str(), rep->seconds,
              static_cast<double>(rep->records) / std::max(rep->seconds, 1e-9) * 1e-6, static_cast<long long>(st.malformed),
              kinds.empty() ? "" : " (", kinds.c_str(), kinds.empty() ? "" : ")");
  return 0;
}

// ---- gen-data ---------------------------------------------------------------------------------

struct GenArgs {
  std::string out, train_rows = "1000000", eval_rows = "100000", seed = "1", num_dense = "13", num_sparse = "26";
  std::string vocab = "10000", zipf = "1.05", multi_hot_max = "1", format = "tsv", latent_dim = "4", noise = "0";
  std::string label_rate = "0.25", teacher_auc = "0.8", threads = "0";
  bool quiet = false;
};

Result<data::GenOptions> to_gen_options(const GenArgs& a) {
  data::GenOptions o;
  o.out_dir = a.out;
  constexpr int64_t kMaxRows = int64_t{1} << 40;
  LEANEMB_ASSIGN_OR_RETURN(o.train_rows, parse_count("--train-rows", a.train_rows, 0, kMaxRows));
  LEANEMB_ASSIGN_OR_RETURN(o.eval_rows, parse_count("--eval-rows", a.eval_rows, 0, kMaxRows));
  if (o.train_rows + o.eval_rows == 0) return invalid_argument("--train-rows and --eval-rows are both 0: nothing to generate");
  LEANEMB_ASSIGN_OR_RETURN(int64_t seed, parse_count("--seed", a.seed, 0, INT64_MAX));
  o.seed = static_cast<uint64_t>(seed);
  LEANEMB_ASSIGN_OR_RETURN(int64_t nd, parse_count("--num-dense", a.num_dense, 0, 4096));
  LEANEMB_ASSIGN_OR_RETURN(int64_t ns, parse_count("--num-sparse", a.num_sparse, 0, 4096));
  o.num_dense = static_cast<int>(nd);
  o.num_sparse = static_cast<int>(ns);
  if (nd + ns == 0) return invalid_argument("--num-dense and --num-sparse are both 0: no features");
  LEANEMB_ASSIGN_OR_RETURN(o.vocab, data::parse_int_list(a.vocab, "--vocab", 1, int64_t{1} << 32));
  if (o.vocab.size() != 1 && o.vocab.size() != static_cast<size_t>(ns))
    return invalid_argument("--vocab expects 1 value or one per sparse feature (" + std::to_string(ns) + "), got " +
                            std::to_string(o.vocab.size()));
  LEANEMB_ASSIGN_OR_RETURN(o.zipf, parse_real("--zipf", a.zipf, 0.0, 10.0));
  LEANEMB_ASSIGN_OR_RETURN(int64_t mh, parse_count("--multi-hot-max", a.multi_hot_max, 1, 4096));
  o.multi_hot_max = static_cast<int>(mh);
  auto fmt = data::parse_output_format(a.format);
  if (!fmt.ok()) return invalid_argument("--format: " + fmt.status().message());
  o.format = fmt.value();
  LEANEMB_ASSIGN_OR_RETURN(int64_t k, parse_count("--latent-dim", a.latent_dim, 1, 16));
  o.latent_dim = static_cast<int>(k);
  LEANEMB_ASSIGN_OR_RETURN(o.noise_std, parse_real("--noise", a.noise, 0.0, 100.0));
  LEANEMB_ASSIGN_OR_RETURN(o.target_label_rate, parse_real("--label-rate", a.label_rate, 0.001, 0.999));
  LEANEMB_ASSIGN_OR_RETURN(o.target_auc, parse_real("--teacher-auc", a.teacher_auc, 0.501, 0.999));
  LEANEMB_ASSIGN_OR_RETURN(int64_t threads, parse_count("--threads", a.threads, 0, 1024));
  o.num_threads = static_cast<int>(threads);
  if (!a.quiet) o.progress = print_progress;
  return o;
}

int run_gen_data(const GenArgs& a) {
  auto o = to_gen_options(a);
  if (!o.ok()) return report_error(o.status());
  auto rep = data::generate_dataset(o.value());
  if (!rep.ok()) return report_error(rep.status());
  const int64_t rows = o->train_rows + o->eval_rows;
  std::printf("gen-data: %lld train + %lld eval rows in %.2f s (%.2f M rows/s) -> %s, %s, %s\n",
              static_cast<long long>(o->train_rows), static_cast<long long>(o->eval_rows), rep->seconds,
              static_cast<double>(rows) / std::max(rep->seconds, 1e-9) * 1e-6, rep->train_path.c_str(),
              rep->eval_path.c_str(), rep->meta_path.c_str());
  if (rep->has_teacher_metrics)
    std::printf("gen-data: label rate train %.4f eval %.4f; teacher on eval: AUC %.4f, logloss %.4f\n",
                rep->train_label_rate, rep->eval_label_rate, rep->teacher_auc, rep->teacher_logloss);
  else
    std::printf("gen-data: label rate train %.4f eval %.4f; teacher metrics undefined (eval split has one class or no rows)\n",
                rep->train_label_rate, rep->eval_label_rate);
  return 0;
}

}  // namespace

void register_data(CLI::App& app, CommandResult* result) {
  auto c = std::make_shared<ConvertArgs>();
  CLI::App* conv = app.add_subcommand(
      "convert", "Convert a Criteo-style TSV file to leanemb binary records (docs/formats/binary-data.md): "
                 "categorical values stored as 64-bit hashes, dense values transformed, per-block XXH3 checksums");
  conv->add_option("--in", c->in, "Input TSV file (label, dense, categorical columns)")->required()->type_name("FILE")->check(non_empty());
  conv->add_option("--out", c->out, "Output binary file (written as FILE.tmp, renamed when complete)")
      ->required()->type_name("FILE")->check(non_empty());
  conv->add_option("--num-dense", c->num_dense, "Dense columns")->capture_default_str()->type_name("N")->check(non_empty());
  conv->add_option("--num-sparse", c->num_sparse, "Categorical columns")->capture_default_str()->type_name("N")->check(non_empty());
  conv->add_option("--max-malformed-rate", c->max_malformed_rate, "Fail when malformed lines exceed this fraction")
      ->capture_default_str()->type_name("X")->check(non_empty());
  conv->add_flag("--quiet", c->quiet, "No warnings for malformed lines (they are still counted)");
  conv->footer(exit_code_table());
  conv->callback([c, result] { result->exit_code = run_convert(*c); });

  auto g = std::make_shared<GenArgs>();
  CLI::App* gen = app.add_subcommand(
      "gen-data", "Generate Criteo-like synthetic data whose labels come from a planted factorization-machine teacher: "
                  "DIR/train.*, DIR/eval.*, DIR/meta.json (with teacher_auc and teacher_logloss on eval)");
  gen->add_option("--out", g->out, "Output directory (created if missing)")->required()->type_name("DIR")->check(non_empty());
  gen->add_option("--train-rows", g->train_rows, "Training rows (accepts 1e6)")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--eval-rows", g->eval_rows, "Evaluation rows")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--seed", g->seed, "Seed: same seed and options, same bytes")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--num-dense", g->num_dense, "Dense columns")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--num-sparse", g->num_sparse, "Categorical columns")->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_option("--vocab", g->vocab, "Vocabulary size: one for all features, or a comma list with one per feature")
      ->capture_default_str()->type_name("N|LIST")->check(non_empty());
  gen->add_option("--zipf", g->zipf, "Zipf exponent of the ids (0 = uniform)")->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--multi-hot-max", g->multi_hot_max, "Values per non-empty categorical field: uniform in [1, L]")
      ->capture_default_str()->type_name("L")->check(non_empty());
  gen->add_option("--format", g->format, "tsv | bin")->capture_default_str()->type_name("FMT")->check(non_empty());
  gen->add_option("--latent-dim", g->latent_dim, "Teacher latent dim k (1..16)")->capture_default_str()->type_name("K")->check(non_empty());
  gen->add_option("--noise", g->noise, "Std of Gaussian noise on the label logit (not in the teacher's p)")
      ->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--label-rate", g->label_rate, "Target mean label")->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--teacher-auc", g->teacher_auc, "Target expected AUC of the teacher")->capture_default_str()->type_name("X")->check(non_empty());
  gen->add_option("--threads", g->threads, "OpenMP threads (0 = default); output does not depend on it")
      ->capture_default_str()->type_name("N")->check(non_empty());
  gen->add_flag("--quiet", g->quiet, "No progress lines on stderr");
  gen->footer(exit_code_table());
  gen->callback([g, result] { result->exit_code = run_gen_data(*g); });
}

}  // namespace leanemb::tools
