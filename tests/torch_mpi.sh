#!/usr/bin/env bash
# leanemb.torch with sharded tables under mpirun (ctest: torch_mpi; docs/python.md):
# P = 1 and 2 train the same global batches to bit-identical rows and optimizer state, and a
# single process without sharding loads the P = 2 (sharded) checkpoint to the same rows; and
# examples/torch_dlrm.py --dist (sharded tables, DDP over gloo for the dense part) trains at P = 2.
# Usage: tests/torch_mpi.sh MPIEXEC
set -euo pipefail
MPIEXEC=$1
HERE=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for np in 1 2; do
  MASTER_PORT=$((29500 + RANDOM % 2000)) "$MPIEXEC" --oversubscribe -np "$np" /usr/bin/python3 "$HERE/torch_mpi_check.py" train --out "$OUT"
done
/usr/bin/python3 "$HERE/torch_mpi_check.py" load --out "$OUT" --ckpt "$OUT/ckpt_P2"
# The DLRM example with sharded tables and DDP (gloo) for the dense part trains.
MASTER_PORT=$((31500 + RANDOM % 2000)) "$MPIEXEC" --oversubscribe -np 2 /usr/bin/python3 "$HERE/../examples/torch_dlrm.py" \
  --dist --steps 40 --threads 1 --check > "$OUT/dlrm.log" 2>&1 || { cat "$OUT/dlrm.log"; exit 1; }
/usr/bin/python3 - "$OUT" <<'PY'
import sys
import numpy as np
out = sys.argv[1]
a, b, c = (np.load(f"{out}/{n}.npz") for n in ("rows_P1", "rows_P2", "loaded"))
for k in a.files:
    assert np.array_equal(a[k], b[k]), f"P=2 differs from P=1 in {k}"
    assert np.array_equal(a[k], c[k]), f"the loaded P=2 checkpoint differs from P=1 in {k}"
print("torch_mpi: P=1 and P=2 bit-identical (rows, state, step); sharded checkpoint loads in one process")
PY
