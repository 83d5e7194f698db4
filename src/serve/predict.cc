// `leanemb predict` / `leanemb test` (see predict.h).
#include "serve/predict.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <vector>

#include "text/text_trainer.h"
#include "ctr/ctr_serving.h"

namespace leanemb::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Status write_error(std::FILE* out) {
  return std::ferror(out) ? io_error("cannot write the predictions (disk full or closed pipe?)") : Status();
}

}  // namespace

Result<PredictStats> predict_ctr_file(LoadedCtr& m, const std::string& file, std::FILE* out, const PredictProgress& progress) {
  const auto t0 = Clock::now();
  PredictStats ps;
  char buf[32];
  auto stats = ctr::predict_ctr(*m.model, m.config, {file}, 0, [&](const data::Batch&, std::span<const float> p) -> Status {
    for (float v : p) {
      const int n = std::snprintf(buf, sizeof buf, "%.9g\n", static_cast<double>(v));
      std::fwrite(buf, 1, static_cast<size_t>(n), out);
    }
    ps.lines += static_cast<int64_t>(p.size());
    return write_error(out);
  }, progress ? std::function<void(int64_t)>([&](int64_t bytes) { progress(bytes, ps.lines); }) : std::function<void(int64_t)>());
  if (!stats.ok()) return stats.status();
  std::fflush(out);
  LEANEMB_RETURN_IF_ERROR(write_error(out));
  ps.malformed = stats.value().malformed;
  ps.seconds = since(t0);
  return ps;
}

Result<PredictStats> predict_text_file(LoadedText& m, const std::string& file, const TextPredictOptions& o, std::FILE* out,
                                       const PredictProgress& progress) {
  if (o.k < 1) return invalid_argument("--k must be >= 1, got " + std::to_string(o.k));
  std::ifstream in(file, std::ios::binary);
  if (!in) return not_found("cannot open data file '" + file + "'");
  const auto t0 = Clock::now();
  PredictStats ps;
  const int64_t C = m.model->options().num_labels;
  const bool ova = m.model->options().loss == text::TextLoss::kOneVsAll;
  constexpr int64_t kBatch = 256;
  std::vector<int64_t> ids, offsets{0};
  std::vector<char> has_words;  // per line of the batch
  std::vector<float> logits, prob(static_cast<size_t>(C));
  std::vector<int32_t> top;
  std::string text;
  auto flush = [&]() -> Status {
    const int64_t b = static_cast<int64_t>(offsets.size()) - 1;
    logits.resize(static_cast<size_t>(b * C));
    if (b > 0) LEANEMB_RETURN_IF_ERROR(m.model->predict(ids, offsets, logits));
    int64_t e = 0;
    for (char hw : has_words) {
      if (hw) {
        const float* x = logits.data() + e * C;
        ++e;
        if (ova) {
          for (int64_t c = 0; c < C; ++c) prob[static_cast<size_t>(c)] = 1.0f / (1.0f + std::exp(-x[c]));
        } else {
          const float mx = *std::max_element(x, x + C);
          double sum = 0;
          for (int64_t c = 0; c < C; ++c) sum += prob[static_cast<size_t>(c)] = std::exp(x[c] - mx);
          for (float& p : prob) p = static_cast<float>(p / sum);
        }
        text::top_k_labels(std::span<const float>(x, static_cast<size_t>(C)), o.k, &top);
        text.clear();
        for (int32_t t : top) {
          const float p = prob[static_cast<size_t>(t)];
          if (p < o.threshold) break;  // best first: the rest are lower
          if (!text.empty()) text += ' ';
          text += "__label__";
          text += m.dict.label(t);
          if (o.probs) {
            char pb[32];
            std::snprintf(pb, sizeof pb, " %.6g", static_cast<double>(p));
            text += pb;
          }
        }
        text += '\n';
        std::fwrite(text.data(), 1, text.size(), out);
      } else {
        std::fputc('\n', out);
        ++ps.empty;
      }
      ++ps.lines;
    }
    ids.clear();
    offsets.assign(1, 0);
    has_words.clear();
    return write_error(out);
  };
  std::string line;
  while (std::getline(in, line)) {
    const bool words = text::encode_words(line, m.dict, m.config.data, &ids) > 0;
    if (words) offsets.push_back(static_cast<int64_t>(ids.size()));
    has_words.push_back(words ? 1 : 0);
    if (static_cast<int64_t>(has_words.size()) >= kBatch) {
      LEANEMB_RETURN_IF_ERROR(flush());
      if (progress) progress(static_cast<int64_t>(in.tellg()), ps.lines);
    }
  }
  if (in.bad()) return io_error("read error in '" + file + "' after line " + std::to_string(ps.lines + static_cast<int64_t>(has_words.size())));
  LEANEMB_RETURN_IF_ERROR(flush());
  std::fflush(out);
  LEANEMB_RETURN_IF_ERROR(write_error(out));
  ps.seconds = since(t0);
  return ps;
}

