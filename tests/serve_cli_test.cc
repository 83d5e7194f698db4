// `leanemb test`, `predict` and `export` as a user runs them (issue 20, docs/serve.md), checked
// against the trainer's own figures: the AUC of `test` and of `predict`'s probabilities equal the
// trainer's final evaluation of the same file, text `predict` top-1 labels give the trainer's
// P@1, exported arrays read by numpy equal the checkpoint's rows; bad input gives clear errors;
// an unknown command is named as unknown.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "leanemb/json.h"

#include "data/metrics.h"
#include "leanemb/checkpoint.h"
#include "tests/cli_testing.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace leanemb::testing_cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string scratch(const std::string& name) {
  const std::string d = ::testing::TempDir() + "leanemb_serve_cli_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A seeded linear congruential stream of small ints for the tests' data files: rnd(n) in [0, n).
struct Lcg {
  uint64_t s;
  int operator()(int n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((s >> 33) % static_cast<uint64_t>(n));
  }
};

json read_json(const std::string& path) {
  std::ifstream f(path);
  return parse_json_or_discarded(f);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// A tiny CTR run (the train_cli_test model): 4 sparse features, 2048 rows, 256 eval rows; trained
// once per test binary, with its summary.
struct CtrRun {
  std::string data, out, summary;
};
const CtrRun& ctr_run() {
  static const CtrRun run = [] {
    CtrRun r;
    r.data = scratch("ctr_data");
    r.out = scratch("ctr_run");
    r.summary = r.out + "/summary.json";
    const RunResult t = run_cli(
        "train --quiet --set 'data.dir=\"" + r.data + "\"' --set data.gen.train_rows=2048 --set data.gen.eval_rows=256 "
        "--set data.gen.vocab=50 --set data.num_sparse=4 --set model.table_rows=64 --set model.embedding_dim=8 "
        "--set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2 "
        "--out '" + r.out + "' --json-summary '" + r.summary + "'");
    EXPECT_EQ(t.exit_code, 0) << t.err;
    return r;
  }();
  return run;
}

// A tiny text run: 4 labels, each with its own 6 words, plus 20 shared noise words; 800 lines.
struct TextRun {
  std::string train, test, out, summary;
};
const TextRun& text_run() {
  static const TextRun run = [] {
    TextRun r;
    const std::string d = scratch("text");
    r.train = d + "/train.txt";
    r.test = d + "/test.txt";
    r.out = d + "/run";
    r.summary = d + "/summary.json";
    Lcg rnd{3};
    for (const auto& [path, n] : {std::pair{r.train, 800}, std::pair{r.test, 200}}) {
      std::ofstream f(path);
      for (int i = 0; i < n; ++i) {
        const char l = static_cast<char>('a' + i % 4);
        f << "__label__" << l;
        for (int w = 0; w < 7; ++w) {
          if (w % 2) f << ' ' << l << 'w' << rnd(6);
          else f << " n" << rnd(20);
        }
        f << '\n';
      }
    }
    std::ofstream cfg(d + "/text.toml");
    cfg << "task = \"text\"\n[data]\ntrain = \"" << r.train << "\"\neval = \"" << r.test
        << "\"\nword_ngrams = 2\nbuckets = 1000\n[model]\ndim = 8\n[embedding]\nlearning_rate = 0.5\n[dense]\nlearning_rate = 0.5\n"
           "[train]\nepochs = 3\nbatch_size = 8\nthreads = 2\n";
    cfg.close();
    const RunResult t = run_cli("train --quiet --config '" + d + "/text.toml' --out '" + r.out + "' --json-summary '" + r.summary + "'");
    EXPECT_EQ(t.exit_code, 0) << t.err;
    return r;
  }();
  return run;
}

TEST(unknown_command, IsNamedWithTheListOfCommands) {
  const RunResult r = run_cli("predict-prob --run x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'predict-prob'"), std::string::npos) << r.err;
  for (const char* c : {"train", "test", "predict", "export", "plan"}) EXPECT_NE(r.err.find(c), std::string::npos) << c << ": " << r.err;
  EXPECT_EQ(r.err.find("A subcommand is required"), std::string::npos) << r.err;
}

TEST(serve_test, CtrAucAndLoglossEqualTheTrainersFinalEvaluation) {
  const CtrRun& run = ctr_run();
  const json sum = read_json(run.summary);
  ASSERT_TRUE(sum.contains("eval")) << dump_json(sum);
  const std::string js = run.out + "/test.json";
  const RunResult r = run_cli("test --run '" + run.out + "' --data '" + run.data + "/eval.tsv' --json '" + js + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("N\t256\nAUC\t"), std::string::npos) << r.out;
  const json t = read_json(js);
  EXPECT_NEAR(t["auc"].get<double>(), sum["eval"]["auc"].get<double>(), 1e-6);
  EXPECT_NEAR(t["logloss"].get<double>(), sum["eval"]["logloss"].get<double>(), 1e-6);
  EXPECT_EQ(t["rows"].get<int64_t>(), 256);
  // A checkpoint directory works as well as the run directory.
  const RunResult c = run_cli("test --checkpoint '" + sum["checkpoint"].get<std::string>() + "' --data '" + run.data + "/eval.tsv'");
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, r.out);
}

