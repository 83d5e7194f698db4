#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz preset: clang 14, ASan + UBSan) and runs each for a bounded
# time on a scratch copy of its seed corpus (fuzz/corpus/<name>/), as many at once as there are
# cores. A crash fails the run; the crashing input is saved as fuzz/regressions/<name>/crash-<sha1>
# (commit it with the fix: the fuzz_replay_<name> tests then run it under every preset). Per
# harness it prints libFuzzer's final line: executions, coverage (cov: edges, ft: features) and
# corpus size.
#   scripts/fuzz.sh [SECONDS_PER_HARNESS] [NAME...]     (default 20 s; names: tsv text toml binary ckpt sharded_ckpt)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
shift || true
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=(tsv text toml binary ckpt sharded_ckpt)
cmake --preset fuzz > /dev/null
cmake --build --preset fuzz -j "$(nproc 2>/dev/null || echo 2)" --target fuzzers
work=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The harnesses run side by side, as many at once as there are cores (each fuzzer is one
# process on one core), and report in the order named.
run_one() {
  local n=$1
  if build/fuzz/fuzz_"$n" -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
       -print_final_stats=1 -artifact_prefix="fuzz/regressions/$n/" "$work/$n" > "$work/$n.log" 2>&1; then
    echo 0 > "$work/$n.rc"
  else
    echo $? > "$work/$n.rc"
  fi
}
jobs=$(nproc 2>/dev/null || echo 2)
running=0
for n in "${names[@]}"; do
  mkdir -p "$work/$n" "fuzz/regressions/$n"
  cp fuzz/corpus/"$n"/* "$work/$n"/
  if (( running >= jobs )); then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$n" &
  running=$((running + 1))
done
wait
status=0
for n in "${names[@]}"; do
  log="$work/$n.log"
  if [[ "$(cat "$work/$n.rc")" == 0 ]]; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    echo "fuzz_$n: ${execs:-?} executions in ${SECONDS_EACH} s; ${last:-no progress line}"
  else
    status=1
    echo "fuzz_$n: FAILED (input saved under fuzz/regressions/$n/):"
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$log" | head -20
  fi
done
exit $status
