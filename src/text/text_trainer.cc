// Text-classification training: vocabulary, encoding, epochs with linear lr decay, evaluation.
#include "text/text_trainer.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "amp/loss_scaler.h"
#include "text/text_model.h"
#include "text/text_plan.h"
#include "train/run_config.h"
#include "train/task.h"
#include "leanemb/json.h"

namespace leanemb::text {

namespace {


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

void top_k_labels(std::span<const float> logits, int k, std::vector<int32_t>* out) {
  const auto C = static_cast<int32_t>(logits.size());
  const int kk = std::min<int>(k, C);
  out->resize(static_cast<size_t>(C));
  std::iota(out->begin(), out->end(), 0);
  std::partial_sort(out->begin(), out->begin() + kk, out->end(), [&](int32_t a, int32_t b) {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    return x > y || (x == y && a < b);
  });
  out->resize(static_cast<size_t>(kk));
}

Result<TextEvalResult> evaluate_text(TextModel& model, const TextDataset& data, int64_t batch_size, int k) {
  if (k < 1) return invalid_argument("text evaluation: k must be >= 1, got " + std::to_string(k));
  TextEvalResult r;
  r.k = k;
  std::vector<int32_t> topk;
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
      if (k > 1) {
        top_k_labels(std::span<const float>(x, static_cast<size_t>(C)), k, &topk);
        r.predictions += static_cast<int64_t>(topk.size());
        for (int32_t t : topk) r.correct_at_k += std::find(lb, le, t) != le;
      }
    }
  }
  r.examples = n;
  if (n > 0) {
    r.precision_at_1 = static_cast<double>(r.correct) / static_cast<double>(n);
    r.accuracy = r.precision_at_1;
    r.loss = loss / static_cast<double>(n);
  }
  if (r.gold_labels > 0) r.recall_at_1 = static_cast<double>(r.correct) / static_cast<double>(r.gold_labels);
  if (k == 1) {  // the top label alone
    r.predictions = n;
    r.correct_at_k = r.correct;
  }
  if (r.predictions > 0) r.precision_at_k = static_cast<double>(r.correct_at_k) / static_cast<double>(r.predictions);
  if (r.gold_labels > 0) r.recall_at_k = static_cast<double>(r.correct_at_k) / static_cast<double>(r.gold_labels);
  return r;
}

namespace {

constexpr char kPositionMagic[] = "leanemb-text-position-v1";

// The text model and its data as a TrainTask of the one loop (train/task.h). Every rank reads
// and encodes the whole data set (the same dictionary and examples) and passes each step's
// global batch to the model, which computes the rank's groups of it.
class TextTask final : public train::TrainTask {
 public:
  // `data`: what the plan read (read_text_data), taken over; null: read here.
  static Result<std::unique_ptr<train::TrainTask>> create(const TextConfig& c, int grad_groups, const train::TaskContext& tc,
                                                          std::shared_ptr<TextData> data) {
    auto t = std::unique_ptr<TextTask>(new TextTask(c));
    if (data == nullptr) {
      LEANEMB_ASSIGN_OR_RETURN(data, read_text_data(c));
    }
    t->dict_ = std::move(data->dict);
    t->train_ = std::move(data->train);
    t->eval_ = std::move(data->eval);
    t->train_stats_ = data->train_stats;
    t->eval_stats_ = data->eval_stats;
    t->data_seconds_ = data->seconds;
    if (tc.say)
      tc.say(std::to_string(t->dict_.num_words()) + " words, " + std::to_string(t->dict_.num_labels()) + " labels, " +
             std::to_string(t->train_.num_examples()) + " training lines (" + std::to_string(t->train_stats_.tokens) +
             " tokens), " + std::to_string(t->eval_.num_examples()) + " eval lines; read in " +
             std::to_string(t->data_seconds_).substr(0, 5) + " s");
    if (t->train_.num_examples() == 0) return invalid_argument(c.origin + ": the training files hold no usable line");
    TextModelOptions mo = c.model;
    mo.input_rows = t->dict_.input_rows(c.data);
    mo.num_labels = t->dict_.num_labels();
    mo.grad_groups = grad_groups;
    DistributionOptions dist;
    dist.comm = tc.comm;
    dist.sharding = c.sharding;
    dist.forward_payload = c.forward_payload;
    dist.backward_payload = c.backward_payload;
    LEANEMB_ASSIGN_OR_RETURN(t->model_, TextModel::create(mo, tc.memory, dist));
    t->order_.resize(static_cast<size_t>(t->train_.num_examples()));
    t->start_epoch(0);
    return std::unique_ptr<train::TrainTask>(std::move(t));
  }

  EmbeddingTables& tables() override { return model_->tables(); }

