// The text model's bf16 embedding output (train.precision = "bf16", TextModelOptions::precision):
// a step equals the fp32 path fed the bf16-rounded pooled rows and bf16-rounded gradients (built
// here through the public table and head API), evaluation rounds as training does, runs repeat
// bit-identically, the plan counts the buffers the run allocates, and the config refuses fp16.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/training_digest.h"
#include "text/text_config.h"
#include "text/text_model.h"
#include "text/text_trainer.h"

namespace leanemb::text {
namespace {

TextModelOptions bf16_model_options(OptimizerKind opt, int64_t hidden, int groups) {
  TextModelOptions o;
  o.input_rows = 40;
  o.dim = 12;
  o.num_labels = 5;
  o.hidden = hidden;
  o.zero_output_init = false;  // a zero output layer gives the rows no gradient in the first step
  o.row_optimizer.kind = opt;
  o.row_optimizer.learning_rate = 0.3f;
  if (opt != OptimizerKind::kSgd) o.row_optimizer.eps = default_eps(opt);
  o.dense_optimizer.learning_rate = 0.2;
  o.grad_groups = groups;
  o.num_threads = 1;
  o.seed = 9;
  return o;
}

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16_rne(x)); }

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A batch of 7 examples over rows [0, 40) with 1-6 ids each, one label each.
struct Batch {
  std::vector<int64_t> ids, offsets{0}, label_offsets{0};
  std::vector<int32_t> labels;
  Batch() {
    std::mt19937 rng(3);
    for (int b = 0; b < 7; ++b) {
      for (int k = 0, n = 1 + static_cast<int>(rng() % 6); k < n; ++k) ids.push_back(static_cast<int64_t>(rng() % 40));
      offsets.push_back(static_cast<int64_t>(ids.size()));
      labels.push_back(static_cast<int32_t>(rng() % 5));
      label_offsets.push_back(static_cast<int64_t>(labels.size()));
    }
  }
  nn::ClassTargets targets() const { return {label_offsets, labels}; }
  TextBatch text_batch() const { return {ids, offsets, targets()}; }
  SparseBatch sparse() const {
    SparseBatch sb;
    sb.batch_size = static_cast<int64_t>(offsets.size()) - 1;
    sb.features.push_back(FeatureInput{ids, offsets, {}});
    return sb;
  }
};

std::vector<float> rows_of(TextModel& m) {
  std::vector<float> r(static_cast<size_t>(m.options().input_rows * m.options().dim));
  EXPECT_TRUE(m.tables().read_rows(0, 0, m.options().input_rows, r).ok());
  return r;
}

// The reference of one bf16 step on an fp32 model `ref` (the same options but the precision):
// the pooled rows rounded to bf16, each gradient group's head forward and backward on them, the
// input gradient rounded to bf16, then the fp32 update with it. Returns the summed loss.
double reference_step(TextModel& ref, const Batch& batch) {
  const TextModelOptions& o = ref.options();
  const SparseBatch sb = batch.sparse();
  const int64_t B = sb.batch_size, D = o.dim, C = o.num_labels;
  std::vector<float> pooled(static_cast<size_t>(B * D)), dpooled(pooled.size());
  EXPECT_TRUE(ref.tables().forward(sb, pooled).ok());
  for (float& x : pooled) x = round_bf16(x);
  const nn::GroupSlice sl = nn::group_slice(B, o.grad_groups, 0, 1);
  double loss = 0;
  for (int64_t g = sl.g0; g < sl.g1; ++g) {
    const auto [a, b] = sl.group(g);
    const int64_t m = b - a;
    std::vector<float> logits(static_cast<size_t>(m * C)), dl(logits.size());
    std::vector<int64_t> loff;
    for (int64_t i = a; i <= b; ++i) loff.push_back(batch.label_offsets[static_cast<size_t>(i)] - batch.label_offsets[static_cast<size_t>(a)]);
    const nn::ClassTargets t{loff, std::span<const int32_t>(batch.labels).subspan(static_cast<size_t>(a), static_cast<size_t>(m))};
    EXPECT_TRUE(ref.head().forward(m, std::span<const float>(pooled).subspan(static_cast<size_t>(a * D), static_cast<size_t>(m * D)), logits).ok());
    loss += text_loss(o.loss, logits, C, t, dl).value();
    EXPECT_TRUE(ref.head().backward(dl, std::span<float>(dpooled).subspan(static_cast<size_t>(a * D), static_cast<size_t>(m * D))).ok());
  }
  ref.dense_optimizer().zero_grad();
  for (float& x : dpooled) x = round_bf16(x);
  EXPECT_TRUE(ref.tables().set_learning_rate(0, o.row_optimizer.learning_rate).ok());
  EXPECT_TRUE(ref.tables().backward_update(sb, dpooled).ok());
  return loss;
}

