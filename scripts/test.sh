#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice: optimized (release
# preset) and under AddressSanitizer + UndefinedBehaviorSanitizer (debug preset); then the tests
# of the code's own threads (allocators, the row cache's prefetch pipeline, the row stores' I/O,
# the local communicator's rank threads)
# under ThreadSanitizer (tsan preset: only those test programs are built); then the libFuzzer
# harnesses (fuzz preset, clang 14 + ASan + UBSan) for FUZZ_SECONDS each (default 20;
# scripts/fuzz.sh).
#   scripts/test.sh            all three presets and the fuzzers
#   scripts/test.sh release    one preset (fuzz: the fuzzers alone)
# The test-only packages (GoogleTest, Google Benchmark, clang, Chromium, fastText, ...) come from
# `scripts/install_deps.sh --tests`; the tests are configured ON here, so a missing GoogleTest is a
# configure error, not a build without tests (a plain `cmake --preset release` builds them only
# when GoogleTest is found). The release preset also builds and checks the .deb
# (tests/package_test.sh, CTest test `package`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
presets=("$@")
[[ ${#presets[@]} -eq 0 ]] && presets=(release debug tsan fuzz)
extra=()
# CI treats warnings as errors.
[[ "${CI:-}" == "true" ]] && extra+=(-DLEANEMB_WERROR=ON)
jobs=$(nproc 2>/dev/null || echo 2)
for p in "${presets[@]}"; do
  echo "=== preset $p ==="
  if [[ "$p" == fuzz ]]; then
    scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
    continue
  fi
  want=(-DLEANEMB_BUILD_TESTS=ON)
  [[ "$p" == release ]] && want+=(-DLEANEMB_BUILD_BENCHMARKS=ON)
  cmake --preset "$p" "${want[@]}" "${extra[@]}" >/dev/null
  if [[ "$p" == tsan ]]; then
    cmake --build --preset tsan -j "$jobs" --target device_arena_test memory_test cache_test store_test dist_test core_test
  else
    cmake --build --preset "$p" -j "$jobs"
  fi
  ctest --preset "$p" -j "$jobs"
done
