// Tests of the binary record format and `convert`: identical batches from TSV and binary (with
// shuffling, truncation and malformed lines), checksums, truncation, unfinished files, schema
// checks, and conversion failing cleanly on a bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/binary_format.h"
#include "leanemb/data_convert.h"
#include "data/data_testing.h"
#include "data/reader.h"

namespace leanemb::data {
namespace {

using testing_util::open_reader;
using testing_util::options;
using testing_util::read_batches;
using testing_util::schema;
using testing_util::ScratchDir;
using testing_util::slurp;

// A TSV of 2 dense and 3 sparse columns with multi-hot lists, empty fields, negative and decimal
// dense values and two malformed lines.
std::string mixed_tsv(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i == 17) s += "garbage line\n";
    if (i == 40) s += "1\t1\t2\tnothex\t\t\n";
    s += std::string(i % 4 == 0 ? "1" : "0") + "\t" + (i % 5 ? std::to_string(i - 3) : "") + "\t" + std::to_string(i) + ".5\t";
    for (int c = 0; c < 3; ++c) {
      const int len = (i + c) % 4;  // 0..3 values
      for (int k = 0; k < len; ++k) {
        char h[20];
        std::snprintf(h, sizeof h, "%x", (i * 31 + c * 7 + k) % 97);
        if (k) s += ',';
        s += h;
      }
      s += c < 2 ? "\t" : "\n";
    }
  }
  return s;
}

ConvertOptions convert_options(const std::string& in, const std::string& out) {
  ConvertOptions o;
  o.input = in;
  o.output = out;
  o.num_dense = 2;
  o.num_sparse = 3;
  o.malformed.max_rate = 1.0;
  o.malformed.warn = [](const std::string&) {};
  o.block_bytes = 256;  // many blocks
  return o;
}

// Converting a TSV and reading the binary file gives the same batches as reading the TSV, with
// shuffling, epochs and max_len; the converter's malformed count reaches the reader's stats.
TEST(DataBinaryFormatTest, TsvAndBinaryGiveIdenticalBatches) {
  ScratchDir dir;
  const std::string tsv = dir.write("d.tsv", mixed_tsv(300));
  const std::string bin = dir.file("d.bin");
  auto rep = convert_to_binary(convert_options(tsv, bin));
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->records, 300);
  EXPECT_EQ(rep->stats.malformed, 2);
  for (int64_t shuffle : {0, 50}) {
    auto o = options({tsv}, schema(2, 3, 61, /*max_len=*/2), 32);
    o.shuffle_buffer = shuffle;
    o.num_epochs = 2;
    const auto from_tsv = read_batches(open_reader(o).get());
    o.files = {bin};
    auto reader = open_reader(o);
    EXPECT_EQ(read_batches(reader.get()), from_tsv) << "shuffle " << shuffle;
    EXPECT_EQ(reader->stats().converted_malformed, 4) << "2 per epoch";
    EXPECT_EQ(reader->stats().records, 600);
    EXPECT_GT(reader->stats().truncated_values, 0);
  }
}

// TSV and binary files can be mixed in one reader.
TEST(DataBinaryFormatTest, MixedFormatsReadInFileOrder) {
  ScratchDir dir;
  const std::string tsv = dir.write("d.tsv", mixed_tsv(100));
  const std::string bin = dir.file("d.bin");
  ASSERT_TRUE(convert_to_binary(convert_options(tsv, bin)).ok());
  const auto both_tsv = read_batches(open_reader(options({tsv, tsv}, schema(2, 3), 64)).get());
  EXPECT_EQ(read_batches(open_reader(options({tsv, bin}, schema(2, 3), 64)).get()), both_tsv);
}

// A flipped payload byte is DataLoss naming the file and block.
TEST(DataBinaryFormatTest, CorruptBlockIsDataLossNamingFileAndBlock) {
  ScratchDir dir;
  const std::string bin = dir.file("d.bin");
  ASSERT_TRUE(convert_to_binary(convert_options(dir.write("d.tsv", mixed_tsv(100)), bin)).ok());
  std::string bytes = slurp(bin);
  bytes[kBinaryHeaderBytes + kBlockHeaderBytes + 5] ^= 0x10;  // inside block 0's payload
  dir.write("d.bin", bytes);
  Status error;
  read_batches(open_reader(options({bin}, schema(2, 3), 16)).get(), -1, &error);
  EXPECT_EQ(error.code(), StatusCode::kDataLoss);
  EXPECT_NE(error.message().find(bin), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("block 0 checksum mismatch"), std::string::npos) << error.message();
}