// A model trained with bf16 rows is served from its bf16 rows: test gives the trainer's AUC.
TEST(serve_test, Bf16RowsAreReadAsStored) {
  const CtrRun& run = ctr_run();
  const std::string out = scratch("bf16"), summary = out + "/summary.json", js = out + "/test.json";
  const RunResult t = run_cli(
      "train --quiet --set 'data.dir=\"" + run.data + "\"' --set data.gen.train_rows=2048 --set data.gen.eval_rows=256 "
      "--set data.gen.vocab=50 --set data.num_sparse=4 --set model.table_rows=64 --set model.embedding_dim=8 "
      "--set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2 "
      "--set embedding.dtype=bf16 --out '" + out + "/run' --json-summary '" + summary + "'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const RunResult r = run_cli("test --run '" + out + "/run' --data '" + run.data + "/eval.tsv' --json '" + js + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(read_json(js)["auc"].get<double>(), read_json(summary)["eval"]["auc"].get<double>(), 1e-6);
}

TEST(serve_predict, CtrProbabilitiesGiveTheTrainersAuc) {
  const CtrRun& run = ctr_run();
  const json sum = read_json(run.summary);
  const std::string eval = run.data + "/eval.tsv";
  const RunResult r = run_cli("predict --run '" + run.out + "' --data '" + eval + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<float> probs, labels;
  for (const std::string& l : lines_of(r.out)) probs.push_back(std::stof(l));
  for (const std::string& l : lines_of(slurp(eval))) labels.push_back(std::stof(l.substr(0, l.find('\t'))));
  ASSERT_EQ(probs.size(), labels.size());
  auto auc = data::roc_auc(labels, probs);
  ASSERT_TRUE(auc.ok()) << auc.status().message();
  EXPECT_NEAR(auc.value(), sum["eval"]["auc"].get<double>(), 1e-6);
  for (float p : probs) EXPECT_TRUE(p > 0 && p < 1) << p;
}

TEST(serve_predict, MalformedLinesAreSkippedAsInTraining) {
  const CtrRun& run = ctr_run();
  const std::string bad = run.out + "/bad.tsv";
  const std::vector<std::string> eval = lines_of(slurp(run.data + "/eval.tsv"));
  {
    std::ofstream f(bad);
    for (size_t i = 0; i < 100; ++i) f << eval[i] << "\n";
    f << "not\ta\tcriteo\tline\n";
  }
  // One bad line of 101 is over the config's rate (0.001): the error names the file and line.
  expect_clean_failure("predict --run '" + run.out + "' --data '" + bad + "'", bad + ":101");
  const RunResult ok = run_cli("predict --run '" + run.out + "' --data '" + bad + "' --set data.max_malformed_rate=0.5");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(lines_of(ok.out).size(), 100u);
  EXPECT_NE(ok.err.find("1 malformed lines skipped"), std::string::npos) << ok.err;
}

TEST(serve_bad_input, MissingCheckpointAndModelDataMismatchAreClearErrors) {
  const CtrRun& run = ctr_run();
  const std::string empty = scratch("empty_run");
  expect_clean_failure("test --run '" + empty + "/nope' --data x", "no checkpoint or run directory");
  expect_clean_failure("predict --run '" + empty + "' --data x", "neither a checkpoint directory");
  expect_clean_failure("predict --run '" + run.out + "' --data '" + run.out + "/missing.tsv'", "missing.tsv");
  // A text file given to a CTR model: every line malformed, named.
  const TextRun& text = text_run();
  expect_clean_failure("test --run '" + run.out + "' --data '" + text.test + "'", text.test + ":1");
  // --k must be a positive integer.
  expect_clean_failure("test --run '" + text.out + "' --data '" + text.test + "' --k 0", "--k");
}

TEST(serve_test, TextPrecisionAndRecallAtKAsFastTextPrintsThem) {
  const TextRun& run = text_run();
  const json sum = read_json(run.summary);
  ASSERT_TRUE(sum.contains("eval")) << dump_json(sum);
  const std::string js = run.out + "/test.json";
  const RunResult r = run_cli("test --run '" + run.out + "' --data '" + run.test + "' --json '" + js + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json t = read_json(js);
  EXPECT_EQ(t["precision_at_1"].get<double>(), sum["eval"]["precision_at_1"].get<double>());
  EXPECT_EQ(t["recall_at_1"].get<double>(), sum["eval"]["recall_at_1"].get<double>());
  EXPECT_GT(t["precision_at_1"].get<double>(), 0.5) << "the tiny model should learn the label words";
  char want[128];
  std::snprintf(want, sizeof want, "N\t200\nP@1\t%.3g\nR@1\t%.3g\n", t["precision_at_1"].get<double>(), t["recall_at_1"].get<double>());
  EXPECT_EQ(r.out, want);
  // k = 2: one gold label per line, so two predictions per line: P@2 = correct / 400, R@2 = correct / 200.
  const RunResult r2 = run_cli("test --run '" + run.out + "' --data '" + run.test + "' --k 2 --json '" + js + "'");
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const json t2 = read_json(js);
  EXPECT_EQ(t2["predictions"].get<int64_t>(), 400);
  EXPECT_NEAR(t2["recall_at_k"].get<double>(), 2 * t2["precision_at_k"].get<double>(), 1e-12);
  EXPECT_GE(t2["recall_at_k"].get<double>(), t["recall_at_1"].get<double>());
  EXPECT_NE(r2.out.find("P@2\t"), std::string::npos) << r2.out;
}

TEST(serve_predict, TextTopOneLabelsGiveTheTrainersPrecision) {
  const TextRun& run = text_run();
  const json sum = read_json(run.summary);
  const RunResult r = run_cli("predict --run '" + run.out + "' --data '" + run.test + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> got = lines_of(r.out), gold = lines_of(slurp(run.test));
  ASSERT_EQ(got.size(), gold.size());
  int64_t correct = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].rfind("__label__", 0), 0u) << got[i];
    ASSERT_EQ(got[i].find(' '), std::string::npos) << got[i];
    correct += gold[i].substr(0, gold[i].find(' ')) == got[i];
  }
  EXPECT_EQ(static_cast<double>(correct) / static_cast<double>(got.size()), sum["eval"]["precision_at_1"].get<double>());
  // predict-prob: "__label__x p __label__y q", p >= q, probabilities of a softmax.
  const RunResult p = run_cli("predict --run '" + run.out + "' --data '" + run.test + "' --k 2 --prob");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::vector<std::string> pl = lines_of(p.out);
  ASSERT_EQ(pl.size(), gold.size());
  for (size_t i = 0; i < pl.size(); ++i) {
    std::istringstream in(pl[i]);
    std::string l1, l2;
    double p1 = -1, p2 = -1;
    in >> l1 >> p1 >> l2 >> p2;
    EXPECT_EQ(l1, got[i]);
    EXPECT_EQ(l2.rfind("__label__", 0), 0u) << pl[i];
    EXPECT_NE(l1, l2);
    EXPECT_TRUE(p1 >= p2 && p2 >= 0 && p1 + p2 <= 1.000001) << pl[i];
  }
  // A line without a word gives an empty line, as fastText's predict.
  const std::string mixed = run.out + "/mixed.txt";
  std::ofstream(mixed) << gold[0] << "\n\n" << "__label__a\n" << gold[1] << "\n";
  const RunResult m = run_cli("predict --run '" + run.out + "' --data '" + mixed + "'");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_EQ(m.out, got[0] + "\n\n\n" + got[1] + "\n");
}

// numpy (Debian's python3) reads the arrays; their bytes are the checkpoint's weight bytes.
TEST(serve_export, NumpyReadsTheArraysAndTheyEqualTheCheckpointRows) {
  const CtrRun& run = ctr_run();
  const std::string ex = scratch("export");
  const RunResult e = run_cli("export --run '" + run.out + "' --out '" + ex + "' --with-state");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const json manifest = read_json(ex + "/manifest.json");
  ASSERT_EQ(manifest["tables"].size(), 4u);
  const std::string script = ex + "/read.py";
  std::ofstream(script) << "import json, sys, numpy as np\n"
                           "d = sys.argv[1]\n"
                           "m = json.load(open(d + '/manifest.json'))\n"
                           "for t in m['tables'] + m['dense']:\n"
                           "    a = np.load(d + '/' + t['file'])\n"
                           "    assert a.dtype == np.float32 and list(a.shape) == t['shape'], (t, a.shape)\n"
                           "    print(t['name'], a.tobytes().hex())\n"
                           "for t in m['tables']:\n"
                           "    s = np.load(d + '/' + t['state_file'])\n"
                           "    assert list(s.shape) == t['state_shape']\n";
  const std::string out = ex + "/hex.txt";
  ASSERT_EQ(std::system(("/usr/bin/python3 '" + script + "' '" + ex + "' > '" + out + "'").c_str()), 0);
  std::map<std::string, std::string> hex;
  for (const std::string& l : lines_of(slurp(out))) hex[l.substr(0, l.find(' '))] = l.substr(l.find(' ') + 1);
  auto reader = ckpt::CheckpointReader::open(read_json(run.summary)["checkpoint"].get<std::string>());
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  auto to_hex = [](const uint8_t* p, size_t n) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
    return s;
  };
  for (const auto& t : manifest["tables"]) {
    const std::string name = t["name"].get<std::string>();
    const ckpt::EntryInfo* info = reader.value()->find("emb/" + name);
    ASSERT_NE(info, nullptr) << name;
    const int64_t rows = t["shape"][0].get<int64_t>(), dim = t["shape"][1].get<int64_t>();
    std::vector<uint8_t> raw(info->row_bytes * static_cast<size_t>(rows));
    ASSERT_TRUE(reader.value()->read_rows("emb/" + name, 0, rows, raw).ok());
    std::string want;  // fp32 rows: the weights are the first dim floats of each fat row
    for (int64_t r = 0; r < rows; ++r) want += to_hex(raw.data() + static_cast<size_t>(r) * info->row_bytes, static_cast<size_t>(dim) * 4);
    EXPECT_EQ(hex[name], want) << name;
  }
  for (const auto& d : manifest["dense"]) {
    if (d.contains("optimizer_state")) continue;
    const std::string name = d["name"].get<std::string>();
    auto blob = reader.value()->read_blob("dense/param/" + name);
    ASSERT_TRUE(blob.ok()) << name;
    EXPECT_EQ(hex[name], to_hex(blob.value().data(), blob.value().size())) << name;
  }
}