Result<json> test_ctr_file(LoadedCtr& m, const std::string& file, int64_t max_rows) {
  data::DataStats st;
  LEANEMB_ASSIGN_OR_RETURN(json ev, ctr::evaluate_ctr(*m.model, m.config, {file}, max_rows, &st));  // the trainer's evaluation
  ev["task"] = "ctr";
  ev["malformed"] = st.malformed;
  return ev;
}

Result<json> test_text_file(LoadedText& m, const std::string& file, int k) {
  text::TextDataStats st;
  LEANEMB_ASSIGN_OR_RETURN(text::TextDataset ds, text::read_dataset(std::vector<std::string>{file}, m.dict, m.config.data, &st));
  LEANEMB_ASSIGN_OR_RETURN(text::TextEvalResult r, text::evaluate_text(*m.model, ds, 256, k));
  return json{{"task", "text"},
              {"k", r.k},
              {"examples", r.examples},
              {"precision_at_k", r.precision_at_k},
              {"recall_at_k", r.recall_at_k},
              {"precision_at_1", r.precision_at_1},
              {"recall_at_1", r.recall_at_1},
              {"predictions", r.predictions},
              {"gold_labels", r.gold_labels},
              {"loss", r.loss},
              {"skipped_unknown_label_lines", st.skipped_unknown},
              {"malformed", st.malformed}};
}

Result<TestReport> test_ctr_run(const SavedRun& run, const std::string& file, const TestOptions& o) {
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_ctr(run, o.sets));
  LEANEMB_ASSIGN_OR_RETURN(json r, test_ctr_file(*m, file, o.max_rows));
  char buf[256];
  std::snprintf(buf, sizeof buf, "N\t%lld\nAUC\t%.6f\nlogloss\t%.6f\n", static_cast<long long>(r["rows"].get<int64_t>()),
                r["auc"].get<double>(), r["logloss"].get<double>());
  return TestReport{std::move(r), buf};
}

Result<TestReport> test_text_run(const SavedRun& run, const std::string& file, const TestOptions& o) {
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_text(run, o.sets));
  LEANEMB_ASSIGN_OR_RETURN(json r, test_text_file(*m, file, o.k));
  // fastText's `test FILE k` lines (std::setprecision(3): three significant digits).
  char buf[256];
  std::snprintf(buf, sizeof buf, "N\t%lld\nP@%lld\t%.3g\nR@%lld\t%.3g\n", static_cast<long long>(r["examples"].get<int64_t>()),
                static_cast<long long>(o.k), r["precision_at_k"].get<double>(), static_cast<long long>(o.k),
                r["recall_at_k"].get<double>());
  return TestReport{std::move(r), buf};
}

Result<PredictStats> predict_ctr_run(const SavedRun& run, const std::string& file, const PredictOptions& o, std::FILE* out,
                                     const PredictProgress& progress) {
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_ctr(run, o.sets));
  return predict_ctr_file(*m, file, out, progress);
}

Result<PredictStats> predict_text_run(const SavedRun& run, const std::string& file, const PredictOptions& o, std::FILE* out,
                                      const PredictProgress& progress) {
  LEANEMB_ASSIGN_OR_RETURN(auto m, load_text(run, o.sets));
  return predict_text_file(*m, file, o.text, out, progress);
}

}  // namespace leanemb::serve
