// `leanemb convert` (TSV -> binary records) and `leanemb gen-data` (synthetic data with a
// planted teacher); see docs/data.md. Values are taken as strings and parsed here so that every
// bad value gets a message naming the flag and exit code 2.
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "leanemb/progress.h"
#include "leanemb/data_convert.h"
#include "leanemb/data_synthetic.h"
#include "leanemb/commands.h"

namespace leanemb::cli {

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

// A comma-separated list of integers in [lo, hi] ("1000" or "10,20,30"). Errors:
// InvalidArgument naming `what` and the bad element.
Result<std::vector<int64_t>> parse_int_list(std::string_view s, std::string_view what, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  const std::string range = " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  size_t pos = 0;
  while (true) {
    const size_t comma = s.find(',', pos);
    const std::string_view item = s.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < lo || v > hi)
      return invalid_argument(std::string(what) + " expects integers" + range + " separated by ',', got '" +
                              std::string(item) + "'");
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

Result<double> parse_real(const std::string& flag, const std::string& v, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || end == v.c_str() || *end != '\0' || !std::isfinite(d) || d < lo || d > hi)
    return invalid_argument(flag + " expects a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return d;
}

void print_progress(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

// A terminal gets one progress line with rate and ETA (core/progress.h); elsewhere the periodic
// lines above stay.
bool stderr_is_tty() { return isatty(STDERR_FILENO) != 0; }

// ---- convert ----------------------------------------------------------------------------------


}  // namespace

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
  std::unique_ptr<TtyProgress> bar;
  if (!a.quiet && stderr_is_tty()) {
    struct stat sb {};
    const double mb = ::stat(a.in.c_str(), &sb) == 0 ? static_cast<double>(sb.st_size) / 1e6 : 0.0;
    bar = std::make_unique<TtyProgress>(stderr, "convert", "MB", mb);
    o.progress = [&bar](int64_t bytes, int64_t records) {
      bar->update(static_cast<double>(bytes) / 1e6, format_count(static_cast<double>(records)) + " records");
    };
  }
  auto rep = data::convert_to_binary(o);
  if (bar && rep.ok())
    bar->finish(static_cast<double>(rep->stats.bytes_read) / 1e6, format_count(static_cast<double>(rep->records)) + " records");
  else if (bar && bar->printed())
    std::fputc('\n', stderr);  // the error goes below the line
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

namespace {

// ---- gen-data ---------------------------------------------------------------------------------


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
  LEANEMB_ASSIGN_OR_RETURN(o.vocab, parse_int_list(a.vocab, "--vocab", 1, int64_t{1} << 32));
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
  if (!a.quiet && !stderr_is_tty()) o.progress = print_progress;
  return o;
}

}  // namespace

int run_gen_data(const GenArgs& a) {
  auto o = to_gen_options(a);
  if (!o.ok()) return report_error(o.status());
  PhasedProgress bar(stderr, "gen-data", "rows");  // a terminal: one line per split
  if (!a.quiet && stderr_is_tty())
    o->progress_rows = [&bar](const char* split, int64_t done, int64_t rows) { bar.update(split, done, rows); };
  auto rep = data::generate_dataset(o.value());
  bar.finish();
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

}  // namespace leanemb::cli