TEST(serve_export, TextWordVectorsInFastTextVecFormat) {
  const TextRun& run = text_run();
  const std::string ex = scratch("export_text");
  const RunResult e = run_cli("export --run '" + run.out + "' --out '" + ex + "'");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const std::vector<std::string> vec = lines_of(slurp(ex + "/words.vec"));
  ASSERT_FALSE(vec.empty());
  const json sum = read_json(run.summary);
  const int64_t words = sum["words"].get<int64_t>();
  EXPECT_EQ(vec[0], std::to_string(words) + " 8");
  ASSERT_EQ(static_cast<int64_t>(vec.size()), words + 1);
  EXPECT_EQ(vec[1].substr(0, 5), "</s> ");  // the most frequent word: every line ends with it
  std::istringstream in(vec[1]);
  int n = 0;
  for (std::string tok; in >> tok; ++n) {
    if (n > 0) {
      EXPECT_NO_THROW((void)std::stod(tok)) << tok;
    }
  }
  EXPECT_EQ(n, 9);  // the word and 8 values
  EXPECT_EQ(read_json(ex + "/manifest.json")["labels"].size(), 4u);
}

// The compact serving export: int8 rows without optimizer state, read by predict / test; the
// AUC and P@1 move by the int8 rounding only.
TEST(serve_export, ServingCheckpointHasInt8RowsAndPredictsAlmostAsTheModel) {
  const CtrRun& run = ctr_run();
  const json sum = read_json(run.summary);
  const std::string srv = scratch("serving");
  const RunResult e = run_cli("export --run '" + run.out + "' --out '" + srv + "' --serving");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("tables 16.00 KiB -> 4.00 KiB"), std::string::npos) << e.out;  // 4 x 64 rows: fp32 + Adagrad -> int8
  const std::string js = srv + "/test.json";
  const RunResult t = run_cli("test --run '" + srv + "' --data '" + run.data + "/eval.tsv' --json '" + js + "'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NEAR(read_json(js)["auc"].get<double>(), sum["eval"]["auc"].get<double>(), 0.01);
  auto reader = ckpt::CheckpointReader::open(srv + "/checkpoints/step-0000000016");
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  ASSERT_NE(reader.value()->find("emb/C1"), nullptr);
  EXPECT_EQ(reader.value()->find("emb/C1")->row_bytes, 8u + 8u);  // 8 codes, scale, bias
  EXPECT_EQ(reader.value()->find("dense/opt/top.0.weight.exp_avg"), nullptr);
  // Optimizer state was left out: asking for it is an error, not zeros.
  expect_clean_failure("export --run '" + srv + "' --out '" + srv + "/npy' --with-state", "no optimizer state");
  // Text: P@1 of the int8 copy within a few lines of the trained model's.
  const TextRun& text = text_run();
  const std::string tsrv = scratch("serving_text");
  ASSERT_EQ(run_cli("export --run '" + text.out + "' --out '" + tsrv + "' --serving").exit_code, 0);
  const RunResult tt = run_cli("test --run '" + tsrv + "' --data '" + text.test + "' --json '" + js + "'");
  ASSERT_EQ(tt.exit_code, 0) << tt.err;
  EXPECT_NEAR(read_json(js)["precision_at_1"].get<double>(), read_json(text.summary)["eval"]["precision_at_1"].get<double>(), 0.03);
}

