#!/usr/bin/env python3
"""Peer benchmark: leanemb against PyTorch's sparse EmbeddingBag training, same inputs, same math.

Run with Debian's python3 (the one that has python3-torch), after building the _leanemb module:

    /usr/bin/python3 bench/peer_torch.py [--module-dir build/release] [--json FILE]
    /usr/bin/python3 bench/peer_torch.py --rows 100000 --steps 20      # smoke run, < 1 minute

Default workload (docs/benchmarks.md, `optimizer`): E=2e6 rows, D=128, B=4096 bags of L=20
distinct Zipf(1.05) ids, 2 threads on both sides. For each of SGD, Adagrad and Adam:

  * torch: nn.EmbeddingBag(mode="sum", sparse=True) + torch.optim.SGD / Adagrad / SparseAdam;
    one step = forward, loss = (out * G).sum() (so d loss / d out = G), backward, optimizer step;
  * leanemb: one table and one pooled feature of _leanemb.Tables (the table interface that
    leanemb.torch is built on, called directly: the engine alone) with the same initial weights
    (write_rows), hyper-parameters and gradient G: forward + backward_update(G), into
    preallocated numpy buffers.

The id stream is generated once in numpy (zipf_batches below: per bag L distinct ids, Zipf(alpha)
ranks truncated to [1, rows] scattered over the table by a fixed permutation, the shape of
`leanemb bench`'s stream; not the same arrays) and both contenders consume the same batches in
the same order. They
alternate in blocks (torch block, leanemb block, ...; who goes first alternates too); the speed
ratio is the median of per-block ratios of medians. After the run the updated weights of both
must agree: max |w_torch - w_leanemb| / (1 + |w_torch|) <= 1e-4 (fp32), else exit status 1.

Peak RSS is measured per contender in a fresh subprocess (`--rss-only NAME`) that builds only
that contender and runs ~20 steps; ru_maxrss of a process only grows, so one process cannot
measure several contenders. The process baseline (interpreter, numpy, torch when imported) is
reported next to it.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

RSS_CONTENDERS = [
    "torch_sgd", "torch_adagrad", "torch_sparse_adam",
    "leanemb_sgd", "leanemb_adagrad", "leanemb_adam",
    "leanemb_bf16_rowwise_adagrad", "leanemb_bf16_adam_int8_state",
]

TOLERANCE = 1e-4


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--module-dir", default="build/release", help="directory holding _leanemb*.so")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--bag-size", type=int, default=20)
    p.add_argument("--alpha", type=float, default=1.05, help="Zipf exponent, <= 1 means uniform")
    p.add_argument("--steps", type=int, default=50, help="measured steps per contender (>= 1)")
    p.add_argument("--warmup", type=int, default=10, help="warm-up steps per contender")
    p.add_argument("--block", type=int, default=5, help="steps per block when alternating")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-batches", type=int, default=8, help="distinct pre-generated batches, cycled")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--optimizers", default="sgd,adagrad,adam", help="comma list of sgd, adagrad, adam")
    p.add_argument("--json", default="bench/results/peer_torch.json")
    p.add_argument("--no-rss", action="store_true", help="skip the per-contender RSS subprocesses")
    p.add_argument("--rss-steps", type=int, default=20)
    p.add_argument("--rss-only", metavar="CONTENDER", choices=RSS_CONTENDERS,
                   help="internal: build only this contender, run --rss-steps steps, print its peak RSS as JSON")
    a = p.parse_args(argv)
    for name in ("rows", "dim", "batch", "bag_size", "steps", "block", "threads", "num_batches", "rss_steps"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name.replace("_", "-"))
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.bag_size > a.rows:
        p.error("--bag-size must be <= --rows (bags hold distinct ids)")
    for o in a.optimizers.split(","):
        if o not in ("sgd", "adagrad", "adam"):
            p.error("unknown optimizer %r in --optimizers" % o)
    return a


def import_leanemb(module_dir):
    sys.path.insert(0, os.path.abspath(module_dir))
    try:
        import _leanemb  # noqa: PLC0415
    except ImportError as e:
        sys.exit("peer_torch.py: cannot import _leanemb from %r (%s); build it, e.g. "
                 "cmake --preset release && cmake --build --preset release, or pass --module-dir" % (module_dir, e))
    return _leanemb


def proc_status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rss_now_bytes():
    return proc_status_bytes("VmRSS")


def peak_rss_bytes():
    """ru_maxrss of this process. NOTE: Linux carries ru_maxrss across fork + exec (a child
    starts with the parent's RSS at fork as its maximum), so subprocesses use own_peak_rss_bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


def own_peak_rss_bytes():
    """VmHWM: the peak RSS of this process's own address space (new at exec, not inherited)."""
    return proc_status_bytes("VmHWM")


def summary_ms(xs):
    xs = sorted(xs)
    if not xs:
        return {"median": None, "p10": None, "p90": None}
    q = np.quantile(np.array(xs), [0.1, 0.5, 0.9])
    return {"median": float(q[1]), "p10": float(q[0]), "p90": float(q[2])}


class CpuLoadMonitor:
    """Other processes' CPU use during the run (the machine is shared; see bench/workloads.cc)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.sys0 = self._system()
        self.self0 = self._self()
        self.load0 = os.getloadavg()[0]

    @staticmethod
    def _system():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return v[0] + v[1] + v[2] + v[5] + v[6], v[7]  # busy, steal (ticks)

    @staticmethod
    def _self():
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system  # seconds (RSS children included)

    def finish(self):
        wall = time.monotonic() - self.t0
        busy1, steal1 = self._system()
        hz = os.sysconf("SC_CLK_TCK")
        busy = (busy1 - self.sys0[0]) / hz
        own = self._self() - self.self0
        foreign = max(0.0, busy - own) / wall if wall > 0 else 0.0
        out = {"wall_s": wall, "foreign_cpu_cores": foreign, "steal_cpu_cores": (steal1 - self.sys0[1]) / hz / wall,
               "self_cpu_cores": own / wall, "loadavg_at_start": self.load0,
               "note": "foreign_cpu_cores: average cores other processes kept busy during the run; above ~0.25 the "
                       "timings are disturbed"}
        if foreign > 0.25:
            out["warning"] = "other processes used the CPUs during this run: timings are disturbed"
        return out


# ---- inputs ----------------------------------------------------------------------------------

def zipf_batches(rows, batch, bag_size, alpha, seed, num_batches):
    """[(ids int64 [batch * bag_size], offsets int64 [batch + 1])]: per bag bag_size distinct rows
    whose ranks follow Zipf(alpha) truncated to [1, rows] (alpha <= 1: uniform), rank k on row
    perm[k - 1] for a fixed random permutation (hot rows scattered over the table)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(rows).astype(np.int64)
    cdf = None
    if alpha > 1.0:
        cdf = np.cumsum(np.arange(1, rows + 1, dtype=np.float64) ** -alpha)
        cdf /= cdf[-1]

    def draw(shape):
        if cdf is None:
            return rng.integers(0, rows, size=shape, dtype=np.int64)
        return np.minimum(np.searchsorted(cdf, rng.random(shape)), rows - 1).astype(np.int64)

    offsets = np.arange(0, batch * bag_size + 1, bag_size, dtype=np.int64)
    out = []
    for _ in range(num_batches):
        # 4L draws per bag; each bag keeps its first L distinct ranks in draw order (repeats of an
        # earlier draw are skipped, as bench/zipf.cc does).
        m = 4 * bag_size
        cand = draw((batch, m))
        order = np.argsort(cand, axis=1, kind="stable")  # equal ranks stay in draw order
        srt = np.take_along_axis(cand, order, axis=1)
        dup = np.zeros_like(cand, dtype=bool)
        np.put_along_axis(dup, order[:, 1:], srt[:, 1:] == srt[:, :-1], axis=1)
        pos = np.broadcast_to(np.arange(m), cand.shape)
        keep = np.argsort(np.where(dup, m + pos, pos), axis=1)[:, :bag_size]
        ids = np.take_along_axis(cand, keep, axis=1)
        for b in np.nonzero(dup.sum(axis=1) > m - bag_size)[0]:  # fewer than L distinct: complete uniformly
            have = list(dict.fromkeys(int(x) for x in cand[b]))
            while len(have) < bag_size:
                x = int(rng.integers(0, rows))
                if x not in have:
                    have.append(x)
            ids[b] = have[:bag_size]
        out.append((perm[ids].reshape(-1), offsets))
    return out


def make_stream(a):
    batches = zipf_batches(a.rows, a.batch, a.bag_size, a.alpha, a.seed, a.num_batches)
    rng = np.random.default_rng(a.seed + 17)
    grad = (rng.random((a.batch, a.dim), dtype=np.float32) * 2.0 - 1.0) * 0.01
    return batches, grad.astype(np.float32)


def initial_weights(a):
    rng = np.random.default_rng(a.seed + 29)
    bound = np.float32(1.0 / math.sqrt(a.rows))
    w = rng.random((a.rows, a.dim), dtype=np.float32)
    w *= 2 * bound
    w -= bound
    return w


# ---- contenders ------------------------------------------------------------------------------

class TorchContender:
    def __init__(self, torch, kind, a, w0=None):
        self.torch, self.kind = torch, kind
        nn = torch.nn
        if w0 is not None:
            weight = torch.from_numpy(w0)  # shares w0's memory: no extra copy
            self.emb = nn.EmbeddingBag.from_pretrained(weight, freeze=False, mode="sum", sparse=True,
                                                       include_last_offset=True)
        else:
            self.emb = nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True, include_last_offset=True)
        p = self.emb.parameters()
        if kind == "sgd":
            self.opt = torch.optim.SGD(p, lr=a.lr)
        elif kind == "adagrad":
            self.opt = torch.optim.Adagrad(p, lr=a.lr, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                                           eps=1e-10)
        else:
            self.opt = torch.optim.SparseAdam(p, lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
        self.name = {"sgd": "torch SGD", "adagrad": "torch Adagrad", "adam": "torch SparseAdam"}[kind]

    def prepare(self, batches, grad):
        t = self.torch
        self.inputs = [(t.from_numpy(ids), t.from_numpy(off)) for ids, off in batches]
        self.grad = t.from_numpy(grad)

    def step(self, i):
        ids, off = self.inputs[i % len(self.inputs)]
        t0 = time.perf_counter()
        out = self.emb(ids, off)
        t1 = time.perf_counter()
        (out * self.grad).sum().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t0) * 1e3

    def forward(self, i):
        ids, off = self.inputs[i % len(self.inputs)]
        with self.torch.no_grad():
            return self.emb(ids, off).numpy()

    def weights(self):
        return self.emb.weight.detach().numpy()

    def bytes_per_param(self):
        w = self.emb.weight
        n = w.numel() * w.element_size()
        for st in self.opt.state.values():
            for v in st.values():
                if hasattr(v, "numel") and v.numel() > 1:
                    n += v.numel() * v.element_size()
        return n / w.numel()


