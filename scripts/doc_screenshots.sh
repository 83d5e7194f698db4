#!/usr/bin/env bash
# Remakes docs/img/report.png (docs/serve.md) and docs/img/plan.png (docs/plan.md): the report
# page of tests/report_chromium.sh's short training run and `leanemb plan --html` of the seed's
# example, screenshots by headless Chromium (Debian's chromium).
#   scripts/doc_screenshots.sh [LEANEMB_BINARY]     (default build/release/leanemb)
set -euo pipefail
cd "$(dirname "$0")/.."
LEANEMB=$(realpath "${1:-build/release/leanemb}")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_shots.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=passive
cd "$WORK"  # the page title names the run directory: ctr_tiny
"$LEANEMB" train --quiet --set "data.dir=\"$WORK/data\"" --set data.gen.train_rows=16384 --set data.gen.eval_rows=2048 \
  --set data.gen.vocab=200 --set data.num_sparse=4 --set model.table_rows=256 --set model.embedding_dim=8 \
  --set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2 \
  --set train.log_every=4 --set train.eval_every=16 --set train.checkpoint_every=32 \
  --set embedding.cache_fraction=0.5 --set embedding.cache_min_rows=1 \
  --out ctr_tiny --json-summary summary.json > /dev/null
"$LEANEMB" report ctr_tiny --summary summary.json --quiet
"$LEANEMB" plan --vocab 1000000 --dim 512 --batch 4096 --seq-len 2048 --optimizer adam --preset ascend-910a \
  --html "$WORK/plan.html" > /dev/null 2>&1
shot() {  # FILE.html OUT.png WIDTH,HEIGHT
  HOME="$WORK" chromium --headless --disable-gpu --no-sandbox --no-first-run --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$WORK/profile" --window-size="$3" --screenshot="$2" "file://$1" > /dev/null 2>&1
}
cd - > /dev/null
shot "$WORK/ctr_tiny/report.html" docs/img/report.png 1200,2700
shot "$WORK/plan.html" docs/img/plan.png 1200,860
ls -l docs/img/report.png docs/img/plan.png
