// Text-classification training: vocabulary, encoding, epochs with linear lr decay, evaluation.
#include "text/text_trainer.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include "text/text_model.h"

namespace leanemb::text {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

size_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;  // Linux: kilobytes
}

// Gathers examples `idx` of `ds` into one batch (ids, offsets, label CSR) in `*b`.
struct GatheredBatch {
  std::vector<int64_t> ids, offsets, label_offsets;
  std::vector<int32_t> labels;
  int64_t tokens = 0;
  void gather(const TextDataset& ds, std::span<const int64_t> idx) {
    ids.clear();
    labels.clear();
    offsets.assign(1, 0);
    label_offsets.assign(1, 0);
    tokens = 0;
    for (int64_t i : idx) {
      const size_t e = static_cast<size_t>(i);
      ids.insert(ids.end(), ds.ids.begin() + ds.offsets[e], ds.ids.begin() + ds.offsets[e + 1]);
      offsets.push_back(static_cast<int64_t>(ids.size()));
      labels.insert(labels.end(), ds.labels.begin() + ds.label_offsets[e], ds.labels.begin() + ds.label_offsets[e + 1]);
      label_offsets.push_back(static_cast<int64_t>(labels.size()));
      tokens += ds.tokens[e];
    }
  }
  TextBatch batch() const { return TextBatch{ids, offsets, nn::ClassTargets{label_offsets, labels}}; }
};

nlohmann::json stats_json(const TextDataStats& s) {
  return {{"lines", s.lines},
          {"blank_lines", s.blank_lines},
          {"examples", s.examples},
          {"malformed", s.malformed},
          {"malformed_by_kind", {{"no_label", s.no_label}, {"empty_label", s.empty_label}, {"no_words", s.no_words}}},
          {"unknown_labels", s.unknown_labels},
          {"skipped_unknown_label_lines", s.skipped_unknown},
          {"truncated_words", s.truncated_words},
          {"tokens", s.tokens},
          {"first_malformed", s.first_malformed}};
}

}  // namespace

Result<TextEvalResult> evaluate_text(TextModel& model, const TextDataset& data, int64_t batch_size) {
  TextEvalResult r;
  const int64_t n = data.num_examples(), C = model.options().num_labels;
  std::vector<int64_t> idx;
  GatheredBatch g;
  std::vector<float> logits, dl;
  double loss = 0;
  for (int64_t b = 0; b < n; b += batch_size) {
    const int64_t e = std::min(n, b + batch_size);
    idx.resize(static_cast<size_t>(e - b));
    std::iota(idx.begin(), idx.end(), b);
    g.gather(data, idx);
    logits.resize(static_cast<size_t>((e - b) * C));
    dl.resize(logits.size());
    LEANEMB_RETURN_IF_ERROR(model.predict(g.ids, g.offsets, logits));
    auto l = text_loss(model.options().loss, logits, C, nn::ClassTargets{g.label_offsets, g.labels}, dl);
    LEANEMB_RETURN_IF_ERROR(l.status());
    loss += l.value();
    for (int64_t i = 0; i < e - b; ++i) {
      const float* x = logits.data() + i * C;
      const int32_t top = static_cast<int32_t>(std::max_element(x, x + C) - x);  // ties: lowest label id
      const auto lb = g.labels.begin() + g.label_offsets[static_cast<size_t>(i)];
      const auto le = g.labels.begin() + g.label_offsets[static_cast<size_t>(i) + 1];
      r.gold_labels += le - lb;
      if (std::find(lb, le, top) != le) ++r.correct;
    }
  }
  r.examples = n;
  if (n > 0) {
    r.precision_at_1 = static_cast<double>(r.correct) / static_cast<double>(n);
    r.accuracy = r.precision_at_1;
    r.loss = loss / static_cast<double>(n);
  }
  if (r.gold_labels > 0) r.recall_at_1 = static_cast<double>(r.correct) / static_cast<double>(r.gold_labels);
  return r;
}

