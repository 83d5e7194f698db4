#!/usr/bin/env bash
# Installs the Debian 12 packages leanemb needs. Idempotent: packages already present are skipped,
# and apt is not touched at all when nothing is missing.
#   scripts/install_deps.sh            what the README's first command needs: building the release
#                                      CLI and the Python package, `leanemb train`,
#                                      `import leanemb.torch`, `--target package` (the .deb)
#   scripts/install_deps.sh --mpi      also Open MPI (`mpirun ... leanemb train`, docs/dist.md;
#                                      reconfigure the build after it)
#   scripts/install_deps.sh --tests    also everything only the tests, fuzzers and micro-benches
#                                      use (scripts/test.sh); includes --mpi
#   scripts/install_deps.sh --peers    also perf, GNU time and stress-ng for bench/
#   scripts/install_deps.sh --without-torch
#                                      leave out python3-torch, which only `import leanemb.torch`
#                                      needs, not the build (scripts/quickstart.sh installs it
#                                      in the background while the build runs)
#   scripts/install_deps.sh --download-only
#                                      only download the missing packages into apt's cache
#                                      (apt-get --download-only; network bound, almost no CPU);
#                                      a later run without it installs them from the cache
# Flags combine (--tests --peers).
set -euo pipefail

# The release CLI, the `leanemb` Python package (pybind11 module) and its PyTorch modules.
pkgs=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev liburing-dev
  python3 python3-dev pybind11-dev python3-numpy
  # leanemb.torch (EmbeddingBagCollection, ...): import leanemb.torch
  python3-torch
  # the .deb (cmake --build --preset release --target package): dpkg-shlibdeps
  dpkg-dev file
)
mpi_pkgs=(libopenmpi-dev openmpi-bin)
test_pkgs=(
  # GoogleTest (every *_test program) and Google Benchmark (leanemb_microbench)
  libgtest-dev libgmock-dev libbenchmark-dev
  # tests/torch_api_test.py, tests/torch_property_test.py
  python3-pytest
  # fastText: text_test checks our word n-gram buckets against fastText's own model files
  fasttext
  # clang 14, its libFuzzer / sanitizer runtimes and OpenMP: the fuzz preset (scripts/fuzz.sh)
  clang-14 libclang-rt-14-dev libomp-dev
  # headless Chromium: tests/report_chromium.sh renders the `report` and `plan --html` pages
  chromium
  # tests/package_test.sh renders the .deb's man page and runs its bash completion
  man-db bash-completion
)
peer_pkgs=(linux-perf time stress-ng)

without_torch=0
download_only=()
for arg in "$@"; do
  case "$arg" in
    --mpi) pkgs+=("${mpi_pkgs[@]}") ;;
    --tests) pkgs+=("${mpi_pkgs[@]}" "${test_pkgs[@]}") ;;
    --peers) pkgs+=("${peer_pkgs[@]}") ;;
    --without-torch) without_torch=1 ;;
    --download-only) download_only=(--download-only) ;;
    *) echo "install_deps: unknown argument '$arg' (--mpi, --tests, --peers, --without-torch, --download-only)" >&2; exit 2 ;;
  esac
done

missing=()
declare -A seen=()
for p in "${pkgs[@]}"; do
  [[ -n "${seen[$p]:-}" ]] && continue
  [[ $without_torch -eq 1 && $p == python3-torch ]] && continue
  seen[$p]=1
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#seen[@]} packages present"
  exit 0
fi

if [[ ${#download_only[@]} -gt 0 ]]; then
  echo "install_deps: downloading (not installing) ${missing[*]}"
else
  echo "install_deps: installing ${missing[*]}"
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${download_only[@]}" "${missing[@]}"
