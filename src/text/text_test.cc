// Tests of the text module: fastText tokenization and hashing, the reader's malformed-line
// handling, the losses' and the model's gradients (finite differences), and learning a tiny
// dataset.
#include <gtest/gtest.h>

#include <iterator>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "dist/dist_testing.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/training_digest.h"
#include "nn/loss.h"
#include "text/text_config.h"
#include "text/text_data.h"
#include "text/text_model.h"
#include "text/text_trainer.h"
#include "train/metrics_testing.h"

namespace leanemb::text {
namespace {

// A temporary file holding `content`, removed at scope exit.
class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             ("leanemb_text_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".txt")).string();
    std::ofstream(path_) << content;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// fastText's FNV-1a: standard test vectors for ASCII, sign-extended bytes above 0x7f.
TEST(TextHashTest, MatchesFastTextFnv1a) {
  EXPECT_EQ(fasttext_hash(""), 0x811c9dc5u);
  EXPECT_EQ(fasttext_hash("a"), 0xe40c292cu);
  EXPECT_EQ(fasttext_hash("foobar"), 0xbf9cf968u);
  EXPECT_EQ(fasttext_hash("\xc3\xa9"), 0x3cfa68c1u);  // "é": differs from unsigned-byte FNV-1a
  EXPECT_EQ(fasttext_hash("</s>"), 0xd79c9359u);
}

// Tokens are split on fastText's separator bytes; empty tokens never appear.
TEST(TextTokenizeTest, SplitsOnFastTextSeparators) {
  std::vector<std::string_view> t;
  split_tokens(std::string_view("  a\tbb\v\fc\r d\0e  ", 15), &t);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[0], "a");
  EXPECT_EQ(t[1], "bb");
  EXPECT_EQ(t[2], "c");
  EXPECT_EQ(t[3], "d");
  EXPECT_EQ(t[4], "e");
}

// Word n-gram buckets equal values computed independently with fastText's rule (int32 hashes
// widened with sign extension, h * 116049371 + next, mod buckets), in fastText's order.
TEST(TextNgramTest, BucketsMatchFastTextRule) {
  std::vector<uint32_t> h;
  for (const char* w : {"the", "quick", "fox", "</s>"}) h.push_back(fasttext_hash(w));
  std::vector<int64_t> out;
  add_word_ngrams(h, 2, 2000000, &out);
  EXPECT_EQ(out, (std::vector<int64_t>{786096, 440226, 242451}));
  out.clear();
  add_word_ngrams(h, 3, 1000, &out);
  EXPECT_EQ(out, (std::vector<int64_t>{96, 478, 226, 775, 451}));
  out.clear();
  add_word_ngrams(h, 1, 1000, &out);
  EXPECT_TRUE(out.empty());
}

// The dictionary sorts words by count, keeps "</s>" as a word, drops words under min_count,
// and an encoded line holds its known words, "</s>", then its n-gram buckets after the words.
TEST(TextDictionaryTest, EncodesWordsEosAndNgrams) {
  TempFile f("__label__a x y x\n__label__b y z\n");
  TextDataOptions o;
  o.min_count = 2;
  o.word_ngrams = 2;
  o.buckets = 10;
  auto d = Dictionary::build(std::vector<std::string>{f.path()}, o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value().num_words(), 3);  // x (2), y (2), </s> (2); z dropped
  EXPECT_EQ(d.value().word_id("z"), -1);
  EXPECT_EQ(d.value().num_labels(), 2);
  TextDataStats st;
  auto ds = read_dataset(std::vector<std::string>{f.path()}, d.value(), o, &st);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ(ds.value().num_examples(), 2);
  // Line 2: y, </s> (z is unknown) then 2 bigrams (y z, z </s>): 4 ids.
  const auto& v = ds.value();
  ASSERT_EQ(v.offsets[2] - v.offsets[1], 4);
  EXPECT_EQ(v.ids[static_cast<size_t>(v.offsets[1])], d.value().word_id("y"));
  EXPECT_EQ(v.ids[static_cast<size_t>(v.offsets[1]) + 1], d.value().word_id("</s>"));
  for (int64_t i = v.offsets[1] + 2; i < v.offsets[2]; ++i) {
    EXPECT_GE(v.ids[static_cast<size_t>(i)], 3);
    EXPECT_LT(v.ids[static_cast<size_t>(i)], 13);
  }
  EXPECT_EQ(st.tokens, 5 + 4);  // labels, words and </s> of both lines
}

// The malformed-line matrix: each kind is skipped, counted and reported with file and line;
// blank lines and unknown eval labels are counted separately; the rate limit fails the read.
TEST(TextReaderTest, CountsEachMalformedKindWithFileAndLine) {
  TempFile train("__label__a good words\n__label__b other words\n");
  TempFile eval(
      "__label__a good words\n"   // 1 ok
      "no label here\n"           // 2 no_label
      "__label__ empty\n"         // 3 empty_label
      "__label__a __label__b\n"   // 4 no_words
      "   \n"                     // 5 blank
      "__label__zzz unknown\n"    // 6 unknown label only: skipped
      "__label__b __label__q x\n" // 7 ok, one unknown label dropped
  );
  TextDataOptions o;
  auto d = Dictionary::build(std::vector<std::string>{train.path()}, o);
  ASSERT_TRUE(d.ok());
  std::vector<std::string> warnings;
  o.malformed.max_rate = 1.0;
  o.malformed.warn = [&](const std::string& w) { warnings.push_back(w); };
  TextDataStats st;
  auto ds = read_dataset(std::vector<std::string>{eval.path()}, d.value(), o, &st);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds.value().num_examples(), 2);
  EXPECT_EQ(st.no_label, 1);
  EXPECT_EQ(st.empty_label, 1);
  EXPECT_EQ(st.no_words, 1);
  EXPECT_EQ(st.malformed, 3);
  EXPECT_EQ(st.blank_lines, 1);
  EXPECT_EQ(st.skipped_unknown, 1);
  EXPECT_EQ(st.unknown_labels, 2);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_NE(warnings[0].find(eval.path() + ":2:"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[2].find(eval.path() + ":4:"), std::string::npos) << warnings[2];
  // Three malformed of six non-blank lines is over a 10% limit: the read fails, naming the file.
  o.malformed.max_rate = 0.1;
  o.malformed.warn = [](const std::string&) {};
  auto bad = read_dataset(std::vector<std::string>{eval.path()}, d.value(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_malformed_rate"), std::string::npos);
  EXPECT_NE(bad.status().message().find(eval.path()), std::string::npos);
}

// max_len keeps the first words of a line (counted), "</s>" always follows.
TEST(TextReaderTest, TruncatesLinesToMaxLen) {
  TempFile f("__label__a w1 w2 w3 w4 w5\n");
  TextDataOptions o;
  o.max_len = 2;
  auto d = Dictionary::build(std::vector<std::string>{f.path()}, o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().num_words(), 3);  // w1, w2, </s>
  TextDataStats st;
  auto ds = read_dataset(std::vector<std::string>{f.path()}, d.value(), o, &st);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds.value().ids.size(), 3u);
  EXPECT_EQ(st.truncated_words, 3);
}

// Central differences of a loss over logits, against the analytic gradient.
template <typename Loss>
void check_logit_gradient(Loss loss, int64_t B, int64_t C, nn::ClassTargets t) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(B * C)), g(x.size()), tmp(x.size());
  for (float& v : x) v = nd(rng);
  ASSERT_TRUE(loss(x, C, t, 1.0f, g).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    const float h = 1e-2f;
    std::vector<float> xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    const double fd = (static_cast<double>(loss(xp, C, t, 1.0f, tmp).value()) - loss(xm, C, t, 1.0f, tmp).value()) / (2.0 * h);
    EXPECT_NEAR(g[i], fd, 2e-3 + 2e-3 * std::fabs(fd)) << "logit " << i;
  }
}

// Softmax cross-entropy (one and two labels per row) and one-vs-all pass a finite-difference check.
TEST(TextLossTest, GradientsMatchFiniteDifferences) {
  const std::vector<int64_t> off = {0, 1, 3, 4};
  const std::vector<int32_t> cls = {2, 0, 4, 1};
  const nn::ClassTargets t{off, cls};
  check_logit_gradient(nn::softmax_cross_entropy, 3, 5, t);
  check_logit_gradient(nn::one_vs_all_logistic, 3, 5, t);
}

// Bad targets are rejected, naming the row.
TEST(TextLossTest, RejectsRowWithoutClassOrClassOutOfRange) {
  std::vector<float> x(4), g(4);
  const std::vector<int64_t> off = {0, 0, 1};
  const std::vector<int32_t> cls = {1};
  auto r = nn::softmax_cross_entropy(x, 2, nn::ClassTargets{off, cls}, 1.0f, g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("row 0"), std::string::npos);
  const std::vector<int64_t> off2 = {0, 1, 2};
  const std::vector<int32_t> cls2 = {1, 7};
  EXPECT_FALSE(nn::one_vs_all_logistic(x, 2, nn::ClassTargets{off2, cls2}, 1.0f, g).ok());
}

TextModelOptions small_model(int64_t rows, int64_t dim, int32_t labels) {
  TextModelOptions o;
  o.input_rows = rows;
  o.dim = dim;
  o.num_labels = labels;
  o.row_optimizer.kind = OptimizerKind::kSgd;
  o.row_optimizer.learning_rate = 0.1f;
  o.dense_optimizer.learning_rate = 0.1;
  o.num_threads = 1;
  return o;
}

// One SGD step moves each input row of the batch by -lr times its gradient; that gradient
// (through the head, the mean pooling and the loss) matches central differences of the loss.
TEST(TextModelTest, InputRowGradientMatchesFiniteDifferences) {
  for (int64_t hidden : {0, 6}) {
    TextModelOptions o = small_model(8, 4, 3);
    o.hidden = hidden;
    o.zero_output_init = false;
    o.dense_optimizer.learning_rate = 0.0;  // only the rows move
    o.row_optimizer.learning_rate = 1e-3f;
    auto m = TextModel::create(o, static_cast<Allocator*>(nullptr));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const std::vector<int64_t> ids = {1, 5, 5, 2}, offsets = {0, 4}, loff = {0, 1};
    const std::vector<int32_t> labels = {2};
    const nn::ClassTargets t{loff, labels};
    auto loss_at = [&](TextModel& mm) {
      std::vector<float> logits(3), g(3);
      EXPECT_TRUE(mm.predict(ids, offsets, logits).ok());
      return static_cast<double>(nn::softmax_cross_entropy(logits, 3, t, 1.0f, g).value());
    };
    EmbeddingTables& c = m.value()->tables();
    std::vector<float> before(8 * 4), after(8 * 4);
    ASSERT_TRUE(c.read_rows(0, 0, 8, before).ok());
    std::vector<double> fd(before.size());
    for (size_t i = 0; i < before.size(); ++i) {
      std::vector<float> w = before;
      const float h = 1e-2f;
      w[i] = before[i] + h;
      ASSERT_TRUE(c.write_rows(0, 0, 8, w).ok());
      const double lp = loss_at(*m.value());
      w[i] = before[i] - h;
      ASSERT_TRUE(c.write_rows(0, 0, 8, w).ok());
      fd[i] = (lp - loss_at(*m.value())) / (2.0 * h);
    }
    ASSERT_TRUE(c.write_rows(0, 0, 8, before).ok());
    ASSERT_TRUE(m.value()->train_step(TextBatch{ids, offsets, t}, 1.0).ok());
    ASSERT_TRUE(c.read_rows(0, 0, 8, after).ok());
    double max_fd = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      const double grad = (static_cast<double>(before[i]) - after[i]) / 1e-3;
      EXPECT_NEAR(grad, fd[i], 2e-3 + 1e-2 * std::fabs(fd[i])) << "hidden " << hidden << " element " << i;
      max_fd = std::max(max_fd, std::fabs(fd[i]));
    }
    EXPECT_GT(max_fd, 1e-3);  // the check is not vacuous: the rows have a gradient
  }
}