  // The batches of epoch e are the examples in a seeded order (a shuffle per epoch), batch_size
  // at a time; fastText's schedule counts tokens: lr = rate * (1 - tokens so far / total).
  Result<bool> next_batch() override {
    const int64_t n = train_.num_examples();
    if (pos_ >= n) {
      if (epoch_ + 1 >= c_.epochs) return false;
      start_epoch(epoch_ + 1);
    }
    const int64_t e = std::min(n, pos_ + c_.batch_size);
    g_.gather(train_, std::span<const int64_t>(order_).subspan(static_cast<size_t>(pos_), static_cast<size_t>(e - pos_)));
    pos_ = e;
    return true;
  }
  Result<train::TaskStep> train_step(int64_t, bool inject_nonfinite) override {
    if (inject_nonfinite) return unimplemented("text models have no loss scaling: train.inject_nonfinite_steps does not apply");
    const double total = static_cast<double>(train_stats_.tokens) * static_cast<double>(c_.epochs);
    lr_scale_ = c_.linear_decay ? std::max(0.0, 1.0 - tokens_done_ / total) : 1.0;
    LEANEMB_ASSIGN_OR_RETURN(double loss, model_->train_step(g_.batch(), lr_scale_));
    tokens_done_ += static_cast<double>(g_.tokens);
    const int64_t examples = g_.batch().size();
    return train::TaskStep{loss / static_cast<double>(examples), examples, false};
  }
  bool has_eval() const override { return eval_.num_examples() > 0; }
  Result<nlohmann::json> evaluate() override {
    LEANEMB_ASSIGN_OR_RETURN(TextEvalResult ev, evaluate_text(*model_, eval_));
    return nlohmann::json{{"examples", ev.examples}, {"precision_at_1", ev.precision_at_1}, {"recall_at_1", ev.recall_at_1},
                          {"accuracy", ev.accuracy}, {"loss", ev.loss}, {"data", stats_json(eval_stats_)}};
  }
  std::string eval_headline(const nlohmann::json& e) const override {
    return e.contains("precision_at_1") ? "p@1 " + std::to_string(e["precision_at_1"].get<double>()).substr(0, 6) : "-";
  }
  // "train/reader": the position (epoch, next example of its order, tokens so far as the bits of
  // the double, the dictionary's size as a check); "amp/loss_scaler": a disabled scaler's.
  Result<train::Blobs> checkpoint_blobs() const override {
    train::Blobs b;
    uint64_t bits = 0;
    std::memcpy(&bits, &tokens_done_, 8);
    const nlohmann::json pos = {{"format", kPositionMagic}, {"epoch", epoch_}, {"pos", pos_}, {"tokens_done_bits", bits},
                                {"input_rows", model_->options().input_rows}, {"labels", model_->options().num_labels}};
    const std::string ps = dump_json(pos);
    b.emplace_back("train/reader", std::vector<uint8_t>(ps.begin(), ps.end()));
    LEANEMB_ASSIGN_OR_RETURN(amp::LossScaler scaler, amp::LossScaler::create({.enabled = false}));
    b.emplace_back("amp/loss_scaler", scaler.save());
    auto floats = [](std::span<const float> v) {
      return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<const uint8_t*>(v.data() + v.size()));
    };
    for (const auto& t : model_->dense_parameters()) b.emplace_back("dense/param/" + t.name, floats(t.values));
    for (const auto& t : model_->dense_optimizer_state()) b.emplace_back("dense/opt/" + t.name, floats(t.values));
    return b;
  }
  Status restore(const ckpt::CheckpointReader& r) override {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> pb, r.read_blob("train/reader"));
    const nlohmann::json pos = parse_json_or_discarded(pb.data(), pb.size());
    if (pos.is_discarded() || pos.value("format", std::string()) != kPositionMagic)
      return data_loss("train/reader is not a text model's position (a CTR checkpoint?)");
    if (pos.value("input_rows", int64_t{-1}) != model_->options().input_rows || pos.value("labels", int64_t{-1}) != model_->options().num_labels)
      return invalid_argument("the training files give another vocabulary than the checkpoint's (" +
                              std::to_string(pos.value("input_rows", int64_t{-1})) + " input rows, " +
                              std::to_string(pos.value("labels", int64_t{-1})) + " labels): the data changed");
    const int64_t epoch = pos.value("epoch", int64_t{-1}), p = pos.value("pos", int64_t{-1});
    if (epoch < 0 || epoch >= c_.epochs || p < 0 || p > train_.num_examples()) return data_loss("train/reader: position out of range");
    std::vector<std::vector<float>> store;
    std::vector<nn::NamedTensor> params, state;
    const auto want_p = model_->dense_parameters(), want_s = model_->dense_optimizer_state();
    store.reserve(want_p.size() + want_s.size());
    for (const auto& [prefix, want, out] : {std::tuple{"dense/param/", &want_p, &params}, std::tuple{"dense/opt/", &want_s, &state}}) {
      for (const auto& t : *want) {
        LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> v, r.read_blob(std::string(prefix) + t.name));
        if (v.size() % 4) return data_loss("checkpoint blob " + std::string(prefix) + t.name + " is not a float array");
        store.emplace_back(v.size() / 4);
        std::memcpy(store.back().data(), v.data(), v.size());
        out->push_back({t.name, store.back()});
      }
    }
    LEANEMB_RETURN_IF_ERROR(model_->load_dense(params, state));
    // Replay the shuffles up to the saved epoch: the order is a function of the seed and epoch.
    rng_.seed(c_.seed);
    start_epoch(0);
    for (int64_t e = 1; e <= epoch; ++e) start_epoch(e);
    pos_ = p;
    const uint64_t bits = pos.value("tokens_done_bits", uint64_t{0});
    std::memcpy(&tokens_done_, &bits, 8);
    tokens_at_start_ = tokens_done_;
    return Status();
  }
  std::vector<nn::NamedTensor> dense_parameters() const override { return model_->dense_parameters(); }
  int64_t batch_epoch() const override { return epoch_; }
  int64_t steps_per_epoch() const override { return (train_.num_examples() + c_.batch_size - 1) / c_.batch_size; }
  void add_summary(nlohmann::json* s) const override {
    const TextModelOptions& mo = model_->options();
    (*s)["words"] = dict_.num_words();
    (*s)["labels"] = dict_.num_labels();
    (*s)["input_rows"] = mo.input_rows;
    (*s)["table_rows"] = model_->tables().options().tables[0].num_rows;
    (*s)["dim"] = mo.dim;
    (*s)["epochs"] = c_.epochs;
    // Epochs the model has seen (with --steps, a fraction of the configured ones).
    const int64_t n = train_.num_examples();
    (*s)["epochs_trained"] = static_cast<double>(epoch_) + (n > 0 ? static_cast<double>(pos_) / static_cast<double>(n) : 0.0);
    (*s)["batch_size"] = c_.batch_size;
    (*s)["train_examples"] = train_.num_examples();
    (*s)["data_seconds"] = data_seconds_;
    const double secs = (*s)["train_seconds"].get<double>();
    (*s)["examples_per_s"] = (*s)["samples_per_s"];
    (*s)["tokens_per_s"] = secs > 0 ? tokens_this_run() / secs : 0.0;
    (*s)["train_data"] = stats_json(train_stats_);
    (*s)["dataset_bytes"] = train_.memory_bytes() + eval_.memory_bytes();
    (*s)["table_bytes"] = model_->table_bytes();
    // dynamic_rows: the loop's, as for CTR models (train/loop.cc, add_table_counters).
    (*s)["config"] = {{"row_dtype", std::string(dtype_name(mo.dtype))}, {"row_optimizer", std::string(optimizer_name(mo.row_optimizer.kind))},
                      {"dynamic", mo.dynamic.enabled}};
    (*s)["peak_rss_bytes"] = peak_rss_bytes();
  }

 private:
  explicit TextTask(const TextConfig& c) : c_(c), rng_(c.seed) {}
  void start_epoch(int64_t e) {
    epoch_ = e;
    pos_ = 0;
    std::iota(order_.begin(), order_.end(), int64_t{0});
    if (c_.shuffle) std::shuffle(order_.begin(), order_.end(), rng_);
  }
  double tokens_this_run() const { return tokens_done_ - tokens_at_start_; }
  TextConfig c_;
  Dictionary dict_;
  TextDataStats train_stats_, eval_stats_;
  TextDataset train_, eval_;
  double data_seconds_ = 0;
  std::unique_ptr<TextModel> model_;
  std::vector<int64_t> order_;
  std::mt19937_64 rng_;
  int64_t epoch_ = 0, pos_ = 0;
  double tokens_done_ = 0, lr_scale_ = 1.0;
  double tokens_at_start_ = 0;  // a resumed run's tokens before it
  GatheredBatch g_;
};

}  // namespace

