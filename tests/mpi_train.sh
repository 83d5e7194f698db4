#!/usr/bin/env bash
# Multi-process `leanemb train` under mpirun (ctest: mpi_train_*; docs/dist.md).
#
#   tests/mpi_train.sh MPIRUN LEANEMB_BINARY digest|reshard|payload|crash
#
# A tiny CTR model (fp32 rows, fp32 payloads, dist.grad_groups = 4) trains STEPS steps; the
# training digest of its final checkpoint (`leanemb ckpt digest --training`: tables, dense
# parameters and optimizer state, loss scaler, reader position, counters) is the reference,
# from one process without MPI.
#   digest:   mpirun -np 1, 2, 4: the same training digest as the reference.
#   reshard:  STEPS/2 steps at P, then --resume at P' to STEPS, for P -> P' = 2 -> 1, 1 -> 2,
#             2 -> 4: the reference digest.
#   payload:  bf16 and int8 payloads (both directions) at P = 2: the final eval AUC within
#             0.01 of the reference's and the loss within 2% (the tolerance of docs/dist.md).
#   crash:    at P = 2, rank 1 ends its process after step 10 (dist.inject_exit_step); rank 0
#             must fail within the collective timeout, naming rank 1, and not hang; then
#             `mpirun -np 2 ... --resume` continues from the last complete checkpoint (step 8)
#             to STEPS: the reference digest.
#   stop:     at P = 2 with many steps, SIGTERM to rank 1 alone: both ranks stop after the same
#             step (the stop flags are all-reduced before every step), exit 5 and write one
#             complete sharded checkpoint of that step; `--resume` at P = 2 to that step + 8
#             gives the training digest of an uninterrupted single-process run of as many steps.
set -euo pipefail

MPIRUN=${1:?usage: mpi_train.sh MPIRUN LEANEMB_BINARY digest|reshard|payload|crash|stop}
LEANEMB=${2:?usage: mpi_train.sh MPIRUN LEANEMB_BINARY digest|reshard|payload|crash|stop}
MODE=${3:?usage: mpi_train.sh MPIRUN LEANEMB_BINARY digest|reshard|payload|crash|stop}
STEPS=24
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_mpi_train.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# Open MPI: allow root (CI containers), 4 ranks on 2 cores, one OpenMP thread per rank.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1

SETS=(--set "data.dir=\"$WORK/data\"" --set data.gen.train_rows=12000 --set data.gen.eval_rows=2000
      --set data.gen.vocab=500 --set model.table_rows=1000 --set train.batch_size=256
      --set train.micro_batches=2 --set train.checkpoint_every=8 --set train.log_every=1000
      --set dist.grad_groups=4 --set dist.timeout_ms=5000)

fail() { echo "mpi_train $MODE FAILED: $*"; exit 1; }
train1() { "$LEANEMB" train "${SETS[@]}" --quiet "$@" > /dev/null; }
trainp() { local np=$1; shift; timeout -k 5 120 "$MPIRUN" --oversubscribe -np "$np" "$LEANEMB" train "${SETS[@]}" --quiet "$@"; }
at() { local np=$1; shift; if [[ "$np" == 1 ]]; then train1 "$@"; else trainp "$np" "$@" > /dev/null; fi; }  # P=1 without MPI
latest() { ls -d "$1"/checkpoints/step-* 2>/dev/null | grep -v '\.tmp$' | sort | tail -1; }
digest_of() { "$LEANEMB" ckpt digest --training "$(latest "$1")"; }
final_step_ok() { [[ "$(basename "$(latest "$1")")" == "step-$(printf '%010d' "$STEPS")" ]] || fail "$1 did not reach step $STEPS"; }

train1 --steps "$STEPS" --out "$WORK/ref" --json-summary "$WORK/ref.json"
final_step_ok "$WORK/ref"
REF=$(digest_of "$WORK/ref")