// A tiny dataset (each label has its own words, plus shared noise) is learned to high accuracy
// in fp32 with SGD, and with bf16 rows + RowwiseAdagrad in a dynamic table smaller than the
// input rows (rows on first touch).
TEST(TextTrainTest, LearnsTinyDatasetToHighAccuracy) {
  std::mt19937 rng(7);
  auto make = [&](int lines) {
    std::string s;
    for (int i = 0; i < lines; ++i) {
      const int label = static_cast<int>(rng() % 4);
      s += "__label__c" + std::to_string(label);
      for (int k = 0; k < 6; ++k) {
        const bool signal = rng() % 2 == 0;
        s += signal ? " w" + std::to_string(label) + "_" + std::to_string(rng() % 5) : " noise" + std::to_string(rng() % 30);
      }
      s += "\n";
    }
    return s;
  };
  TempFile train(make(800)), eval(make(200));
  for (bool lean : {false, true}) {
    TextConfig c;
    c.train_files = {train.path()};
    c.eval_files = {eval.path()};
    c.data.word_ngrams = 2;
    c.data.buckets = 100000;
    c.model.dim = 16;
    c.model.row_optimizer.kind = OptimizerKind::kSgd;
    c.model.row_optimizer.learning_rate = 0.2f;
    c.model.dense_optimizer.learning_rate = 0.2;
    if (lean) {
      c.model.dtype = DType::kBF16;
      c.model.row_optimizer.kind = OptimizerKind::kRowwiseAdagrad;
      c.model.row_optimizer.eps = default_eps(OptimizerKind::kRowwiseAdagrad);
      c.model.dynamic.enabled = true;
      c.model.dynamic_rows = 20000;
    }
    c.epochs = 5;
    c.threads = 1;
    const std::string out = (std::filesystem::path(testing::TempDir()) / ("leanemb_text_run_" + std::to_string(lean))).string();
    std::filesystem::remove_all(out);
    train::RunOptions ro;
    ro.out_dir = out;
    ro.quiet = true;
    auto r = run_text_training(ro, c);
    std::filesystem::remove_all(out);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_GT(r.value()["eval"]["precision_at_1"].get<double>(), 0.95) << "lean " << lean;
    EXPECT_EQ(r.value()["table_rows"].get<int64_t>(), lean ? 20000 : r.value()["input_rows"].get<int64_t>());
  }
}

