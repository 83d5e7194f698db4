#!/usr/bin/env bash
# kill -9 loop of examples/ctr_everything.toml (issue 16's acceptance; not a CI test: minutes).
#
#   tests/everything_kill9.sh LEANEMB_BINARY [KILLS]
#
# The example (row-wise sharding, bf16 rows + row-wise Adagrad, a 10% row cache over the file
# store, optimizer state on the host, a dynamic table, a device budget) trains STEPS steps
# uninterrupted: the final checkpoint's training digest (`leanemb ckpt digest --training`) is the
# reference. Then one run directory is trained again and again, alternately under
# `mpirun -np 2` and in one process, each try resuming (`--resume`) from whatever checkpoint
# the previous try left, and killed with SIGKILL (every process of the try: mpirun and its
# ranks) at a random moment, KILLS times; a last try runs to the end. Every published checkpoint
# must verify after every kill, and the final training digest must equal the reference.
# Prints "everything_kill9: K kills (P = 2: a, P = 1: b), R resumes from a checkpoint, ..." and
# exits non-zero on any difference.
set -euo pipefail

LEANEMB=$(realpath "${1:?usage: everything_kill9.sh LEANEMB_BINARY [KILLS]}")
KILLS=${2:-20}
STEPS=60
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_everything_kill9.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
MPI=(mpirun -np 2 --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPI+=(--allow-run-as-root)

# The example as it is, on data of its own, checkpoints every 5 steps. cmd P OUT: sets CMD.
cmd() {
  CMD=()
  [[ $1 == 2 ]] && CMD+=("${MPI[@]}")
  CMD+=("$LEANEMB" train --config "$ROOT/examples/ctr_everything.toml" --set "data.dir=\"$WORK/data\""
        --set "embedding.store_dir=\"$2/store\"" --set train.checkpoint_every=5 --set train.keep_checkpoints=2
        --quiet --steps "$STEPS" --out "$2" --resume --start-fresh)
}
latest() { ls -d "$1"/checkpoints/step-* 2>/dev/null | grep -v '\.tmp$\|\.deleting$' | sort | tail -1; }

t0=$(date +%s%N)
cmd 1 "$WORK/ref"
"${CMD[@]}" > "$WORK/ref.log" 2>&1 || { echo "reference run failed:"; tail -5 "$WORK/ref.log"; exit 1; }
ref_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
REF=$("$LEANEMB" ckpt digest --training "$(latest "$WORK/ref")")
[[ "$(basename "$(latest "$WORK/ref")")" == "step-$(printf '%010d' "$STEPS")" ]] || { echo "reference did not reach step $STEPS"; exit 1; }

out="$WORK/run"
kills=0 k2=0 k1=0 resumed=0 lost=0 try=0
while (( kills < KILLS )); do
  try=$((try + 1))
  p=$(( try % 2 == 1 ? 2 : 1 ))
  [[ -n "$(latest "$out")" ]] && resumed=$((resumed + 1))
  cmd "$p" "$out"
  # Its own process group (setsid), so that one kill reaches mpirun and every rank.
  setsid "${CMD[@]}" > "$WORK/try$try.log" 2>&1 &
  pid=$!
  # A kill at a random moment of the first 60% of a run (resumed runs do less).
  sleep "$(awk -v r=$RANDOM -v ms="$ref_ms" 'BEGIN { printf "%.3f", (r / 32768.0) * ms * 0.6 / 1000.0 }')"
  if kill -0 "$pid" 2> /dev/null; then
    kill -9 -- "-$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    kills=$((kills + 1))
    (( p == 2 )) && k2=$((k2 + 1)) || k1=$((k1 + 1))
  else
    wait "$pid" || { echo "try $try (P = $p) failed:"; tail -5 "$WORK/try$try.log"; exit 1; }
  fi
  while pgrep -f -- "--out $out" > /dev/null; do sleep 0.1; done  # every rank is gone (the lock is free)
  for d in "$out"/checkpoints/step-*; do
    [[ -d "$d" && "$d" != *.tmp && "$d" != *.deleting ]] || continue
    if ! "$LEANEMB" ckpt verify "$d" > /dev/null 2>&1; then lost=$((lost + 1)); echo "kill $kills: $d does not verify"; fi
  done
  if [[ -n "$(latest "$out")" && "$(basename "$(latest "$out")")" == "step-$(printf '%010d' "$STEPS")" ]]; then
    rm -rf "$out"  # finished before the kill: start over so that every kill interrupts training
  fi
done
p=$(( (try + 1) % 2 == 1 ? 2 : 1 ))
cmd "$p" "$out"
"${CMD[@]}" > "$WORK/final.log" 2>&1 || { echo "final run failed:"; tail -5 "$WORK/final.log"; exit 1; }
GOT=$("$LEANEMB" ckpt digest --training "$(latest "$out")")
echo "everything_kill9: $kills kills (P = 2: $k2, P = 1: $k1), $resumed tries resumed from a checkpoint, $lost checkpoints that do not verify, final run at P = $p"
echo "everything_kill9: training digest $GOT, uninterrupted $REF"
[[ "$GOT" == "$REF" && $lost -eq 0 ]]
