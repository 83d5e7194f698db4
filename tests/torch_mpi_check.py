#!/usr/bin/env python3
"""leanemb.torch with tables sharded over MPI (run by tests/torch_mpi.sh under mpirun -np P).

train: every rank takes its share of the same global batches (bags [r*B/P, (r+1)*B/P)) and of a
fixed output gradient, trains 6 steps of two row-wise sharded tables (Adagrad, Adam), checks
torch.distributed (gloo, from the MPI environment) with one all_reduce, then rank 0 writes every
table's rows and optimizer state to OUT/rows_P<P>.npz and all ranks save a (sharded) checkpoint
OUT/ckpt_P<P>. With fp32 payloads the rows are bit-identical at any P.
load: one process without sharding loads CKPT and writes its rows to OUT/loaded.npz.
"""
import argparse
import os
import sys

import leanemb  # noqa: F401  (before torch)
import numpy as np
import torch

import leanemb.torch as lt

B, STEPS = 8, 6
CFGS = dict(
    t0=dict(num_embeddings=37, embedding_dim=8, feature_names=["a", "b"], optimizer="adagrad", learning_rate=0.1),
    t1=dict(num_embeddings=20, embedding_dim=4, feature_names=["c"], pooling="mean", optimizer="adam", learning_rate=0.01),
)


def module(**kw):
    return lt.EmbeddingBagCollection([lt.EmbeddingBagConfig(name=n, **c) for n, c in CFGS.items()], num_threads=1, **kw)


def dump(m, path):
    d = {}
    for i, n in enumerate(CFGS):
        d[n + "_w"] = m.weight(i).numpy()
        d[n + "_s"] = m.optimizer_state(i).numpy()
    d["step"] = np.array(m.step_count)
    np.savez(path, **d)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("train", "load"))
    p.add_argument("--out", required=True)
    p.add_argument("--ckpt")
    a = p.parse_args()
    if a.mode == "load":
        m = module()
        m.load(a.ckpt)
        dump(m, os.path.join(a.out, "loaded.npz"))
        return 0
    rank, P = lt.init_distributed("gloo")
    t = torch.tensor([float(rank + 1)])
    torch.distributed.all_reduce(t)
    assert float(t) == P * (P + 1) / 2, float(t)
    m = module(sharding="row_modulo")
    assert (m.rank, m.world_size) == (rank, P)
    keys = ["a", "b", "c"]
    rng = np.random.default_rng(0)
    lo, hi = rank * B // P, (rank + 1) * B // P
    for _ in range(STEPS):
        lengths = rng.integers(0, 4, size=(3, B))
        ids = [rng.integers(0, 37 if k < 2 else 20, size=int(lengths[k].sum())) for k in range(3)]
        G = torch.tensor(rng.standard_normal((B, 8 + 8 + 4)), dtype=torch.float32)
        vals, lens = [], []
        for k in range(3):
            off = np.concatenate([[0], np.cumsum(lengths[k])])
            vals.append(ids[k][off[lo]:off[hi]])
            lens.append(lengths[k][lo:hi])
        kjt = lt.KeyedJaggedTensor(keys, torch.tensor(np.concatenate(vals)), lengths=torch.tensor(np.concatenate(lens)))
        (m(kjt).values() * G[lo:hi]).sum().backward()
    assert m.step_count == STEPS
    if rank == 0:
        dump(m, os.path.join(a.out, f"rows_P{P}.npz"))  # (the row readers are collective: rank 0 writes)
    else:
        for i in range(len(CFGS)):
            m.weight(i), m.optimizer_state(i)
    m.save(os.path.join(a.out, f"ckpt_P{P}"))
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