// Evaluation looks ids up and admits none: with a full dynamic table (24 rows for the words
// and bigram buckets), the dynamic_rows counters after the final evaluation (the summary) are
// those of the last training step (its metrics.jsonl line).
TEST(TextTrainTest, EvaluationLeavesTheDynamicTableAsTrainingLeftIt) {
  std::mt19937 rng(5);
  auto make = [&](int lines) {
    std::string s;
    for (int i = 0; i < lines; ++i) {
      const int label = static_cast<int>(rng() % 3);
      s += "__label__c" + std::to_string(label) + " w" + std::to_string(label) + "_" + std::to_string(rng() % 4) + " n" +
           std::to_string(rng() % 20) + "\n";
    }
    return s;
  };
  TempFile train(make(80)), eval(make(60));
  TextConfig c;
  c.train_files = {train.path()};
  c.eval_files = {eval.path()};
  c.data.word_ngrams = 2;
  c.data.buckets = 4000;
  c.model.dim = 8;
  c.model.dynamic.enabled = true;
  c.model.dynamic_rows = 24;
  c.epochs = 1;
  c.batch_size = 8;  // 10 steps
  c.log_every = 10;
  c.checkpoint_every = -1;
  c.threads = 1;
  train::RunOptions ro;
  ro.out_dir = (std::filesystem::path(testing::TempDir()) / "leanemb_text_eval_dynamic").string();
  std::filesystem::remove_all(ro.out_dir);
  ro.quiet = true;
  auto r = run_text_training(ro, c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_FALSE(r.value()["eval"].is_null()) << "the run must evaluate";
  const nlohmann::json logged = train::metrics_field_at_step(ro.out_dir, 10, "dynamic_rows");
  ASSERT_FALSE(logged.is_null()) << "no metrics line of step 10";
  EXPECT_GT(logged["evicted"].get<int64_t>(), 0) << "the table must be full";
  EXPECT_EQ(logged.dump(), r.value()["dynamic_rows"].dump());
}

// A text run on the one loop (train/task.h): checkpoints every few steps; a run cut short and
// resumed ends at the uninterrupted run's training digest, and so do 2 and 4 ranks (threads of a
// LocalWorld) with the same grad_groups, with bf16 rows, row-wise Adagrad and a dynamic table.
TEST(TextTrainTest, ResumesAndShardsToTheSameTrainingDigest) {
  std::mt19937 rng(11);
  std::string lines;
  for (int i = 0; i < 300; ++i) {
    const int label = static_cast<int>(rng() % 3);
    lines += "__label__c" + std::to_string(label) + " w" + std::to_string(label) + "_" + std::to_string(rng() % 4) + " n" +
             std::to_string(rng() % 20) + "\n";
  }
  TempFile train(lines);
  TextConfig c;
  c.train_files = {train.path()};
  c.data.word_ngrams = 2;
  c.data.buckets = 4000;
  c.model.dim = 8;
  c.model.dtype = DType::kBF16;
  c.model.row_optimizer.kind = OptimizerKind::kRowwiseAdagrad;
  c.model.row_optimizer.learning_rate = 0.3f;
  c.model.dynamic.enabled = true;
  c.model.dynamic.partitions = 4;
  c.model.dynamic_rows = 96;  // fewer rows than ids: evicts
  c.epochs = 2;
  c.batch_size = 8;
  c.checkpoint_every = 20;
  c.grad_groups = 4;
  c.threads = 1;
  const std::string base = (std::filesystem::path(testing::TempDir()) / "leanemb_text_loop").string();
  std::filesystem::remove_all(base);
  auto run = [&](const std::string& out, int64_t steps, bool resume, dist::Communicator* comm) {
    train::RunOptions ro;
    ro.out_dir = base + "/" + out;
    ro.quiet = true;
    ro.steps = steps;
    ro.resume = resume;
    ro.comm = comm;
    return run_text_training(ro, c);
  };
  auto digest = [&](const std::string& out) {
    auto latest = dist::find_latest_tables_checkpoint(base + "/" + out);
    EXPECT_TRUE(latest.ok()) << latest.status().to_string();
    return latest.ok() ? dist::training_digest(latest.value().ref.path).value() : std::string();
  };
  auto full = run("full", -1, false, nullptr);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  EXPECT_GT(full.value()["dynamic_rows"]["evicted"].get<int64_t>(), 0);
  const std::string want = digest("full");
  ASSERT_TRUE(run("cut", 27, false, nullptr).ok());
  auto resumed = run("cut", -1, true, nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed.value()["resumed_from_step"].get<int64_t>(), 27);
  EXPECT_EQ(digest("cut"), want);
  for (int p : {2, 4}) {
    const std::string out = "p" + std::to_string(p);
    dist::test_util::expect_all_ok(dist::test_util::run_world(p, [&](dist::Communicator& comm) { return run(out, -1, false, &comm).status(); }));
    EXPECT_EQ(digest(out), want) << "P=" << p;
  }
  std::filesystem::remove_all(base);
}

// fastText's own model file: the input matrix and the word list of a trained .bin (fastText
// 0.9.2's format: magic, version, 12 int32 args and a double, the dictionary, then matrices).
struct FastTextBin {
  int64_t rows = 0, dim = 0;
  std::vector<float> input;                        // [rows, dim]
  std::unordered_map<std::string, int64_t> words;  // word -> row
};

bool read_fasttext_bin(const std::string& path, FastTextBin* out) {
  std::ifstream f(path, std::ios::binary);
  auto get = [&](auto* v) { return static_cast<bool>(f.read(reinterpret_cast<char*>(v), sizeof(*v))); };
  int32_t i32 = 0;
  int64_t i64 = 0;
  double dbl = 0;
  for (int k = 0; k < 14; ++k)
    if (!get(&i32)) return false;  // magic, version, 12 args
  if (!get(&dbl)) return false;    // sampling threshold t
  int32_t size = 0, nwords = 0, nlabels = 0;
  int64_t prune = 0;
  if (!get(&size) || !get(&nwords) || !get(&nlabels) || !get(&i64) || !get(&prune)) return false;
  for (int32_t e = 0; e < size; ++e) {
    std::string w;
    if (!std::getline(f, w, '\0')) return false;
    int8_t type = 0;
    if (!get(&i64) || !get(&type)) return false;
    if (type == 0) out->words[w] = e;
  }
  for (int64_t k = 0; k < prune; ++k)
    if (!get(&i32) || !get(&i32)) return false;
  uint8_t quant = 0;
  if (!get(&quant) || quant != 0 || !get(&out->rows) || !get(&out->dim)) return false;
  out->input.resize(static_cast<size_t>(out->rows * out->dim));
  return static_cast<bool>(f.read(reinterpret_cast<char*>(out->input.data()), static_cast<std::streamsize>(out->input.size() * 4)));
}

// With fastText installed: averaging fastText's own trained input rows over the word ids and
// n-gram buckets computed here gives the sentence vectors `fasttext print-sentence-vectors`
// prints, so our hashing and n-gram rule select exactly fastText's rows (non-ASCII and
// out-of-vocabulary words included). Skipped without fastText.
TEST(TextFastTextParityTest, OurBucketsSelectFastTextsRows) {
  if (std::system("command -v fasttext > /dev/null 2>&1") != 0) GTEST_SKIP() << "fasttext not installed";
  TempFile train(
      "__label__a the quick brown fox\n__label__b jumps over the lazy dog\n"
      "__label__a caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e the dog\n__label__b lazy quick fox jumps\n");
  const std::string prefix = train.path() + ".ft";
  ASSERT_EQ(std::system(("fasttext supervised -input '" + train.path() + "' -output '" + prefix +
                         "' -dim 4 -bucket 1000 -wordNgrams 3 -epoch 2 -minCount 1 -verbose 0 > /dev/null 2>&1").c_str()), 0);
  FastTextBin bin;
  ASSERT_TRUE(read_fasttext_bin(prefix + ".bin", &bin));
  const std::vector<std::string> queries = {"the quick brown fox", "caf\xc3\xa9 unseen cr\xc3\xa8me the lazy dog",
                                            "fox", "jumps over over the dog dog"};
  TempFile q([&] { std::string s; for (const auto& x : queries) s += x + "\n"; return s; }());
  FILE* p = popen(("fasttext print-sentence-vectors '" + prefix + ".bin' < '" + q.path() + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  for (const std::string& query : queries) {
    std::vector<std::string_view> tok;
    split_tokens(query, &tok);
    tok.push_back(kEos);  // print-sentence-vectors reads up to the newline: "</s>" ends the line
    std::vector<int64_t> rows;
    std::vector<uint32_t> hashes;
    for (std::string_view t : tok) {
      if (auto it = bin.words.find(std::string(t)); it != bin.words.end()) rows.push_back(it->second);
      hashes.push_back(fasttext_hash(t));
    }
    const size_t nw = rows.size();
    add_word_ngrams(hashes, 3, 1000, &rows);
    for (size_t i = nw; i < rows.size(); ++i) rows[i] += static_cast<int64_t>(bin.words.size());
    for (int64_t j = 0; j < bin.dim; ++j) {
      double mean = 0;
      for (int64_t r : rows) mean += bin.input[static_cast<size_t>(r * bin.dim + j)];
      mean /= static_cast<double>(rows.size());
      float printed = 0;
      ASSERT_EQ(fscanf(p, "%f", &printed), 1);
      EXPECT_NEAR(printed, mean, 1e-5 + 1e-4 * std::fabs(mean)) << query << " column " << j;
    }
  }
  pclose(p);
  std::filesystem::remove(prefix + ".bin");
  std::filesystem::remove(prefix + ".vec");
}

// Config parsing: fastText's defaults, a task mismatch and unknown keys are errors naming them.
TEST(TextConfigTest, DefaultsAndStrictKeys) {
  auto c = parse_text_config("task = \"text\"\n[data]\ntrain = \"t.txt\"\n", "x.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().model.dim, 100);
  EXPECT_EQ(c.value().epochs, 5);
  EXPECT_EQ(c.value().data.buckets, 2000000);
  EXPECT_FLOAT_EQ(c.value().model.row_optimizer.learning_rate, 0.1f);
  auto bad = parse_text_config("task = \"text\"\n[data]\ntrain = \"t.txt\"\n[model]\ndims = 3\n", "x.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.dims"), std::string::npos);
  EXPECT_FALSE(parse_text_config("task = \"ctr\"\n[data]\ntrain = \"t.txt\"\n", "x.toml").ok());
  auto set = parse_text_config("task = \"text\"\n[data]\ntrain = \"t.txt\"\n", "x.toml",
                               std::vector<std::string>{"embedding.dtype=bf16", "train.epochs=2"});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set.value().model.dtype, DType::kBF16);
  EXPECT_EQ(set.value().epochs, 2);
}

// The head follows the row rate unless dense.learning_rate is set, in the shipped example too:
// examples/text_debian.toml pinned dense.learning_rate = 0.1, so `--set
// embedding.learning_rate=X` left its output layer at 0.1 (issue 37 item 19). Its default run
// is unchanged: the pin equalled the example's row rate, 0.1.
TEST(TextConfigTest, ExampleHeadFollowsTheRowRateUnlessSet) {
  std::ifstream f(std::string(LEANEMB_SOURCE_DIR) + "/examples/text_debian.toml");
  ASSERT_TRUE(f.good());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto plain = parse_text_config(text, "text_debian.toml");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_FLOAT_EQ(plain.value().model.row_optimizer.learning_rate, 0.1f);
  EXPECT_FLOAT_EQ(plain.value().model.dense_optimizer.learning_rate, 0.1f);
  auto rate = parse_text_config(text, "text_debian.toml", std::vector<std::string>{"embedding.learning_rate=0.5"});
  ASSERT_TRUE(rate.ok()) << rate.status().to_string();
  EXPECT_FLOAT_EQ(rate.value().model.dense_optimizer.learning_rate, 0.5f);
  auto both = parse_text_config(text, "text_debian.toml",
                                std::vector<std::string>{"embedding.learning_rate=0.5", "dense.learning_rate=0.2"});
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  EXPECT_FLOAT_EQ(both.value().model.dense_optimizer.learning_rate, 0.2f);
}

}  // namespace
}  // namespace leanemb::text