// Every row's occurrences in a Criteo TSV file, computed here from the documented id rule
// (docs/data.md: a hex value v hashes to XXH3_64bits_withSeed(8 LE bytes of v, seed = feature
// index); its row is hash % rows), independently of the reader: [feature][row].
std::vector<std::vector<int64_t>> row_counts(const std::string& tsv, int num_dense, int num_sparse, int64_t rows) {
  std::vector<std::vector<int64_t>> c(static_cast<size_t>(num_sparse), std::vector<int64_t>(static_cast<size_t>(rows), 0));
  for (const std::string& l : lines_of(slurp(tsv))) {
    std::vector<std::string> f;
    std::istringstream in(l);
    for (std::string x; std::getline(in, x, '\t');) f.push_back(x);
    for (int s = 0; s < num_sparse; ++s) {
      const size_t i = static_cast<size_t>(1 + num_dense + s);
      if (i >= f.size() || f[i].empty()) continue;  // an empty value (getline drops a trailing one)
      const std::string& v = f[i];
      const uint64_t value = std::stoull(v, nullptr, 16);
      ++c[static_cast<size_t>(s)][XXH3_64bits_withSeed(&value, 8, static_cast<uint64_t>(s)) % static_cast<uint64_t>(rows)];
    }
  }
  return c;
}