class LeanembContender:
    """One table looked up by one pooled feature of _leanemb.Tables (docs/python.md, "The native
    module"), outputs written into a preallocated buffer."""

    def __init__(self, le, kind, a, dtype="fp32", state_dtype="fp32", w0=None):
        eps = {"sgd": 1e-8, "adagrad": 1e-10, "rowwise_adagrad": 1e-10, "adam": 1e-8}[kind]
        table = {"name": "table", "num_rows": a.rows, "dim": a.dim, "dtype": dtype, "optimizer": kind,
                 "learning_rate": a.lr, "eps": eps, "beta1": 0.9, "beta2": 0.999, "state_dtype": state_dtype}
        self.t = le.Tables([table], [{"name": "feature", "table": 0, "pooling": "sum"}],
                           {"num_threads": a.threads, "seed": a.seed})
        if w0 is not None:
            self.t.write_rows(0, 0, w0)
        self.rows, self.dim = a.rows, a.dim
        self.out = np.empty((a.batch, a.dim), np.float32)
        self.name = "leanemb %s %s%s" % (dtype, kind, "" if state_dtype == "fp32" else " state:" + state_dtype)

    def prepare(self, batches, grad):
        self.inputs = [([ids], [off]) for ids, off in batches]
        self.grad = grad

    def step(self, i):
        ids, off = self.inputs[i % len(self.inputs)]
        t0 = time.perf_counter()
        self.t.forward(len(off[0]) - 1, ids, off, [None], self.out, [])
        t1 = time.perf_counter()
        self.t.backward_update(len(off[0]) - 1, ids, off, [None], self.grad, [])
        t2 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t0) * 1e3

    def forward(self, i):
        ids, off = self.inputs[i % len(self.inputs)]
        self.t.forward(len(off[0]) - 1, ids, off, [None], self.out, [])
        return self.out.copy()

    def weights(self):
        return self.t.read_rows(0, 0, self.rows)

    def memory(self):
        """{category: {"current_bytes", "peak_bytes"}} summed over the tiers."""
        out = {}
        for tier in self.t.memory_stats().values():
            for cat, v in tier["categories"].items():
                o = out.setdefault(cat, {"current_bytes": 0, "peak_bytes": 0})
                o["current_bytes"] += v["current_bytes"]
                o["peak_bytes"] += v["peak_bytes"]
        return out

    def bytes_per_param(self):
        m = self.memory()
        return (m["weights"]["current_bytes"] + m["optimizer_state"]["current_bytes"]) / (self.rows * self.dim)


