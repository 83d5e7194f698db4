// Test helpers shared by the row cache's tests (cache_test.cc, row_cache_test.cc).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace leanemb::tiered::testing_util {

// A scratch directory on a real disk (O_DIRECT needs one), removed at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("LEANEMB_TEST_TMPDIR");
    path_ = std::filesystem::path(base ? base : "/tmp") / ("leanemb-cache-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace leanemb::tiered::testing_util
