#!/usr/bin/env python3
"""DLRM end to end: the same CTR model on the same data, trained by PyTorch and by leanemb in one run.

Run with Debian's python3 (the one that has python3-torch), after building leanemb and _leanemb:

    /usr/bin/python3 bench/dlrm_torch.py [--config examples/ctr_small.toml] [--json FILE]
    /usr/bin/python3 bench/dlrm_torch.py --train-rows 100000          # quick run, ~1 minute

For each config, leanemb and torch are trained one after the other (who goes first alternates
from one config to the next), each in a fresh child process measured the same way:

  * leanemb: `build/release/leanemb train --config CFG --set ... --json-summary FILE --quiet`.
  * torch:   this script with --torch-child (internal): the batches come from leanemb's own data
    reader (_leanemb.read_ctr, python/leanemb_py.cc), so both sides train on exactly the same
    batches in the same order (labels, log1p-transformed dense features, hashed ids); the model
    is built from the same config: nn.EmbeddingBag(rows, dim, mode=pooling, sparse=True) per
    sparse feature (init U(-1/sqrt(rows), 1/sqrt(rows)), leanemb's default), bottom MLP
    (nn.Linear + ReLU after every layer), DLRM "dot" interaction (z, then the strictly lower
    triangle of [z, e_1..e_F] [z, e_1..e_F]^T, as torch.tril_indices(F+1, F+1, -1)) or "cat",
    top MLP (nn.Linear + ReLU, then a 1-wide nn.Linear), BCEWithLogitsLoss (mean). Embedding
    optimizer: torch.optim.Adagrad (eps 1e-10, as leanemb) for adagrad and rowwise_adagrad,
    SparseAdam for adam and partial_rowwise_adam, SGD for sgd, always on fp32 rows and fp32 state
    (the PyTorch baseline); the dense optimizer as configured ([dense], torch.optim.Adam by
    default). torch.set_num_threads(--threads); leanemb runs with train.threads = --threads.

Configs: "default" is the config file as-is; "lean" adds --lean-set (default: embedding.dtype=bf16,
embedding.optimizer=rowwise_adagrad), the memory-lean leanemb config, against the same fp32
PyTorch baseline. --set applies to both (and to both sides). leanemb also gets
train.checkpoint_every=0 (no checkpoint inside the timed loop; the final one is written after
the timer stops) and train.threads.

Measured per side: samples/s of training (leanemb: its `samples_per_s`, which includes reading
and parsing the TSV inside the loop; torch: training steps over preloaded batches, data loading
excluded and reported separately), eval AUC (exact, ties count one half) and logloss (p clipped to
[1e-7, 1 - 1e-7]) on the eval file, and the peak RSS of the child process (GNU time's %M, i.e.
ru_maxrss of the child, when /usr/bin/time exists, else wait4's ru_maxrss; the torch child also
reports its own VmHWM). The torch child's peak includes the interpreter, torch and the preloaded
batches (reported as preloaded_train_bytes). Ratios: leanemb/torch samples/s, leanemb/torch peak
RSS, leanemb AUC - torch AUC. Output: JSON (--json) and a table on stdout.

Shared machine: for each child the script records /proc/loadavg before and after and the average
cores other processes kept busy meanwhile (foreign_cpu_cores, from /proc/stat minus our own
children's CPU time); a child above 0.25 such cores is run again (--retry-disturbed, default 2) and
the least disturbed attempt is reported (all attempts are listed). Both OpenMP runtimes slow down
sharply when the 2 cores are shared, so a disturbed samples/s ratio means little. The run stops
if the config or data files change under it (another job regenerating the data).
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

DEFAULT_LEAN_SETS = ["embedding.dtype=bf16", "embedding.optimizer=rowwise_adagrad"]

# Torch's counterpart of each leanemb embedding optimizer (fp32 rows and state on the torch side).
TORCH_EMB_OPT = {"sgd": "sgd", "adagrad": "adagrad", "rowwise_adagrad": "adagrad", "adam": "adam",
                 "partial_rowwise_adam": "adam"}

# Acceptance of the issue: AUC equal or better, samples/s >= 3x, peak RSS <= 0.3x (lean config).
AUC_EQUAL_TOLERANCE = 0.001
# Average cores of other processes' CPU use during a child above which its timing is disturbed.
DISTURBED_FOREIGN_CORES = 0.25


def log(msg):
    print("[dlrm_torch] " + msg, file=sys.stderr, flush=True)


# ---- config: the keys the torch side needs, with leanemb's defaults (src/train/config.{h,cc}) -----

def parse_value(text):
    import tomllib  # noqa: PLC0415 (Python 3.11+)
    try:
        return tomllib.loads("v = " + text)["v"]
    except tomllib.TOMLDecodeError:
        return text  # as leanemb: a value that is not TOML is taken as a string


def apply_sets(doc, sets):
    for s in sets:
        if "=" not in s:
            sys.exit("dlrm_torch.py: --set %r: expected section.key=value" % s)
        key, value = s.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) < 2:
            sys.exit("dlrm_torch.py: --set %r: expected section.key=value" % s)
        t = doc
        for p in parts[:-1]:
            t = t.setdefault(p, {})
        t[parts[-1]] = parse_value(value.strip())
    return doc


def load_config(path, sets):
    import tomllib  # noqa: PLC0415
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    return apply_sets(doc, sets)


def as_list(v):
    return v if isinstance(v, list) else [v]


def torch_spec(doc, threads):
    """The torch side's model, optimizer and data settings from a parsed leanemb config."""
    d, g, m = doc.get("data", {}), doc.get("data", {}).get("gen", {}), doc.get("model", {})
    e, dn, t = doc.get("embedding", {}), doc.get("dense", {}), doc.get("train", {})
    data_dir = d.get("dir", "")
    ext = ".bin" if g.get("format", "tsv") == "bin" else ".tsv"
    train_files = as_list(d.get("train", [])) or ([data_dir + "/train" + ext] if d.get("generate") else [])
    eval_files = as_list(d.get("eval", [])) or ([data_dir + "/eval" + ext] if d.get("generate") else [])
    num_sparse = int(d.get("num_sparse", 26))
    rows = as_list(m.get("table_rows", 100000))
    rows = rows * num_sparse if len(rows) == 1 else rows
    emb_opt = e.get("optimizer", "adagrad")
    if emb_opt not in TORCH_EMB_OPT:
        sys.exit("dlrm_torch.py: embedding.optimizer %r has no torch counterpart here" % emb_opt)
    torch_opt = TORCH_EMB_OPT[emb_opt]
    default_eps = 1e-10 if emb_opt in ("adagrad", "rowwise_adagrad") else 1e-8  # leanemb's default_eps()
    dense_opt = dn.get("optimizer", "adam")
    spec = {
        "train_files": train_files, "eval_files": eval_files, "data_dir": data_dir,
        "generate": bool(d.get("generate", False)),
        "num_dense": int(d.get("num_dense", 13)), "num_sparse": num_sparse, "max_len": int(d.get("max_len", 0)),
        "shuffle_buffer": int(d.get("shuffle_buffer", 0)), "eval_rows": int(d.get("eval_rows", 0)),
        "embedding_dim": int(m.get("embedding_dim", 16)), "table_rows": [int(r) for r in rows],
        "bottom_mlp": [int(w) for w in as_list(m.get("bottom_mlp", [64, 16]))],
        "top_mlp": [int(w) for w in as_list(m.get("top_mlp", [64, 32]))],
        "interaction": m.get("interaction", "dot"), "pooling": m.get("pooling", "sum"),
        "leanemb_row_dtype": e.get("dtype", "fp32"), "leanemb_row_optimizer": emb_opt,
        "emb_optimizer": torch_opt, "emb_lr": float(e.get("learning_rate", 0.05)),
        "emb_eps": float(e.get("eps", default_eps)), "emb_betas": [float(e.get("beta1", 0.9)), float(e.get("beta2", 0.999))],
        "emb_weight_decay": float(e.get("weight_decay", 0.0)),
        "emb_init": e.get("init", "uniform"), "emb_init_bound": float(e.get("init_bound", 0.0)),
        "emb_init_std": float(e.get("init_std", 1.0)),
        "dense_optimizer": dense_opt, "dense_lr": float(dn.get("learning_rate", 0.001)),
        "dense_eps": float(dn.get("eps", 1e-10 if dense_opt == "adagrad" else 1e-8)),
        "dense_betas": [float(dn.get("beta1", 0.9)), float(dn.get("beta2", 0.999))],
        "dense_weight_decay": float(dn.get("weight_decay", 0.0)),
        "batch_size": int(t.get("batch_size", 1024)), "steps": int(t.get("steps", 0)),
        "epochs": int(t.get("epochs", 1)), "precision": t.get("precision", "fp32"),
        "micro_batches": int(t.get("micro_batches", 1)), "seed": int(t.get("seed", 1)), "threads": threads,
    }
    if spec["precision"] != "fp32":
        sys.exit("dlrm_torch.py: train.precision %r: the torch side here is fp32 only" % spec["precision"])
    if spec["pooling"] not in ("sum", "mean"):
        sys.exit("dlrm_torch.py: model.pooling %r: EmbeddingBag pools with sum or mean" % spec["pooling"])
    if spec["interaction"] not in ("dot", "cat"):
        sys.exit("dlrm_torch.py: unknown model.interaction %r" % spec["interaction"])
    if spec["emb_weight_decay"] != 0.0:
        sys.exit("dlrm_torch.py: embedding.weight_decay: torch's sparse optimizers do not support it")
    if spec["steps"] > 0 and spec["shuffle_buffer"] > 0:
        sys.exit("dlrm_torch.py: train.steps with data.shuffle_buffer is not supported (use epochs)")
    return spec


