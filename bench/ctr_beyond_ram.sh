#!/usr/bin/env bash
# A written state larger than RAM, end to end (issue 36; docs/tiered.md "Beyond RAM"):
# examples/ctr_beyond_ram.toml for STEPS steps (batch 16384) with a checkpoint every EVERY steps,
# run twice, one after the other (the disk holds one run's store, not two):
#   a: killed with SIGKILL after step KILL_AT, then --resume; its training digests are kept and
#      its store and checkpoints removed;
#   b: uninterrupted.
# Prints the machine and its load before and after each part, each run's time to the first step,
# samples/s, peak RSS, checkpoint lines (bytes written, rows linked), the rows written to the
# stores (the log's live records: the written state) against RAM, the bytes on disk (store files
# and checkpoints, hard links counted once), `ckpt list`, and the training digests of both runs at
# each checkpoint both kept (equal: the kill and the links changed nothing).
#
#   bench/ctr_beyond_ram.sh [OUT=bench-beyond-ram] [STEPS=2600] [EVERY=800] [KILL_AT=1300]
# The result of 2026-12-07: bench/results/ctr_beyond_ram_zen3.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-beyond-ram} STEPS=${2:-2600} EVERY=${3:-800} KILL_AT=${4:-1300}
L=${LEANEMB:-build/release/leanemb}
PY=/usr/bin/python3
mkdir -p "$OUT"
# train.disk_check (on) needs the disk `leanemb plan` prints "at the run's peak" free: 64.5 GB for
# the defaults (the stores' files and the checkpoints' places; docs/plan.md "The disk over the run").
common=(--config examples/ctr_beyond_ram.toml --set "data.gen.train_rows=$((STEPS * 16384))" --set "data.dir=$OUT/data"
        --set "train.checkpoint_every=$EVERY" --set "train.steps=$STEPS" --set "embedding.store_dir=$OUT/store")
# EXTRA: more arguments (a smoke test: EXTRA='--set model.table_rows=[1000000,1000000,1000000,1000000]').
if [[ -n ${EXTRA:-} ]]; then read -r -a extra <<< "$EXTRA"; common+=("${extra[@]}"); fi
echo "== machine"; lscpu | grep -E "Model name|^CPU\(s\)|CPU family|^Model:"; free -g | head -2; df -h "$OUT" | tail -1; uptime
echo "== plan"
"$L" plan "${common[@]}" | grep -E "as configured|disk|checkpoint_bytes"

written_state() {  # the stores' files: bytes on disk (the log's records, live and not yet compacted)
  echo "store files: $(du -sb "$OUT/store" | cut -f1) bytes in $(find "$OUT/store" -name '*.seg' | wc -l) segment files"
}

echo "== run a: killed with SIGKILL after step $KILL_AT, then --resume"
/usr/bin/time -f "a (until killed): %e s wall, %U s user, %S s sys, %M KB max RSS" \
  "$L" train "${common[@]}" --out "$OUT/a" --overwrite --quiet > "$OUT/a.log" 2>&1 &
pid=$!
sleep 5
tpid=$(pgrep -P $pid -f "leanemb train" || echo $pid)
until [[ -f $OUT/a/metrics.jsonl ]] && $PY bench/run_metrics.py reached "$OUT/a/metrics.jsonl" "$KILL_AT"; do
  if ! kill -0 "$tpid" 2>/dev/null; then echo "run a ended before step $KILL_AT"; cat "$OUT/a.log"; exit 1; fi
  sleep 2
done
written_state
kill -9 "$tpid"; wait $pid || true
grep -E "first step|checkpoint" "$OUT/a.log" | head -20 || true
echo "killed after step $KILL_AT; checkpoints: $(ls "$OUT/a/checkpoints" | tr '\n' ' ')"
uptime
/usr/bin/time -f "a (resumed): %e s wall, %U s user, %S s sys, %M KB max RSS" \
  "$L" train "${common[@]}" --out "$OUT/a" --resume 2>&1 | grep -E "first step|trained|resumed|a \(resumed\)|error|refus|checkpoint" || true
uptime
written_state
echo "== run a: checkpoints, bytes on disk"
grep '"checkpoint"' "$OUT/a/metrics.jsonl" | cut -c1-600
$PY - "$OUT/a/metrics.jsonl" <<'EOF'
import json, sys
c = [json.loads(l) for l in open(sys.argv[1]) if '"checkpoint"' in l]
last = c[-1]
# 520-byte fat rows: 256 bf16 values and row-wise Adagrad's fp32 accumulator, 8-byte aligned.
rows = last.get("checkpoint_linked_rows", 0)
print(f"written state at step {last['step']}: {rows} rows in the stores x 520 B = {rows * 520 / 1e9:.2f} GB "
      f"= {rows * 520 / (24 * 2**30):.2f} x 24 GiB of RAM")
EOF
"$L" ckpt list "$OUT/a"
du -sh "$OUT"/a/checkpoints "$OUT"/store "$OUT"/data
df -h "$OUT" | tail -1
echo "== run a: training digests (each reads every linked row and computes the others' initial bytes)"
for d in "$OUT"/a/checkpoints/step-*; do
  /usr/bin/time -f "%e s" "$L" ckpt digest --training "$d" > "$OUT/a-$(basename "$d").digest" 2> "$OUT/a-$(basename "$d").time"
  echo "$(basename "$d"): $(cat "$OUT/a-$(basename "$d").digest") ($(tail -1 "$OUT/a-$(basename "$d").time"))"
done
uptime
echo "== removing run a's store and checkpoints"
/usr/bin/time -f "rm: %e s" rm -rf "$OUT/store" "$OUT/a/checkpoints"
df -h "$OUT" | tail -1

echo "== run b: uninterrupted"
/usr/bin/time -f "b: %e s wall, %U s user, %S s sys, %M KB max RSS" \
  "$L" train "${common[@]}" --out "$OUT/b" --overwrite 2>&1 | grep -E "first step|trained|b:|error|refus|checkpoint" || true
uptime
written_state
du -sh "$OUT"/b/checkpoints "$OUT"/store
df -h "$OUT" | tail -1
echo "== training digests: a (killed and resumed) against b (uninterrupted)"
for d in "$OUT"/b/checkpoints/step-*; do
  s=$(basename "$d")
  b=$("$L" ckpt digest --training "$d")
  a=$(cat "$OUT/a-$s.digest" 2>/dev/null || echo "(not kept)")
  echo "$s: a $a, b $b $([[ $a == "$b" ]] && echo EQUAL || echo DIFFERENT)"
done
echo "== run b: cache and store per step (second half)"
# 520-byte fat rows (256 bf16 values and row-wise Adagrad's accumulator): the rows read back.
$PY bench/run_metrics.py second-half "$OUT/b/metrics.jsonl" "$STEPS" 520
echo "== test --run of run b's last checkpoint"
eval_file=$(ls "$OUT"/data/eval* | head -1)
/usr/bin/time -f "test --run: %e s wall, %M KB max RSS" "$L" test --run "$OUT/b/checkpoints/$(ls "$OUT/b/checkpoints" | tail -1)" --data "$eval_file" 2>&1 | tail -3
uptime