case "$MODE" in
  digest)
    for np in 1 2 4; do
      trainp "$np" --steps "$STEPS" --out "$WORK/p$np" > /dev/null
      final_step_ok "$WORK/p$np"
      got=$(digest_of "$WORK/p$np")
      [[ "$got" == "$REF" ]] || fail "P=$np: training digest $got != single-process $REF"
      echo "mpi_train digest: P=$np matches the single-process training digest $REF"
    done
    ;;
  reshard)
    for pair in "2 1" "1 2" "2 4"; do
      read -r from to <<< "$pair"
      out="$WORK/r${from}to${to}"
      at "$from" --steps $((STEPS / 2)) --out "$out"
      at "$to" --steps "$STEPS" --out "$out" --resume --json-summary "$out.json"
      grep -q "\"resumed_from_step\": $((STEPS / 2))," "$out.json" || fail "$from -> $to: did not resume from step $((STEPS / 2))"
      final_step_ok "$out"
      got=$(digest_of "$out")
      [[ "$got" == "$REF" ]] || fail "$from -> $to: training digest $got != $REF"
      echo "mpi_train reshard: $from -> $to ranks resumed to the single-process training digest $REF"
    done
    ;;
  payload)
    ref_auc=$(grep -o '"auc": [0-9.]*' "$WORK/ref.json" | head -1 | awk '{print $2}')
    ref_loss=$(grep -o '"loss": [0-9.]*' "$WORK/ref.json" | head -1 | awk '{print $2}')
    for p in bf16 int8; do
      trainp 2 --steps "$STEPS" --out "$WORK/$p" --set "dist.forward_payload=\"$p\"" --set "dist.backward_payload=\"$p\"" \
        --json-summary "$WORK/$p.json" > /dev/null
      auc=$(grep -o '"auc": [0-9.]*' "$WORK/$p.json" | head -1 | awk '{print $2}')
      loss=$(grep -o '"loss": [0-9.]*' "$WORK/$p.json" | head -1 | awk '{print $2}')
      awk -v a="$auc" -v r="$ref_auc" -v l="$loss" -v rl="$ref_loss" \
        'BEGIN { d = a - r; if (d < 0) d = -d; e = (l - rl) / rl; if (e < 0) e = -e; exit !(d <= 0.01 && e <= 0.02) }' ||
        fail "$p payload: AUC $auc loss $loss vs fp32 single process AUC $ref_auc loss $ref_loss"
      echo "mpi_train payload: $p at P=2: AUC $auc (reference $ref_auc), loss $loss (reference $ref_loss)"
    done
    ;;
  crash)
    SECONDS=0
    set +e
    # Keep the job alive when rank 1 exits non-zero, so that rank 0 reports on its own. Rank 0
    # runs under a wrapper that records its exit code (mpirun's own status does not tell);
    # rank 1 runs directly (Open MPI ends the whole job when a wrapped MPI process exits without
    # MPI_Finalize while its wrapper exits 0).
    CRASH=(train "${SETS[@]}" --quiet --steps "$STEPS" --out "$WORK/crash" --set dist.timeout_ms=6000
           --set dist.inject_exit_rank=1 --set dist.inject_exit_step=10)
    OMPI_MCA_orte_abort_on_non_zero_status=0 timeout -k 5 120 "$MPIRUN" --oversubscribe \
      -np 1 bash -c '"$@"; echo $? > "$0"' "$WORK/rc.0" "$LEANEMB" "${CRASH[@]}" : -np 1 "$LEANEMB" "${CRASH[@]}" \
      > "$WORK/crash.out" 2>&1
    set -e
    elapsed=$SECONDS
    grep -q "rank 1: dist.inject_exit_step: ending the process after step 10" "$WORK/crash.out" ||
      { cat "$WORK/crash.out"; fail "rank 1 did not crash at step 10"; }
    [[ "$(cat "$WORK/rc.0" 2>/dev/null)" == 1 ]] || { cat "$WORK/crash.out"; fail "rank 0 did not exit 1 after rank 1 crashed"; }
    [[ $elapsed -lt 60 ]] || { cat "$WORK/crash.out"; fail "took $elapsed s (a hang?)"; }
    grep -qE "rank 0: .*rank 0 of 2: [a-z_ ()]+ timed out after 6000 ms waiting for rank 1" "$WORK/crash.out" ||
      { cat "$WORK/crash.out"; fail "rank 0 did not report the unresponsive rank 1"; }
    [[ "$(basename "$(latest "$WORK/crash")")" == "step-0000000008" ]] || fail "the last complete checkpoint is not step 8"
    trainp 2 --steps "$STEPS" --out "$WORK/crash" --resume --json-summary "$WORK/crash.json" > /dev/null
    grep -q '"resumed_from_step": 8,' "$WORK/crash.json" || fail "the relaunch did not resume from step 8"
    got=$(digest_of "$WORK/crash")
    [[ "$got" == "$REF" ]] || fail "resumed after the crash: training digest $got != $REF"
    echo "mpi_train crash: rank 0 failed in ${elapsed} s naming rank 1; the relaunch resumed from step 8 to the reference digest"
    ;;
  stop)
    set +e
    timeout -k 5 300 "$MPIRUN" --oversubscribe -np 2 "$LEANEMB" train "${SETS[@]}" --quiet --steps 1000000 --out "$WORK/stop" \
      --set train.log_every=1 --json-summary "$WORK/stop.json" > "$WORK/stop.out" 2>&1 &
    job=$!
    set -e
    for _ in $(seq 600); do [[ $(cat "$WORK/stop/metrics.jsonl" 2>/dev/null | wc -l) -ge 3 ]] && break; sleep 0.1; done
    # timeout -> mpirun -> the two rank processes: signal one of them only.
    ranks=($(pgrep -P "$(pgrep -P "$job" | head -1)"))
    [[ ${#ranks[@]} -eq 2 ]] || { cat "$WORK/stop.out"; fail "did not find the two rank processes (${ranks[*]})"; }
    kill -TERM "${ranks[1]}"
    rc=0; wait "$job" || rc=$?
    [[ $rc -eq 5 ]] || { cat "$WORK/stop.out"; fail "mpirun exited $rc, expected 5 (stopped)"; }
    step=$(grep -o '"steps": [0-9]*' "$WORK/stop.json" | grep -o '[0-9]*$')
    dir="$WORK/stop/checkpoints/step-$(printf '%010d' "$step")"
    "$LEANEMB" ckpt verify "$dir" > /dev/null || fail "no complete checkpoint of step $step"
    # Rank 0 names the signal if it was the one signalled, "a stop request" (another rank's) otherwise.
    grep -qE "stopped by (SIGTERM|a stop request) after step $step;" "$WORK/stop.out" || { cat "$WORK/stop.out"; fail "rank 0 did not stop at step $step"; }
    total=$((step + 8))
    trainp 2 --steps "$total" --out "$WORK/stop" --resume > /dev/null
    train1 --steps "$total" --out "$WORK/stopref"
    [[ "$(digest_of "$WORK/stop")" == "$(digest_of "$WORK/stopref")" ]] || fail "resumed after the stop: training digest differs"
    echo "mpi_train stop: SIGTERM to rank 1 stopped both ranks after step $step (exit 5, one sharded checkpoint); resumed to step $total with the single-process training digest"
    ;;
  *) fail "unknown mode $MODE" ;;
esac
