#!/usr/bin/env bash
# The 1e9-row job end to end (issue 36; docs/tiered.md "Beyond RAM"): examples/ctr_huge.toml for
# STEPS steps (batch 4096, STEPS x 4096 generated rows) with an incremental checkpoint every
# EVERY steps, run twice: once killed with SIGKILL after KILL_AT steps and resumed with --resume,
# once uninterrupted. Prints the plan (memory, disk over the run, checkpoint bytes), each run's
# time to the first step, samples/s, peak RSS and checkpoint lines, the store's rows read per step
# in the second half against the plan's, the bytes on disk (the store files' blocks and the
# checkpoints), the training digests of both runs at every checkpoint (equal: the kill and the
# chain changed nothing), `ckpt list`, and `test --run` / `predict --run` / `report` of the
# resumed run, with the machine load before and after each part.
#
#   bench/ctr_huge.sh [OUT=bench-ctr-huge] [STEPS=2000] [EVERY=500] [KILL_AT=1300]
# OUT needs the disk `leanemb plan` prints for both runs (twice its "over the run" files plus
# checkpoints); the script refuses when the file system has less than that plus 10 GB free.
# The result of 2026-12-06: bench/results/ctr_huge_zen3.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-ctr-huge} STEPS=${2:-2000} EVERY=${3:-500} KILL_AT=${4:-1300}
L=${LEANEMB:-build/release/leanemb}
PY=/usr/bin/python3
mkdir -p "$OUT"
common=(--config examples/ctr_huge.toml --set "data.gen.train_rows=$((STEPS * 4096))" --set "data.dir=$OUT/data"
        --set "train.checkpoint_every=$EVERY" --set train.log_every=50 --set "train.steps=$STEPS")
echo "== machine"; lscpu | grep -E "Model name|^CPU\(s\)"; free -g | head -2; df -h "$OUT" | tail -1; uptime
echo "== plan"
"$L" plan "${common[@]}" --set "embedding.store_dir=$OUT/store-a" | grep -E "as configured|disk|checkpoint_bytes"
free_kb=$(df -k --output=avail "$OUT" | tail -1)
echo "free: $((free_kb / 1048576)) GiB"

train() {  # train NAME [args...]: /usr/bin/time around leanemb train, its lines with step/first/trained/checkpoint
  local name=$1; shift
  /usr/bin/time -f "$name: %e s wall, %U s user, %S s sys, %M KB max RSS" "$L" train "${common[@]}" "$@" 2>&1 |
    grep -E "first step|trained|resumed|$name:|error|refus" || true
  uptime
}

echo "== run a: killed with SIGKILL after step $KILL_AT, then --resume"
"$L" train "${common[@]}" --set "embedding.store_dir=$OUT/store-a" --out "$OUT/a" --overwrite --quiet &
pid=$!
until [[ -f $OUT/a/metrics.jsonl ]] && $PY bench/run_metrics.py reached "$OUT/a/metrics.jsonl" "$KILL_AT"; do
  if ! kill -0 $pid 2>/dev/null; then echo "run a ended before step $KILL_AT"; exit 1; fi
  sleep 1
done
kill -9 $pid; wait $pid || true
echo "killed at: $(grep -c '"samples_per_s"' "$OUT/a/metrics.jsonl") log lines; checkpoints:"; ls "$OUT/a/checkpoints"
uptime
train a --set "embedding.store_dir=$OUT/store-a" --out "$OUT/a" --resume
echo "== run b: uninterrupted"
train b --set "embedding.store_dir=$OUT/store-b" --out "$OUT/b" --overwrite

echo "== checkpoints (run a), store files, bytes on disk"
grep '"checkpoint"' "$OUT/a/metrics.jsonl" | cut -c1-400
"$L" ckpt list "$OUT/a"
du -sh "$OUT"/a/checkpoints/* "$OUT"/store-a "$OUT"/store-b
du -sh --apparent-size "$OUT"/store-a
echo "== training digests (the last two checkpoints of run b; each reads every row of the 1e9)"
for d in $(ls -d "$OUT"/b/checkpoints/step-* | tail -2); do
  s=$(basename "$d")
  a=$([[ -d $OUT/a/checkpoints/$s ]] && "$L" ckpt digest --training "$OUT/a/checkpoints/$s" || echo "(not kept)")
  echo "$s: a $a, b $("$L" ckpt digest --training "$d")"
done
echo "== store reads per step, second half of run b (row_cache misses) against the plan"
# 132-byte fat rows (64 bf16 values and row-wise Adagrad's accumulator): the rows read back.
$PY bench/run_metrics.py second-half "$OUT/b/metrics.jsonl" "$STEPS" 132
echo "== test / predict / report of run a"
eval_file=$(ls "$OUT"/data/eval* | head -1)
/usr/bin/time -f "test --run: %e s wall, %M KB max RSS" "$L" test --run "$OUT/a/checkpoints/$(ls "$OUT/a/checkpoints" | tail -1)" --data "$eval_file" 2>&1 | tail -3
"$L" predict --run "$OUT/a/checkpoints/$(ls "$OUT/a/checkpoints" | tail -1)" --data "$eval_file" --output "$OUT/pred.tsv" --quiet
echo "predict: $(wc -l < "$OUT/pred.tsv") lines"
"$L" report "$OUT/a" "$OUT/b" --quiet && ls -la "$OUT/a/compare.html"
uptime
