#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice: optimized (release
# preset) and under AddressSanitizer + UndefinedBehaviorSanitizer (debug preset).
#   scripts/test.sh            both presets
#   scripts/test.sh release    one preset
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
presets=("$@")
[[ ${#presets[@]} -eq 0 ]] && presets=(release debug)
extra=()
# CI treats warnings as errors.
[[ "${CI:-}" == "true" ]] && extra+=(-DLEANEMB_WERROR=ON)
jobs=$(nproc 2>/dev/null || echo 2)
for p in "${presets[@]}"; do
  echo "=== preset $p ==="
  cmake --preset "$p" "${extra[@]}" >/dev/null
  cmake --build --preset "$p" -j "$jobs"
  ctest --preset "$p" -j "$jobs"
done
