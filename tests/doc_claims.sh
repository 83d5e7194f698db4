#!/usr/bin/env bash
# Doc claims (issue 37, items 12, 13, 16; ctest: doc_claims): sentences of docs/ that state what
# the CLI does, read from the pages themselves and checked against the real binary, so that a
# page and the code cannot drift apart silently.
#
#   tests/doc_claims.sh LEANEMB_BINARY [SOURCE_DIR]
#
# Cases (one line each, "ok CASE" or "FAIL CASE: why", then "N passed, M failed"):
#   ckpt_verify_exit_code (12): the exit code docs/formats/checkpoint.md's "Verify" section gives
#     for a bad block ("... and exits 0, or exits N (corrupt: DataLoss)") is what `ckpt verify`
#     returns on a checkpoint with one flipped data byte, and the message names the file and the
#     checksum mismatch as the page's example does.
#   keep_checkpoints_default, keep_checkpoints_zero (13): docs/train.md's `keep_checkpoints` row
#     gives the default and says what 0 does ("0 keeps every checkpoint"); a run of 5 steps with
#     a checkpoint every step keeps that default number (the key left out), and all 5 with 0.
#   dist_limits_doc, tiered_dynamic_checkpoint_doc (16): no paragraph of docs/dist.md says that
#     sharded runs refuse (`Unimplemented`) row caches, dynamic vocabularies or sequence (`kNone`)
#     features, and docs/tiered.md does not say that the trainer does not checkpoint dynamic
#     state;
#   dynamic_cached_resume (16, the code side of both): a run with a dynamic table and row caches
#     stopped at step 3 and resumed to step 6 ends on the training digest of an uninterrupted
#     6-step run (the trainer checkpoints dynamic state);
#   dynamic_cached_sharded (16): with mpirun on PATH and an MPI build, the same 6 steps at P = 2
#     give that digest too (sharded runs take row caches and dynamic tables). Sequence (`kNone`)
#     features under sharding are covered by StackMatrixTest.TrainsBitIdenticallyToOneResidentTable
#     (src/dist/stack_matrix_test.cc: every mode at P = 1, 2, 4 with kNone pooling), which the CTR
#     CLI cannot reach (its features are pooled).
#   planned_vs_measured_under_mpirun (18): in that P = 2 run, rank 0 prints the "planned vs
#     measured peak" header with a line under it for every tier and category of the summary's
#     plan (issue 37 item 18 saw the header alone; 1b2851e prints the header only above lines).
set -u

