// Tests of the TSV reader: the malformed-line matrix and rate limit, empty fields, multi-hot
// truncation, categorical hashing, jagged batches, batch reuse, shuffling and epochs, and
// save/restore exactness.
#include <gtest/gtest.h>

#include <chrono>
#include <xxhash.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "data/reader.h"
#include "leanemb/ctr_reader.h"
#include "leanemb/embedding.h"

namespace leanemb::data {
namespace {

using testing_util::open_reader;
using testing_util::options;
using testing_util::read_batches;
using testing_util::schema;
using testing_util::ScratchDir;

// A line of the 2-dense, 3-sparse schema used below.
std::string line(const std::string& label, const std::string& i1, const std::string& i2, const std::string& c1,
                 const std::string& c2, const std::string& c3) {
  return label + "\t" + i1 + "\t" + i2 + "\t" + c1 + "\t" + c2 + "\t" + c3 + "\n";
}

// n good lines with distinct values: line i (from `first`) has label 1 when i % 3 == 0, dense
// (i, 2i) and one categorical value per field derived from i.
std::string good_lines(int n, int first = 0) {
  std::string s;
  for (int i = first; i < first + n; ++i) {
    char h[3][20];
    for (int c = 0; c < 3; ++c) std::snprintf(h[c], sizeof h[c], "%08x", i * 7919 + c * 104729);
    s += line(i % 3 == 0 ? "1" : "0", std::to_string(i), std::to_string(2 * i), h[0], h[1], h[2]);
  }
  return s;
}

uint64_t expected_hash(uint64_t value, int feature) { return XXH3_64bits_withSeed(&value, 8, static_cast<uint64_t>(feature)); }

// ---- malformed lines --------------------------------------------------------------------------

struct MalformedCase {
  const char* name;
  std::string line;
  MalformedKind kind;
};

// Each kind of malformed line is skipped, counted under its kind, and reported with its file and
// line number; the good lines around it are read.
TEST(DataTsvMalformedTest, EachKindIsCountedWithItsLineNumber) {
  const MalformedCase cases[] = {
      {"too_few", "1\t2\t3\taa\tbb\n", MalformedKind::kFieldCount},
      {"too_many", line("1", "2", "3", "aa", "bb", "cc\tdd"), MalformedKind::kFieldCount},
      {"empty_line", "\n", MalformedKind::kFieldCount},
      {"label_text", line("yes", "2", "3", "aa", "bb", "cc"), MalformedKind::kBadLabel},
      {"label_empty", line("", "2", "3", "aa", "bb", "cc"), MalformedKind::kBadLabel},
      {"label_two", line("2", "2", "3", "aa", "bb", "cc"), MalformedKind::kLabelNotBinary},
      {"dense_text", line("0", "x1", "3", "aa", "bb", "cc"), MalformedKind::kBadDense},
      {"dense_nan", line("0", "2", "nan", "aa", "bb", "cc"), MalformedKind::kBadDense},
      {"hex_bad", line("0", "2", "3", "zz", "bb", "cc"), MalformedKind::kBadHex},
      {"hex_too_long", line("0", "2", "3", "aa", "0123456789abcdef0", "cc"), MalformedKind::kBadHex},
      {"hex_empty_item", line("0", "2", "3", "aa", "bb", "cc,,dd"), MalformedKind::kBadHex},
  };
  for (const MalformedCase& c : cases) {
    ScratchDir dir;
    const std::string path = dir.write(std::string(c.name) + ".tsv", good_lines(2) + c.line + good_lines(3, 2));
    std::vector<std::string> warnings;
    auto reader = open_reader(options({path}, schema(2, 3), 100, &warnings));
    const auto batches = read_batches(reader.get());
    ASSERT_EQ(batches.size(), 1u) << c.name;
    EXPECT_EQ(batches[0].batch_size, 5) << c.name;
    const DataStats& st = reader->stats();
    EXPECT_EQ(st.lines, 6) << c.name;
    EXPECT_EQ(st.malformed, 1) << c.name;
    EXPECT_EQ(st.malformed_by_kind[static_cast<size_t>(c.kind)], 1) << c.name << " counted as another kind";
    ASSERT_EQ(warnings.size(), 1u) << c.name;
    EXPECT_NE(warnings[0].find(path + ":3: "), std::string::npos) << c.name << ": " << warnings[0];
    EXPECT_EQ(st.first_malformed.rfind(path + ":3: ", 0), 0u) << c.name;
  }
}

// Empty dense fields read as 0 and empty categorical fields as empty bags; they are not malformed.
TEST(DataTsvMalformedTest, EmptyFieldsAreValid) {
  ScratchDir dir;
  const std::string path = dir.write("empty.tsv", line("1", "", "7", "", "a", ""));
  auto reader = open_reader(options({path}, schema(2, 3), 4));
  const auto b = read_batches(reader.get());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(reader->stats().malformed, 0);
  EXPECT_EQ(b[0].dense, (std::vector<float>{0.0f, static_cast<float>(std::log1p(7.0))}));
  EXPECT_EQ(b[0].sparse[0].offsets, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(b[0].sparse[1].offsets, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(b[0].sparse[2].offsets, (std::vector<int64_t>{0, 0}));
}

// Negative dense values clamp to 0 before log1p; decimals and "\r\n" endings are accepted, and a
// last line without "\n" is read.
TEST(DataTsvMalformedTest, DenseTransformAndLineEndings) {
  ScratchDir dir;
  const std::string path = dir.write("ends.tsv", "0\t-5\t2.5\ta\tb\tc\r\n1\t3\t0\ta\tb\tc");
  auto reader = open_reader(options({path}, schema(2, 3), 4));
  const auto b = read_batches(reader.get());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].labels, (std::vector<float>{0.0f, 1.0f}));
  EXPECT_EQ(b[0].dense, (std::vector<float>{0.0f, static_cast<float>(std::log1p(2.5)), static_cast<float>(std::log1p(3.0)), 0.0f}));
  EXPECT_EQ(reader->stats().malformed, 0);
}

// Above max_malformed_rate reading fails with a message naming the file, the line, the rate and
// the first malformed line; below it reading succeeds.
TEST(DataTsvMalformedTest, RateAboveLimitFailsWithFileLineAndRate) {
  ScratchDir dir;
  std::string bad_every_100;
  for (int i = 0; i < 20; ++i) bad_every_100 += good_lines(99, i * 99) + "junk\n";
  const std::string path = dir.write("bad.tsv", bad_every_100);
  auto o = options({path}, schema(2, 3), 256);
  o.malformed.max_rate = 0.001;
  o.malformed.min_lines = 1000;
  Status error;
  auto reader = open_reader(o);
  read_batches(reader.get(), -1, &error);
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  // Lines of ~6 bytes: the verdict is certain before the end (no remaining byte could save it).
  EXPECT_NE(error.message().find(path + " line "), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("malformed-line rate 0.01 ("), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("exceeds max_malformed_rate 0.001"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find(path + ":100: "), std::string::npos) << error.message();
  Batch b;
  EXPECT_EQ(reader->next(&b).status().code(), StatusCode::kInvalidArgument) << "errors are sticky";

  o.malformed.max_rate = 0.02;
  auto lenient = open_reader(o);
  Status ok;
  read_batches(lenient.get(), -1, &ok);
  EXPECT_TRUE(ok.ok()) << ok.to_string();
  EXPECT_EQ(lenient->stats().malformed, 20);
}

// The verdict does not depend on where the bad lines sit or on the order of the files: 10 bad
// lines in 4010 (0.25%) pass at max rate 0.003 and fail at 0.002 whether they come first, in the
// middle or last, in one file or another (before the fix, bad lines early failed and late passed).
TEST(DataTsvMalformedTest, VerdictIsIndependentOfPositionAndFileOrder) {
  ScratchDir dir;
  std::string junk;
  for (int i = 0; i < 10; ++i) junk += "junk\n";
  const std::string good = dir.write("good.tsv", good_lines(2000));
  const std::string early = dir.write("early.tsv", junk + good_lines(2000, 7));
  const std::string mid = dir.write("mid.tsv", good_lines(1000, 7) + junk + good_lines(1000, 9));
  const std::string late = dir.write("late.tsv", good_lines(2000, 7) + junk);
  for (double rate : {0.003, 0.002}) {
    for (const std::vector<std::string>& files : std::vector<std::vector<std::string>>{
             {early, good}, {good, early}, {mid, good}, {good, mid}, {late, good}, {good, late}}) {
      auto o = options(files, schema(2, 3), 256);
      o.malformed.max_rate = rate;
      o.malformed.min_lines = 100;
      o.malformed.max_warnings = 0;
      Status st;
      auto reader = open_reader(o);
      read_batches(reader.get(), -1, &st);
      EXPECT_EQ(st.ok(), rate > 0.0025) << "rate " << rate << ", files " << files[0] << " " << files[1] << ": " << st.to_string();
    }
  }
}

// A file that is mostly malformed fails before the pass ends, once no remaining byte could save it.
TEST(DataTsvMalformedTest, HopelessInputFailsEarly) {
  ScratchDir dir;
  std::string junk;
  for (int i = 0; i < 3000; ++i) junk += "junk\n";
  const std::string path = dir.write("junk.tsv", junk + good_lines(10));
  auto o = options({path}, schema(2, 3), 4);
  o.malformed.max_rate = 0.5;
  o.malformed.max_warnings = 0;
  Status error;
  auto reader = open_reader(o);
  read_batches(reader.get(), -1, &error);
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(error.message().find(path + " line "), std::string::npos) << error.message();
  EXPECT_EQ(error.message().find("the whole input"), std::string::npos) << error.message();
}

// A small file is judged at its end even below min_lines.
TEST(DataTsvMalformedTest, SmallFileIsJudgedAtItsEnd) {
  ScratchDir dir;
  const std::string path = dir.write("small.tsv", good_lines(9) + "junk\n");
  auto o = options({path}, schema(2, 3), 4);
  o.malformed.max_rate = 0.05;
  auto reader = open_reader(o);
  Status error;
  read_batches(reader.get(), -1, &error);
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(error.message().find("(1 of 10 lines)"), std::string::npos) << error.message();
}

// ---- values -----------------------------------------------------------------------------------

// Multi-hot fields keep their first max_len values; the dropped ones are counted.
TEST(DataTsvValuesTest, MultiHotFieldIsTruncatedToMaxLen) {
  ScratchDir dir;
  const std::string path = dir.write("mh.tsv", line("1", "1", "1", "a,b,c,d", "e", "f,1") + line("0", "", "", "9", "", "2,3,4"));
  auto reader = open_reader(options({path}, schema(2, 3, 1000, /*max_len=*/2), 8));
  const auto b = read_batches(reader.get());
  ASSERT_EQ(b.size(), 1u);
  const int64_t rows = 1000;
  auto id = [&](uint64_t v, int f) { return static_cast<int64_t>(expected_hash(v, f) % rows); };
  EXPECT_EQ(b[0].sparse[0].ids, (std::vector<int64_t>{id(0xa, 0), id(0xb, 0), id(0x9, 0)}));
  EXPECT_EQ(b[0].sparse[0].offsets, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(b[0].sparse[2].ids, (std::vector<int64_t>{id(0xf, 2), id(0x1, 2), id(0x2, 2), id(0x3, 2)}));
  EXPECT_EQ(reader->stats().truncated_values, 3);
}

// Ids are XXH3-64 of the value's 8 little-endian bytes seeded with the feature index, modulo the
// feature's table rows; hex case and leading zeros do not matter; kRaw keeps the whole hash.
TEST(DataTsvValuesTest, CategoricalIdsAreSeededHashesOfTheValue) {
  ScratchDir dir;
  const std::string path = dir.write("h.tsv", line("1", "", "", "68fd1e64", "00068FD1E64", "68fd1e64"));
  const int64_t rows[3] = {1000, 77, 1 << 20};
  auto reader = open_reader(options({path}, make_schema(2, 3, rows).value(), 1));
  const auto b = read_batches(reader.get());
  ASSERT_EQ(b.size(), 1u);
  for (int f = 0; f < 3; ++f)
    EXPECT_EQ(b[0].sparse[static_cast<size_t>(f)].ids, std::vector<int64_t>{static_cast<int64_t>(expected_hash(0x68fd1e64, f) % static_cast<uint64_t>(rows[f]))});
  EXPECT_NE(expected_hash(0x68fd1e64, 0), expected_hash(0x68fd1e64, 2)) << "features hash differently";

  auto raw = open_reader(options({path}, make_schema(2, 3, rows, 0, IdMode::kRaw).value(), 1));
  const auto r = read_batches(raw.get());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(static_cast<uint64_t>(r[0].sparse[1].ids[0]), expected_hash(0x68fd1e64, 1));
  // The same value always gives the same id (determinism across readers).
  EXPECT_EQ(read_batches(open_reader(options({path}, make_schema(2, 3, rows).value(), 1)).get()), b);
}

// The multiply-based IdMapper equals hash % num_rows for every divisor size, including 1, powers
// of two, values around 2^32 and 2^63 - 1; kRaw passes the hash through.
TEST(DataTsvValuesTest, IdMapperEqualsModulo) {
  const int64_t rows[] = {1, 2, 3, 7, 1000, 1 << 20, (int64_t{1} << 32) - 1, (int64_t{1} << 32) + 1,
                          (int64_t{1} << 40) + 7, INT64_MAX, 0x5851f42d4c957f2d};
  const IdMapper mapper(make_schema(0, static_cast<int>(std::size(rows)), rows).value());
  uint64_t h = 0x243f6a8885a308d3ull;
  for (int i = 0; i < 20000; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t hash = i < 4 ? std::vector<uint64_t>{0, 1, ~uint64_t{0}, uint64_t{1} << 63}[static_cast<size_t>(i)] : h;
    for (size_t f = 0; f < std::size(rows); ++f)
      ASSERT_EQ(mapper(f, hash), map_id(hash, IdMode::kModulo, rows[f])) << "hash " << hash << " rows " << rows[f];
  }
  const IdMapper raw(make_schema(0, 1, {}, 0, IdMode::kRaw).value());
  EXPECT_EQ(raw(0, ~uint64_t{0}), -1);
}

// Batches are jagged in EmbeddingBag convention (offsets [B+1], no padding) and their
// SparseBatch view passes EmbeddingCollection's validation.
TEST(DataTsvValuesTest, JaggedBatchFollowsEmbeddingBagConvention) {
  ScratchDir dir;
  const std::string path = dir.write("j.tsv", line("1", "1", "2", "a,b", "", "c") + line("0", "3", "4", "", "d", "e,f,1") +
                                                  line("1", "5", "6", "2", "3", ""));
  const DataSchema s = schema(2, 3, 50);
  auto reader = open_reader(options({path}, s, 3));
  const auto b = read_batches(reader.get());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].batch_size, 3);
  EXPECT_EQ(b[0].labels, (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(b[0].dense.size(), 6u);
  EXPECT_EQ(b[0].dense[3], static_cast<float>(std::log1p(4.0))) << "row-major [B, num_dense]";
  EXPECT_EQ(b[0].sparse[0].offsets, (std::vector<int64_t>{0, 2, 2, 3}));
  EXPECT_EQ(b[0].sparse[1].offsets, (std::vector<int64_t>{0, 0, 1, 2}));
  EXPECT_EQ(b[0].sparse[2].offsets, (std::vector<int64_t>{0, 1, 4, 4}));
  const SparseBatch view = b[0].sparse_batch();
  ASSERT_EQ(view.features.size(), 3u);
  EXPECT_EQ(view.batch_size, 3);
  EXPECT_EQ(view.features[2].ids.data(), b[0].sparse[2].ids.data()) << "a view, not a copy";

  CollectionOptions co;
  const char* names[3][2] = {{"t0", "f0"}, {"t1", "f1"}, {"t2", "f2"}};
  for (int f = 0; f < 3; ++f) {
    TableOptions t;
    t.name = names[f][0];
    t.num_rows = 50;
    t.dim = 4;
    co.tables.push_back(t);
    co.features.push_back({names[f][1], f, PoolingMode::kSum});
  }
  auto coll = EmbeddingCollection::create(co);
  ASSERT_TRUE(coll.ok()) << coll.status().to_string();
  EXPECT_TRUE((*coll)->validate(view).ok());
}

// A reused Batch keeps its buffers: after the first batch no vector is reallocated.
TEST(DataTsvValuesTest, ReusedBatchDoesNotReallocate) {
  ScratchDir dir;
  const std::string path = dir.write("r.tsv", good_lines(100));
  auto o = options({path}, schema(2, 3), 10);
  o.num_epochs = 3;
  auto reader = open_reader(o);
  Batch b;
  ASSERT_TRUE(reader->next(&b).value());
  const float* labels = b.labels.data();
  const float* dense = b.dense.data();
  const int64_t* ids = b.sparse[2].ids.data();
  const int64_t* offsets = b.sparse[0].offsets.data();
  for (int i = 0; i < 29; ++i) {
    ASSERT_TRUE(reader->next(&b).value());
    ASSERT_EQ(b.labels.data(), labels);
    ASSERT_EQ(b.dense.data(), dense);
    ASSERT_EQ(b.sparse[2].ids.data(), ids);
    ASSERT_EQ(b.sparse[0].offsets.data(), offsets);
  }
}

// ---- shuffle and epochs -----------------------------------------------------------------------

// The first dense value identifies a record of good_lines (log1p(i)); the order of a stream.
std::vector<int> order_of(const std::vector<Batch>& batches) {
  std::vector<int> out;
  for (const Batch& b : batches)
    for (int64_t i = 0; i < b.batch_size; ++i)
      out.push_back(static_cast<int>(std::lround(std::expm1(static_cast<double>(b.dense[static_cast<size_t>(2 * i)])))));
  return out;
}

std::vector<Batch> read_all(const std::string& path, int64_t shuffle, uint64_t seed, int64_t epochs, int64_t batch = 16) {
  auto o = options({path}, schema(2, 3), batch);
  o.shuffle_buffer = shuffle;
  o.seed = seed;
  o.num_epochs = epochs;
  return read_batches(open_reader(o).get());
}

// Without a shuffle buffer records come in file order; the last batch of each epoch is short.
TEST(DataShuffleTest, NoShuffleKeepsFileOrderAndShortLastBatch) {
  ScratchDir dir;
  const std::string path = dir.write("s.tsv", good_lines(50));
  const auto b = read_all(path, 0, 1, 2);
  ASSERT_EQ(b.size(), 8u);  // 16+16+16+2 per epoch
  EXPECT_EQ(b[3].batch_size, 2);
  EXPECT_EQ(b[3].epoch, 0);
  EXPECT_EQ(b[4].epoch, 1);
  std::vector<int> want(50);
  for (int i = 0; i < 50; ++i) want[static_cast<size_t>(i)] = i;
  want.insert(want.end(), want.begin(), want.end());
  EXPECT_EQ(order_of(b), want);
}

// The same seed gives the same order; another seed another order; every epoch is a permutation
// of the file, and epochs are shuffled differently.
TEST(DataShuffleTest, SeededShuffleIsDeterministicPerEpoch) {
  ScratchDir dir;
  const std::string path = dir.write("s.tsv", good_lines(200));
  const auto a = order_of(read_all(path, 32, 7, 2));
  EXPECT_EQ(a, order_of(read_all(path, 32, 7, 2)));
  EXPECT_NE(a, order_of(read_all(path, 32, 8, 2)));
  ASSERT_EQ(a.size(), 400u);
  std::vector<int> e0(a.begin(), a.begin() + 200), e1(a.begin() + 200, a.end());
  EXPECT_NE(e0, e1) << "epoch number is part of the seed";
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(e0, e1);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(e0[static_cast<size_t>(i)], i);
}

// drop_last drops the short batch of every epoch; num_epochs = 0 loops forever.
TEST(DataShuffleTest, DropLastAndEndlessEpochs) {
  ScratchDir dir;
  const std::string path = dir.write("s.tsv", good_lines(50));
  auto o = options({path}, schema(2, 3), 16);
  o.drop_last = true;
  o.num_epochs = 0;
  auto reader = open_reader(o);
  const auto b = read_batches(reader.get(), 10);
  ASSERT_EQ(b.size(), 10u);
  for (const Batch& x : b) EXPECT_EQ(x.batch_size, 16);
  EXPECT_EQ(b[9].epoch, 3);
  EXPECT_EQ(reader->epoch(), 3);
}

// An epoch without records is an error, not an endless loop.
TEST(DataShuffleTest, EmptyInputIsAnError) {
  ScratchDir dir;
  const std::string path = dir.write("e.tsv", "");
  auto o = options({path}, schema(2, 3), 4);
  o.num_epochs = 0;
  Batch b;
  EXPECT_EQ(open_reader(o)->next(&b).status().code(), StatusCode::kInvalidArgument);
}

// "epoch N has no valid records" names the files read (issue 37 item 10): a run of many files
// must say which ones held nothing.
TEST(DataShuffleTest, EpochWithoutRecordsNamesTheFiles) {
  ScratchDir dir;
  const std::string a = dir.write("only_garbage.tsv", "garbage line\nmore garbage\n");
  const std::string b = dir.write("empty.tsv", "");
  Batch batch;
  const Status s = open_reader(options({a, b}, schema(2, 3), 4))->next(&batch).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("epoch 0 has no valid records in '" + a + "', '" + b + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2 malformed"), std::string::npos) << s.message();
}

// A data file that changes during a run (it shrank, grew or was rewritten between epochs) is
// DataLoss naming it at the next epoch end, instead of a silently different epoch.
TEST(DataShuffleTest, FileChangedDuringTheRunIsNamedAtTheEpochEnd) {
  for (const char* how : {"shrank", "grew", "modified"}) {
    SCOPED_TRACE(how);
    ScratchDir dir;
    const std::string path = dir.write("d.tsv", good_lines(40));
    auto o = options({path}, schema(2, 3), 8);
    o.num_epochs = 3;
    auto reader = open_reader(o);
    ASSERT_EQ(read_batches(reader.get(), 2).size(), 2u);  // epoch 0 under way
    const std::string now = std::string(how) == "shrank" ? good_lines(20) : std::string(how) == "grew" ? good_lines(60) : good_lines(40, 1000);
    dir.write("d.tsv", now);
    if (std::string(how) == "modified") {  // same size, a later time stamp
      const auto t = std::filesystem::last_write_time(path);
      std::filesystem::last_write_time(path, t + std::chrono::seconds(5));
    }
    Status error;
    read_batches(reader.get(), -1, &error);
    EXPECT_EQ(error.code(), StatusCode::kDataLoss);
    EXPECT_NE(error.message().find("data file '" + path + "' changed during the run"), std::string::npos) << error.message();
    if (std::string(how) != "modified") {
      EXPECT_NE(error.message().find(how), std::string::npos) << error.message();
    }
  }
}

// ---- save / restore ---------------------------------------------------------------------------

struct ResumeCase {
  int64_t shuffle;
  int k, m;  // batches before saving, batches compared after
};
void PrintTo(const ResumeCase& c, std::ostream* os) { *os << "shuffle " << c.shuffle << ", k " << c.k << ", m " << c.m; }

class DataResumeTest : public ::testing::TestWithParam<ResumeCase> {};

// A reader restored from a saved state returns exactly the batches (and statistics) the original
// returns after the save, across epoch boundaries and with or without shuffling.
TEST_P(DataResumeTest, RestoredReaderContinuesIdentically) {
  const ResumeCase c = GetParam();
  ScratchDir dir;
  const std::string a = dir.write("a.tsv", good_lines(70) + "junk\n" + good_lines(30, 70));
  const std::string b = dir.write("b.tsv", good_lines(45, 100));
  auto o = options({a, b}, schema(2, 3, 97, 1), 16);
  o.shuffle_buffer = c.shuffle;
  o.seed = 3;
  o.num_epochs = 0;
  auto first = open_reader(o);
  read_batches(first.get(), c.k);
  const std::vector<uint8_t> state = first->save_state();
  const auto expected = read_batches(first.get(), c.m);

  auto second = open_reader(o);
  ASSERT_TRUE(second->restore_state(state).ok());
  EXPECT_EQ(read_batches(second.get(), c.m), expected);
  EXPECT_EQ(second->stats().lines, first->stats().lines);
  EXPECT_EQ(second->stats().malformed, first->stats().malformed);
  EXPECT_EQ(second->stats().first_malformed, first->stats().first_malformed);
}

INSTANTIATE_TEST_SUITE_P(ShuffleAndPositions, DataResumeTest,
                         ::testing::Values(ResumeCase{0, 0, 5}, ResumeCase{0, 3, 9}, ResumeCase{0, 9, 4},
                                           ResumeCase{7, 4, 12}, ResumeCase{64, 2, 10}, ResumeCase{64, 10, 10},
                                           ResumeCase{1000, 5, 8}),
                         [](const ::testing::TestParamInfo<ResumeCase>& i) {
                           return "shuffle" + std::to_string(i.param.shuffle) + "_k" + std::to_string(i.param.k) +
                                  "_m" + std::to_string(i.param.m);
                         });

// A reader over 40 lines that has read 2 batches of 8, and its saved state.
struct SavedState {
  ScratchDir dir;
  ReaderOptions o;
  std::unique_ptr<DataReader> reader;
  std::vector<uint8_t> state;
  SavedState() : o(options({dir.write("a.tsv", good_lines(40))}, schema(2, 3), 8)), reader(open_reader(o)) {
    read_batches(reader.get(), 2);
    state = reader->save_state();
  }
};

// A state saved by a reader with other options, or damaged bytes, are refused.
TEST(DataResumeErrorsTest, ForeignOrCorruptStateIsRejected) {
  SavedState saved;
  auto& [dir, o, reader, state] = saved;
  o.seed = 99;
  EXPECT_EQ(open_reader(o)->restore_state(state).code(), StatusCode::kInvalidArgument);
  state[20] ^= 1;
  EXPECT_EQ(reader->restore_state(state).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reader->restore_state(std::vector<uint8_t>{1, 2, 3}).code(), StatusCode::kInvalidArgument);
}

// A well-formed state of another format version is refused with a message naming both versions.
TEST(DataResumeErrorsTest, StateOfAnotherVersionNamesTheVersions) {
  SavedState saved;
  auto& [dir, o, reader, state] = saved;
  const uint32_t old_version = 1;
  std::memcpy(state.data() + 8, &old_version, 4);  // after the 8-byte magic
  const uint64_t sum = XXH3_64bits(state.data(), state.size() - 8);
  std::memcpy(state.data() + state.size() - 8, &sum, 8);
  const Status s = open_reader(o)->restore_state(state);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("format version 1, this build reads version 2"), std::string::npos) << s.message();
}

// Restoring a position past the end of a file that has since shrunk is DataLoss.
TEST(DataResumeErrorsTest, ShrunkInputIsDataLoss) {
  ScratchDir dir;
  const std::string path = dir.write("a.tsv", good_lines(40));
  auto o = options({path}, schema(2, 3), 8);
  auto reader = open_reader(o);
  read_batches(reader.get(), 4);
  const std::vector<uint8_t> state = reader->save_state();
  dir.write("a.tsv", good_lines(20));
  EXPECT_EQ(open_reader(o)->restore_state(state).code(), StatusCode::kDataLoss);
}

// A state restored into a reader with fewer epochs than its position returns no more batches.
TEST(DataResumeErrorsTest, RestoringPastTheLastEpochEndsTheStream) {
  ScratchDir dir;
  const std::string path = dir.write("a.tsv", good_lines(20));
  auto o = options({path}, schema(2, 3), 8);
  o.num_epochs = 3;
  auto reader = open_reader(o);
  read_batches(reader.get(), 7);  // 3 batches per epoch: into epoch 2
  o.num_epochs = 2;
  auto fewer = open_reader(o);
  ASSERT_TRUE(fewer->restore_state(reader->save_state()).ok());
  EXPECT_TRUE(read_batches(fewer.get()).empty());
}

// ---- options ----------------------------------------------------------------------------------

// Bad options and missing files fail at open with a message naming them.
TEST(DataReaderOptionsTest, BadOptionsAndMissingFilesFailAtOpen) {
  ScratchDir dir;
  const std::string path = dir.write("a.tsv", good_lines(4));
  auto o = options({path}, schema(2, 3), 0);
  EXPECT_EQ(DataReader::open(o).status().code(), StatusCode::kInvalidArgument);
  o.batch_size = 4;
  o.files = {dir.file("missing.tsv")};
  const Status s = DataReader::open(o).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("missing.tsv"), std::string::npos);
  o.files = {path};
  o.schema.sparse[1].num_rows = 0;
  EXPECT_EQ(DataReader::open(o).status().code(), StatusCode::kInvalidArgument);
}

// The public CtrReader (leanemb/ctr_reader.h) gives the DataReader's batches over make_schema's
// schema, shuffled and over epochs too, and ends with it.
TEST(CtrReaderTest, GivesTheDataReadersBatches) {
  ScratchDir dir;
  const std::string path = dir.write("ctr.tsv", good_lines(500));
  CtrReaderOptions co;
  co.files = {path};
  co.num_dense = 2;
  co.num_sparse = 3;
  co.table_rows = {7, 11, 13};
  co.batch_size = 64;
  co.shuffle_buffer = 100;
  co.seed = 5;
  co.num_epochs = 2;
  std::unique_ptr<CtrReader> ctr = CtrReader::open(co).value();
  ReaderOptions o = options({path}, make_schema(2, 3, co.table_rows).value(), 64);
  o.shuffle_buffer = 100;
  o.seed = 5;
  o.num_epochs = 2;
  std::unique_ptr<DataReader> reader = open_reader(o);
  Batch want;
  int batches = 0;
  while (reader->next(&want).value()) {
    ASSERT_TRUE(ctr->next().value());
    ASSERT_EQ(ctr->batch_size(), want.batch_size);
    EXPECT_TRUE(std::ranges::equal(ctr->labels(), want.labels));
    EXPECT_TRUE(std::ranges::equal(ctr->dense(), want.dense));
    ASSERT_EQ(ctr->num_sparse(), 3);
    for (int f = 0; f < 3; ++f) {
      EXPECT_TRUE(std::ranges::equal(ctr->ids(f), want.sparse[static_cast<size_t>(f)].ids)) << "feature " << f;
      EXPECT_TRUE(std::ranges::equal(ctr->offsets(f), want.sparse[static_cast<size_t>(f)].offsets)) << "feature " << f;
    }
    ++batches;
  }
  EXPECT_FALSE(ctr->next().value());
  EXPECT_EQ(batches, 16);  // 2 epochs of ceil(500 / 64) batches
}

// table_rows must hold one value or one per feature.
TEST(CtrReaderTest, RefusesTableRowsOfAnotherLength) {
  ScratchDir dir;
  CtrReaderOptions co;
  co.files = {dir.write("ctr.tsv", good_lines(10))};
  co.num_dense = 2;
  co.num_sparse = 3;
  co.table_rows = {7, 11};
  EXPECT_EQ(CtrReader::open(co).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leanemb::data