def max_rel_diff(ref, x, chunk=1 << 20):
    """max |x - ref| / (1 + |ref|), elementwise, in row chunks (tables are large)."""
    ref = ref.reshape(-1)
    x = x.reshape(-1)
    worst = 0.0
    for s in range(0, ref.size, chunk):
        r = ref[s:s + chunk].astype(np.float64)
        d = np.abs(x[s:s + chunk].astype(np.float64) - r) / (1.0 + np.abs(r))
        worst = max(worst, float(d.max()) if d.size else 0.0)
    return worst


# ---- one optimizer: torch vs leanemb, alternating blocks ---------------------------------------

def run_pair(torch, le, kind, a, batches, grad, log):
    log("%s: building both contenders (%d rows x %d)" % (kind, a.rows, a.dim))
    w0 = initial_weights(a)
    lean = LeanembContender(le, kind, a, w0=w0)
    tch = TorchContender(torch, kind, a, w0=w0)  # takes w0 over (shared memory)
    del w0
    for c in (tch, lean):
        c.prepare(batches, grad)
    fwd_before = max_rel_diff(tch.forward(0), lean.forward(0))

    for c in (tch, lean):
        for i in range(a.warmup):
            c.step(i)
    steps = {tch: [], lean: []}
    fwds = {tch: [], lean: []}
    block_ratios, block_fwd_ratios = [], []
    done = 0
    block_index = 0
    while done < a.steps:
        n = min(a.block, a.steps - done)
        order = (tch, lean) if block_index % 2 == 0 else (lean, tch)
        med = {}
        for c in order:
            bs, bf = [], []
            for k in range(n):
                f, s = c.step(a.warmup + done + k)
                bs.append(s)
                bf.append(f)
            steps[c] += bs
            fwds[c] += bf
            med[c] = (statistics.median(bs), statistics.median(bf))
        block_ratios.append(med[tch][0] / med[lean][0])
        block_fwd_ratios.append(med[tch][1] / med[lean][1])
        done += n
        block_index += 1
    log("%s: %d measured steps each; checking the updated weights" % (kind, a.steps))
    w_t = tch.weights()
    w_l = lean.weights()
    diff = max_rel_diff(w_t, w_l)
    del w_l
    fwd_after = max_rel_diff(tch.forward(1), lean.forward(1))
    res = {
        "optimizer": kind,
        "torch": {"name": tch.name, "step_ms": summary_ms(steps[tch]), "forward_ms": summary_ms(fwds[tch]),
                  "bytes_per_param": tch.bytes_per_param()},
        "leanemb": {"name": lean.name, "step_ms": summary_ms(steps[lean]), "forward_ms": summary_ms(fwds[lean]),
                    "bytes_per_param": lean.bytes_per_param(), "memory": lean.memory()},
        "step_ratio_torch_over_leanemb": statistics.median(block_ratios),
        "forward_ratio_torch_over_leanemb": statistics.median(block_fwd_ratios),
        "block_step_ratios": block_ratios,
        "ratio_method": "median over blocks of (torch median step / leanemb median step in the same block)",
        "correctness": {
            "forward_max_rel_diff_before": fwd_before,
            "weights_max_rel_diff_after": diff,
            "forward_max_rel_diff_after": fwd_after,
            "metric": "max |leanemb - torch| / (1 + |torch|)",
            "steps_applied": a.warmup + a.steps,
            "tolerance": TOLERANCE,
            "pass": bool(diff <= TOLERANCE and fwd_before <= TOLERANCE and fwd_after <= TOLERANCE),
        },
    }
    log("%s: step torch %.2f ms, leanemb %.2f ms, ratio %.2fx; weights max rel diff %.2e (%s)" % (
        kind, res["torch"]["step_ms"]["median"], res["leanemb"]["step_ms"]["median"],
        res["step_ratio_torch_over_leanemb"], diff, "pass" if res["correctness"]["pass"] else "FAIL"))
    return res


