#!/usr/bin/env bash
# The memory-lean configuration against full precision on the main job's data, over 3 seeds:
#   full: fp32 rows + Adam (fp32 state), fp32 activations
#   lean: bf16 rows + RowwiseAdagrad, bf16 activations
# Learning rates: each configuration at its best rate from a seed-1 sweep on this data
# (full Adam: 3e-5 0.7946, 1e-4 0.7947, 3e-4 0.7938, 1e-3 0.7925, 3e-3 0.7910, 1e-2 0.7895,
# 3e-2 0.7850; lean RowwiseAdagrad: 0.02 0.7941, 0.05 0.7938, 0.1 0.7935, 0.2 0.7931).
# Prints per-seed AUC and the embedding bytes (weights + optimizer state of the tables, engine
# accounting), then the mean AUC difference and the memory ratio; writes JSON.
#
#   bench/ctr_precision.sh [LEANEMB_BINARY] [OUT_JSON] [extra --set overrides...]
set -euo pipefail
LEANEMB=${1:-build/release/leanemb}
OUT=${2:-bench/results/ctr_precision.json}
shift $(( $# >= 2 ? 2 : $# ))
EXTRA=()
for s in "$@"; do EXTRA+=(--set "$s"); done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_prec.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

FULL=(--set embedding.dtype=fp32 --set embedding.optimizer=adam --set embedding.learning_rate=0.0001 --set train.precision=fp32)
LEAN=(--set embedding.dtype=bf16 --set embedding.optimizer=rowwise_adagrad --set embedding.learning_rate=0.02 --set train.precision=bf16)
COMMON=(--set train.checkpoint_every=0 --quiet)

run() {  # name seed args...
  local name=$1 seed=$2; shift 2
  "$LEANEMB" train "${COMMON[@]}" "${EXTRA[@]}" --set train.seed="$seed" "$@" --out "$WORK/$name-$seed" \
    --json-summary "$WORK/$name-$seed.json" > /dev/null
}
# Generate the data once (the first run does it), then two runs at a time.
run full 1 "${FULL[@]}"
run lean 1 "${LEAN[@]}" & run full 2 "${FULL[@]}" & wait
run lean 2 "${LEAN[@]}" & run full 3 "${FULL[@]}" & wait
run lean 3 "${LEAN[@]}"

/usr/bin/python3 - "$WORK" "$OUT" <<'EOF'
import json, sys, statistics
work, out = sys.argv[1], sys.argv[2]
res = {"what": "fp32 rows + Adam + fp32 activations (full) vs bf16 rows + RowwiseAdagrad + bf16 activations (lean), "
               "same data and model, seeds 1-3; embedding bytes = weights + optimizer state of the tables (engine)",
       "runs": {}}
for name in ("full", "lean"):
    for seed in (1, 2, 3):
        s = json.load(open(f"{work}/{name}-{seed}.json"))
        res["runs"][f"{name}-{seed}"] = {"auc": s["eval"]["auc"], "logloss": s["eval"]["logloss"],
                                        "embedding_table_bytes": s["embedding_table_bytes"],
                                        "samples_per_s": s["samples_per_s"], "teacher_auc": s["teacher_auc"],
                                        "memory": s["memory"]}
full = [res["runs"][f"full-{i}"]["auc"] for i in (1, 2, 3)]
lean = [res["runs"][f"lean-{i}"]["auc"] for i in (1, 2, 3)]
res["mean_auc_full"] = statistics.mean(full)
res["mean_auc_lean"] = statistics.mean(lean)
res["mean_auc_difference_lean_minus_full"] = res["mean_auc_lean"] - res["mean_auc_full"]
res["embedding_bytes_full"] = res["runs"]["full-1"]["embedding_table_bytes"]
res["embedding_bytes_lean"] = res["runs"]["lean-1"]["embedding_table_bytes"]
res["embedding_memory_ratio_full_over_lean"] = res["embedding_bytes_full"] / res["embedding_bytes_lean"]
json.dump(res, open(out, "w"), indent=2)
for k, v in res["runs"].items():
    print(f"{k:8s} AUC {v['auc']:.4f}  logloss {v['logloss']:.4f}  tables {v['embedding_table_bytes']/2**20:8.2f} MiB  {v['samples_per_s']:.0f} samples/s")
print(f"mean AUC full {res['mean_auc_full']:.4f}, lean {res['mean_auc_lean']:.4f}, "
      f"difference {res['mean_auc_difference_lean_minus_full']:+.4f}; embedding memory {res['embedding_memory_ratio_full_over_lean']:.2f}x smaller")
EOF
