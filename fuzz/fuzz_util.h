// Helpers of the libFuzzer harnesses (fuzz/*.cc; docs/testing in README, "Fuzzing").
//
// Each harness feeds arbitrary bytes to one reader and checks only what must hold for any input:
// no crash, no sanitizer report, no exception, and a Status (never an abort) for bad input. The
// fuzz build defines LEANEMB_FUZZING, under which block checksums that do not match are accepted
// (and a shard MANIFEST that differs from the one its sharded checkpoint recorded), so that
// mutated inputs reach the decoders behind the checksums.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace leanemb::fuzz {

// A per-process file in RAM (/dev/shm when it exists) holding `data`; the same path every call.
inline const std::string& write_input(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [suffix] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/leanemb_fuzz_" + std::to_string(getpid()) + suffix;
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace leanemb::fuzz
