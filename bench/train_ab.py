#!/usr/bin/env python3
"""Alternating whole-run comparison of `leanemb train` contenders (docs/benchmarks.md: ratios
measured in one run, contenders alternating).

Each contender is a name, a leanemb binary and overrides: `section.key=value` items become
`--set` options, `env:NAME=VALUE` items set an environment variable for that contender only.
Every round runs each contender once, in order; with --load (e.g. "stress-ng --cpu 1") every
round runs twice, quiet then loaded, so quiet and loaded ratios come from the same run. The
machine load of each run is recorded: cores kept busy by other processes (/proc/stat busy time
minus the run's own CPU time, divided by the wall time).

    bench/train_ab.py --rounds 3 \\
        --contender before /tmp/leanemb_main train.checkpoint_every=0 \\
        --contender after build/release/leanemb train.checkpoint_every=0
    bench/train_ab.py --rounds 3 --contender fp32 build/release/leanemb train.precision=fp32 \\
        --contender bf16 build/release/leanemb train.precision=bf16
    bench/train_ab.py --config examples/text_debian.toml --rounds 2 \\
        --contender default build/release/leanemb --contender passive build/release/leanemb env:OMP_WAIT_POLICY=passive

Prints per-contender medians (samples/s, eval metric) and ratios to the first contender;
--json writes every run.
"""
import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return sum(v[:8]) - idle, sum(v[:8])


def child_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(contender, args, workdir, tag):
    name, binary, items = contender
    env = dict(os.environ)
    cmd = [binary, "train"]
    if args.config:
        cmd += ["--config", args.config]
    for item in args.set + items:
        if item.startswith("env:"):
            k, v = item[4:].split("=", 1)
            env[k] = v
        else:
            cmd += ["--set", item]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    out = os.path.join(workdir, f"{name}-{tag}")
    summary = out + ".json"
    cmd += ["--out", out, "--json-summary", summary, "--quiet"]
    hz = os.sysconf("SC_CLK_TCK")
    b0, _ = busy_jiffies()
    c0 = child_cpu_seconds()
    t0 = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    b1, _ = busy_jiffies()
    own = child_cpu_seconds() - c0
    s = json.load(open(summary))
    ev = s.get("eval") or {}
    metric = ev.get("auc", ev.get("precision_at_1"))
    speed = s["samples_per_s"] if "samples_per_s" in s else s["examples_per_s"]  # CTR / text summaries
    return {"contender": name, "samples_per_s": speed, "metric": metric, "wall_s": wall,
            "own_cpu_s": own, "other_busy_cores": max(0.0, ((b1 - b0) / hz - own) / wall), "cmd": shlex.join(cmd)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contender", nargs="+", action="append", required=True, metavar="NAME BINARY [ITEM]",
                   help="name, leanemb binary, then section.key=value or env:NAME=VALUE items")
    p.add_argument("--config", help="--config for every run (default: the embedded main job)")
    p.add_argument("--set", action="append", default=[], help="override for every contender")
    p.add_argument("--steps", type=int, help="--steps for every run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--load", help="command run in the background during the loaded half of each round")
    p.add_argument("--json", help="write all runs and the summary to this file")
    args = p.parse_args()
    contenders = [(c[0], c[1], c[2:]) for c in args.contender if len(c) >= 2]
    if len(contenders) != len(args.contender):
        p.error("each --contender needs a name and a binary")
    phases = ["quiet", "loaded"] if args.load else ["quiet"]
    runs = []
    with tempfile.TemporaryDirectory(prefix="leanemb_ab.") as work:
        for r in range(args.rounds):
            for phase in phases:
                bg = subprocess.Popen(shlex.split(args.load), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) if phase == "loaded" else None
                try:
                    if bg:
                        time.sleep(1.0)
                    for c in contenders:
                        res = run_one(c, args, work, f"{phase}-{r}")
                        res.update(round=r, phase=phase)
                        runs.append(res)
                        print(f"round {r} {phase:6s} {res['contender']:>12s}: {res['samples_per_s']:10.0f} samples/s  "
                              f"metric {res['metric']}  other busy cores {res['other_busy_cores']:.2f}", file=sys.stderr)
                finally:
                    if bg:
                        bg.terminate()
                        bg.wait()
    summary = {}
    base = contenders[0][0]
    for phase in phases:
        for name, _, _ in contenders:
            mine = [x for x in runs if x["phase"] == phase and x["contender"] == name]
            ratios = [m["samples_per_s"] / b["samples_per_s"] for m in mine for b in runs
                      if b["phase"] == phase and b["contender"] == base and b["round"] == m["round"]]
            summary[f"{phase}/{name}"] = {
                "median_samples_per_s": statistics.median(x["samples_per_s"] for x in mine),
                "metric": [x["metric"] for x in mine],
                f"median_ratio_to_{base}": statistics.median(ratios),
                "median_other_busy_cores": statistics.median(x["other_busy_cores"] for x in mine),
                "median_cpu_s": statistics.median(x["own_cpu_s"] for x in mine)}
    for k, v in summary.items():
        print(f"{k:24s} {v['median_samples_per_s']:10.0f} samples/s  x{v[f'median_ratio_to_{base}']:.3f} vs {base}  "
              f"cpu {v['median_cpu_s']:.1f} s  metric {v['metric']}  other busy cores {v['median_other_busy_cores']:.2f}")
    if args.json:
        json.dump({"cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
                   "runs": runs, "summary": summary}, open(args.json, "w"), indent=2)


if __name__ == "__main__":
    main()