# ---- RSS of one contender in this (fresh) process ---------------------------------------------

def rss_only(a):
    le = import_leanemb(a.module_dir)
    name = a.rss_only
    torch = None
    if name.startswith("torch_"):
        import torch  # noqa: PLC0415 (only torch contenders pay for importing torch)
        torch.set_num_threads(a.threads)
    batches, grad = make_stream(a)
    baseline = rss_now_bytes()
    if name.startswith("torch_"):
        kind = {"torch_sgd": "sgd", "torch_adagrad": "adagrad", "torch_sparse_adam": "adam"}[name]
        c = TorchContender(torch, kind, a)
    else:
        spec = {
            "leanemb_sgd": ("sgd", "fp32", "fp32"),
            "leanemb_adagrad": ("adagrad", "fp32", "fp32"),
            "leanemb_adam": ("adam", "fp32", "fp32"),
            "leanemb_bf16_rowwise_adagrad": ("rowwise_adagrad", "bf16", "fp32"),
            "leanemb_bf16_adam_int8_state": ("adam", "bf16", "int8"),
        }[name]
        c = LeanembContender(le, spec[0], a, dtype=spec[1], state_dtype=spec[2])
    c.prepare(batches, grad)
    times = [c.step(i)[1] for i in range(a.rss_steps)]
    print(json.dumps({"contender": name, "peak_rss_bytes": own_peak_rss_bytes(), "ru_maxrss_bytes": peak_rss_bytes(),
                      "baseline_rss_bytes": baseline,
                      "bytes_per_param": c.bytes_per_param(), "steps": a.rss_steps,
                      "step_ms_median": statistics.median(times)}))