# ---- metrics -----------------------------------------------------------------------------------

def roc_auc(labels, scores):
    """Exact ROC AUC (Mann-Whitney U / (P N)); tied scores count one half (average ranks)."""
    import numpy as np  # noqa: PLC0415
    y = np.asarray(labels, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(s, kind="mergesort")
    s, y = s[order], y[order]
    n = s.size
    first = np.empty(n, dtype=bool)
    first[0] = True
    first[1:] = s[1:] != s[:-1]
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], n)
    avg_rank = (starts + 1 + ends) / 2.0  # 1-based ranks starts+1..ends
    ranks = avg_rank[np.cumsum(first) - 1]
    p = float(y.sum())
    q = n - p
    if p == 0 or q == 0:
        return float("nan")
    return float((ranks[y == 1].sum() - p * (p + 1) / 2.0) / (p * q))


def mean_logloss(labels, probs, eps=1e-7):
    import numpy as np  # noqa: PLC0415
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probs, dtype=np.float64), eps, 1.0 - eps)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log(1.0 - p)))


# ---- the torch child -----------------------------------------------------------------------------

def proc_status_bytes(key, pid="self"):
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def torch_child(spec_path, result_path, module_dir):
    import resource  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    sys.path.insert(0, os.path.abspath(module_dir))
    import _leanemb  # noqa: PLC0415

    with open(spec_path) as f:
        sp = json.load(f)
    torch.set_num_threads(sp["threads"])
    torch.manual_seed(sp["seed"])
    baseline_rss = proc_status_bytes("VmRSS")
    B, F, D = sp["batch_size"], sp["num_sparse"], sp["embedding_dim"]

    def read(files, epochs, max_batches=0):
        return _leanemb.read_ctr(files, sp["num_dense"], F, sp["table_rows"], B, max_batches=max_batches,
                                 shuffle_buffer=sp["shuffle_buffer"], seed=sp["seed"], num_epochs=epochs,
                                 max_len=sp["max_len"])

    def to_torch(batches):
        out = []
        for labels, dense, sparse in batches:
            out.append((torch.from_numpy(labels), torch.from_numpy(dense),
                        [(torch.from_numpy(i), torch.from_numpy(o)) for i, o in sparse]))
        return out

    def nbytes(batches):
        return sum(lab.nbytes + den.nbytes + sum(i.nbytes + o.nbytes for i, o in sp_) for lab, den, sp_ in batches)

    # Data: leanemb's reader, all batches preloaded (not timed as training).
    t0 = time.perf_counter()
    # With shuffling, each epoch's order differs (seeded by epoch): read every epoch. Without, one
    # epoch's list is replayed.
    read_epochs = sp["epochs"] if sp["shuffle_buffer"] > 0 and sp["steps"] == 0 else 1
    raw = read(sp["train_files"], read_epochs)
    train_bytes = nbytes(raw)
    train = to_torch(raw)
    del raw
    load_s = time.perf_counter() - t0
    if sp["steps"] > 0:
        schedule = [train[i % len(train)] for i in range(sp["steps"])]
    else:
        schedule = train * (sp["epochs"] // read_epochs)
    rss_after_load = proc_status_bytes("VmRSS")

    # Model.
    class Dlrm(nn.Module):
        def __init__(self):
            super().__init__()
            self.embs = nn.ModuleList()
            for rows in sp["table_rows"]:
                e = nn.EmbeddingBag(rows, D, mode=sp["pooling"], sparse=True, include_last_offset=True)
                with torch.no_grad():
                    if sp["emb_init"] == "uniform":
                        b = sp["emb_init_bound"] if sp["emb_init_bound"] > 0 else 1.0 / math.sqrt(rows)
                        e.weight.uniform_(-b, b)
                    elif sp["emb_init"] == "normal":
                        e.weight.normal_(0.0, sp["emb_init_std"])
                    else:
                        e.weight.zero_()
                self.embs.append(e)
            layers, w_in = [], sp["num_dense"]
            for w in sp["bottom_mlp"]:
                layers += [nn.Linear(w_in, w), nn.ReLU()]
                w_in = w
            self.bottom = nn.Sequential(*layers)
            zd = sp["bottom_mlp"][-1]
            if sp["interaction"] == "dot":
                li, lj = torch.tril_indices(F + 1, F + 1, offset=-1)
                self.register_buffer("li", li, persistent=False)
                self.register_buffer("lj", lj, persistent=False)
                w_in = zd + (F + 1) * F // 2
            else:
                w_in = zd + F * D
            layers = []
            for w in sp["top_mlp"]:
                layers += [nn.Linear(w_in, w), nn.ReLU()]
                w_in = w
            layers.append(nn.Linear(w_in, 1))
            self.top = nn.Sequential(*layers)

        def forward(self, dense, sparse):
            z = self.bottom(dense)
            pooled = [emb(ids, off) for emb, (ids, off) in zip(self.embs, sparse)]
            if sp["interaction"] == "dot":
                t = torch.stack([z] + pooled, dim=1)          # [B, F+1, d]
                zz = torch.bmm(t, t.transpose(1, 2))           # [B, F+1, F+1]
                r = torch.cat([z, zz[:, self.li, self.lj]], dim=1)
            else:
                r = torch.cat([z] + pooled, dim=1)
            return self.top(r).squeeze(1)

    model = Dlrm()
    emb_params = [e.weight for e in model.embs]
    dense_params = list(model.bottom.parameters()) + list(model.top.parameters())
    if sp["emb_optimizer"] == "adagrad":
        emb_opt = torch.optim.Adagrad(emb_params, lr=sp["emb_lr"], lr_decay=0, weight_decay=0,
                                      initial_accumulator_value=0, eps=sp["emb_eps"])
    elif sp["emb_optimizer"] == "adam":
        emb_opt = torch.optim.SparseAdam(emb_params, lr=sp["emb_lr"], betas=tuple(sp["emb_betas"]), eps=sp["emb_eps"])
    else:
        emb_opt = torch.optim.SGD(emb_params, lr=sp["emb_lr"])
    if sp["dense_optimizer"] == "adam":
        dense_opt = torch.optim.Adam(dense_params, lr=sp["dense_lr"], betas=tuple(sp["dense_betas"]),
                                     eps=sp["dense_eps"], weight_decay=sp["dense_weight_decay"])
    elif sp["dense_optimizer"] == "adagrad":
        dense_opt = torch.optim.Adagrad(dense_params, lr=sp["dense_lr"], eps=sp["dense_eps"],
                                        weight_decay=sp["dense_weight_decay"])
    else:
        dense_opt = torch.optim.SGD(dense_params, lr=sp["dense_lr"], weight_decay=sp["dense_weight_decay"])
    loss_fn = nn.BCEWithLogitsLoss()
    k = max(1, sp["micro_batches"])

    # Training (timed: forward, backward, both optimizer steps).
    model.train()
    samples, loss_sum, loss_n, last_losses = 0, 0.0, 0, []
    t0 = time.perf_counter()
    for labels, dense, sparse in schedule:
        emb_opt.zero_grad(set_to_none=True)
        dense_opt.zero_grad(set_to_none=True)
        n = labels.shape[0]
        if k == 1:
            loss = loss_fn(model(dense, sparse), labels)
            loss.backward()
            lv = float(loss)
        else:  # micro-batches: each loss weighted by its share of the batch (as leanemb)
            lv = 0.0
            for i in range(min(k, n)):
                b0, b1 = n * i // k, n * (i + 1) // k
                sub = [(ids[off[b0]:off[b1]], off[b0:b1 + 1] - off[b0]) for ids, off in sparse]
                part = loss_fn(model(dense[b0:b1], sub), labels[b0:b1]) * ((b1 - b0) / n)
                part.backward()
                lv += float(part)
        emb_opt.step()
        dense_opt.step()
        samples += n
        loss_sum += lv
        loss_n += 1
        if loss_n == 100:
            last_losses.append(loss_sum / loss_n)
            loss_sum, loss_n = 0.0, 0
    train_s = time.perf_counter() - t0
    if loss_n:
        last_losses.append(loss_sum / loss_n)
    steps = len(schedule)
    rss_after_train = proc_status_bytes("VmRSS")
    del schedule, train

    # Eval (the eval file through the same reader; the training batches are freed first).
    model.eval()
    max_eval_batches = (sp["eval_rows"] + B - 1) // B if sp["eval_rows"] > 0 else 0
    labels_all, probs_all = [], []
    t0 = time.perf_counter()
    with torch.no_grad():
        for labels, dense, sparse in to_torch(_leanemb.read_ctr(
                sp["eval_files"], sp["num_dense"], F, sp["table_rows"], B, max_batches=max_eval_batches,
                max_len=sp["max_len"])):
            probs_all.append(torch.sigmoid(model(dense, sparse)).numpy())
            labels_all.append(labels.numpy())
    eval_s = time.perf_counter() - t0
    y = np.concatenate(labels_all)
    p = np.concatenate(probs_all)
    if sp["eval_rows"] > 0:
        y, p = y[:sp["eval_rows"]], p[:sp["eval_rows"]]

    res = {
        "samples_per_s": samples / train_s if train_s > 0 else 0.0,
        "samples_per_s_includes": "forward, backward and both optimizer steps over batches preloaded in memory "
                                  "(data loading excluded: see data_load_seconds)",
        "train_seconds": train_s, "steps": steps, "samples": samples,
        "step_ms_mean": 1e3 * train_s / steps if steps else None,
        "loss_last_100_steps": last_losses[-1] if last_losses else None,
        "eval_auc": roc_auc(y, p), "eval_logloss": mean_logloss(y, p), "eval_rows": int(y.size),
        "eval_seconds": eval_s, "data_load_seconds": load_s,
        "preloaded_train_bytes": train_bytes,
        "baseline_rss_bytes": baseline_rss, "rss_after_load_bytes": rss_after_load,
        "rss_after_train_bytes": rss_after_train,
        "self_vmhwm_bytes": proc_status_bytes("VmHWM"),
        "self_ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
        "embedding_optimizer": type(emb_opt).__name__, "dense_optimizer": type(dense_opt).__name__,
        "embedding_parameter_bytes": sum(w.numel() * w.element_size() for w in emb_params),
    }
    with open(result_path, "w") as f:
        json.dump(res, f, indent=2)


# ---- running and measuring a child -------------------------------------------------------------

def read_loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def system_busy_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return v[0] + v[1] + v[2] + v[5] + v[6]


def run_measured(cmd, workdir, name, env):
    """Runs cmd as a child; returns rc, wall, peak RSS (GNU time %M or wait4), CPU use of others."""
    stdout_p = os.path.join(workdir, name + ".stdout")
    stderr_p = os.path.join(workdir, name + ".stderr")
    rss_p = os.path.join(workdir, name + ".maxrss")
    use_time = os.access("/usr/bin/time", os.X_OK)
    full = (["/usr/bin/time", "-f", "%M", "-o", rss_p] + cmd) if use_time else cmd
    load0 = read_loadavg()
    busy0 = system_busy_ticks()
    t_self0 = os.times()
    t0 = time.monotonic()
    with open(stdout_p, "w") as so, open(stderr_p, "w") as se:
        p = subprocess.Popen(full, stdout=so, stderr=se, env=env)
        vmhwm = 0
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid != 0:
                break
            if not use_time:  # VmHWM of the child as a cross-check (misses its last ~50 ms)
                vmhwm = max(vmhwm, proc_status_bytes("VmHWM", p.pid))
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    rc = p.returncode
    hz = os.sysconf("SC_CLK_TCK")
    busy = (system_busy_ticks() - busy0) / hz
    t_self1 = os.times()
    own = sum(t_self1[i] - t_self0[i] for i in range(4))  # this process + its waited-for children
    peak, method = None, None
    if use_time:
        try:
            with open(rss_p) as f:
                peak = int(f.read().strip().splitlines()[-1]) * 1024
                method = "GNU time %M (ru_maxrss of the child, kB)"
        except (OSError, ValueError, IndexError):
            pass
    if peak is None:
        peak = ru.ru_maxrss * 1024
        method = ("wait4 ru_maxrss of the child (Linux counts the parent's RSS at fork in it; VmHWM polled every "
                  "50 ms: %d bytes)" % vmhwm)
    with open(stderr_p) as f:
        err_tail = f.read()[-2000:]
    with open(stdout_p) as f:
        out_text = f.read()
    return {"rc": rc, "wall_seconds": wall, "peak_rss_bytes": peak, "peak_rss_method": method,
            "loadavg_before": load0, "loadavg_after": read_loadavg(),
            "foreign_cpu_cores": max(0.0, busy - own) / wall if wall > 0 else 0.0,
            "stderr_tail": err_tail, "stdout": out_text}


def run_leanemb(a, cfg_sets, workdir, name, env):
    summary = os.path.join(workdir, name + ".summary.json")
    out = os.path.join(workdir, name + ".out")
    sets = list(cfg_sets) + ["train.checkpoint_every=0", "train.threads=%d" % a.threads]
    cmd = [a.leanemb, "train", "--config", a.config, "--out", out, "--json-summary", summary, "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    log("%s: leanemb train (%s)" % (name, ", ".join(sets)))
    r = run_measured(cmd, workdir, name, env)
    if r["rc"] != 0:
        sys.exit("dlrm_torch.py: leanemb train failed (exit %d):\n%s" % (r["rc"], r["stderr_tail"]))
    with open(summary) as f:
        s = json.load(f)
    shutil.rmtree(out, ignore_errors=True)
    ev = s.get("eval") or {}
    return {
        "samples_per_s": s["samples_per_s"],
        "samples_per_s_includes": "leanemb train's samples_per_s: every training step including reading and "
                                  "parsing the TSV batches inside the loop (no checkpoint inside the loop: "
                                  "train.checkpoint_every=0; eval and the final checkpoint come after the timer)",
        "train_seconds": s["train_seconds"], "steps": s["steps"], "samples": s["samples"],
        "step_ms_mean": 1e3 * s["train_seconds"] / s["steps"] if s["steps"] else None,
        "loss_last_log": s.get("loss"),
        "eval_auc": ev.get("auc"), "eval_logloss": ev.get("logloss"), "eval_rows": ev.get("rows"),
        "teacher_auc": s.get("teacher_auc"),
        "peak_rss_bytes": r["peak_rss_bytes"], "peak_rss_method": r["peak_rss_method"],
        "engine_memory_peaks": s.get("memory"), "embedding_table_bytes": s.get("embedding_table_bytes"),
        "weights_and_state_bytes": s.get("weights_and_state_bytes"), "config": s.get("config"),
        "data": s.get("data"), "wall_seconds": r["wall_seconds"], "loadavg_before": r["loadavg_before"],
        "loadavg_after": r["loadavg_after"], "foreign_cpu_cores": r["foreign_cpu_cores"],
        "command": " ".join(cmd),
    }


def run_torch(a, spec, workdir, name, env):
    spec_p = os.path.join(workdir, name + ".spec.json")
    res_p = os.path.join(workdir, name + ".result.json")
    with open(spec_p, "w") as f:
        json.dump(spec, f, indent=1)
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-child", spec_p, "--torch-result", res_p,
           "--module-dir", a.module_dir]
    log("%s: torch (EmbeddingBag sparse + %s, dense %s)" % (name, spec["emb_optimizer"], spec["dense_optimizer"]))
    r = run_measured(cmd, workdir, name, env)
    if r["rc"] != 0:
        sys.exit("dlrm_torch.py: the torch child failed (exit %d):\n%s" % (r["rc"], r["stderr_tail"]))
    with open(res_p) as f:
        res = json.load(f)
    res.update({"peak_rss_bytes": r["peak_rss_bytes"], "peak_rss_method": r["peak_rss_method"],
                "wall_seconds": r["wall_seconds"], "loadavg_before": r["loadavg_before"],
                "loadavg_after": r["loadavg_after"], "foreign_cpu_cores": r["foreign_cpu_cores"],
                "command": " ".join(cmd)})
    return res


# ---- main --------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="examples/ctr_small.toml", help="leanemb TOML config (both sides)")
    p.add_argument("--module-dir", default="build/release", help="directory holding _leanemb*.so")
    p.add_argument("--leanemb", default="build/release/leanemb", help="the leanemb CLI")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every config and both sides (repeatable)")
    p.add_argument("--lean-set", action="append", default=None, metavar="KEY=VALUE",
                   help="the memory-lean config's overrides (repeatable; default: %s)" % " ".join(DEFAULT_LEAN_SETS))
    p.add_argument("--configs", default="default,lean", help="comma list of default, lean")
    p.add_argument("--train-rows", type=int, default=0, help="train on the first N records only (0 = all)")
    p.add_argument("--epochs", type=int, default=1, help="train.epochs for both sides")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--retry-disturbed", type=int, default=2, metavar="N",
                   help="run a child again (up to N times) when other processes used > %.2f cores during it; the "
                        "least disturbed attempt is reported, all are listed" % DISTURBED_FOREIGN_CORES)
    p.add_argument("--json", default="bench/results/dlrm_torch.json")
    p.add_argument("--keep-workdir", action="store_true", help="keep the children's logs and summaries")
    p.add_argument("--torch-child", metavar="SPEC", help=argparse.SUPPRESS)
    p.add_argument("--torch-result", metavar="FILE", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.lean_set is None:
        a.lean_set = list(DEFAULT_LEAN_SETS)
    for c in a.configs.split(","):
        if c not in ("default", "lean"):
            p.error("unknown config %r in --configs" % c)
    if a.train_rows < 0 or a.epochs < 1 or a.threads < 1 or a.retry_disturbed < 0:
        p.error("--train-rows and --retry-disturbed must be >= 0, --epochs and --threads >= 1")
    return a


def ensure_data(a, spec, env):
    missing = [f for f in spec["train_files"] + spec["eval_files"] if not os.path.exists(f)]
    if not missing:
        return
    if not spec["generate"]:
        sys.exit("dlrm_torch.py: missing data files: %s" % ", ".join(missing))
    log("generating the data (missing: %s) with a 1-step leanemb train" % ", ".join(missing))
    tmp = tempfile.mkdtemp(prefix="dlrm_torch_gen_")
    cmd = [a.leanemb, "train", "--config", a.config, "--steps", "1", "--out", tmp, "--quiet"]
    for s in a.set:
        cmd += ["--set", s]
    r = subprocess.run(cmd, env=env)
    shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode != 0:
        sys.exit("dlrm_torch.py: generating the data failed (exit %d)" % r.returncode)


def head_file(src, dst, n):
    """The first n lines of a TSV file; returns the lines written."""
    k = 0
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        for line in fi:
            if k == n:
                break
            fo.write(line)
            k += 1
    return k


def fingerprint(paths):
    """(path, size, mtime_ns, inode) of each file: the run is void if any changes under it (shared machine)."""
    out = []
    for path in paths:
        st = os.stat(path)
        out.append([path, st.st_size, st.st_mtime_ns, st.st_ino])
    return out


def ratio(x, y):
    return x / y if (x is not None and y not in (None, 0)) else None


def main(argv=None):
    a = parse_args(argv)
    if a.torch_child:
        torch_child(a.torch_child, a.torch_result, a.module_dir)
        return 0
    if not os.access(a.leanemb, os.X_OK):
        sys.exit("dlrm_torch.py: %s is not executable; build it: cmake --preset release && "
                 "cmake --build --preset release" % a.leanemb)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    load_start = read_loadavg()
    t_start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="dlrm_torch_")
    common_sets = list(a.set) + ["train.epochs=%d" % a.epochs]
    base_spec = torch_spec(load_config(a.config, common_sets), a.threads)
    ensure_data(a, base_spec, env)

    train_note = "all records of %s" % ", ".join(base_spec["train_files"])
    if a.train_rows > 0:
        if len(base_spec["train_files"]) != 1 or not base_spec["train_files"][0].endswith(".tsv"):
            sys.exit("dlrm_torch.py: --train-rows needs one TSV train file")
        sub = os.path.join(workdir, "train_head.tsv")
        got = head_file(base_spec["train_files"][0], sub, a.train_rows)
        common_sets.append('data.train=["%s"]' % sub)
        train_note = "the first %d records of %s (copied to a temporary file both sides read)" % (
            got, base_spec["train_files"][0])

    doc = {
        "benchmark": "dlrm_torch",
        "what": "the same DLRM-style CTR model trained on the same batches by PyTorch (EmbeddingBag sparse=True + "
                "torch.optim sparse optimizer, fp32) and by leanemb (`leanemb train`), each in a fresh child "
                "process, one after the other; ratios are leanemb / torch within this run",
        "command": " ".join(["/usr/bin/python3", "bench/dlrm_torch.py"] + (argv if argv is not None else sys.argv[1:])),
        "config_file": a.config, "common_sets": common_sets, "data_files": None, "train_data": train_note,
        "threads": a.threads, "cpu_count": os.cpu_count(),
        "notes": {
            "samples_per_s": "leanemb: includes reading/parsing TSV inside the loop; torch: preloaded batches, "
                             "data loading excluded (data_load_seconds)",
            "peak_rss_bytes": "peak RSS of each child process (GNU time %M), measured alike for both; the torch "
                              "child's peak includes the interpreter + torch (baseline_rss_bytes) and the preloaded "
                              "training batches (preloaded_train_bytes); peak_rss_ratio_vs_torch_without_data "
                              "divides by (torch peak - preloaded_train_bytes)",
            "auc": "exact ROC AUC on the eval file, ties one half; leanemb's own eval (data::roc_auc) vs this "
                   "script's numpy implementation for torch; logloss with p clipped to [1e-7, 1-1e-7]",
            "torch_side": "always fp32 rows and fp32 optimizer state: Adagrad for leanemb adagrad/rowwise_adagrad, "
                          "SparseAdam for adam/partial_rowwise_adam",
        },
        "configs": {},
    }
    watched = [a.config] + base_spec["eval_files"] + (
        [os.path.join(workdir, "train_head.tsv")] if a.train_rows > 0 else base_spec["train_files"])
    fp0 = fingerprint(watched)
    doc["data_files"] = [{"path": f[0], "bytes": f[1], "mtime_ns": f[2]} for f in fp0]
    meta = os.path.join(base_spec["data_dir"], "meta.json") if base_spec["data_dir"] else None
    if meta and os.path.exists(meta):
        with open(meta) as f:
            doc["data_meta"] = json.load(f)
    order_flip = False
    for cname in a.configs.split(","):
        sets = common_sets + (a.lean_set if cname == "lean" else [])
        spec = torch_spec(load_config(a.config, sets), a.threads)
        res = {"leanemb_sets": sets, "torch_spec": spec}
        runs = [("leanemb", lambda: run_leanemb(a, sets, workdir, cname + "_leanemb", env)),
                ("torch", lambda: run_torch(a, spec, workdir, cname + "_torch", env))]
        if order_flip:
            runs.reverse()
        res["order"] = [r[0] for r in runs]
        for side, fn in runs:
            attempts = []
            while True:
                attempts.append(fn())
                if fingerprint(watched) != fp0:
                    sys.exit("dlrm_torch.py: the config or data files changed during the run (%s): the sides did "
                             "not see the same data; run again" % ", ".join(watched))
                f = attempts[-1]["foreign_cpu_cores"]
                if f <= DISTURBED_FOREIGN_CORES or len(attempts) > a.retry_disturbed:
                    break
                log("%s/%s: other processes used %.2f cores during it: running it again" % (cname, side, f))
            s = res[side] = min(attempts, key=lambda r: r["foreign_cpu_cores"])
            s["attempts"] = [{"samples_per_s": r["samples_per_s"], "foreign_cpu_cores": r["foreign_cpu_cores"],
                              "eval_auc": r["eval_auc"], "peak_rss_bytes": r["peak_rss_bytes"]} for r in attempts]
            log("%s/%s: %.0f samples/s, AUC %.4f, logloss %.4f, peak RSS %.1f MiB, %d steps" % (
                cname, side, s["samples_per_s"], s["eval_auc"], s["eval_logloss"],
                (s["peak_rss_bytes"] or 0) / 2**20, s["steps"]))
        order_flip = not order_flip
        le, to = res["leanemb"], res["torch"]
        torch_net = (to["peak_rss_bytes"] - to["preloaded_train_bytes"]) if to["peak_rss_bytes"] else None
        res["ratios"] = {
            "samples_per_s_leanemb_over_torch": ratio(le["samples_per_s"], to["samples_per_s"]),
            "peak_rss_leanemb_over_torch": ratio(le["peak_rss_bytes"], to["peak_rss_bytes"]),
            "peak_rss_ratio_vs_torch_without_data": ratio(le["peak_rss_bytes"], torch_net),
            "auc_leanemb_minus_torch": le["eval_auc"] - to["eval_auc"],
            "logloss_leanemb_minus_torch": le["eval_logloss"] - to["eval_logloss"],
        }
        busy = {side: res[side]["foreign_cpu_cores"] for side in ("leanemb", "torch")
                if res[side]["foreign_cpu_cores"] > DISTURBED_FOREIGN_CORES}
        if busy:
            res["load_warning"] = ("other processes kept %s busy while %s ran (> %.2f cores): the samples/s "
                                   "figures and their ratio are disturbed" % (
                                       " and ".join("%.2f cores" % v for v in busy.values()),
                                       " and ".join(busy), DISTURBED_FOREIGN_CORES))
        if le["steps"] != to["steps"]:
            res["warning"] = "the sides trained different numbers of steps (%d vs %d)" % (le["steps"], to["steps"])
        doc["configs"][cname] = res

    doc["teacher_auc"] = next((r["leanemb"].get("teacher_auc") for r in doc["configs"].values()), None)
    if "lean" in doc["configs"]:
        r = doc["configs"]["lean"]["ratios"]
        doc["acceptance_lean_config"] = {
            "auc_equal_or_better": r["auc_leanemb_minus_torch"] >= -AUC_EQUAL_TOLERANCE,
            "auc_tolerance": AUC_EQUAL_TOLERANCE,
            "samples_per_s_at_least_3x": r["samples_per_s_leanemb_over_torch"] >= 3.0,
            "peak_rss_at_most_0.3x": r["peak_rss_leanemb_over_torch"] is not None
            and r["peak_rss_leanemb_over_torch"] <= 0.3,
        }
    doc["machine_load"] = {"loadavg_start": load_start, "loadavg_end": read_loadavg(),
                           "wall_seconds": time.monotonic() - t_start,
                           "note": "loadavg = /proc/loadavg (1, 5, 15 min); per child: foreign_cpu_cores = average "
                                   "cores other processes kept busy while it ran (2 cores here)"}

    print("\ndlrm_torch: %s, %s, %d threads" % (a.config, train_note, a.threads))
    print("%-8s %-8s %12s %8s %8s %10s %6s %8s" % ("config", "side", "samples/s", "AUC", "logloss", "peak RSS",
                                                    "steps", "others"))
    for cname, res in doc["configs"].items():
        for side in ("leanemb", "torch"):
            s = res[side]
            print("%-8s %-8s %12.0f %8.4f %8.4f %7.1f MiB %6d %7.2fc" % (
                cname, side, s["samples_per_s"], s["eval_auc"], s["eval_logloss"], (s["peak_rss_bytes"] or 0) / 2**20,
                s["steps"], s["foreign_cpu_cores"]))
        r = res["ratios"]
        print("%-8s ratios: samples/s %.2fx, peak RSS %.3fx (%.3fx of torch without its preloaded data), "
              "AUC %+.4f, logloss %+.4f" % (
                  cname, r["samples_per_s_leanemb_over_torch"] or float("nan"),
                  r["peak_rss_leanemb_over_torch"] or float("nan"),
                  r["peak_rss_ratio_vs_torch_without_data"] or float("nan"),
                  r["auc_leanemb_minus_torch"], r["logloss_leanemb_minus_torch"]))
        if "load_warning" in res:
            print("%-8s WARNING: %s" % (cname, res["load_warning"]))
    if doc["teacher_auc"] is not None:
        print("teacher AUC on eval (the planted model that labelled the data): %.4f" % doc["teacher_auc"])
    ml = doc["machine_load"]
    print("load average: start %s, end %s" % (" ".join("%.2f" % x for x in ml["loadavg_start"]),
                                               " ".join("%.2f" % x for x in ml["loadavg_end"])))
    if "acceptance_lean_config" in doc:
        print("acceptance (lean config): %s" % json.dumps(doc["acceptance_lean_config"]))

    if a.json:
        d = os.path.dirname(a.json)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
        log("wrote %s" % a.json)
    if a.keep_workdir:
        log("children's files kept in %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
