#!/usr/bin/env bash
# Crash tests of `leanemb train` with real processes (ctest: resume_bitexact, ckpt_kill9_random,
# graceful_stop_random).
#
#   tests/ckpt_kill9.sh LEANEMB_BINARY [KILLS] [resume|kill9|sigterm|all] [OPTIMIZER] [STORE] [ROWS:STATE]
#
# A tiny model trains STEPS steps with a checkpoint every 4 steps; its final checkpoint's digest
# (`leanemb ckpt digest`) is the reference.
#   resume:  train STEPS/2 steps, then `--resume` in a fresh process to STEPS: same digest.
#   kill9:   KILLS times: start a fresh run, kill -9 it at a random moment, check that every
#            checkpoint left behind verifies, resume it to STEPS: same digest every time.
#            Prints "kill9: K kills, R resumed with the reference digest, L lost checkpoints, ..."
#   sigterm: KILLS times: start a fresh run, SIGTERM it at a random moment: it must exit 5 (or 0
#            when it had finished) with a checkpoint of the step it reached; resumed to STEPS,
#            its training digest (`ckpt digest --training`) must be the reference's.
# ROWS:STATE: the row and optimizer state dtypes (default bf16:fp32; e.g. q8:int4).
# STORE=linked: the rows live in a log-layout file store (embedding.store_dir in each run's --out)
# behind a row cache of 30% of the rows, and every checkpoint is incremental with the store's sealed segments
# linked into it (train.incremental_checkpoints, train.link_store_rows), so a kill can land
# between the links of a checkpoint's rows or in a delta.
# Exits non-zero on any difference. CI uses KILLS=20 (kill9) and 5 (sigterm); the acceptance
# run of issue 18 used `tests/ckpt_kill9.sh build/release/leanemb 200 kill9`.
set -euo pipefail

LEANEMB=${1:?usage: ckpt_kill9.sh LEANEMB_BINARY [KILLS] [resume|kill9|all] [OPTIMIZER]}
KILLS=${2:-20}
MODE=${3:-all}
OPTIMIZER=${4:-adam}  # sm3: its column accumulators live outside the rows (blob optstate/<table>)
STORE=${5:-resident}  # resident | linked
DTYPES=${6:-bf16:fp32}  # rows:state
STEPS=40
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_kill9.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=passive

SETS=(--set "data.dir=\"$WORK/data\"" --set data.gen.train_rows=12000 --set data.gen.eval_rows=1000
      --set data.gen.vocab=500 --set model.table_rows=1000 --set train.batch_size=256
      --set train.checkpoint_every=4 --set train.keep_checkpoints=2 --set train.log_every=1000
      --set embedding.optimizer="$OPTIMIZER" --set "embedding.dtype=${DTYPES%%:*}" --set "embedding.state_dtype=${DTYPES##*:}")

case "$STORE" in
  resident) ;;
  linked) SETS+=(--set embedding.store=file --set embedding.store_layout=log --set embedding.cache_fraction=0.3
                 --set embedding.cache_min_rows=0 --set train.incremental_checkpoints=true --set train.link_store_rows=true) ;;
  *) echo "ckpt_kill9: STORE must be resident or linked, not '$STORE'"; exit 2 ;;
esac
# store_of OUT: the settings that put the run's store (if any) inside its output directory.
store_of() { [[ "$STORE" == resident ]] || printf '%s\n' --set "embedding.store_dir=\"$1/store\""; }
# run_sets ARGS...: RUN = SETS plus the store of the --out among ARGS.
run_sets() {
  local out="" prev=""
  for a in "$@"; do [[ "$prev" == --out ]] && out=$a; prev=$a; done
  mapfile -t RUN < <(store_of "$out")
  RUN=("${SETS[@]}" "${RUN[@]}")
}
train() { run_sets "$@"; "$LEANEMB" train "${RUN[@]}" --quiet "$@" > /dev/null; }
latest() { ls -d "$1"/checkpoints/step-* 2>/dev/null | grep -v '\.tmp$' | sort | tail -1; }
# The content digest hashes a checkpoint's own blobs; a delta's depend on its chain (the resumed
# run's chain starts at the checkpoint it resumed from), so chains compare their training state.
digest_of() { if [[ "$STORE" == linked ]]; then "$LEANEMB" ckpt digest --training "$(latest "$1")"; else "$LEANEMB" ckpt digest "$(latest "$1")"; fi; }

train --steps "$STEPS" --out "$WORK/ref"
REF=$(digest_of "$WORK/ref")
[[ "$(basename "$(latest "$WORK/ref")")" == "step-$(printf '%010d' "$STEPS")" ]] || { echo "reference did not reach step $STEPS"; exit 1; }

if [[ "$MODE" == resume || "$MODE" == all ]]; then
  train --steps $((STEPS / 2)) --out "$WORK/half"
  train --steps "$STEPS" --out "$WORK/half" --resume --json-summary "$WORK/half.json"
  # The second process continued from step STEPS/2: it trained only the remaining steps.
  grep -q "\"resumed_from_step\": $((STEPS / 2))," "$WORK/half.json" || { echo "resume_bitexact: did not resume from step $((STEPS / 2))"; exit 1; }
  grep -q "\"samples_this_run\": $((STEPS / 2 * 256))," "$WORK/half.json" || { echo "resume_bitexact: trained more than the remaining steps"; exit 1; }
  GOT=$(digest_of "$WORK/half")
  if [[ "$GOT" != "$REF" ]]; then echo "resume_bitexact: digest $GOT != reference $REF"; exit 1; fi
  echo "resume_bitexact: resumed run matches the reference digest $REF"
