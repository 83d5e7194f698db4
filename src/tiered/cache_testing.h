// Test helpers shared by the row cache's tests (cache_test.cc, row_cache_test.cc).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace leanemb::tiered::testing_util {

// A new directory "<base>/<prefix>XXXXXX" made by mkdtemp, on a real disk (O_DIRECT needs one):
// base is $LEANEMB_TEST_TMPDIR or /tmp. Unique even where an earlier run left a directory of a
// process with the same id behind (a name of the pid alone then made the test fail). Aborts
// when it cannot be made.
inline std::string make_scratch_dir(const std::string& prefix) {
  const char* base = std::getenv("LEANEMB_TEST_TMPDIR");
  std::string tmpl = (std::filesystem::path(base ? base : "/tmp") / (prefix + "XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  return tmpl;
}

// A scratch directory (make_scratch_dir), removed at the end.
class TempDir {
 public:
  TempDir() : path_(make_scratch_dir("leanemb-cache-test-")) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace leanemb::tiered::testing_util
