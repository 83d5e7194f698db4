#!/usr/bin/env bash
# The planner's disk model on runs whose log stores compact (issue 36; docs/plan.md "The disk over
# the run"): small CTR runs over log-layout file stores with small row caches, sized so that each
# log reaches its bound (2x its live rows plus 4 segments) and compacts many times, with linked
# checkpoints (train.link_store_rows). For each shape it prints `leanemb plan`'s "at the run's
# peak" line and its --json as_configured.run_disk, then trains and measures, at each checkpoint's
# commit, the bytes on disk of the stores' files plus the checkpoints on disk then (hard links
# counted once: bench/run_metrics.py disk-at-checkpoints, which stops the run at each commit while
# it takes the files). The run itself keeps every checkpoint (train.keep_checkpoints = 0) and the
# set a run keeping KEEP holds at each commit is taken from the checkpoints' chains, so that the
# peak before each cleanup is measured, not raced.
# Shapes:
#   pinned:  near-uniform ids over small tables, a 2% cache (1,000 rows: two steps' rows), a checkpoint every 100 steps in one
#            incremental chain of 8: compaction frees segments the kept checkpoints still link
#            (the model's bound 2, the files only checkpoints hold);
#   rehits:  Zipf 1.2 ids, a 20% cache that holds the hot rows, a checkpoint every 5 steps: each
#            checkpoint writes the cached rows, which the cache then updates again (bound 1,
#            the records of rows a checkpoint wrote);
#   sealed:  pinned's ids and cache with a checkpoint every 5 steps (about 0.16 of a segment
#            appended between two): each checkpoint seals a part-written segment, and the log
#            compacts long before its records reach its bound;
#   full2:   pinned with full checkpoints (no chain) keeping 3 (keep_checkpoints and
#            full_checkpoint_every differ).
# OLD_LEANEMB=<a leanemb binary>: its plan line too (a model before a change), for comparison.
#
#   bench/disk_model_compaction.sh [OUT=bench-disk-compaction] [SHAPES="pinned rehits sealed full2"]
# The result of 2026-12-07: bench/results/disk_model_compaction_zen3.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-disk-compaction} SHAPES=${2:-pinned rehits sealed full2}
L=${LEANEMB:-build/release/leanemb}
PY=/usr/bin/python3
mkdir -p "$OUT"
echo "== machine"; lscpu | grep -E "Model name|^CPU\(s\)|CPU family|^Model:"; free -g | head -2; df -h "$OUT" | tail -1; uptime

# Two tables of 32 fp32 values with row-wise Adagrad (136-byte rows, 30 to a 4 KiB block) behind
# caches over log stores (1 MiB segments: 7,680 records), one id per table per sample.
base=(--config examples/ctr_small.toml --set data.num_sparse=2 --set data.gen.format=\"bin\" --set data.gen.eval_rows=1000
      --set model.embedding_dim=32 --set model.bottom_mlp=[32,32] --set model.top_mlp=[32] --set embedding.optimizer=\"rowwise_adagrad\"
      --set embedding.cache_min_rows=0 --set embedding.store=\"file\" --set embedding.store_layout=\"log\"
      --set train.link_store_rows=true --set train.eval_every=0 --set train.threads=2)

shape_sets() {  # the shape's --set arguments: steps, batch, table rows, ids, cache, checkpoints
  case $1 in
    pinned) echo "6000 256 50000 50000 0.3 0.02 100 2 true 8" ;;
    rehits) echo "3000 256 50000 50000 1.2 0.2 5 2 true 8" ;;
    sealed) echo "200 256 50000 50000 0.3 0.02 5 2 true 8" ;;
    full2)  echo "6000 256 50000 50000 0.3 0.02 100 3 false 8" ;;
    *) echo "unknown shape $1" >&2; exit 2 ;;
  esac
}

for shape in $SHAPES; do
  read -r steps batch rows vocab zipf cache every keep incr full <<< "$(shape_sets "$shape")"
  dir=$OUT/$shape
  rm -rf "$dir"; mkdir -p "$dir"
  sets=("${base[@]}" --set "data.dir=$OUT/data-$shape" --set "data.gen.train_rows=$((steps * batch))" --set "data.gen.vocab=$vocab"
        --set "data.gen.zipf=$zipf" --set "model.table_rows=$rows" --set "embedding.cache_fraction=$cache"
        --set "train.batch_size=$batch" --set "train.steps=$steps" --set "train.checkpoint_every=$every"
        --set "train.incremental_checkpoints=$incr" --set "train.full_checkpoint_every=$full"
        --set "embedding.store_dir=$dir/store")
  echo "== shape $shape: $steps steps of $batch, 2 tables of $rows rows, vocab $vocab, Zipf $zipf, cache $cache," \
       "a checkpoint every $every, keep_checkpoints $keep, incremental $incr, full_checkpoint_every $full"
  echo "-- plan (keep_checkpoints = $keep)"
  "$L" plan "${sets[@]}" --set "train.keep_checkpoints=$keep" | grep -E "at the run's peak|disk:" || true
  if [[ -n ${OLD_LEANEMB:-} ]]; then
    echo "$OLD_LEANEMB (before): $("$OLD_LEANEMB" plan "${sets[@]}" --set "train.keep_checkpoints=$keep" | grep -E "at the run's peak" || true)"
  fi
  "$L" plan "${sets[@]}" --set "train.keep_checkpoints=$keep" --json > "$dir/plan.json"
  $PY - "$dir/plan.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["as_configured"]["run_disk"]
print("plan --json as_configured.run_disk: " + ", ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}" for k, v in d.items()))
EOF
  echo "-- train (every checkpoint kept; the set of keep_checkpoints = $keep measured at each commit)"
  uptime
  start=$(date +%s)
  $PY bench/run_metrics.py disk-at-checkpoints "$dir/run" "$dir/store" "$keep" -- bash -c '"$@" > "$0" 2>&1' "$dir/train.log" \
    /usr/bin/time -f "train: %e s wall, %U s user, %S s sys, %M KB max RSS" \
    "$L" train "${sets[@]}" --set train.keep_checkpoints=0 --set train.log_every=1 --out "$dir/run" --overwrite --quiet \
    | tee "$dir/disk.txt"
  grep -E "^trained|^train:" "$dir/train.log" || cat "$dir/train.log"
  echo "($(($(date +%s) - start)) s with the data's generation)"
  uptime
  $PY - "$dir/plan.json" "$dir/disk.txt" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))["as_configured"]["run_disk"]
m = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["measured_peak"]
print(f"predicted peak {p['peak_bytes'] / 1e6:.2f} MB at step {p['peak_step']} (store {p['store_bytes'] / 1e6:.2f}, pinned "
      f"{p['pinned_bytes'] / 1e6:.2f}, checkpoints {p['checkpoint_bytes'] / 1e6:.2f}); measured peak {m['bytes'] / 1e6:.2f} MB "
      f"at step {m['step']} (store {m['store_bytes'] / 1e6:.2f}, pinned {m['pinned_bytes'] / 1e6:.2f}, checkpoints' own "
      f"{m['checkpoint_own_bytes'] / 1e6:.2f}; {m['kept']} kept, {m['gc_passes']} compaction passes by then): "
      f"predicted / measured {p['peak_bytes'] / m['bytes']:.3f}")
EOF
  rm -rf "$dir/store" "$dir/run/checkpoints"
done
rm -rf "$OUT"/data-*
df -h "$OUT" | tail -1