std::vector<uint8_t> table_bytes_of(const std::string& ckpt, const std::string& name, int64_t* rows) {
  auto r = ckpt::CheckpointReader::open(ckpt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  const ckpt::EntryInfo* info = r.value()->find("emb/" + name);
  EXPECT_NE(info, nullptr) << name;
  *rows = info->total_rows;
  std::vector<uint8_t> raw(info->row_bytes * static_cast<size_t>(*rows));
  EXPECT_TRUE(r.value()->read_rows("emb/" + name, 0, *rows, raw).ok());
  return raw;
}

// Pruning (--prune-min-count N): each table keeps exactly the rows counted >= N times in the
// training file (counted here by the documented id rule), stored in ascending order with the
// same int8 bytes as the unpruned export; predict and test read the pruned export; with N = 1
// every row the training file uses is kept, so predictions on it equal the unpruned export's.
TEST(serve_export, PruningKeepsExactlyTheRowsCountedAtLeastNTimes) {
  const CtrRun& run = ctr_run();
  const std::string full = scratch("serving_full"), pruned = scratch("serving_pruned"), one = scratch("serving_min1");
  ASSERT_EQ(run_cli("export --run '" + run.out + "' --out '" + full + "' --serving").exit_code, 0);
  const RunResult e = run_cli("export --run '" + run.out + "' --out '" + pruned + "' --serving --prune-min-count 30");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("pruned rows seen < 30 times"), std::string::npos) << e.out;
  const auto counts = row_counts(run.data + "/train.tsv", 13, 4, 64);
  const std::string step = "/checkpoints/step-0000000016";
  auto reader = ckpt::CheckpointReader::open(pruned + step);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  int64_t dropped = 0, kept_all = 0;
  for (int f = 0; f < 4; ++f) {
    const std::string name = "C" + std::to_string(f + 1);
    std::vector<int64_t> want;
    for (int64_t r = 0; r < 64; ++r)
      if (counts[static_cast<size_t>(f)][static_cast<size_t>(r)] >= 30) want.push_back(r);
    dropped += 64 - static_cast<int64_t>(want.size());
    kept_all += static_cast<int64_t>(want.size());
    auto blob = reader.value()->read_blob("serve/kept/" + name);
    ASSERT_TRUE(blob.ok()) << blob.status().message();
    std::vector<int64_t> got(blob.value().size() / 8);
    std::memcpy(got.data(), blob.value().data(), blob.value().size());
    EXPECT_EQ(got, want) << name;
    int64_t rf = 0, rp = 0;
    const std::vector<uint8_t> fb = table_bytes_of(full + step, name, &rf), pb = table_bytes_of(pruned + step, name, &rp);
    ASSERT_EQ(rp, std::max<int64_t>(1, static_cast<int64_t>(want.size()))) << name;
    const size_t rb = fb.size() / static_cast<size_t>(rf);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(0, std::memcmp(pb.data() + i * rb, fb.data() + static_cast<size_t>(want[i]) * rb, rb)) << name << " kept row " << i;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GT(kept_all, 0);
  const std::string js = pruned + "/test.json";
  const RunResult t = run_cli("test --run '" + pruned + "' --data '" + run.data + "/eval.tsv' --json '" + js + "'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("AUC\t"), std::string::npos) << t.out;
  const double auc = read_json(js)["auc"].get<double>();
  EXPECT_TRUE(auc > 0.4 && auc < 1.0) << auc;
  // N = 1 keeps every row the training file touches: the same predictions on that file.
  ASSERT_EQ(run_cli("export --run '" + run.out + "' --out '" + one + "' --serving --prune-min-count 1").exit_code, 0);
  const RunResult pf = run_cli("predict --run '" + full + "' --data '" + run.data + "/train.tsv'");
  const RunResult p1 = run_cli("predict --run '" + one + "' --data '" + run.data + "/train.tsv'");
  ASSERT_EQ(pf.exit_code, 0) << pf.err;
  ASSERT_EQ(p1.exit_code, 0) << p1.err;
  EXPECT_EQ(lines_of(p1.out).size(), 2048u);
  EXPECT_EQ(p1.out, pf.out);
}

// Text pruning: rows are the words and n-gram buckets; N = 1 keeps every row the training file
// uses (P@1 on it equals the unpruned export's), a higher N drops rows and test still reports P@1.
TEST(serve_export, TextPruningReadsByPredictAndTest) {
  const TextRun& run = text_run();
  const std::string full = scratch("tsrv_full"), one = scratch("tsrv_min1"), many = scratch("tsrv_min40");
  ASSERT_EQ(run_cli("export --run '" + run.out + "' --out '" + full + "' --serving").exit_code, 0);
  ASSERT_EQ(run_cli("export --run '" + run.out + "' --out '" + one + "' --serving --prune-min-count 1").exit_code, 0);
  const RunResult e = run_cli("export --run '" + run.out + "' --out '" + many + "' --serving --prune-min-count 40");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("pruned rows seen < 40 times"), std::string::npos) << e.out;
  const RunResult pf = run_cli("predict --run '" + full + "' --data '" + run.train + "' --k 2 --prob");
  const RunResult p1 = run_cli("predict --run '" + one + "' --data '" + run.train + "' --k 2 --prob");
  ASSERT_EQ(pf.exit_code, 0) << pf.err;
  ASSERT_EQ(p1.exit_code, 0) << p1.err;
  EXPECT_EQ(p1.out, pf.out);
  const std::string js = many + "/test.json";
  const RunResult t = run_cli("test --run '" + many + "' --data '" + run.test + "' --json '" + js + "'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("P@1\t"), std::string::npos) << t.out;
  const json r = read_json(js);
  EXPECT_EQ(r["examples"].get<int64_t>(), 200);
  const json fmt = [&] {
    auto rd = ckpt::CheckpointReader::open(many + "/checkpoints/step-" + std::string(10 - std::to_string(r["step"].get<int64_t>()).size(), '0') +
                                          std::to_string(r["step"].get<int64_t>()));
    EXPECT_TRUE(rd.ok()) << rd.status().message();
    auto b = rd.value()->read_blob("serve/format");
    return parse_json_or_discarded(b.value().data(), b.value().size());
  }();
  ASSERT_EQ(fmt["pruned_tables"].size(), 1u);
  EXPECT_LT(fmt["pruned_tables"][0]["kept"].get<int64_t>(), fmt["pruned_tables"][0]["rows"].get<int64_t>());
  EXPECT_GT(fmt["pruned_tables"][0]["kept"].get<int64_t>(), 0);
}

// Bad pruning arguments are refused before anything is written, naming the flag.
TEST(serve_bad_input, PruneMinCountNeedsServingAndAPositiveCount) {
  const CtrRun& run = ctr_run();
  const std::string d = scratch("prune_bad");
  expect_clean_failure("export --run '" + run.out + "' --out '" + d + "/a' --prune-min-count 3", "add --serving");
  expect_clean_failure("export --run '" + run.out + "' --out '" + d + "/b' --serving --prune-min-count=-2", "--prune-min-count must be >= 1");
  expect_clean_failure("export --run '" + run.out + "' --out '" + d + "/c' --serving --prune-min-count x", "--prune-min-count");
  EXPECT_FALSE(fs::exists(d + "/b/checkpoints"));
}

// Own data without preparation: categorical values that are any strings (data.categorical =
// "string"), hashed by the reader; the default ("hex") names the setting in its error.
TEST(own_data, StringCategoricalValuesAreHashedByTheReader) {
  const std::string d = scratch("strings");
  Lcg rnd{11};
  const char* animals[4] = {"dog", "cat", "bird fly", "\xc3\xbcnicode"};
  for (const auto& [name, n] : {std::pair{"train.tsv", 2000}, std::pair{"eval.tsv", 500}}) {
    std::ofstream f(d + "/" + name);
    for (int i = 0; i < n; ++i) {
      const int a = rnd(4);
      const int y = (a == 0 || a == 2) != (rnd(10) < 2);
      f << y << '\t' << rnd(10) << '\t' << animals[a] << '\t' << "user_" << rnd(30) << ",x\n";
    }
  }
  const std::string cfg = "--quiet --set data.generate=false --set 'data.train=\"" + d + "/train.tsv\"' --set 'data.eval=\"" + d +
                          "/eval.tsv\"' --set data.num_dense=1 --set data.num_sparse=2 --set model.table_rows=1000 "
                          "--set model.embedding_dim=8 --set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' "
                          "--set train.batch_size=100 --set train.threads=2 ";
  expect_clean_failure("train " + cfg + "--out '" + d + "/hex'", "data.categorical = \"string\"");
  const RunResult t = run_cli("train " + cfg + "--set 'data.categorical=\"string\"' --out '" + d + "/run' --json-summary '" + d + "/s.json'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const json sum = read_json(d + "/s.json");
  EXPECT_EQ(sum["data"]["malformed"].get<int64_t>(), 0);
  EXPECT_GT(sum["eval"]["auc"].get<double>(), 0.7) << "the label follows the animal: the strings must reach distinct rows";
  // predict reads the strings with the saved config's rule.
  const RunResult r = run_cli("test --run '" + d + "/run' --data '" + d + "/eval.tsv' --json '" + d + "/t.json'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(read_json(d + "/t.json")["auc"].get<double>(), sum["eval"]["auc"].get<double>(), 1e-6);
  // An empty item in a list is still malformed.
  std::ofstream(d + "/bad.tsv") << "1\t3\tdog\tuser_1,,x\n";
  expect_clean_failure("predict --run '" + d + "/run' --data '" + d + "/bad.tsv'", "is empty");
}

// model.table_rows = "auto": one counting pass over data.train gives each feature's table as many
// rows as it has distinct values (strings hashed by the reader, list items counted one by one);
// the sizes are printed, in the summary and in <out>/table_rows.json, and a resumed run reads
// them back even when the training file has grown since. Other strings are refused.
TEST(own_data, TableRowsAutoCountsDistinctValuesAndResumeKeepsThem) {
  const std::string d = scratch("auto_rows");
  Lcg rnd{5};
  const char* colors[5] = {"red", "green", "blue", "dark red", "\xc3\xa9" "cru"};
  std::set<std::string> users;
  {
    std::ofstream f(d + "/train.tsv");
    for (int i = 0; i < 1000; ++i) {
      const int c = rnd(5);
      char u[16], v[16];  // (not "u" + std::to_string: GCC 12 -O3 warns falsely on it, -Wrestrict)
      std::snprintf(u, sizeof u, "u%d", rnd(45));
      std::snprintf(v, sizeof v, "u%d", rnd(45));
      users.insert(u);
      users.insert(v);
      f << (c < 2) << '\t' << rnd(10) << '\t' << colors[c] << '\t' << u << ',' << v << '\n';
    }
  }
  const std::string cfg = "--set data.generate=false --set 'data.train=\"" + d + "/train.tsv\"' --set 'data.eval=\"" + d +
                          "/train.tsv\"' --set data.num_dense=1 --set data.num_sparse=2 --set 'data.categorical=\"string\"' "
                          "--set model.embedding_dim=8 --set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' "
                          "--set train.batch_size=50 --set train.threads=2 --set train.checkpoint_every=5 ";
  expect_clean_failure("train --quiet " + cfg + "--set 'model.table_rows=\"many\"' --out '" + d + "/bad'", "expected \"auto\"");
  const RunResult t = run_cli("train " + cfg + "--set 'model.table_rows=\"auto\"' --steps 10 --out '" + d + "/run' --json-summary '" +
                              d + "/s.json'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::vector<int64_t> want = {5, static_cast<int64_t>(users.size())};
  const json sum = read_json(d + "/s.json");
  EXPECT_TRUE(sum["table_rows_derived"].get<bool>());
  EXPECT_EQ(sum["sparse_table_rows"].get<std::vector<int64_t>>(), want);
  const std::string said = "model.table_rows = \"auto\": [5, " + std::to_string(users.size()) + "]";
  EXPECT_NE(t.err.find(said), std::string::npos) << t.err;
  ASSERT_TRUE(fs::exists(d + "/run/table_rows.json"));
  // New values in the file do not resize the tables of a resumed run.
  std::ofstream(d + "/train.tsv", std::ios::app) << "1\t3\tpurple\tnew_user,u1\n";
  const RunResult r = run_cli("train " + cfg + "--set 'model.table_rows=\"auto\"' --steps 20 --resume --out '" + d +
                              "/run' --json-summary '" + d + "/s2.json'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_json(d + "/s2.json")["sparse_table_rows"].get<std::vector<int64_t>>(), want);
  EXPECT_NE(r.err.find("not counted again"), std::string::npos) << r.err;
  // test reads the sizes from the checkpoint.
  const RunResult e = run_cli("test --run '" + d + "/run' --data '" + d + "/train.tsv'");
  EXPECT_EQ(e.exit_code, 0) << e.err;
}

// ---- rough edges of training on one's own data (issue 20) ----------------------------------------

std::string tiny_ctr(const std::string& extra) {
  return "train --set 'data.dir=\"" + ctr_run().data + "\"' --set data.gen.train_rows=2048 --set data.gen.eval_rows=256 "
         "--set data.gen.vocab=50 --set data.num_sparse=4 --set model.table_rows=64 --set model.embedding_dim=8 "
         "--set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2 " + extra;
}

TEST(rough_edges, CheckpointsCanBeTurnedOff) {
  const std::string out = scratch("no_ckpt");
  const RunResult r = run_cli(tiny_ctr("--quiet --set train.checkpoint_every=-1 --out '" + out + "/run'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("checkpoint: (none: checkpoints are off, train.checkpoint_every = -1)"), std::string::npos) << r.out;
  EXPECT_TRUE(!fs::exists(out + "/run/checkpoints") || fs::is_empty(out + "/run/checkpoints"));
  EXPECT_TRUE(fs::exists(out + "/run/metrics.jsonl"));
  expect_clean_failure(tiny_ctr("--set train.checkpoint_every=-2 --out '" + out + "/run2'"), "train.checkpoint_every");
}

TEST(rough_edges, DefaultOutIsDerivedFromTheConfigName) {
  const std::string d = scratch("default_out");
  std::ofstream(d + "/my_model.toml") << "[data]\ndir = \"" << d << "/data\"\ngenerate = true\nnum_sparse = 4\n"
                                      << "[data.gen]\ntrain_rows = 2048\neval_rows = 256\nvocab = 50\n"
                                      << "[model]\ntable_rows = 64\nembedding_dim = 8\nbottom_mlp = [16, 8]\ntop_mlp = [16]\n"
                                      << "[train]\nbatch_size = 128\nthreads = 2\n";
  const RunResult r = run_cli("train --quiet --config my_model.toml", "cd '" + d + "' && ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(d + "/runs/my_model/checkpoints")) << r.out;
  EXPECT_NE(r.out.find("runs/my_model/checkpoints/step-"), std::string::npos) << r.out;
}

TEST(rough_edges, StepsPerEpochArePrintedAndEvalEveryEpochs) {
  const std::string out = scratch("epochs");
  const RunResult r = run_cli(tiny_ctr("--set train.epochs=2 --set train.eval_every_epochs=1 --set train.log_every=1000 "
                                       "--out '" + out + "/run' --json-summary '" + out + "/s.json'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("16 steps per epoch"), std::string::npos) << r.err;  // 2048 rows / batch 128
  EXPECT_NE(r.err.find("epoch 1 (step 16): eval auc "), std::string::npos) << r.err;
  std::vector<std::string> metrics;  // the evaluations (the other lines: the final checkpoint)
  for (const std::string& l : lines_of(slurp(out + "/run/metrics.jsonl")))
    if (parse_json(l).contains("eval")) metrics.push_back(l);
  ASSERT_EQ(metrics.size(), 2u);  // after epoch 1, and the final evaluation (after epoch 2)
  const json e1 = parse_json(metrics[0]), fin = parse_json(metrics[1]);
  EXPECT_EQ(e1["epoch"].get<int64_t>(), 1);
  EXPECT_EQ(e1["step"].get<int64_t>(), 16);
  EXPECT_TRUE(e1["eval"].contains("auc"));
  EXPECT_EQ(fin["step"].get<int64_t>(), 32);
  EXPECT_EQ(read_json(out + "/s.json")["steps_per_epoch"].get<int64_t>(), 16);
  // Text: the steps per epoch come from the data (800 lines / batch 8).
  EXPECT_EQ(read_json(text_run().summary)["steps_per_epoch"].get<int64_t>(), 100);
}

TEST(rough_edges, SummaryAfterResumeCountsThisRun) {
  const std::string out = scratch("resume_summary");
  ASSERT_EQ(run_cli(tiny_ctr("--quiet --steps 6 --out '" + out + "/run'")).exit_code, 0);
  const RunResult r = run_cli(tiny_ctr("--quiet --steps 10 --resume --out '" + out + "/run' --json-summary '" + out + "/s.json'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("resumed at step 6: steps 7-10 in this run (512 samples; 10 steps, 1280 samples in all)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("samples/s (this run's samples over this run's time)"), std::string::npos) << r.out;
  const json s = read_json(out + "/s.json");
  EXPECT_EQ(s["samples_this_run"].get<int64_t>(), 512);
  EXPECT_NEAR(s["samples_per_s"].get<double>(), 512.0 / s["train_seconds"].get<double>(), 1e-6 * s["samples_per_s"].get<double>());
}

TEST(rough_edges, SetErrorsAreAttributedToSet) {
  const RunResult r = run_cli("train --set train.batch_size=abc");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("leanemb: error: InvalidArgument: --set train.batch_size=abc: expected an integer"), std::string::npos) << r.err;
  const RunResult u = run_cli("train --set train.bogus=1");
  EXPECT_NE(u.err.find("--set train.bogus=1: unknown key train.bogus"), std::string::npos) << u.err;
  const RunResult b = run_cli("train --device-budget lots");
  EXPECT_NE(b.err.find("--device-budget lots: "), std::string::npos) << b.err;
}

TEST(rough_edges, DeviceTierIsNamedForThisMachine) {
  const std::string out = scratch("device_name");
  const RunResult r = run_cli(tiny_ctr("--set train.log_every=8 --out '" + out + "/run'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(tier: device (cpu), budget"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  device (cpu) total"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("| device (cpu) "), std::string::npos) << r.err;
}

// ---- leanemb report -------------------------------------------------------------------------------

// The value of attribute `name` of the element that carries `marker` (a plain-text HTML reading,
// enough for the page report writes).
std::string attribute_near(const std::string& html, const std::string& marker, const std::string& name) {
  const size_t at = html.find(marker);
  if (at == std::string::npos) return "<no " + marker + ">";
  const size_t begin = html.rfind('<', at), end = html.find('>', at);
  const std::string tag = html.substr(begin, end - begin);
  const size_t a = tag.find(" " + name + "=\"");
  if (a == std::string::npos) return "<no " + name + ">";
  const size_t v = a + name.size() + 3;
  return tag.substr(v, tag.find('"', v) - v);
}

std::vector<double> numbers(const std::string& s) {
  std::vector<double> v;
  std::istringstream in(s);
  for (double x; in >> x;) v.push_back(x);
  return v;
}

TEST(serve_report, HtmlChartsHoldTheRunsSeries) {
  const std::string out = scratch("report");
  const RunResult t = run_cli(tiny_ctr("--quiet --set train.log_every=2 --set train.eval_every=4 --set train.checkpoint_every=4 --out '" + out +
                                       "/run' --json-summary '" + out + "/s.json'"));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const RunResult r = run_cli("report '" + out + "/run' --summary '" + out + "/s.json'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = slurp(out + "/run/report.html");
  ASSERT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained: nothing to run or fetch
  EXPECT_EQ(html.find("http://", html.find("<body")), html.find("http://www.w3.org/2000/svg", html.find("<body")));
  std::vector<double> steps, loss, speed, eval_steps, auc, h2d, ckpt_steps, ckpt_secs;
  for (const std::string& l : lines_of(slurp(out + "/run/metrics.jsonl"))) {
    const json j = parse_json(l);
    if (j.contains("loss")) {
      steps.push_back(j["step"].get<double>());
      loss.push_back(j["loss"].get<double>());
      speed.push_back(j["samples_per_s"].get<double>());
      h2d.push_back(j["transfers"]["host_to_device"].get<double>());
    }
    if (j.contains("checkpoint")) {
      ckpt_steps.push_back(j["step"].get<double>());
      ckpt_secs.push_back(j["checkpoint_seconds"].get<double>());
    }
    if (j.contains("eval")) {
      eval_steps.push_back(j["step"].get<double>());
      auc.push_back(j["eval"]["auc"].get<double>());
    }
  }
  ASSERT_EQ(steps.size(), 8u);  // 16 steps, every 2
  ASSERT_EQ(auc.size(), 5u);    // steps 4, 8, 12, 16 and the final one
  auto expect_series = [&](const std::string& id, const std::vector<double>& xs, const std::vector<double>& ys) {
    SCOPED_TRACE(id);
    const std::vector<double> gx = numbers(attribute_near(html, "data-series=\"" + id + "\"", "data-steps"));
    const std::vector<double> gy = numbers(attribute_near(html, "data-series=\"" + id + "\"", "data-values"));
    ASSERT_EQ(gx.size(), xs.size());
    ASSERT_EQ(gy.size(), ys.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(gx[i], xs[i]);
      EXPECT_NEAR(gy[i], ys[i], 1e-8 * std::abs(ys[i]));
    }
    const std::string points = attribute_near(html, "data-series=\"" + id + "\"", "points");
    EXPECT_EQ(static_cast<size_t>(std::count(points.begin(), points.end(), ',')), xs.size());  // one x,y per point
  };
  expect_series("loss", steps, loss);
  expect_series("samples_per_s", steps, speed);
  expect_series("eval", eval_steps, auc);
  expect_series("host_to_device", steps, h2d);  // chart-transfers
  // Checkpoints: every 4 steps, each on the timeline chart and marked on the loss chart.
  ASSERT_EQ(ckpt_steps, (std::vector<double>{4, 8, 12, 16}));
  expect_series("checkpoint_seconds", ckpt_steps, ckpt_secs);
  const std::string loss_chart = html.substr(html.find("id=\"chart-loss\""), html.find("</svg>", html.find("id=\"chart-loss\"")) -
                                                                                 html.find("id=\"chart-loss\""));
  size_t markers = 0;
  for (size_t at = loss_chart.find("data-kind=\"checkpoint\""); at != std::string::npos; at = loss_chart.find("data-kind=\"checkpoint\"", at + 1))
    ++markers;
  EXPECT_EQ(markers, 4u);
  for (const char* id : {"chart-transfers", "chart-memory"})
    EXPECT_NE(html.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  // An fp32 run's loss scale stays 1 and it skips no step: those charts would say nothing.
  for (const char* id : {"chart-loss_scale", "chart-skipped_steps"})
    EXPECT_EQ(html.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  // Memory: a planned and a measured bar per tier, the measured bytes those of the summary.
  const json sum = read_json(out + "/s.json");
  const double weights = sum["plan"]["device"]["categories"]["weights"]["measured"].get<double>();
  EXPECT_EQ(numbers(attribute_near(html, "data-bar=\"device measured\" data-category=\"weights\"", "data-value")),
            std::vector<double>{weights});
  expect_clean_failure("report '" + out + "/nope'", "no metrics.jsonl");
}

// Skipped steps and ends of epochs are marked on the charts over steps; a metrics.jsonl of an
// older run (no transfers, no checkpoint lines) still draws, saying what it lacks.
TEST(serve_report, SkippedStepsAndEpochsAreMarked) {
  const std::string out = scratch("report_marks");
  fs::create_directories(out + "/run");
  std::ofstream(out + "/run/metrics.jsonl")
      << "{\"step\":2,\"loss\":0.7,\"samples_per_s\":10,\"loss_scale\":65536,\"skipped_steps\":0}\n"
      << "{\"step\":4,\"loss\":0.6,\"samples_per_s\":11,\"loss_scale\":32768,\"skipped_steps\":1}\n"
      << "{\"step\":4,\"epoch\":1,\"eval\":{\"precision_at_1\":0.5}}\n"
      << "{\"step\":6,\"loss\":0.5,\"samples_per_s\":12,\"loss_scale\":8192,\"skipped_steps\":3}\n";
  const RunResult r = run_cli("report '" + out + "/run' --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = slurp(out + "/run/report.html");
  const size_t loss_at = html.find("id=\"chart-loss\"");
  const std::string loss_chart = html.substr(loss_at, html.find("</svg>", loss_at) - loss_at);
  std::vector<std::string> kinds;
  for (size_t at = loss_chart.find("data-kind=\""); at != std::string::npos; at = loss_chart.find("data-kind=\"", at + 1)) {
    const size_t step = loss_chart.find("data-step=\"", at) + 11;  // markers: data-kind, then data-step
    kinds.push_back(loss_chart.substr(at + 11, loss_chart.find('"', at + 11) - at - 11) + "@" +
                    loss_chart.substr(step, loss_chart.find('"', step) - step));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"skipped@4", "epoch@4", "skipped@6"}));
  EXPECT_EQ(numbers(attribute_near(html, "data-series=\"loss_scale\"", "data-values")), (std::vector<double>{65536, 32768, 8192}));
  EXPECT_NE(html.find("<th class=\"l\">P@1</th><td>0.5</td>"), std::string::npos);  // one evaluation: a number, no chart
  EXPECT_EQ(html.find("id=\"chart-eval\""), std::string::npos);
  EXPECT_NE(html.find("metrics.jsonl records no transfers"), std::string::npos);
  EXPECT_NE(html.find("no checkpoint in metrics.jsonl"), std::string::npos);
  std::ofstream(out + "/run/metrics.jsonl", std::ios::app) << "not json\n";
  expect_clean_failure("report '" + out + "/run'", "metrics.jsonl line 5 is not a JSON object");
}

// Several runs on one page: one line per run on every chart, a column per run; --summary once
// per run.
TEST(serve_report, SeveralRunsOnOnePage) {
  const std::string out = scratch("report_several");
  for (const char* name : {"a", "b"}) {
    fs::create_directories(out + "/" + name);
    std::ofstream(out + "/" + name + "/metrics.jsonl") << "{\"step\":2,\"loss\":0.7,\"samples_per_s\":10}\n"
                                                      << "{\"step\":4,\"loss\":0.6,\"samples_per_s\":11}\n";
    std::ofstream(out + "/" + name + ".json") << "{\"steps\":4,\"config\":{\"row_dtype\":\"" << (name[0] == 'a' ? "fp32" : "bf16") << "\"}}";
  }
  const RunResult r = run_cli("report '" + out + "/a' '" + out + "/b' --summary '" + out + "/a.json' --summary '" + out + "/b.json'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("compare.html"), std::string::npos) << r.out;
  const std::string html = slurp(out + "/a/compare.html");
  EXPECT_NE(html.find("data-series=\"a\""), std::string::npos);
  EXPECT_NE(html.find("data-series=\"b\""), std::string::npos);
  EXPECT_NE(html.find("<th class=\"l\">row_dtype</th>"), std::string::npos);
  // Each --summary takes one file: a RUN_DIR may follow it.
  const RunResult mixed = run_cli("report '" + out + "/a' --summary '" + out + "/a.json' '" + out + "/b' --summary '" + out +
                                  "/b.json' --output '" + out + "/mixed.html'");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  EXPECT_NE(slurp(out + "/mixed.html").find("data-series=\"b\""), std::string::npos);
  expect_clean_failure("report '" + out + "/a' '" + out + "/b' --summary '" + out + "/a.json'", "give one per RUN_DIR");
}

// plan --html writes the page beside the usual output (also when nothing fits, exit 3); not
// with --largest-table.
TEST(serve_report, PlanHtmlWritesThePage) {
  const std::string out = scratch("plan_html");
  const std::string seed = "plan --vocab 1000000 --dim 512 --batch 4096 --seq-len 2048 --optimizer adam";
  const RunResult r = run_cli(seed + " --preset ascend-910a --html '" + out + "/plan.html'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| category "), std::string::npos);  // the text table as before
  const std::string html = slurp(out + "/plan.html");
  for (const char* part : {"id=\"chart-plan\"", "data-bar=\"naive (device)\"", "data-bar=\"plan (device)\"", "data-fits=\"true\""})
    EXPECT_NE(html.find(part), std::string::npos) << part;
  const RunResult none = run_cli(seed + " --preset cpu:64MiB --no-host --html '" + out + "/none.html'");
  EXPECT_EQ(none.exit_code, 3) << none.err;
  EXPECT_NE(slurp(out + "/none.html").find("data-fits=\"false\""), std::string::npos);
  expect_clean_failure(seed + " --largest-table --html '" + out + "/x.html'", "not with --largest-table");
}

}  // namespace
}  // namespace leanemb::testing_cli
