// Test helpers for data_test (tests only): a per-process scratch directory, small files, a
// reader over them, and reading a whole stream of batches.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "data/reader.h"

namespace leanemb::data::testing_util {

// A directory unique to this process and test, removed on destruction (CTest runs the tests of
// one binary as parallel processes).
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : std::string("x");
    for (char& c : name)
      if (c == '/') c = '_';  // parameterized tests are named "Prefix/Suite.Name/3"
    static int count = 0;  // several directories in one test
    path_ = ::testing::TempDir() + "leanemb_data_" + std::to_string(::getpid()) + "_" + name + "_" + std::to_string(count++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to name and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(file(name), std::ios::binary) << content;
    return file(name);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A schema of num_dense / num_sparse features, all tables of `rows` rows, max_len for all.
inline DataSchema schema(int num_dense, int num_sparse, int64_t rows = 1000, int64_t max_len = 0) {
  const int64_t r[1] = {rows};
  return make_schema(num_dense, num_sparse, r, max_len).value();
}

// Reader options over `files` that collect warnings in *warnings (or drop them) instead of
// printing, and never fail on the malformed rate unless the test sets it.
inline ReaderOptions options(std::vector<std::string> files, DataSchema s, int64_t batch_size,
                             std::vector<std::string>* warnings = nullptr) {
  ReaderOptions o;
  o.files = std::move(files);
  o.schema = std::move(s);
  o.batch_size = batch_size;
  o.malformed.max_rate = 1.0;
  o.malformed.warn = [warnings](const std::string& w) {
    if (warnings) warnings->push_back(w);
  };
  return o;
}

inline std::unique_ptr<DataReader> open_reader(ReaderOptions o) {
  auto r = DataReader::open(std::move(o));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Up to max_batches batches (all when < 0); stops at the end or at an error (then *error).
inline std::vector<Batch> read_batches(DataReader* reader, int64_t max_batches = -1, Status* error = nullptr) {
  std::vector<Batch> out;
  Batch b;
  while (max_batches < 0 || static_cast<int64_t>(out.size()) < max_batches) {
    auto got = reader->next(&b);
    if (!got.ok()) {
      if (error) *error = got.status();
      else ADD_FAILURE() << got.status().to_string();
      break;
    }
    if (!got.value()) break;
    out.push_back(b);
  }
  return out;
}

}  // namespace leanemb::data::testing_util