// One step with a bf16 output leaves the rows bit-identical to the reference above, and
// different from a plain fp32 step (the rounding is on the path: the check can fail).
TEST(TextBf16OutputTest, StepEqualsFp32FedBf16RoundedOutputsAndGradients) {
  const Batch batch;
  for (OptimizerKind opt : {OptimizerKind::kSgd, OptimizerKind::kAdagrad}) {
    for (int64_t hidden : {0, 6}) {
      for (int groups : {1, 3}) {
        TextModelOptions o = bf16_model_options(opt, hidden, groups);
        auto plain = TextModel::create(o, static_cast<Allocator*>(nullptr));
        auto ref = TextModel::create(o, static_cast<Allocator*>(nullptr));
        o.precision = DType::kBF16;
        auto half = TextModel::create(o, static_cast<Allocator*>(nullptr));
        ASSERT_TRUE(plain.ok() && ref.ok() && half.ok()) << half.status().to_string();
        const std::vector<float> init = rows_of(*half.value());
        ASSERT_TRUE(same_bits(init, rows_of(*ref.value())));
        auto loss = half.value()->train_step(batch.text_batch(), 1.0);
        ASSERT_TRUE(loss.ok()) << loss.status().to_string();
        const double want = reference_step(*ref.value(), batch);
        auto plain_loss = plain.value()->train_step(batch.text_batch(), 1.0);
        ASSERT_TRUE(plain_loss.ok());
        const std::vector<float> got = rows_of(*half.value());
        const std::string what = std::string(optimizer_name(opt)) + " hidden " + std::to_string(hidden) + " groups " + std::to_string(groups);
        EXPECT_TRUE(same_bits(got, rows_of(*ref.value()))) << what;
        EXPECT_FALSE(same_bits(got, init)) << what << ": the step moved no row";
        // Adagrad's first step moves a row by about lr * sign(g) whatever the rounding: SGD shows it.
        if (opt == OptimizerKind::kSgd) {
          EXPECT_FALSE(same_bits(got, rows_of(*plain.value()))) << what << ": bf16 rounding changed nothing";
        }
        EXPECT_EQ(loss.value(), want) << what;
        EXPECT_NE(loss.value(), plain_loss.value()) << what << ": the forward's rounding changed nothing";
      }
    }
  }
}

// predict() rounds the pooled rows to bf16 as training does: its logits equal the head's on
// the rounded rows (per gradient group), and differ from the fp32 model's.
TEST(TextBf16OutputTest, PredictRoundsAsTrainingDoes) {
  const Batch batch;
  for (int groups : {1, 3}) {
    TextModelOptions o = bf16_model_options(OptimizerKind::kSgd, 6, groups);
    auto ref = TextModel::create(o, static_cast<Allocator*>(nullptr));
    o.precision = DType::kBF16;
    auto half = TextModel::create(o, static_cast<Allocator*>(nullptr));
    ASSERT_TRUE(ref.ok() && half.ok());
    const int64_t B = 7, D = o.dim, C = o.num_labels;
    std::vector<float> got(static_cast<size_t>(B * C)), fp32(got.size()), want(got.size());
    ASSERT_TRUE(half.value()->predict(batch.ids, batch.offsets, got).ok());
    ASSERT_TRUE(ref.value()->predict(batch.ids, batch.offsets, fp32).ok());
    std::vector<float> pooled(static_cast<size_t>(B * D));
    ASSERT_TRUE(ref.value()->tables().forward(batch.sparse(), pooled, {}, ForwardMode::kEval).ok());
    for (float& x : pooled) x = round_bf16(x);
    const nn::GroupSlice sl = nn::group_slice(B, groups, 0, 1);
    for (int64_t g = sl.g0; g < sl.g1; ++g) {
      const auto [a, b] = sl.group(g);
      ASSERT_TRUE(ref.value()->head().forward(b - a, std::span<const float>(pooled).subspan(static_cast<size_t>(a * D), static_cast<size_t>((b - a) * D)),
                                              std::span<float>(want).subspan(static_cast<size_t>(a * C), static_cast<size_t>((b - a) * C)),
                                              nn::ForwardMode::kEval).ok());
    }
    EXPECT_TRUE(same_bits(got, want)) << "groups " << groups;
    EXPECT_FALSE(same_bits(got, fp32)) << "groups " << groups;
  }
}

// A model refuses fp16 output (no loss scaling) and a bf16 output over several processes.
TEST(TextBf16OutputTest, ModelRefusesFp16) {
  TextModelOptions o = bf16_model_options(OptimizerKind::kSgd, 0, 1);
  o.precision = DType::kF16;
  auto m = TextModel::create(o, static_cast<Allocator*>(nullptr));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("precision fp16"), std::string::npos) << m.status().message();
}

