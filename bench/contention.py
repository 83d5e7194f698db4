#!/usr/bin/env python3
"""Steady speed on a busy machine (issue 19): bench/peer_torch.py's step ratios (torch step /
leanemb step) on a quiet machine and with one CPU-bound process beside both contenders, in one
run: every round runs peer_torch.py quiet, then again under the load command (default
`stress-ng --cpu 1`, `apt-get install stress-ng`), so quiet and loaded figures alternate.

    /usr/bin/python3 bench/contention.py [--rounds 2] [--json bench/results/contention.json] [peer_torch.py options]

Prints, per optimizer, the median quiet ratio, the median loaded ratio and loaded / quiet (the
acceptance: within 25%), with the machine load peer_torch.py measured, and each contender's own
slowdown (median step loaded / median step quiet). The text
half of the criterion (OMP_WAIT_POLICY=passive against the default) is bench/train_ab.py:

    bench/train_ab.py --config examples/text_debian.toml --rounds 3 --load "stress-ng --cpu 1" \\
        --contender default build/release/leanemb --contender passive build/release/leanemb env:OMP_WAIT_POLICY=passive
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_peer(extra, out_json):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "peer_torch.py"), "--no-rss", "--json", out_json] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    doc = json.load(open(out_json))
    steps = {p["optimizer"]: {"torch": p["torch"]["step_ms"]["median"], "leanemb": p["leanemb"]["step_ms"]["median"]}
             for p in doc["pairs"]}
    return {p["optimizer"]: p["step_ratio_torch_over_leanemb"] for p in doc["pairs"]}, steps, doc.get("machine_load")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--load", default="stress-ng --cpu 1", help="the background CPU-bound command")
    p.add_argument("--json", default="bench/results/contention.json")
    args, extra = p.parse_known_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="leanemb_contention.") as work:
        for r in range(args.rounds):
            for phase in ("quiet", "loaded"):
                bg = subprocess.Popen(shlex.split(args.load), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) if phase == "loaded" else None
                try:
                    if bg:
                        time.sleep(1.0)
                    ratios, steps, load = run_peer(extra, os.path.join(work, f"{phase}-{r}.json"))
                finally:
                    if bg:
                        bg.terminate()
                        bg.wait()
                runs.append({"round": r, "phase": phase, "ratios": ratios, "step_ms": steps, "machine_load": load})
                print(f"round {r} {phase:6s}: " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()), file=sys.stderr)
    summary = {}
    for opt in runs[0]["ratios"]:
        q = statistics.median(x["ratios"][opt] for x in runs if x["phase"] == "quiet")
        l = statistics.median(x["ratios"][opt] for x in runs if x["phase"] == "loaded")
        summary[opt] = {"quiet_ratio": q, "loaded_ratio": l, "loaded_over_quiet": l / q}
        # Each contender's own slowdown: its median step loaded over its median step quiet (the
        # ratio above rises when torch slows more than leanemb, and falls when leanemb does).
        for who in ("torch", "leanemb"):
            sq = statistics.median(x["step_ms"][opt][who] for x in runs if x["phase"] == "quiet")
            sl = statistics.median(x["step_ms"][opt][who] for x in runs if x["phase"] == "loaded")
            summary[opt][who + "_step_ms"] = {"quiet": sq, "loaded": sl, "loaded_over_quiet": sl / sq}
        print(f"{opt:8s} quiet {q:6.2f}x  loaded {l:6.2f}x  loaded/quiet {l / q:.2f}   own slowdown: torch "
              f"{summary[opt]['torch_step_ms']['loaded_over_quiet']:.2f}x, leanemb {summary[opt]['leanemb_step_ms']['loaded_over_quiet']:.2f}x")
    json.dump({"load_command": args.load, "peer_torch_args": extra, "runs": runs, "summary": summary},
              open(args.json, "w"), indent=2)


if __name__ == "__main__":
    main()