Result<nlohmann::json> run_text_training(const TextRunOptions& ro) {
  const TextConfig& c = ro.config;
  if (c.threads > 0) omp_set_num_threads(c.threads);
  auto say = [&](const std::string& s) {
    if (!ro.quiet) std::fprintf(stderr, "[text] %s\n", s.c_str());
  };
  const auto t_start = Clock::now();
  LEANEMB_ASSIGN_OR_RETURN(Dictionary dict, Dictionary::build(c.train_files, c.data));
  TextDataStats train_stats, eval_stats;
  LEANEMB_ASSIGN_OR_RETURN(TextDataset train, read_dataset(c.train_files, dict, c.data, &train_stats));
  TextDataset eval;
  if (!c.eval_files.empty()) {
    LEANEMB_ASSIGN_OR_RETURN(eval, read_dataset(c.eval_files, dict, c.data, &eval_stats));
  }
  const double data_seconds = seconds_since(t_start);
  say(std::to_string(dict.num_words()) + " words, " + std::to_string(dict.num_labels()) + " labels, " +
      std::to_string(train.num_examples()) + " training lines (" + std::to_string(train_stats.tokens) + " tokens), " +
      std::to_string(eval.num_examples()) + " eval lines; read in " + std::to_string(data_seconds).substr(0, 5) + " s");

  TextModelOptions mo = c.model;
  mo.input_rows = dict.input_rows(c.data);
  mo.num_labels = dict.num_labels();
  TrackingAllocator alloc;
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<TextModel> model, TextModel::create(mo, &alloc));

  // Training: fastText's schedule counts tokens: lr_t = lr * (1 - tokens so far / (epochs * tokens)).
  const int64_t n = train.num_examples();
  const double total_tokens = static_cast<double>(train_stats.tokens) * static_cast<double>(c.epochs);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(c.seed);
  GatheredBatch g;
  double tokens_done = 0, loss_window = 0;
  int64_t examples_window = 0, steps = 0;
  const auto t_train = Clock::now();
  auto last_log = t_train;
  double last_loss = 0;
  for (int64_t epoch = 0; epoch < c.epochs; ++epoch) {
    if (c.shuffle) std::shuffle(order.begin(), order.end(), rng);
    for (int64_t b = 0; b < n; b += c.batch_size) {
      const int64_t e = std::min(n, b + c.batch_size);
      g.gather(train, std::span<const int64_t>(order).subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)));
      const double lr_scale = c.linear_decay ? std::max(0.0, 1.0 - tokens_done / total_tokens) : 1.0;
      LEANEMB_ASSIGN_OR_RETURN(double loss, model->train_step(g.batch(), lr_scale));
      tokens_done += static_cast<double>(g.tokens);
      loss_window += loss;
      examples_window += e - b;
      ++steps;
      const bool end = epoch + 1 == c.epochs && e == n;
      if (end || (c.log_every_s > 0 && seconds_since(last_log) >= c.log_every_s)) {
        last_loss = loss_window / static_cast<double>(std::max<int64_t>(1, examples_window));
        if (!ro.quiet) {
          const double el = seconds_since(t_train);
          std::fprintf(stderr, "[text] epoch %lld/%lld %5.1f%%  loss %.4f  lr %.5f  %.0f lines/s  %.0f tokens/s\n",
                       static_cast<long long>(epoch + 1), static_cast<long long>(c.epochs),
                       100.0 * tokens_done / total_tokens, last_loss, mo.row_optimizer.learning_rate * lr_scale,
                       static_cast<double>(epoch * n + e) / el, tokens_done / el);
        }
        loss_window = 0;
        examples_window = 0;
        last_log = Clock::now();
      }
    }
  }
  const double train_seconds = seconds_since(t_train);

  nlohmann::json s;
  s["task"] = "text";
  s["config"] = c.origin;
  s["words"] = dict.num_words();
  s["labels"] = dict.num_labels();
  s["input_rows"] = mo.input_rows;
  s["table_rows"] = model->collection().options().tables[0].num_rows;
  s["dim"] = mo.dim;
  s["row_dtype"] = std::string(dtype_name(mo.dtype));
  s["row_optimizer"] = std::string(optimizer_name(mo.row_optimizer.kind));
  s["dynamic"] = mo.dynamic.enabled;
  s["epochs"] = c.epochs;
  s["batch_size"] = c.batch_size;
  s["steps"] = steps;
  s["train_examples"] = n;
  s["data_seconds"] = data_seconds;
  s["train_seconds"] = train_seconds;
  s["examples_per_s"] = static_cast<double>(n * c.epochs) / train_seconds;
  s["tokens_per_s"] = total_tokens / train_seconds;
  s["final_train_loss"] = last_loss;
  s["train_data"] = stats_json(train_stats);
  s["dataset_bytes"] = train.memory_bytes() + eval.memory_bytes();
  s["table_bytes"] = model->table_bytes();
  if (mo.dynamic.enabled) {
    auto ds = model->collection().dynamic_stats(0);
    if (ds.ok())
      s["dynamic_rows"] = {{"live", ds.value().live_rows}, {"admitted", ds.value().admitted},
                           {"evicted", ds.value().evicted}, {"idmap_bytes", ds.value().held_bytes}};
  }
  s["eval"] = nullptr;
  if (eval.num_examples() > 0) {
    LEANEMB_ASSIGN_OR_RETURN(TextEvalResult ev, evaluate_text(*model, eval));
    s["eval"] = {{"examples", ev.examples},          {"precision_at_1", ev.precision_at_1},
                 {"recall_at_1", ev.recall_at_1},    {"accuracy", ev.accuracy},
                 {"loss", ev.loss},                  {"data", stats_json(eval_stats)}};
  }
  const MemoryStats ms = model->memory_stats();
  s["memory"] = nlohmann::json::parse(ms.to_json());
  s["memory_summary_text"] = ms.summary_table();
  s["peak_rss_bytes"] = peak_rss_bytes();
  return s;
}

}  // namespace leanemb::text
