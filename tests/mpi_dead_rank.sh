#!/usr/bin/env bash
# A rank that stops answering: the survivors must fail, not hang.
#   tests/mpi_dead_rank.sh MPIRUN DIST_MPI_CHECK NP DEAD_RANK sleep|exit
# sleep: DEAD_RANK stays alive but never enters the collective. Every other rank must exit
#        non-zero with "all_reduce timed out after T ms waiting for rank DEAD_RANK".
# exit:  DEAD_RANK kills itself (SIGKILL). mpirun must end the job with a non-zero status.
# Either way the run is wrapped in a hard `timeout`: a hang fails the test instead of blocking
# CTest. How fast the survivors fail is not asserted beyond that guard.
set -u
if [ $# -ne 5 ]; then
  echo "usage: $0 MPIRUN DIST_MPI_CHECK NP DEAD_RANK sleep|exit" >&2
  exit 2
fi
mpirun=$1 exe=$2 np=$3 dead=$4 mode=$5
timeout_ms=1000
hard_limit_s=45

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Open MPI: allow root in containers; 4 ranks on 2 cores. sleep mode: keep the job alive when
# a survivor exits non-zero, so every survivor gets to report (the sleeping rank exits once all
# have). Not in exit mode: with it, Open MPI 4.1's mpirun does not end a job whose rank was
# killed by a signal.
[ "$mode" = sleep ] && export OMPI_MCA_orte_abort_on_non_zero_status=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

SECONDS=0
timeout -k 5 "$hard_limit_s" "$mpirun" --oversubscribe -np "$np" "$exe" \
  --dead-rank "$dead" --mode "$mode" --timeout-ms "$timeout_ms" --done-dir "$dir" >"$dir/out" 2>&1
rc=$?
elapsed_s=$SECONDS

fail() {
  echo "mpi_dead_rank FAILED (np=$np dead=$dead mode=$mode): $*"
  echo "---- output ----"
  cat "$dir/out"
  exit 1
}

# (mpirun itself exits 137 when a rank died of SIGKILL, so the guard is recognized by the time.)
[ "$elapsed_s" -lt "$hard_limit_s" ] || fail "hung: stopped by the ${hard_limit_s} s guard (exit $rc)"
[ "$rc" -ne 0 ] || fail "mpirun exited 0"
grep -q "succeeded without rank" "$dir/out" && fail "a collective succeeded without the dead rank"
if [ "$mode" = sleep ]; then
  for ((r = 0; r < np; r++)); do
    [ "$r" -eq "$dead" ] && continue
    # "waiting for rank D", or "ranks A, D" if a slow survivor is named too (true under load).
    want="rank $r of $np: all_reduce timed out after $timeout_ms ms waiting for ranks? ([0-9]+, )*$dead(,|\$| )"
    grep -qE "$want" "$dir/out" || fail "rank $r did not report: '$want'"
    [ "$(cat "$dir/done.$r" 2>/dev/null)" = 1 ] || fail "rank $r did not exit with code 1"
  done
fi
exit 0