// train.precision: fp32 by default, bf16 allowed, fp16 and other values refused naming the key.
TEST(TextBf16OutputTest, ConfigReadsPrecisionAndRefusesFp16) {
  const std::string base = "task = \"text\"\n[data]\ntrain = \"t.txt\"\n";
  auto plain = parse_text_config(base, "x.toml");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain.value().model.precision, DType::kF32);
  auto bf16 = parse_text_config(base, "x.toml", std::vector<std::string>{"train.precision=\"bf16\""});
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  EXPECT_EQ(bf16.value().model.precision, DType::kBF16);
  auto fp16 = parse_text_config(base, "x.toml", std::vector<std::string>{"train.precision=\"fp16\""});
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.status().message().find("train.precision: fp16 is not supported by the text model"), std::string::npos)
      << fp16.status().message();
  auto int8 = parse_text_config(base, "x.toml", std::vector<std::string>{"train.precision=\"int8\""});
  ASSERT_FALSE(int8.ok());
  EXPECT_NE(int8.status().message().find("train.precision"), std::string::npos) << int8.status().message();
}

// Runs with a bf16 output: two runs (1 and 2 threads) end at the same training digest, which
// differs from the fp32 output's; the plan counts the buffers the run allocates.
TEST(TextBf16OutputTest, RunsRepeatBitIdenticallyAndThePlanCountsTheBuffers) {
  std::mt19937 rng(13);
  std::string lines;
  for (int i = 0; i < 400; ++i) {
    const int label = static_cast<int>(rng() % 4);
    lines += "__label__c" + std::to_string(label);
    for (int k = 0; k < 5; ++k) lines += rng() % 2 ? " w" + std::to_string(label) + "_" + std::to_string(rng() % 5) : " n" + std::to_string(rng() % 30);
    lines += "\n";
  }
  const std::string base = (std::filesystem::path(testing::TempDir()) / ("leanemb_text_bf16_" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  std::ofstream(base + "/train.txt") << lines;
  std::ofstream(base + "/eval.txt") << lines.substr(0, lines.size() / 4);
  auto run = [&](DType precision, int threads, const std::string& out) -> std::pair<std::string, nlohmann::json> {
    TextConfig c;
    c.train_files = {base + "/train.txt"};
    c.eval_files = {base + "/eval.txt"};
    c.data.word_ngrams = 2;
    c.data.buckets = 5000;
    c.model.dim = 16;
    c.model.precision = precision;
    c.model.row_optimizer.kind = OptimizerKind::kAdagrad;
    c.model.row_optimizer.eps = default_eps(OptimizerKind::kAdagrad);
    c.model.row_optimizer.learning_rate = 0.2f;
    c.model.dense_optimizer.learning_rate = 0.2;
    c.epochs = 2;
    c.batch_size = 16;
    c.grad_groups = 2;
    c.threads = threads;
    train::RunOptions ro;
    ro.out_dir = base + "/" + out;
    ro.quiet = true;
    auto r = run_text_training(ro, c);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    auto latest = dist::find_latest_tables_checkpoint(ro.out_dir);
    EXPECT_TRUE(latest.ok()) << latest.status().to_string();
    return {latest.ok() ? dist::training_digest(latest.value().ref.path).value() : std::string(), r.value()};
  };
  const auto [d1, s1] = run(DType::kBF16, 1, "bf16_t1");
  const auto [d2, s2] = run(DType::kBF16, 2, "bf16_t2");
  const auto [d3, s3] = run(DType::kF32, 1, "fp32");
  std::filesystem::remove_all(base);
  ASSERT_FALSE(d1.empty());
  EXPECT_EQ(d1, d2);
  EXPECT_NE(d1, d3);
  EXPECT_EQ(s1["eval"]["precision_at_1"], s2["eval"]["precision_at_1"]);
  EXPECT_GT(s1["eval"]["precision_at_1"].get<double>(), 0.9);
  // The plan of the bf16 run against the fp32 run's: activations, the category of the pooled
  // buffer (2 bytes an element instead of 4) and the widened group, change by what the run
  // allocates, to the byte. Workspace (the 4 MiB scratch, the bf16 gradient, the accumulation's
  // buffers sized from the mean ids per line) and the peak within 0.1%.
  const auto& dh = s1["plan"]["device"];
  const auto& df = s3["plan"]["device"];
  auto cat = [](const nlohmann::json& d, const char* c, const char* k) { return d["categories"][c][k].get<double>(); };
  EXPECT_EQ(cat(dh, "activations", "planned") - cat(df, "activations", "planned"),
            cat(dh, "activations", "measured") - cat(df, "activations", "measured")) << dh.dump() << "\n" << df.dump();
  EXPECT_GT(cat(dh, "workspace", "measured"), cat(df, "workspace", "measured") + 4e6);  // the scratch is there
  EXPECT_NEAR(cat(dh, "workspace", "planned"), cat(dh, "workspace", "measured"), 1e-3 * cat(dh, "workspace", "measured"));
  EXPECT_NEAR(dh["planned_peak"].get<double>(), dh["measured_peak"].get<double>(), 1e-3 * dh["measured_peak"].get<double>())
      << "bf16 plan device: planned " << dh["planned_peak"] << ", measured " << dh["measured_peak"];
}

}  // namespace
}  // namespace leanemb::text
