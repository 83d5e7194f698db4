#!/usr/bin/env python3
"""torch_parity: leanemb (fp32 rows and state) against PyTorch itself.

For SGD, Adagrad and Adam (torch.optim.SGD / Adagrad / SparseAdam) and the pooling modes sum,
mean and weighted sum, 20 steps of nn.EmbeddingBag(sparse=True) and of _leanemb.Tables (the
native table interface under leanemb.torch: one table, one feature) start from identical
weights, see identical ids (duplicates within and across bags, an empty bag) and the same fixed
random gradient G of loss = (out * G).sum(); forward outputs and weights and optimizer state
must agree within 1e-5 * (1 + |value|) at every step.

Run by CTest with PYTHONPATH at the _leanemb module. Exit code 77 (skip) when torch, numpy or
_leanemb cannot be imported; 1 on a mismatch; prints nothing when it passes.
"""
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"torch_parity: skipped: {e}", file=sys.stderr)
    sys.exit(77)
try:
    import _leanemb
except ImportError as e:  # pragma: no cover - module not built
    print(f"torch_parity: skipped: _leanemb not importable: {e}", file=sys.stderr)
    sys.exit(77)

ROWS, DIM, BATCH, STEPS = 40, 12, 8, 20
ADAGRAD_EPS, ADAM_EPS = 1e-10, 1e-8


def make_batch(rng):
    """ids with duplicates within and across bags; bag 2 is empty. offsets has B + 1 entries."""
    lengths = rng.integers(1, 6, size=BATCH)
    lengths[2] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = rng.integers(0, ROWS // 3, size=int(offsets[-1])).astype(np.int64)
    return ids, offsets


def close(got, want):
    return np.abs(np.asarray(got, np.float64) - want) <= 1e-5 * (1.0 + np.abs(want))


def first_mismatch(got, want):
    bad = np.argwhere(~close(got, want))
    idx = tuple(bad[0])
    return f"at {idx}: leanemb {np.asarray(got)[idx]!r}, torch {np.asarray(want)[idx]!r} ({len(bad)} mismatches)"


def torch_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, lr_decay=0.0, initial_accumulator_value=0.0, eps=ADAGRAD_EPS)
    return torch.optim.SparseAdam(params, lr=lr, betas=(0.9, 0.999), eps=ADAM_EPS)


def compare_state(optimizer, opt, param, got):
    """leanemb's read_state() is [rows, states * dim]: Adagrad sum; Adam exp_avg then exp_avg_sq."""
    if optimizer == "sgd":
        return ""
    st = opt.state[param]
    parts = [st["sum"]] if optimizer == "adagrad" else [st["exp_avg"], st["exp_avg_sq"]]
    want = np.concatenate([t.to_dense().numpy().astype(np.float64) for t in parts], axis=1)
    if np.shape(got) != want.shape:
        return f"(get_state shape {np.shape(got)}, torch {want.shape})"
    return "" if close(got, want).all() else first_mismatch(got, want)


class OneTable:
    """One table looked up by one feature of _leanemb.Tables, over numpy arrays."""

    def __init__(self, optimizer, mode, lr, eps):
        table = {"name": "table", "num_rows": ROWS, "dim": DIM, "dtype": "fp32", "optimizer": optimizer,
                 "learning_rate": lr, "eps": eps, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0,
                 "state_dtype": "fp32"}
        self.t = _leanemb.Tables([table], [{"name": "feature", "table": 0, "pooling": mode}],
                                 {"num_threads": 2, "seed": 0, "use_reference_kernels": False})

    def set_weights(self, w):
        self.t.write_rows(0, 0, np.ascontiguousarray(w, np.float32))

    def get_weights(self):
        return self.t.read_rows(0, 0, ROWS)

    def get_state(self):
        return self.t.read_state(0, 0, ROWS)

    def forward(self, ids, offsets, psw):
        out = np.empty((len(offsets) - 1, DIM), np.float32)
        self.t.forward(len(offsets) - 1, [ids], [offsets], [psw], out, [])
        return out

    def backward_update(self, ids, offsets, grad, psw):
        self.t.backward_update(len(offsets) - 1, [ids], [offsets], [psw], grad, [])

    @property
    def step(self):
        return self.t.step


def run_case(optimizer, mode, weighted, seed):
    """Returns a list of failure messages (empty when leanemb matches torch)."""
    rng = np.random.default_rng(seed)
    lr = 0.1 if optimizer == "sgd" else 0.05
    eps = ADAGRAD_EPS if optimizer == "adagrad" else ADAM_EPS
    w0 = rng.uniform(-0.5, 0.5, size=(ROWS, DIM)).astype(np.float32)

    bag = torch.nn.EmbeddingBag(ROWS, DIM, mode=mode, sparse=True, include_last_offset=True)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(w0))
    opt = torch_optimizer(optimizer, bag.parameters(), lr)

    col = OneTable(optimizer, mode, lr, eps)
    col.set_weights(w0)
    if not np.array_equal(col.get_weights(), w0):
        return ["set_weights/get_weights do not round-trip fp32 weights"]

    failures = []
    for step in range(1, STEPS + 1):
        ids, offsets = make_batch(rng)
        psw = rng.uniform(0.25, 1.75, size=ids.shape).astype(np.float32) if weighted else None
        grad = rng.standard_normal((BATCH, DIM)).astype(np.float32)

        out_t = bag(torch.from_numpy(ids), torch.from_numpy(offsets),
                    per_sample_weights=None if psw is None else torch.from_numpy(psw))
        loss = (out_t * torch.from_numpy(grad)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

        out_l = col.forward(ids, offsets, psw)
        want_out = out_t.detach().numpy().astype(np.float64)
        if np.shape(out_l) != want_out.shape or not close(out_l, want_out).all():
            failures.append(f"step {step}: forward output differs " +
                            (first_mismatch(out_l, want_out) if np.shape(out_l) == want_out.shape
                             else f"(shape {np.shape(out_l)} vs {want_out.shape})"))
            break
        col.backward_update(ids, offsets, grad, psw)

        want_w = bag.weight.detach().numpy().astype(np.float64)
        got_w = col.get_weights()
        if not close(got_w, want_w).all():
            failures.append(f"step {step}: weights differ " + first_mismatch(got_w, want_w))
            break
        msg = compare_state(optimizer, opt, bag.weight, col.get_state())
        if msg:
            failures.append(f"step {step}: optimizer state differs {msg}")
            break
    if not failures and col.step != STEPS:
        failures.append(f"step count {col.step} after {STEPS} steps")
    return failures


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    all_failures = []
    cases = [(opt, mode, weighted) for opt in ("sgd", "adagrad", "adam")
             for (mode, weighted) in (("sum", False), ("mean", False), ("sum", True))]
    for i, (opt, mode, weighted) in enumerate(cases):
        for msg in run_case(opt, mode, weighted, seed=100 + i):
            all_failures.append(f"{opt} / {mode}{' weighted' if weighted else ''}: {msg}")
    if all_failures:
        print("torch_parity: FAILED\n  " + "\n  ".join(all_failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
