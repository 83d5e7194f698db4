// Tests of gen-data: determinism (seed, thread count), meta.json's teacher metrics against a
// recomputation, label rate and teacher AUC near their targets, TSV and binary outputs reading
// as the same batches, multi-hot lengths, Zipf skew, and option checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "data/metrics.h"
#include "data/reader.h"
#include "leanemb/data_synthetic.h"

namespace leanemb::data {
namespace {

using testing_util::open_reader;
using testing_util::options;
using testing_util::read_batches;
using testing_util::schema;
using testing_util::ScratchDir;
using testing_util::slurp;

GenOptions small(const std::string& dir, int64_t train_rows, int64_t eval_rows) {
  GenOptions o;
  o.out_dir = dir;
  o.train_rows = train_rows;
  o.eval_rows = eval_rows;
  o.seed = 11;
  o.num_threads = 2;
  return o;
}

// The number after "key": in a flat JSON document (NaN when missing).
double json_value(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  return at == std::string::npos ? std::nan("") : std::strtod(json.c_str() + at + key.size() + 4, nullptr);
}

// All labels of a file, in file order.
std::vector<float> labels_of(const std::string& path, int64_t rows) {
  auto o = options({path}, schema(13, 26, 1000), rows);
  const auto b = read_batches(open_reader(o).get());
  return b.empty() ? std::vector<float>{} : b[0].labels;
}

// The same seed gives byte-identical files whatever the thread count; another seed does not.
TEST(GenDataTest, SameSeedGivesIdenticalFilesForAnyThreadCount) {
  ScratchDir a, b, c;
  auto o = small(a.path(), 20000, 500);
  ASSERT_TRUE(generate_dataset(o).ok());
  o.out_dir = b.path();
  o.num_threads = 1;
  ASSERT_TRUE(generate_dataset(o).ok());
  // EXPECT_TRUE, not EXPECT_EQ: a failure should not print megabytes.
  EXPECT_TRUE(slurp(a.file("train.tsv")) == slurp(b.file("train.tsv")));
  EXPECT_TRUE(slurp(a.file("eval.tsv")) == slurp(b.file("eval.tsv")));
  EXPECT_EQ(slurp(a.file("meta.json")), slurp(b.file("meta.json")));
  o.out_dir = c.path();
  o.seed = 12;
  ASSERT_TRUE(generate_dataset(o).ok());
  EXPECT_TRUE(slurp(a.file("train.tsv")) != slurp(c.file("train.tsv")));
  EXPECT_FALSE(slurp(a.file("train.tsv")).empty());
}

// meta.json's teacher_auc and teacher_logloss equal the metrics recomputed from the eval file's
// labels and the teacher's probabilities; label rate and AUC are near their targets.
TEST(GenDataTest, TeacherMetricsInMetaMatchRecomputation) {
  ScratchDir dir;
  auto o = small(dir.path(), 1000, 20000);
  o.format = OutputFormat::kBinary;
  auto rep = generate_dataset(o);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  const std::string meta = slurp(dir.file("meta.json"));
  const std::vector<float> labels = labels_of(dir.file("eval.bin"), o.eval_rows);
  ASSERT_EQ(labels.size(), 20000u);
  auto probs = teacher_eval_probabilities(o);
  ASSERT_TRUE(probs.ok());
  EXPECT_DOUBLE_EQ(json_value(meta, "teacher_auc"), roc_auc(labels, *probs).value());
  EXPECT_DOUBLE_EQ(json_value(meta, "teacher_logloss"), mean_logloss(labels, *probs).value());
  EXPECT_NEAR(json_value(meta, "eval_label_rate"), 0.25, 0.02);
  EXPECT_NEAR(json_value(meta, "teacher_auc"), 0.80, 0.02);
  EXPECT_EQ(json_value(meta, "eval_rows"), 20000.0);
}

// The TSV and binary outputs of the same options read as identical batches.
TEST(GenDataTest, TsvAndBinaryOutputsReadAsIdenticalBatches) {
  ScratchDir t, b;
  auto o = small(t.path(), 3000, 10);
  o.multi_hot_max = 3;
  ASSERT_TRUE(generate_dataset(o).ok());
  o.out_dir = b.path();
  o.format = OutputFormat::kBinary;
  ASSERT_TRUE(generate_dataset(o).ok());
  const auto from_tsv = read_batches(open_reader(options({t.file("train.tsv")}, schema(13, 26, 5000, 2), 512)).get());
  ASSERT_EQ(from_tsv.size(), 6u);
  EXPECT_EQ(read_batches(open_reader(options({b.file("train.bin")}, schema(13, 26, 5000, 2), 512)).get()), from_tsv);
}

// Non-empty multi-hot fields hold 1..multi_hot_max values; some fields are empty.
TEST(GenDataTest, MultiHotLengthsStayWithinLimit) {
  ScratchDir dir;
  auto o = small(dir.path(), 2000, 10);
  o.multi_hot_max = 3;
  o.num_sparse = 4;
  ASSERT_TRUE(generate_dataset(o).ok());
  const auto b = read_batches(open_reader(options({dir.file("train.tsv")}, schema(13, 4), 2000)).get());
  ASSERT_EQ(b.size(), 1u);
  std::map<int64_t, int> lengths;
  for (const SparseColumn& c : b[0].sparse)
    for (size_t i = 0; i + 1 < c.offsets.size(); ++i) ++lengths[c.offsets[i + 1] - c.offsets[i]];
  EXPECT_EQ(lengths.size(), 4u) << "lengths 0 (missing), 1, 2, 3";
  EXPECT_EQ(lengths.rbegin()->first, 3);
  EXPECT_GT(lengths[0], 0);
}

// Zipf ids make the hottest value of a feature far more frequent than uniform ids do.
TEST(GenDataTest, ZipfSkewsTheIdDistribution) {
  for (double zipf : {1.05, 0.0}) {
    ScratchDir dir;
    auto o = small(dir.path(), 20000, 10);
    o.zipf = zipf;
    o.num_sparse = 1;
    o.vocab = {1000};
    ASSERT_TRUE(generate_dataset(o).ok());
    auto ro = options({dir.file("train.tsv")}, make_schema(13, 1, {}, 0, IdMode::kRaw).value(), 20000);
    const auto b = read_batches(open_reader(ro).get());
    ASSERT_EQ(b.size(), 1u);
    std::map<int64_t, int> count;
    for (int64_t id : b[0].sparse[0].ids) ++count[id];
    int top = 0;
    for (const auto& [id, n] : count) top = std::max(top, n);
    const double share = static_cast<double>(top) / static_cast<double>(b[0].sparse[0].ids.size());
    if (zipf > 0) EXPECT_GT(share, 0.05);
    else EXPECT_LT(share, 0.01);
  }
}

// Bad options are refused with a message naming the option.
TEST(GenDataTest, BadOptionsAreRejected) {
  GenOptions o;
  o.out_dir = "/nonexistent-unused";
  o.vocab = {10, 20};
  EXPECT_NE(validate_gen_options(o).message().find("vocab"), std::string::npos);
  o.vocab = {10};
  o.target_auc = 1.0;
  EXPECT_NE(validate_gen_options(o).message().find("target_auc"), std::string::npos);
  o.target_auc = 0.8;
  o.latent_dim = 0;
  EXPECT_EQ(validate_gen_options(o).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leanemb::data
