#!/usr/bin/env python3
"""nn_torch_optim_parity: leanemb's dense optimizers (src/nn/dense_optimizer.h) against torch.optim.

Runs the nn_optim_trace binary (argv[1]), which prints, for SGD, Adagrad and Adam cases, the
initial parameters, the gradients of each step, the grad_multiplier (1 / loss scale) and the
parameters and optimizer state after each step, all as exact hex floats. The same steps are
replayed with torch.optim.SGD / Adagrad / Adam on fp32 tensors (gradient multiplied by the
multiplier first, as GradScaler.unscale_ does) and every value must agree within
1e-6 relative (plus 1e-12 absolute, for exact zeros).

Exit code 77 (skip) when torch cannot be imported; 1 on a mismatch; prints nothing on success.
"""
import subprocess
import sys

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"nn_torch_optim_parity: skipped: {e}", file=sys.stderr)
    sys.exit(77)

RTOL, ATOL = 1e-6, 1e-12


def parse(text):
    """Cases: dict(kind, hyper, init{name: list}, steps[{grad, param, state}])."""
    cases = []
    for line in text.splitlines():
        f = line.split()
        if f[0] == "case":
            lr, wd, eps, b1, b2, mult = (float.fromhex(x) for x in f[2:8])
            cases.append(dict(kind=f[1], lr=lr, wd=wd, eps=eps, b1=b1, b2=b2, mult=mult,
                              init={}, steps=[{} for _ in range(int(f[8]))]))
        elif f[0] == "init":
            cases[-1]["init"][f[1]] = [float.fromhex(x) for x in f[2:]]
        else:
            step = cases[-1]["steps"][int(f[1]) - 1]
            step.setdefault(f[0], {})[f[2]] = [float.fromhex(x) for x in f[3:]]
    return cases


def make_optimizer(c, params):
    if c["kind"] == "sgd":
        return torch.optim.SGD(params, lr=c["lr"], weight_decay=c["wd"])
    if c["kind"] == "adagrad":
        return torch.optim.Adagrad(params, lr=c["lr"], lr_decay=0.0, weight_decay=c["wd"],
                                   initial_accumulator_value=0.0, eps=c["eps"])
    return torch.optim.Adam(params, lr=c["lr"], betas=(c["b1"], c["b2"]), eps=c["eps"], weight_decay=c["wd"])


TORCH_STATE = {"sum": "sum", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}


def check(what, got, want):
    got_t = torch.tensor(got, dtype=torch.float64)
    want_t = want.detach().to(torch.float64).flatten()
    bad = (got_t - want_t).abs() > ATOL + RTOL * want_t.abs()
    if bad.any():
        i = int(bad.nonzero()[0])
        print(f"{what}: element {i}: leanemb {got[i]!r}, torch {float(want_t[i])!r} "
              f"({int(bad.sum())} mismatches)", file=sys.stderr)
        return False
    return True


def run_case(c):
    params = {n: torch.tensor(v, dtype=torch.float32, requires_grad=True) for n, v in c["init"].items()}
    opt = make_optimizer(c, list(params.values()))
    ok = True
    for t, step in enumerate(c["steps"], start=1):
        for n, p in params.items():
            p.grad = torch.tensor(step["grad"][n], dtype=torch.float32) * c["mult"]
        opt.step()
        for n, p in params.items():
            ok &= check(f"{c['kind']} step {t} param {n}", step["param"][n], p)
        for full, values in step.get("state", {}).items():
            n, key = full.split(".", 1)
            ok &= check(f"{c['kind']} step {t} state {full}", values, opt.state[params[n]][TORCH_STATE[key]])
    return ok


def main():
    if len(sys.argv) != 2:
        print("usage: torch_optim_parity_test.py PATH_TO_nn_optim_trace", file=sys.stderr)
        return 2
    out = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    cases = parse(out)
    if len(cases) != 5:
        print(f"expected 5 cases from nn_optim_trace, got {len(cases)}", file=sys.stderr)
        return 1
    ok = all([run_case(c) for c in cases])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
