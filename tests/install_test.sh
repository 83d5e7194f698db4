#!/usr/bin/env bash
# The developer install (ctest: install_consumer; cmake/Package.cmake, component dev):
# `cmake --install --component dev` of a built tree into a scratch prefix, then a consumer project
# (tests/install_consumer) configured with find_package(leanemb) against that prefix alone, built
# and run: it saves and loads tables through EmbeddingTables::save / load and calls
# bench_workload_list (include/leanemb/commands.h, in libleanemb_bench_workloads), so every
# function the installed headers declare that it uses links from the installed libraries.
#
#   tests/install_test.sh BUILD_DIR
#
# Prints "ok ..." per check, "FAIL ..." for a failed one; exits 0 only if every check passed.
set -u
BUILD=${1:?usage: tests/install_test.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd -P)
SRC=$(cd "$(dirname "$0")/.." && pwd -P)
W=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_install.XXXXXX")
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
if ! cmake --install "$BUILD" --component dev --prefix "$W/prefix" > "$W/install.log" 2>&1; then
  echo "FAIL cmake --install: $(tail -20 "$W/install.log")"; exit 1
fi
for f in lib/libleanemb.a lib/libleanemb_bench_workloads.a include/leanemb/tables.h include/leanemb/table_save.h \
         include/leanemb/commands.h lib/cmake/leanemb/leanembConfig.cmake lib/cmake/leanemb/leanembTargets.cmake; do
  [[ -f "$W/prefix/$f" ]] || { echo "FAIL the install lacks $f"; exit 1; }
done
echo "ok installed libleanemb.a, libleanemb_bench_workloads.a, the headers and the package config"
CXX=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
if ! cmake -S "$SRC/tests/install_consumer" -B "$W/consumer" -DCMAKE_PREFIX_PATH="$W/prefix" \
     ${CXX:+-DCMAKE_CXX_COMPILER="$CXX"} -DCMAKE_BUILD_TYPE=Release > "$W/configure.log" 2>&1; then
  echo "FAIL configuring the consumer: $(tail -20 "$W/configure.log")"; exit 1
fi
if ! cmake --build "$W/consumer" -j2 > "$W/build.log" 2>&1; then
  echo "FAIL building the consumer: $(tail -20 "$W/build.log")"; exit 1
fi
echo "ok the consumer builds against the install alone"
if ! out=$("$W/consumer/consumer" "$W/run" 2>&1); then
  echo "FAIL the consumer: $out"; exit 1
fi
echo "ok consumer: $out"
