#!/usr/bin/env bash
# leanemb.torch with sharded tables under mpirun (ctest: torch_mpi; docs/python.md):
# P = 1 and 2 train the same global batches to bit-identical rows and optimizer state, and a
# single process without sharding loads the P = 2 (sharded) checkpoint to the same rows;
# examples/torch_dlrm.py --dist (sharded tables, DDP over gloo for the dense part) trains at P = 2;
# and the DLRM example in deterministic mode (--grad-groups 4) trains to the same embedding
# digest and the same dense parameters, bit for bit, in one process (no MPI) and under mpirun
# -np 2 and -np 4, and one process loading each run's saved tables gets that digest too.
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
# Deterministic mode: one process, then 2 and 4 ranks (6 steps of 64 bags in 4 gradient groups).
DLRM="$HERE/../examples/torch_dlrm.py"
DET=(--grad-groups 4 --steps 6 --batch-size 64 --threads 1 --log-every 100)
/usr/bin/python3 "$DLRM" "${DET[@]}" --save "$OUT/det_P1" > "$OUT/det_P1.log" 2>&1 || { cat "$OUT/det_P1.log"; exit 1; }
for np in 2 4; do
  MASTER_PORT=$((33500 + RANDOM % 2000)) "$MPIEXEC" --oversubscribe -np "$np" /usr/bin/python3 "$DLRM" --dist "${DET[@]}" \
    --save "$OUT/det_P$np" > "$OUT/det_P$np.log" 2>&1 || { cat "$OUT/det_P$np.log"; exit 1; }
done
/usr/bin/python3 - "$OUT" "$DLRM" <<'PY'
import importlib.util
import re
import sys
import numpy as np
out, dlrm_path = sys.argv[1], sys.argv[2]
digests = {}
for np_ in (1, 2, 4):
    log = open(f"{out}/det_P{np_}.log").read()
    m = re.search(r"embedding digest ([0-9a-f]{32}) \(step (\d+)\)", log)
    assert m, f"no digest in the P={np_} log:\n{log}"
    assert m.group(2) == "6", f"P={np_} made {m.group(2)} table updates, not 6"
    digests[np_] = m.group(1)
assert digests[2] == digests[1] and digests[4] == digests[1], f"embedding digests differ: {digests}"
d1 = np.load(f"{out}/det_P1/dense.npz")
assert len(d1.files) == 10, d1.files
for np_ in (2, 4):
    d = np.load(f"{out}/det_P{np_}/dense.npz")
    assert sorted(d.files) == sorted(d1.files)
    for k in d1.files:
        assert np.array_equal(d[k], d1[k]), f"dense parameter {k} differs at P={np_}"
# Each run's saved tables (sharded at P = 2, 4), loaded by one process without sharding.
spec = importlib.util.spec_from_file_location("torch_dlrm", dlrm_path)
ex = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ex)
for np_ in (1, 2, 4):
    m = ex.DLRM(1000, "fp32", "adagrad", 0.05, 1)
    m.ebc.load(f"{out}/det_P{np_}")
    assert m.ebc.digest() == digests[1], f"the P={np_} checkpoint loads to another digest"
print(f"torch_mpi: DLRM --grad-groups 4: P=1, 2, 4 embedding digest {digests[1]}, dense parameters bit-identical")
PY
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