def measure_rss(a, log):
    out = {}
    common = ["--module-dir", a.module_dir, "--rows", str(a.rows), "--dim", str(a.dim), "--batch", str(a.batch),
              "--bag-size", str(a.bag_size), "--alpha", str(a.alpha), "--threads", str(a.threads),
              "--seed", str(a.seed), "--num-batches", str(a.num_batches), "--lr", str(a.lr),
              "--rss-steps", str(a.rss_steps)]
    for name in RSS_CONTENDERS:
        log("rss: %s in a fresh process" % name)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--rss-only", name] + common,
                           capture_output=True, text=True)
        if r.returncode != 0:
            out[name] = {"error": "exit %d: %s" % (r.returncode, r.stderr.strip()[-500:])}
            continue
        out[name] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


# ---- main --------------------------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    if a.rss_only:
        rss_only(a)
        return 0
    log = lambda msg: print("[peer_torch] " + msg, file=sys.stderr, flush=True)  # noqa: E731
    monitor = CpuLoadMonitor()
    le = import_leanemb(a.module_dir)
    import torch  # noqa: PLC0415
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    log("generating the input stream: %d batches x %d bags x %d ids over %d rows, alpha %.2f" % (
        a.num_batches, a.batch, a.bag_size, a.rows, a.alpha))
    batches, grad = make_stream(a)

    doc = {
        "benchmark": "peer_torch",
        "config": {"rows": a.rows, "dim": a.dim, "batch": a.batch, "bag_size": a.bag_size, "alpha": a.alpha,
                   "steps": a.steps, "warmup": a.warmup, "block": a.block, "threads": a.threads, "seed": a.seed,
                   "num_batches": a.num_batches, "lr": a.lr, "pooling": "sum",
                   "eps": {"sgd": None, "adagrad": 1e-10, "adam": 1e-8}, "betas": [0.9, 0.999],
                   "ids": "Zipf(alpha) ranks truncated to [1, rows], L distinct per bag, ranks scattered by a "
                          "fixed permutation (numpy, zipf_batches in bench/peer_torch.py)"},
        "machine": {"cpu_count": os.cpu_count(), "torch_version": torch.__version__,
                    "torch_threads": torch.get_num_threads(), "numpy_version": np.__version__},
        "pairs": [],
    }
    ok = True
    for kind in a.optimizers.split(","):
        res = run_pair(torch, le, kind, a, batches, grad, log)
        ok = ok and res["correctness"]["pass"]
        doc["pairs"].append(res)
    doc["main_process_peak_rss_bytes"] = peak_rss_bytes()
    doc["machine_load"] = monitor.finish()  # over the timed pairs (the RSS subprocesses are not timed)

    if not a.no_rss:
        rss = measure_rss(a, log)
        doc["rss"] = rss
        doc["rss_note"] = ("peak RSS (VmHWM, the high-water mark of the process's own address space) of a fresh "
                           "process that built only this contender and ran %d steps; baseline_rss_bytes is that "
                           "process's RSS before building it (interpreter, numpy, torch for torch contenders, the id "
                           "stream). ru_maxrss_bytes is also given but Linux carries ru_maxrss over fork + exec, so a "
                           "child reports at least the parent's RSS at fork" % a.rss_steps)
        ratios, net = {}, {}
        for t in ("torch_sgd", "torch_adagrad", "torch_sparse_adam"):
            for l in ("leanemb_sgd", "leanemb_adagrad", "leanemb_adam", "leanemb_bf16_rowwise_adagrad",
                      "leanemb_bf16_adam_int8_state"):
                rt, rl = rss.get(t, {}), rss.get(l, {})
                if "peak_rss_bytes" in rt and "peak_rss_bytes" in rl:
                    ratios["%s/%s" % (t, l)] = rt["peak_rss_bytes"] / rl["peak_rss_bytes"]
                    nl = rl["peak_rss_bytes"] - rl["baseline_rss_bytes"]
                    if nl > 0:
                        net["%s/%s" % (t, l)] = (rt["peak_rss_bytes"] - rt["baseline_rss_bytes"]) / nl
        doc["rss_ratios"] = ratios
        doc["rss_net_ratios"] = net
        doc["rss_net_note"] = "ratios of (peak - baseline): the growth due to the contender itself"

    doc["summary"] = {
        "step_ratio_torch_over_leanemb": {p["optimizer"]: p["step_ratio_torch_over_leanemb"] for p in doc["pairs"]},
        "forward_ratio_torch_over_leanemb": {p["optimizer"]: p["forward_ratio_torch_over_leanemb"] for p in doc["pairs"]},
        "weights_max_rel_diff": {p["optimizer"]: p["correctness"]["weights_max_rel_diff_after"] for p in doc["pairs"]},
        "correctness_pass": ok,
    }
    if "rss_ratios" in doc:
        doc["summary"]["rss_torch_sparse_adam_over_leanemb_bf16_rowwise_adagrad"] = doc["rss_ratios"].get(
            "torch_sparse_adam/leanemb_bf16_rowwise_adagrad")
        doc["summary"]["net_rss_torch_sparse_adam_over_leanemb_bf16_rowwise_adagrad"] = doc["rss_net_ratios"].get(
            "torch_sparse_adam/leanemb_bf16_rowwise_adagrad")

    print("\npeer_torch: E=%d D=%d B=%d L=%d alpha=%.2f, %d threads, %d warm-up + %d measured steps, blocks of %d" % (
        a.rows, a.dim, a.batch, a.bag_size, a.alpha, a.threads, a.warmup, a.steps, a.block))
    print("%-10s %24s %24s %8s %9s %11s %8s" % ("optimizer", "torch step ms", "leanemb step ms", "ratio",
                                               "fwd ratio", "max rel diff", "B/param"))
    for p in doc["pairs"]:
        ts, ls = p["torch"]["step_ms"], p["leanemb"]["step_ms"]
        print("%-10s %9.2f [%5.2f-%6.2f] %9.2f [%5.2f-%6.2f] %7.2fx %8.2fx %11.2e %3.1f/%3.1f" % (
            p["optimizer"], ts["median"], ts["p10"], ts["p90"], ls["median"], ls["p10"], ls["p90"],
            p["step_ratio_torch_over_leanemb"], p["forward_ratio_torch_over_leanemb"],
            p["correctness"]["weights_max_rel_diff_after"], p["torch"]["bytes_per_param"],
            p["leanemb"]["bytes_per_param"]))
    ml = doc["machine_load"]
    print("machine load during the timed pairs: other processes %.2f cores, steal %.2f cores%s" % (
        ml["foreign_cpu_cores"], ml["steal_cpu_cores"], "  WARNING: timings disturbed" if "warning" in ml else ""))
    if "rss" in doc:
        print("peak RSS per contender (fresh process each):")
        for name, r in doc["rss"].items():
            if "peak_rss_bytes" in r:
                print("  %-30s %8.1f MiB (baseline %6.1f MiB), %.3f B/param" % (
                    name, r["peak_rss_bytes"] / 2**20, r["baseline_rss_bytes"] / 2**20, r["bytes_per_param"]))
            else:
                print("  %-30s %s" % (name, r["error"]))
        v = doc["summary"].get("rss_torch_sparse_adam_over_leanemb_bf16_rowwise_adagrad")
        if v:
            print("  torch SparseAdam / leanemb bf16+RowwiseAdagrad peak RSS: %.2fx (net of baselines: %.2fx)" % (
                v, doc["summary"]["net_rss_torch_sparse_adam_over_leanemb_bf16_rowwise_adagrad"] or float("nan")))

    if a.json:
        d = os.path.dirname(a.json)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
        log("wrote %s" % a.json)
    if not ok:
        log("CORRECTNESS FAILED: leanemb and torch disagree beyond %.0e (see correctness in the JSON)" % TOLERANCE)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
