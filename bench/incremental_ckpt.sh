#!/usr/bin/env bash
# Incremental vs full checkpoints of one model (docs/formats/checkpoint.md, "Chains"): trains
# CONFIG twice for STEPS steps with a checkpoint every EVERY steps, once with full checkpoints and
# once with train.incremental_checkpoints, prints each checkpoint's metrics line (rows, bytes,
# seconds, the step it extends), the bytes on disk, the training digests of both runs at every
# checkpoint (equal when the chains restore the same state), `ckpt list`, and then times
# `leanemb test --run` (load + evaluate) of the last checkpoint of each, ROUNDS times alternating.
# NP=<n> in the environment: the runs are sharded over n processes (mpirun -np n, one thread
# each; each rank keeps a chain of its shard, docs/dist.md), and the bytes on disk include
# shards/. ROUNDS=0 skips the test --run timings. EXTRA: more `--set` arguments (e.g. "--set data.dir=\"/tmp/d\"").
#
#   [NP=2] [EXTRA=...] bench/incremental_ckpt.sh [CONFIG=examples/ctr_large.toml] [OUT=bench-incremental] [STEPS=1000] [EVERY=250] [ROUNDS=3]
# The result of 2026-12-06: bench/results/incremental_ckpt_ctr_large_zen3.txt; at P = 2 (NP=2, shard
# chains): bench/results/incremental_ckpt_sharded_p2_zen3.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-examples/ctr_large.toml} OUT=${2:-bench-incremental} STEPS=${3:-1000} EVERY=${4:-250} ROUNDS=${5:-3}
L=${LEANEMB:-build/release/leanemb}
NP=${NP:-1}
read -r -a extra <<< "${EXTRA:-}"
run=("$L")
if (( NP > 1 )); then run=(env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$NP" --bind-to core "$L"); extra+=(--set train.threads=1); fi
uptime
for mode in full incremental; do
  inc=false; [[ $mode == incremental ]] && inc=true
  /usr/bin/time -f "$mode: %e s wall, %M KB max RSS" "${run[@]}" train --config "$CONFIG" --steps "$STEPS" --set train.checkpoint_every="$EVERY" \
    --set train.keep_checkpoints=0 --set train.incremental_checkpoints=$inc "${extra[@]}" --out "$OUT/$mode" --overwrite --quiet
  uptime
done
for mode in full incremental; do
  grep '"checkpoint"' "$OUT/$mode/metrics.jsonl"
  du -sb "$OUT/$mode"/checkpoints/*
  if [[ -d "$OUT/$mode/shards" ]]; then du -sb "$OUT/$mode"/shards/*/checkpoints/* "$OUT/$mode"/shards/*/*/checkpoints/* 2>/dev/null || true; fi
done
for d in "$OUT"/full/checkpoints/step-*; do
  s=$(basename "$d")
  echo "$s training digest: full $("$L" ckpt digest --training "$d"), incremental $("$L" ckpt digest --training "$OUT/incremental/checkpoints/$s")"
done
"$L" ckpt list "$OUT/incremental"
if (( ROUNDS > 0 )); then
  eval_file=$(ls "$(sed -n 's/^dir *= *"\(.*\)"/\1/p' "$CONFIG" | head -1)"/eval* | head -1)  # the config's data.dir
  last=$(basename "$(ls -d "$OUT"/full/checkpoints/step-* | tail -1)")
  for r in $(seq "$ROUNDS"); do
    for mode in full incremental; do
      /usr/bin/time -f "test --run $mode round $r: %e s wall, %M KB max RSS" "$L" test --run "$OUT/$mode/checkpoints/$last" --data "$eval_file" --quiet 2>&1 | grep round
    done
  done
fi
uptime
