#!/usr/bin/env bash
# Installs the Debian 12 packages leanemb needs. Idempotent: packages already present are skipped,
# and apt is not touched at all when nothing is missing.
#   scripts/install_deps.sh            build + test dependencies
#   scripts/install_deps.sh --peers    also perf, GNU time and stress-ng for bench/
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libomp-dev libopenblas-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev liburing-dev libhwy-dev
  libopenmpi-dev openmpi-bin
  python3 python3-dev pybind11-dev python3-numpy
  # PyTorch: the parity test (tests/torch_parity_test.py) and bench/peer_torch.py
  python3-torch python3-pytest
  # fastText: text_test checks our word n-gram buckets against fastText's own model files
  fasttext
  # clang 14 and its libFuzzer / sanitizer runtimes: the fuzz preset (scripts/fuzz.sh)
  clang-14 libclang-rt-14-dev
  # headless Chromium: tests/report_chromium.sh renders the `report` and `plan --html` pages
  chromium
)
if [[ "${1:-}" == "--peers" ]]; then
  pkgs+=(linux-perf time stress-ng)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
