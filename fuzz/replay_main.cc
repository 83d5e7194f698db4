// A main() for the harnesses outside the fuzz build: runs LLVMFuzzerTestOneInput once on every
// file of the directories (or files) given, so that the seed corpora and every input a fuzzer
// ever crashed on (fuzz/regressions/) are regression tests under the release and debug
// (ASan + UBSan) presets, with gcc, without libFuzzer. Prints the number of inputs run.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int n = 0;
  auto run = [&](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    ++n;
  };
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (!fs::exists(p)) continue;  // e.g. no regression inputs yet
    if (!fs::is_directory(p)) {
      run(p);
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) run(f);
  }
  std::printf("%d inputs ran without a failure\n", n);
  return n > 0 ? 0 : 1;
}