Result<nlohmann::json> run_text_training(const train::RunOptions& ro, const TextConfig& config) {
  TextConfig c = config;
  train::LoopSettings ls = train::loop_settings("text", c, ro, !c.eval_files.empty());
  ls.progress_unit = "examples";
  const int world = ro.comm ? ro.comm->size() : 1;
  const int grad_groups = c.grad_groups == 0 ? world : c.grad_groups;
  // The data is read once: by the plan (it needs the dictionary's rows and the examples' ids), then
  // handed to the task.
  auto data = std::make_shared<std::shared_ptr<TextData>>();
  ls.plan = [c, data](int world) -> Result<plan::Prediction> {
    LEANEMB_ASSIGN_OR_RETURN(*data, read_text_data(c));
    LEANEMB_ASSIGN_OR_RETURN(plan::Workload w, text_workload(c, **data));
    w.num_shards = world;  // the plan of one rank (its share of the rows)
    w.grad_groups = c.grad_groups == 0 ? world : c.grad_groups;
    return plan::predict_memory(w);
  };
  ls.make_task = [c, grad_groups, data](const train::TaskContext& tc) {
    return TextTask::create(c, grad_groups, tc, std::move(*data));
  };
  return train::run_loop(ro, std::move(ls));
}

}  // namespace leanemb::text
