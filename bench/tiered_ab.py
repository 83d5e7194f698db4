#!/usr/bin/env python3
"""Alternating comparison of `leanemb bench --workload tiered` between leanemb binaries (ratios
measured in one run, contenders alternating: docs/benchmarks.md), for the disk-bound steady state
of a file store.

Each contender is a name and a binary; every round runs each once, in order, with the same bench
arguments (after `--`). The machine load of each run is recorded: cores kept busy by other
processes (/proc/stat busy time minus the run's own CPU time, over the wall time).

    bench/tiered_ab.py --rounds 2 --contender before /tmp/base/leanemb \\
        --contender after build/release/leanemb --store-dir /work/tmp -- \\
        --rows 1e8 --dim 64 --dtype bf16 --optimizer rowwise_adagrad --store file \\
        --no-resident --cache-fraction 0.01 --warmup 300 --iters 60

The table files are left in --store-dir (their names are printed): remove them when the disk is
idle. Prints per run: step median, misses per step, time per missed row (step median / misses),
exposed fetch, store reads per second against the same run's random-read probe, wall time;
then per-contender medians and ratios to the first contender. --json writes every run.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle


def child_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(name, binary, bench_args, store_dir, tag):
    out = os.path.join(store_dir, f"tiered-ab-{os.getpid()}-{tag}.json")
    rows = os.path.join(store_dir, f"tiered-ab-{os.getpid()}-{tag}.rows")
    cmd = [binary, "bench", "--workload", "tiered", "--store-path", rows, "--json", out] + bench_args
    hz = os.sysconf("SC_CLK_TCK")
    b0, c0, t0 = busy_jiffies(), child_cpu_seconds(), time.time()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    own = child_cpu_seconds() - c0
    other = max(0.0, ((busy_jiffies() - b0) / hz - own) / wall)
    # The table file is left for the caller to remove when the disk is idle: freeing its
    # scattered blocks can take minutes on a file system mounted with `discard`
    # (docs/tiered.md, "Reuse and lock"), and would load the disk under the next contender.
    if p.returncode != 0:
        sys.exit(f"{name}: exit {p.returncode}\n{p.stderr[-3000:]}")
    with open(out) as f:
        doc = json.load(f)
    os.unlink(out)
    c = next(x for x in doc["contenders"] if x["name"].startswith("cached"))
    cache = c["cache"]
    s = doc["summary"]
    step = c["step_ms"]["median"]
    misses = cache["misses_per_step"]
    r = {
        "name": name, "binary": binary, "wall_s": wall, "own_cpu_cores": own / wall, "other_load_cores": other,
        "step_ms_median": step, "step_ms_p10": c["step_ms"]["p10"], "step_ms_p90": c["step_ms"]["p90"],
        "misses_per_step": misses, "us_per_missed_row": step * 1e3 / misses if misses else None,
        "hit_rate": s.get("hit_rate"), "lru_simulation_hit_rate": s.get("lru_simulation_hit_rate"),
        "exposed_fetch_ms": cache["exposed_fetch_ms"], "fetch_ms_per_step": cache["fetch_ms_per_step"],
        "store_read_ops_per_step": cache["store_read_ops_per_step"],
        "store_write_ops_per_step": cache["store_write_ops_per_step"],
        "store_read_iops": s.get("store_read_iops"), "probe_random_read_iops_4k_qd64": s.get("probe_random_read_iops_4k_qd64"),
        "store_iops_over_probe": s.get("store_iops_over_probe"), "final_flush_s": s.get("final_flush_s"),
        "startup": doc.get("startup"), "peak_rss_bytes": s.get("peak_rss_bytes"),
        "samples_per_s": doc["shape"]["batch"] * 1e3 / step,
    }
    r["table_file"] = rows
    return r


def fmt(x, digits=1):
    """A figure for the log ('-' when the binary does not report it)."""
    return "-" if x is None else f"{x:,.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contender", nargs=2, action="append", metavar=("NAME", "BINARY"), required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--store-dir", default=".", help="where the table files go (removed after each run)")
    ap.add_argument("--json", help="write every run to FILE")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    bench_args = a.bench_args[1:] if a.bench_args[:1] == ["--"] else a.bench_args
    runs = []
    for rnd in range(a.rounds):
        for i, (name, binary) in enumerate(a.contender):
            r = run_one(name, binary, bench_args, a.store_dir, f"{rnd}-{i}")
            r["round"] = rnd
            runs.append(r)
            print(f"round {rnd} {name:>8}: step {fmt(r['step_ms_median'])} ms (p10 {fmt(r['step_ms_p10'])}, p90 "
                  f"{fmt(r['step_ms_p90'])}) | {fmt(r['misses_per_step'], 0)} misses/step | {fmt(r['us_per_missed_row'])} us "
                  f"per missed row | exposed fetch {fmt(r['exposed_fetch_ms'])} ms | hit {fmt(r['hit_rate'], 4)} (LRU sim "
                  f"{fmt(r['lru_simulation_hit_rate'], 4)}) | store reads {fmt(r['store_read_iops'], 0)}/s vs probe "
                  f"{fmt(r['probe_random_read_iops_4k_qd64'], 0)}/s | flush {fmt(r['final_flush_s'])} s | wall "
                  f"{fmt(r['wall_s'], 0)} s | other load {fmt(r['other_load_cores'], 2)} cores", flush=True)
            if a.json:
                with open(a.json + ".partial", "w") as fh:
                    json.dump(runs, fh, indent=1)
    print("table files left (remove them when the disk is idle):", " ".join(r["table_file"] for r in runs))
    first = a.contender[0][0]
    med = {}
    for name, _ in a.contender:
        mine = [r for r in runs if r["name"] == name]
        med[name] = {k: (statistics.median(r[k] for r in mine) if all(r[k] is not None for r in mine) else None) for k in
                     ("step_ms_median", "us_per_missed_row", "exposed_fetch_ms", "final_flush_s", "wall_s", "samples_per_s")}
    for name, m in med.items():
        ratio = med[first]["step_ms_median"] / m["step_ms_median"]
        print(f"{name:>8}: step {fmt(m['step_ms_median'])} ms, {fmt(m['us_per_missed_row'])} us per missed row, "
              f"{fmt(m['samples_per_s'], 0)} samples/s, flush {fmt(m['final_flush_s'])} s, wall {fmt(m['wall_s'], 0)} s; "
              f"speed vs {first}: {ratio:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bench_args": bench_args, "runs": runs, "medians": med,
                       "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": ")}, f, indent=1)


if __name__ == "__main__":
    main()
