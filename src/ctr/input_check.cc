// Input checks before training. See input_check.h.
#include "ctr/input_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "leanemb/json.h"

namespace leanemb::ctr {

using train::Section;

namespace {

Status check_file(const std::string& key, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return not_found(key + ": no such file '" + path + "'");
    return invalid_argument(key + ": cannot stat '" + path + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return invalid_argument(key + ": '" + path + "' is a directory, not a data file");
  if (!S_ISREG(st.st_mode)) return invalid_argument(key + ": '" + path + "' is not a regular file");
  if (st.st_size == 0) return invalid_argument(key + ": data file '" + path + "' is empty (0 bytes)");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid_argument(key + ": cannot read '" + path + "': " + std::strerror(errno));
  ::close(fd);
  return Status();
}

}  // namespace

Status check_data_files(const CtrConfig& c) {
  for (const std::string& f : c.train_files) LEANEMB_RETURN_IF_ERROR(check_file(c.origin + ": data.train", f));
  for (const std::string& f : c.eval_files) LEANEMB_RETURN_IF_ERROR(check_file(c.origin + ": data.eval", f));
  return Status();
}

Status check_generated_data(const CtrConfig& c) {
  if (!c.generate) return Status();
  const std::string meta_path = c.data_dir + "/meta.json";
  std::ifstream in(meta_path);
  if (!in) return Status();
  const auto m = parse_json_or_discarded(in);
  if (m.is_discarded() || !m.is_object()) return invalid_argument(meta_path + " is not a JSON object (remove " + c.data_dir + " to generate the data again)");
  const data::GenOptions& g = c.gen;
  std::vector<std::string> diffs;
  auto num = [&](const char* key, double want) {
    if (!m.contains(key) || !m[key].is_number()) return;
    const double have = m[key].get<double>();
    if (std::fabs(have - want) > 1e-12 * std::max(1.0, std::fabs(want)))
      diffs.push_back(std::string("data.gen.") + key + " = " + dump_json(m[key]) + " in the data, " + Section::number_text(want) + " in the config");
  };
  num("train_rows", static_cast<double>(g.train_rows));
  num("eval_rows", static_cast<double>(g.eval_rows));
  num("seed", static_cast<double>(g.seed));
  num("zipf", g.zipf);
  num("multi_hot_max", g.multi_hot_max);
  num("latent_dim", g.latent_dim);
  num("noise_std", g.noise_std);
  num("dense_weight", g.dense_weight);
  num("first_order_weight", g.first_order_weight);
  num("pairwise_weight", g.pairwise_weight);
  num("target_label_rate", g.target_label_rate);
  num("target_auc", g.target_auc);
  num("num_dense", g.num_dense);
  num("num_sparse", g.num_sparse);
  if (m.contains("vocab_sizes") && m["vocab_sizes"].is_array() && !g.vocab.empty()) {
    const auto& have = m["vocab_sizes"];
    bool same = true;
    for (size_t i = 0; i < have.size(); ++i) {
      const int64_t want = g.vocab.size() == 1 ? g.vocab[0] : i < g.vocab.size() ? g.vocab[i] : -1;
      same = same && have[i].is_number_integer() && have[i].get<int64_t>() == want;
    }
    if (!same) diffs.push_back("data.gen.vocab: the data has vocab_sizes " + dump_json(have));
  }
  const std::string fmt = g.format == data::OutputFormat::kBinary ? "bin" : "tsv";
  if (m.contains("format") && m["format"].is_string() && m["format"].get<std::string>() != fmt)
    diffs.push_back("data.gen.format = " + dump_json(m["format"]) + " in the data, \"" + fmt + "\" in the config");
  if (diffs.empty()) return Status();
  std::string msg = c.origin + ": data.dir '" + c.data_dir + "' holds data generated with other [data.gen] values (it is not generated again):";
  for (const std::string& d : diffs) msg += "\n  " + d;
  return invalid_argument(msg + "\n(set them as the data was made, point data.dir at another directory, or remove " + c.data_dir + ")");
}

}  // namespace leanemb::ctr
