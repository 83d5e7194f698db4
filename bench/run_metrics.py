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
  run_metrics.py disk-at-checkpoints RUN_DIR STORE_DIR KEEP -- COMMAND...
      runs COMMAND in a process group of its own (a `leanemb train` into RUN_DIR with train.keep_checkpoints = 0, so that no
      checkpoint is removed), and each time a checkpoint directory appears stops the group (SIGSTOP),
      takes the files of the stores (STORE_DIR) and of the new checkpoint (inode, blocks, size)
      and lets it go on (SIGCONT). At the end it prints, for each commit k, the bytes on disk a
      run keeping KEEP checkpoints holds then: the stores' files and the files of the checkpoints
      on disk at that commit before KEEP's cleanup (k, the KEEP newest before it and the chains
      they extend, from the checkpoint lines' checkpoint_extends), each inode counted once
      (st_blocks x 512, as du), split into store files, segment files only the checkpoints hold
      (pinned) and the checkpoints' own files; with the log's counters (segment files, the
      compaction passes and records moved: row_cache.store_gc_* of the nearest metrics line) and
      the step of the last metrics line when it stopped (log_every = 1: how far past the commit).
      The last line is JSON: the peak and its parts.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time


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


def files_under(root):
    """{path: (inode, bytes on disk, apparent bytes)} of the plain files under root."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            out[p] = (st.st_ino, st.st_blocks * 512, st.st_size)
    return out


def last_step(metrics):
    try:
        with open(metrics, "rb") as f:
            f.seek(max(0, os.path.getsize(metrics) - 4096))
            tail = f.read().decode(errors="replace").splitlines()
        return max((json.loads(l).get("step", 0) for l in tail[1:] if l.startswith("{")), default=-1)
    except (OSError, ValueError):
        return -1


def kept_after_cleanup(steps, parent, keep):
    """The checkpoints the writer's cleanup keeps of `steps` (ascending): the keep newest and the
    chains they extend (src/ckpt/writer.cc, cleanup)."""
    kept, counted, needed = set(), 0, set()
    for s in reversed(steps):
        if not (keep == 0 or counted < keep or s in needed):
            continue
        if keep == 0 or counted < keep:
            counted += 1
        kept.add(s)
        if parent.get(s) is not None:
            needed.add(parent[s])
    return kept


def disk_at_checkpoints(run_dir, store_dir, keep, command):
    ckdir = os.path.join(run_dir, "checkpoints")
    metrics = os.path.join(run_dir, "metrics.jsonl")
    proc = subprocess.Popen(command, start_new_session=True)  # its group: /usr/bin/time and the run
    seen, snaps = set(), []
    ckfiles = {}  # step -> its files
    while True:
        done = proc.poll() is not None
        try:
            names = sorted(n for n in os.listdir(ckdir) if re.fullmatch(r"step-\d{10}", n))
        except FileNotFoundError:
            names = []
        new = [n for n in names if n not in seen]
        if new:
            if not done:
                os.killpg(proc.pid, signal.SIGSTOP)
            at = last_step(metrics)
            store = files_under(store_dir)
            for n in new:
                ckfiles[int(n[5:])] = files_under(os.path.join(ckdir, n))
                seen.add(n)
            if not done:
                os.killpg(proc.pid, signal.SIGCONT)
            for n in new:
                snaps.append((int(n[5:]), at, store))
        if done:
            break
        time.sleep(0.02)
    if proc.returncode != 0:
        print(f"the run failed: exit {proc.returncode}")
        return 1
    ls = lines(metrics)
    parent = {l["step"]: l.get("checkpoint_extends") for l in ls if "checkpoint" in l and "checkpoint_seconds" in l}
    counters = [(l["step"], l["row_cache"]) for l in ls if "row_cache" in l and "samples_per_s" in l]
    steps = sorted(ckfiles)
    print(f"{'step':>6} {'at':>6} {'kept':>5} {'store B':>12} {'seg files':>9} {'pinned B':>12} {'ckpt own B':>11} "
          f"{'total B':>12} {'apparent B':>12} {'gc passes':>9} {'gc moved':>10}")
    peak = None
    for i, (step, at, store) in enumerate(snaps):
        on_disk = kept_after_cleanup(steps[:i], parent, keep) | {step}
        inodes = {}  # inode -> (blocks, size, part)
        for p, (ino, b, a) in store.items():
            inodes[ino] = (b, a, "store")
        for s in on_disk:
            for p, (ino, b, a) in ckfiles[s].items():
                if ino not in inodes:
                    inodes[ino] = (b, a, "pinned" if p.endswith(".seg") else "own")
        part = {k: sum(v[0] for v in inodes.values() if v[2] == k) for k in ("store", "pinned", "own")}
        total = sum(part.values())
        apparent = sum(v[1] for v in inodes.values())
        segs = sum(1 for p in store if p.endswith(".seg"))
        c = min(counters, key=lambda x: abs(x[0] - step))[1] if counters else {}
        print(f"{step:>6} {at:>6} {len(on_disk):>5} {part['store']:>12} {segs:>9} {part['pinned']:>12} {part['own']:>11} "
              f"{total:>12} {apparent:>12} {c.get('store_gc_passes', '-'):>9} {c.get('store_gc_rows_moved', '-'):>10}")
        if peak is None or total > peak["bytes"]:
            peak = {"step": step, "bytes": total, "apparent_bytes": apparent, "kept": len(on_disk), "store_bytes": part["store"],
                    "pinned_bytes": part["pinned"], "checkpoint_own_bytes": part["own"], "store_segment_files": segs,
                    "gc_passes": c.get("store_gc_passes"), "stopped_at_step": at}
    print(json.dumps({"measured_peak": peak}))
    return 0


def main(argv):
    if len(argv) == 3 and argv[0] == "reached":
        return reached(argv[1], int(argv[2]))
    if len(argv) in (3, 4) and argv[0] == "second-half":
        return second_half(argv[1], int(argv[2]), int(argv[3]) if len(argv) == 4 else 0)
    if len(argv) >= 5 and argv[0] == "disk-at-checkpoints" and argv[4] == "--":
        return disk_at_checkpoints(argv[1], argv[2], int(argv[3]), argv[5:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