LEANEMB=${1:?usage: tests/doc_claims.sh LEANEMB_BINARY [SOURCE_DIR]}
SRC=${2:-$(cd "$(dirname "$0")/.." && pwd)}
[[ -x "$LEANEMB" ]] || { echo "not an executable: $LEANEMB"; echo "0 passed, 1 failed"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_doc_claims.XXXXXX")
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive

PASSED=0 FAILED=0
ok() { echo "ok $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); }
# A tiny CTR run (the attacker's model): 4 sparse features, batch 128.
TINY=(--quiet --set "data.dir=\"$W/data\"" --set data.gen.train_rows=2048 --set data.gen.eval_rows=256
      --set data.gen.vocab=50 --set data.num_sparse=4 --set model.table_rows=64 --set model.embedding_dim=8
      --set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2
      --set train.log_every=1000)
ckpts() { ls -d "$1"/checkpoints/step-* 2>/dev/null | grep -v '\.tmp$' | sort; }
# paragraphs FILE: the page's paragraphs, one per line (line breaks inside one become spaces).
paragraphs() { awk 'BEGIN { RS = "" } { gsub(/\n/, " "); print }' "$1"; }

# ---- 12: ckpt verify's exit code on a bad block -------------------------------------------------
DOC_CKPT="$SRC/docs/formats/checkpoint.md"
documented=$(paragraphs "$DOC_CKPT" | grep -o 'and exits 0, or exits [0-9]' | head -1 | grep -o '[0-9]$')
if [[ -z "$documented" ]]; then
  fail ckpt_verify_exit_code "docs/formats/checkpoint.md no longer says \"and exits 0, or exits N\" (the Verify section moved: update this test)"
elif ! "$LEANEMB" train "${TINY[@]}" --steps 2 --out "$W/v" > /dev/null 2> "$W/err"; then
  fail ckpt_verify_exit_code "the tiny run failed: $(tail -1 "$W/err")"
else
  data=$(ckpts "$W/v" | tail -1)/data-00000.dat
  python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(10); b = f.read(1); f.seek(10); f.write(bytes([b[0] ^ 0xff]))' "$data"
  "$LEANEMB" ckpt verify "$(dirname "$data")" > /dev/null 2> "$W/err"; rc=$?
  if [[ "$rc" != "$documented" ]]; then
    fail ckpt_verify_exit_code "docs/formats/checkpoint.md says a bad block exits $documented, ckpt verify exited $rc"
  elif ! grep -q "data-00000.dat" "$W/err" || ! grep -q "checksum mismatch" "$W/err"; then
    fail ckpt_verify_exit_code "the message does not name the file and the checksum mismatch: $(cat "$W/err")"
  else
    ok "ckpt_verify_exit_code (documented and real: $rc)"
  fi
fi

# ---- 13: keep_checkpoints, its default and 0 -----------------------------------------------------
DOC_TRAIN="$SRC/docs/train.md"
row=$(grep '^| `keep_checkpoints` |' "$DOC_TRAIN" | head -1)
default=$(awk -F'|' '{ gsub(/ /, "", $3); print $3 }' <<< "$row")
# The embedded default config sets keep_checkpoints: leave the key out to get the code's default.
"$LEANEMB" train --print-default-config | grep -v '^keep_checkpoints' > "$W/nokeep.toml"
count_kept() {  # count_kept OUT [--set ...]: checkpoints left by 5 steps with one every step
  local out=$1; shift
  "$LEANEMB" train --config "$W/nokeep.toml" "${TINY[@]}" --set train.checkpoint_every=1 --steps 5 --out "$out" "$@" \
    > /dev/null 2> "$W/err" || { echo "run failed: $(tail -1 "$W/err")"; return; }
  ckpts "$out" | wc -l
}
if [[ -z "$row" ]]; then
  fail keep_checkpoints_default "docs/train.md has no \`keep_checkpoints\` row in its [train] table"
  fail keep_checkpoints_zero "docs/train.md has no \`keep_checkpoints\` row in its [train] table"
else
  got=$(count_kept "$W/k_default")
  if [[ "$got" == "$default" ]]; then ok "keep_checkpoints_default (documented and kept: $got)"
  else fail keep_checkpoints_default "docs/train.md says the default keeps '$default', a run without the key kept $got"; fi
  if ! grep -q '0 keeps every checkpoint' <<< "$row"; then
    fail keep_checkpoints_zero "docs/train.md's keep_checkpoints row does not say what 0 does (\"0 keeps every checkpoint\"): $row"
  else
    got=$(count_kept "$W/k_zero" --set train.keep_checkpoints=0)
    if [[ "$got" == 5 ]]; then ok "keep_checkpoints_zero (documented: 0 keeps every checkpoint; kept 5 of 5)"
    else fail keep_checkpoints_zero "docs/train.md says 0 keeps every checkpoint, a 5-checkpoint run kept $got"; fi
  fi
fi

# ---- 16: the docs do not deny what sharded and dynamic runs do -----------------------------------
bad=$(paragraphs "$SRC/docs/dist.md" | grep 'Unimplemented' | grep -E 'kNone|sequence|row cache|dynamic vocabular|dynamic table' || true)
if [[ -n "$bad" ]]; then fail dist_limits_doc "docs/dist.md says sharded runs refuse what they take: ${bad:0:300}"
else ok dist_limits_doc; fi
bad=$(paragraphs "$SRC/docs/tiered.md" | grep -Ei '(does not|doesn.t|cannot|can.t) (yet )?checkpoint dynamic state' || true)
if [[ -n "$bad" ]]; then fail tiered_dynamic_checkpoint_doc "docs/tiered.md says the trainer does not checkpoint dynamic state: ${bad:0:300}"
else ok tiered_dynamic_checkpoint_doc; fi

# The code side: a dynamic table (C1: 32 rows for 50 values, evicting; 4 id partitions) and row
# caches (57 slots of 64 rows) on the other tables, stopped and resumed, at P = 1 and P = 2.
DYN=(--set train.checkpoint_every=3 --set dist.grad_groups=4 --set embedding.dynamic.C1.capacity_rows=32
     --set embedding.dynamic.C1.partitions=4 --set embedding.cache_fraction=0.9 --set embedding.cache_min_rows=64)
digest() { "$LEANEMB" ckpt digest --training "$(ckpts "$1" | tail -1)"; }
if ! "$LEANEMB" train "${TINY[@]}" "${DYN[@]}" --steps 6 --out "$W/d_ref" > /dev/null 2> "$W/err"; then
  fail dynamic_cached_resume "the uninterrupted run failed: $(tail -1 "$W/err")"
else
  ref=$(digest "$W/d_ref")
  "$LEANEMB" train "${TINY[@]}" "${DYN[@]}" --steps 3 --out "$W/d_res" > /dev/null 2> "$W/err" &&
    "$LEANEMB" train "${TINY[@]}" "${DYN[@]}" --steps 6 --out "$W/d_res" --resume > /dev/null 2>> "$W/err"
  rc=$?
  if [[ "$rc" != 0 ]]; then fail dynamic_cached_resume "stop at 3 / resume to 6 failed (exit $rc): $(tail -1 "$W/err")"
  elif [[ "$(digest "$W/d_res")" != "$ref" ]]; then fail dynamic_cached_resume "resumed digest $(digest "$W/d_res") != uninterrupted $ref"
  else ok "dynamic_cached_resume (training digest $ref)"; fi
  MPIRUN=$(command -v mpirun || true)
  if [[ -z "$MPIRUN" ]]; then
    echo "skip dynamic_cached_sharded (no mpirun on PATH)"
  else
    # As the mpi_train tests run it (src/dist/module.cmake): root allowed, oversubscribed, and under
    # ASan the leak suppressions of Open MPI's own allocations.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      OMPI_MCA_mca_base_component_disable_dlclose=1 \
      LSAN_OPTIONS="fast_unwind_on_malloc=0:suppressions=$SRC/src/dist/mpi_lsan.supp:print_suppressions=0"
    OMP_NUM_THREADS=1 timeout -k 5 120 "$MPIRUN" --oversubscribe -np 2 "$LEANEMB" train "${TINY[@]}" "${DYN[@]}" \
      --set 'dist.backend="mpi"' --steps 6 --out "$W/d_p2" --json-summary "$W/d_p2.json" > "$W/d_p2.out" 2> "$W/err"; rc=$?
    if [[ "$rc" != 0 ]] && grep -q 'Unimplemented' "$W/err"; then echo "skip dynamic_cached_sharded (a build without MPI)"
    elif [[ "$rc" != 0 ]]; then fail dynamic_cached_sharded "mpirun -np 2 failed (exit $rc): $(grep -m1 error "$W/err")"
    elif [[ "$(digest "$W/d_p2")" != "$ref" ]]; then fail dynamic_cached_sharded "P=2 digest $(digest "$W/d_p2") != one process's $ref"
    else
      ok "dynamic_cached_sharded (P=2: training digest $ref)"
      # 18: the "planned vs measured peak" table under mpirun: the header, then a total line per
      # tier the summary's plan holds (a non-zero peak) and a line per category, nothing missing.
      if why=$(python3 - "$W/d_p2.out" "$W/d_p2.json" <<'PY'
import json, sys
out = open(sys.argv[1]).read().split("\n")
plan = json.load(open(sys.argv[2]))["plan"]
heads = [i for i, l in enumerate(out) if l.startswith("planned vs measured peak")]
if len(heads) != 1: sys.exit(f"{len(heads)} 'planned vs measured peak' headers in rank 0's output")
lines = []
for l in out[heads[0] + 1:]:
    if not l.strip(): break
    lines.append(l)
want = 0
for tier, t in plan.items():
    if t["planned_peak"] == 0 and t["measured_peak"] == 0: continue
    label = "device (cpu)" if tier == "device" else tier
    for cat in ["total"] + list(t["categories"]):
        want += 1
        if not any(l.split()[:len(label.split()) + 1] == label.split() + [cat] and " planned " in l and " measured " in l for l in lines):
            sys.exit(f"no '{label} {cat}' line under the header: {lines}")
if want == 0 or len(lines) != want: sys.exit(f"{len(lines)} lines under the header, the plan has {want}: {lines}")
PY
); then ok "planned_vs_measured_under_mpirun (the header and its lines at P=2)"
      else fail planned_vs_measured_under_mpirun "$why"; fi
    fi
  fi
fi

echo "$PASSED passed, $FAILED failed"
[[ "$FAILED" == 0 ]]
