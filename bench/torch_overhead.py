#!/usr/bin/env python3
"""Per-step overhead of leanemb.torch over the engine it calls (docs/python.md, "Zero-copy").

Three ways to run the same step (forward of a KeyedJaggedTensor, backward with a fixed output
gradient G, fused update) on the same tables and ids:

  engine   _leanemb.Tables.forward / backward_update with preallocated numpy buffers (the C++
           engine plus one pybind11 call each; the floor any Python binding has)
  module   leanemb.torch.EmbeddingBagCollection: KeyedJaggedTensor split, the autograd
           Function, output allocation, (out * G).sum().backward()
  torch    torch.nn.EmbeddingBag(sparse=True) per table + the matching torch optimizer (for scale)

Prints the median milliseconds per step of each, the module's overhead over the engine, the
load average and the CPU. Not a CI test.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/torch_overhead.py [--tables 4 --rows 100000 --dim 64 --batch 512 --bag 8]
"""
import argparse
import os
import subprocess
import time

import leanemb  # noqa: F401  (before torch: sets OMP_WAIT_POLICY=passive unless given)
import numpy as np
import torch

import leanemb.torch as lt


def median_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * float(np.median(ts))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tables", type=int, default=4)
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--bag", type=int, default=8)
    p.add_argument("--optimizer", default="adagrad")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: --threads)")
    p.add_argument("--reps", type=int, default=30)
    a = p.parse_args()
    torch.set_num_threads(a.torch_threads or a.threads)
    rng = np.random.default_rng(0)
    T, B, L, D = a.tables, a.batch, a.bag, a.dim
    keys = [f"f{i}" for i in range(T)]
    cfgs = [lt.EmbeddingBagConfig(name=f"t{i}", num_embeddings=a.rows, embedding_dim=D, feature_names=[keys[i]],
                                  optimizer=a.optimizer, learning_rate=0.01) for i in range(T)]
    ebc = lt.EmbeddingBagCollection(cfgs, num_threads=a.threads)
    values = torch.from_numpy(rng.integers(0, a.rows, size=T * B * L))
    lengths = torch.full((T * B,), L, dtype=torch.int64)
    kjt = lt.KeyedJaggedTensor(keys, values, lengths=lengths)
    G = torch.from_numpy(rng.standard_normal((B, T * D)).astype(np.float32))

    def module_step():
        (ebc(kjt).values() * G).sum().backward()

    # the engine alone, on the module's own native object (twins empty)
    tab = ebc.tables
    ids = [values[i * B * L:(i + 1) * B * L].numpy() for i in range(T)]
    offs = [np.arange(0, B * L + 1, L, dtype=np.int64) for _ in range(T)]
    ids_all = ids + [np.zeros(0, np.int64)] * T
    offs_all = offs + [np.zeros(B + 1, np.int64)] * T
    ws = [None] * (2 * T)
    out = np.empty((B, T * D), np.float32)
    seq = [np.empty((0, D), np.float32) for _ in range(T)]
    g = G.numpy()

    def engine_step():
        tab.forward(B, ids_all, offs_all, ws, out, seq)
        tab.backward_update(B, ids_all, offs_all, ws, g, seq, 1.0, True)

    bags = [torch.nn.EmbeddingBag(a.rows, D, mode="sum", sparse=True) for _ in range(T)]
    params = [b.weight for b in bags]
    opt = (torch.optim.Adagrad(params, lr=0.01) if a.optimizer == "adagrad" else
           torch.optim.SparseAdam(params, lr=0.01) if a.optimizer == "adam" else torch.optim.SGD(params, lr=0.01))
    tids = [torch.from_numpy(x) for x in ids]
    toffs = [torch.from_numpy(o[:-1]) for o in offs]

    def torch_step():
        opt.zero_grad()
        o = torch.cat([bags[i](tids[i], toffs[i]) for i in range(T)], 1)
        (o * G).sum().backward()
        opt.step()

    res = {}
    for name, fn in (("engine", engine_step), ("module", module_step), ("torch", torch_step)):
        res[name] = median_ms(fn, a.reps)
    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip()
    print(f"shape: {T} tables x {a.rows} rows x {D}, batch {B}, bag {L}, {a.optimizer}, {a.threads} threads")
    for k, v in res.items():
        print(f"{k:7s} {v:8.3f} ms/step")
    print(f"module overhead over engine: {res['module'] - res['engine']:.3f} ms/step "
          f"({100 * (res['module'] / res['engine'] - 1):.1f}%)")
    print(f"copies made by the module: {ebc.copies}")
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; load average: {os.getloadavg()}; {cpu}")


if __name__ == "__main__":
    main()