fi

if [[ "$MODE" == kill9 || "$MODE" == all ]]; then
  # How long a full run takes here, to spread the kills over it.
  t0=$(date +%s%N)
  train --steps "$STEPS" --out "$WORK/timing"
  run_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  ok=0 lost=0 fresh=0 leftovers=0
  for ((i = 1; i <= KILLS; i++)); do
    out="$WORK/k$i"
    run_sets --out "$out"
    "$LEANEMB" train "${RUN[@]}" --quiet --steps "$STEPS" --out "$out" > /dev/null 2>&1 &
    pid=$!
    sleep "$(awk -v r=$RANDOM -v ms="$run_ms" 'BEGIN { printf "%.3f", (r / 32768.0) * ms / 1000.0 }')"
    kill -9 "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    # Every published checkpoint (a step directory) must have its MANIFEST and verify, and the
    # resume must start from the newest one. .tmp (a write) and .deleting (a removal) are
    # leftovers of the kill, removed by the next commit.
    newest=-1
    for d in "$out"/checkpoints/step-*; do
      [[ -d "$d" ]] || continue
      if [[ "$d" == *.tmp || "$d" == *.deleting ]]; then leftovers=$((leftovers + 1)); continue; fi
      if [[ ! -f "$d/MANIFEST" ]]; then lost=$((lost + 1)); echo "kill $i: $d has no MANIFEST"; continue; fi
      if ! "$LEANEMB" ckpt verify "$d" > /dev/null 2>&1; then lost=$((lost + 1)); echo "kill $i: $d does not verify"; continue; fi
      step=$((10#${d##*step-}))
      (( step > newest )) && newest=$step
    done
    train --steps "$STEPS" --out "$out" --resume --json-summary "$out.json"
    if (( newest < 0 )); then
      grep -q '"resumed_from_step": null' "$out.json" || { lost=$((lost + 1)); echo "kill $i: resumed without a checkpoint"; }
      fresh=$((fresh + 1))
    elif ! grep -q "\"resumed_from_step\": $newest," "$out.json"; then
      lost=$((lost + 1)); echo "kill $i: did not resume from the newest checkpoint (step $newest)"
    fi
    GOT=$(digest_of "$out")
    if [[ "$GOT" == "$REF" ]]; then ok=$((ok + 1)); else echo "kill $i: digest $GOT != reference $REF"; fi
    rm -rf "$out" "$out.json"
  done
  echo "kill9: $KILLS kills, $ok resumed with the reference digest, $lost lost checkpoints, $fresh killed before the first checkpoint, $leftovers .tmp/.deleting leftovers (full run ${run_ms} ms)"
  [[ $ok -eq $KILLS && $lost -eq 0 ]] || exit 1
fi

if [[ "$MODE" == sigterm || "$MODE" == all ]]; then
  t0=$(date +%s%N)
  train --steps "$STEPS" --out "$WORK/timing2"
  run_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  REFT=$("$LEANEMB" ckpt digest --training "$(latest "$WORK/ref")")
  ok=0 stopped=0 finished=0
  for ((i = 1; i <= KILLS; i++)); do
    out="$WORK/s$i"
    run_sets --out "$out"
    "$LEANEMB" train "${RUN[@]}" --quiet --steps "$STEPS" --out "$out" --json-summary "$out.json" > /dev/null 2> "$out.err" &
    pid=$!
    sleep "$(awk -v r=$RANDOM -v ms="$run_ms" 'BEGIN { printf "%.3f", (r / 32768.0) * ms / 1000.0 }')"
    kill -TERM "$pid" 2> /dev/null || true
    rc=0; wait "$pid" || rc=$?
    step=$(grep -o '"steps": [0-9]*' "$out.json" 2>/dev/null | grep -o '[0-9]*$' || echo -1)
    if [[ $rc -eq 5 ]]; then
      stopped=$((stopped + 1))
      # Stopped before its first step (during start-up): nothing to checkpoint.
      [[ $step -eq 0 || -f "$out/checkpoints/step-$(printf '%010d' "$step")/MANIFEST" ]] || { echo "sigterm $i: exit 5 but no checkpoint of step $step"; cat "$out.err"; continue; }
    elif [[ $rc -eq 0 ]]; then
      finished=$((finished + 1))
    else
      # The signal came before the handler was installed (start-up): killed, like kill -9.
      echo "sigterm $i: exit $rc before the stop handler was in place"; step=-1
    fi
    train --steps "$STEPS" --out "$out" --resume
    GOT=$("$LEANEMB" ckpt digest --training "$(latest "$out")")
    if [[ "$GOT" == "$REFT" ]]; then ok=$((ok + 1)); else echo "sigterm $i (stopped at step $step): training digest $GOT != reference $REFT"; fi
    rm -rf "$out" "$out.json" "$out.err"
  done
  echo "sigterm: $KILLS signals, $stopped stopped with exit 5 and a checkpoint of the step reached, $finished had finished, $ok resumed to the reference training digest"
  [[ $ok -eq $KILLS ]] || exit 1
fi