// A file cut short is DataLoss; a damaged header is refused at open.
TEST(DataBinaryFormatTest, TruncatedFileAndBadHeaderAreDataLoss) {
  ScratchDir dir;
  const std::string bin = dir.file("d.bin");
  ASSERT_TRUE(convert_to_binary(convert_options(dir.write("d.tsv", mixed_tsv(100)), bin)).ok());
  const std::string bytes = slurp(bin);
  dir.write("d.bin", bytes.substr(0, bytes.size() - 3));
  Status error;
  read_batches(open_reader(options({bin}, schema(2, 3), 16)).get(), -1, &error);
  EXPECT_EQ(error.code(), StatusCode::kDataLoss);
  EXPECT_NE(error.message().find("truncated"), std::string::npos) << error.message();

  std::string bad = bytes;
  bad[33] ^= 1;  // num_records, covered by the header checksum
  dir.write("d.bin", bad);
  EXPECT_EQ(DataReader::open(options({bin}, schema(2, 3), 16)).status().code(), StatusCode::kDataLoss);
}

// Two binary files joined with cat are refused naming the byte offset where the second starts
// (before, the reader stopped after the first file's blocks and ignored the rest); any other
// bytes after the last block are DataLoss naming their offset.
TEST(DataBinaryFormatTest, ConcatenatedFilesAndTrailingBytesAreRefusedAtTheirOffset) {
  ScratchDir dir;
  const std::string bin = dir.file("d.bin");
  ASSERT_TRUE(convert_to_binary(convert_options(dir.write("d.tsv", mixed_tsv(100)), bin)).ok());
  const std::string bytes = slurp(bin);
  const std::string at = "byte offset " + std::to_string(bytes.size());
  const std::string joined = dir.write("joined.bin", bytes + bytes);
  Status error;
  read_batches(open_reader(options({joined}, schema(2, 3), 16)).get(), -1, &error);
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(error.message().find(joined + ": another binary data file starts at " + at), std::string::npos) << error.message();
  for (const std::string& tail : {std::string("\n"), std::string(100, 'x')}) {
    const std::string bad = dir.write("tail.bin", bytes + tail);
    error = Status();
    read_batches(open_reader(options({bad}, schema(2, 3), 16)).get(), -1, &error);
    EXPECT_EQ(error.code(), StatusCode::kDataLoss);
    EXPECT_NE(error.message().find(std::to_string(tail.size()) + " bytes of trailing garbage at " + at), std::string::npos)
        << error.message();
  }
}

// A writer that never finishes leaves no file under the final name.
TEST(DataBinaryFormatTest, UnfinishedWriterLeavesNoFile) {
  ScratchDir dir;
  const std::string bin = dir.file("d.bin");
  {
    auto w = BinaryWriter::create(bin, 1, 1);
    ASSERT_TRUE(w.ok());
    Record r;
    r.dense = {1.0f};
    r.counts = {1};
    r.hashes = {42};
    ASSERT_TRUE((*w)->add(r).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(bin));
  EXPECT_FALSE(std::filesystem::exists(bin + ".tmp"));
}

// A binary file of another shape than the schema is refused at open, naming both shapes.
TEST(DataBinaryFormatTest, SchemaMismatchIsRejectedAtOpen) {
  ScratchDir dir;
  const std::string bin = dir.file("d.bin");
  ASSERT_TRUE(convert_to_binary(convert_options(dir.write("d.tsv", mixed_tsv(10)), bin)).ok());
  const Status s = DataReader::open(options({bin}, schema(3, 3), 16)).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("2 dense and 3 sparse"), std::string::npos) << s.message();
}

// Conversion above the malformed-rate limit fails and writes nothing.
TEST(DataConvertTest, TooManyMalformedLinesFailWithoutOutput) {
  ScratchDir dir;
  const std::string bin = dir.file("d.bin");
  auto o = convert_options(dir.write("d.tsv", mixed_tsv(50)), bin);
  o.malformed.max_rate = 0.01;
  const auto rep = convert_to_binary(o);
  EXPECT_EQ(rep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rep.status().message().find("exceeds max_malformed_rate"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(bin));
  EXPECT_FALSE(std::filesystem::exists(bin + ".tmp"));
}

}  // namespace
}  // namespace leanemb::data
