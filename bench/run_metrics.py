#!/usr/bin/env python3
"""What the long-run benchmarks (bench/ctr_huge.sh, bench/ctr_beyond_ram.sh) read from a run's
metrics.jsonl:

  run_metrics.py reached METRICS STEP
      exit 0 once the run has logged step STEP or later (1 before: the scripts poll it to kill a
      run at a step);
  run_metrics.py second-half METRICS STEPS [ROW_BYTES]
      the row cache's misses, evictions and hits per step over the second half of a run of
      STEPS steps (its first log line at or after STEPS / 2 to its last), with ROW_BYTES (the
      fat row's bytes) the rows read from the stores per step and the hit rate, the fetch's
      seconds per step and the part of them exposed to the step, and the median samples/s of
      the log lines in that half.
"""
import json
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def reached(path, step):
    steps = [l.get("step", 0) for l in lines(path)]
    return 0 if steps and max(steps) >= step else 1


def second_half(path, steps, row_bytes=0):
    ls = lines(path)
    rc = [(l["step"], l["row_cache"]) for l in ls if "row_cache" in l and "samples_per_s" in l]
    half = steps // 2
    a = min((x for x in rc if x[0] >= half), key=lambda x: x[0])
    b = max(rc, key=lambda x: x[0])
    n = b[0] - a[0]

    def per_step(k):
        return (b[1][k] - a[1][k]) / n

    for k in ("misses", "evictions", "hits"):
        print(f"{k} per step, steps {a[0]}-{b[0]}: {per_step(k):.0f}")
    if row_bytes > 0:
        print(f"rows read from the stores per step, steps {a[0]}-{b[0]}: {per_step('fetched_bytes') / row_bytes:.0f}")
        hits, misses = b[1]["hits"] - a[1]["hits"], b[1]["misses"] - a[1]["misses"]
        print(f"hit rate: {hits / max(1, hits + misses):.3f}")
    print(f"fetch seconds per step {per_step('fetch_seconds'):.4f}, exposed {per_step('exposed_seconds'):.4f}")
    sps = sorted(l["samples_per_s"] for l in ls if "samples_per_s" in l and l["step"] >= half)
    print(f"samples/s in the second half (log lines): median {sps[len(sps) // 2]:.0f}")
    return 0


def main(argv):
    if len(argv) == 3 and argv[0] == "reached":
        return reached(argv[1], int(argv[2]))
    if len(argv) in (3, 4) and argv[0] == "second-half":
        return second_half(argv[1], int(argv[2]), int(argv[3]) if len(argv) == 4 else 0)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
