#!/usr/bin/env python3
"""A DLRM-style CTR model in PyTorch whose embedding tables are leanemb's (leanemb.torch).

The model of `leanemb train` (examples/ctr_small.toml): 13 dense features -> bottom MLP 64, 16;
26 categorical features, each with its own table of `--rows` rows x 16 (pooled sum); the dot
interaction of the 27 vectors; top MLP 64, 32 -> 1; Adam on the dense part, the tables' fused
optimizer (Adagrad, lr 0.05 by default) applied inside backward.

Data: `--data DIR` reads DIR/train.tsv and DIR/eval.tsv (Criteo TSV, e.g. data/ctr_small written
by `leanemb train`) with leanemb's own reader; without it a small synthetic set with a planted
logistic teacher is generated in memory (what CI runs: `--steps 60 --check`).

    PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_dlrm.py --steps 200
    PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_dlrm.py --data data/ctr_small \
        --dtype bf16 --optimizer rowwise_adagrad
    PYTHONPATH=build/release/python mpirun -np 2 /usr/bin/python3 examples/torch_dlrm.py --dist
    PYTHONPATH=build/release/python mpirun -np 2 /usr/bin/python3 examples/torch_dlrm.py --dist \
        --grad-groups 4 --save runs/dlrm_p2     # deterministic: the same digest as one process

Deterministic mode (--grad-groups G; docs/python.md, "Deterministic mode"): each global batch is
cut into G contiguous gradient groups; each group's dense gradient is computed on its own (loss =
the sum of its per-sample losses / the global batch size) and the step's dense gradient is the
fixed-order sum of the G group gradients (leanemb's tree, nn/grad_groups.h); the lookup and the
fused update run once per step on the rank's whole slice; torch runs on 1 thread. One process
and mpirun -np P (G a multiple of P, G and P powers of two, or P = G) then give the same
embedding digest (printed at the end) and dense parameters (--save DIR/dense.npz) bit for bit.

Prints the training loss every --log-every steps, then eval loss and AUC, samples/s, the peak
RSS and the tables' embedding digest (equal for the same state at any process count).
`--embedding torch` runs the same model with nn.EmbeddingBag(sparse=True) tables and the
matching torch optimizer instead (fp32 rows), for comparison: run each in its own process (the
peak RSS is the process's). --check exits 1 unless the loss of the last tenth of the steps is
below the first tenth's and the eval AUC beats 0.55.
"""
import argparse
import os
import sys
import time

import leanemb  # noqa: F401  (before torch: OpenMP waits passively, docs/python.md)
import numpy as np
import torch

import leanemb.torch as lt

NUM_DENSE, NUM_SPARSE, DIM = 13, 26, 16


def synthetic(rng, n, rows, teacher):
    """Rows of a planted teacher: logit = dense . a + sum_f b_f[id_f] (+ noise); ids Zipf-like."""
    dense = rng.standard_normal((n, NUM_DENSE)).astype(np.float32)
    ids = np.minimum(rng.zipf(1.3, size=(n, NUM_SPARSE)) - 1, rows - 1).astype(np.int64)
    logit = dense @ teacher["a"] + teacher["b"][np.arange(NUM_SPARSE), ids].sum(1) - 1.0
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return labels, dense, ids


def synthetic_batches(rng, n, rows, batch, teacher):
    labels, dense, ids = synthetic(rng, n, rows, teacher)
    out = []
    for s in range(0, n - batch + 1, batch):
        sl = slice(s, s + batch)
        # KJT layout: feature-major, one id per bag
        values = torch.from_numpy(np.ascontiguousarray(ids[sl].T).reshape(-1))
        out.append((torch.from_numpy(labels[sl]), torch.from_numpy(dense[sl]), values,
                    torch.ones(NUM_SPARSE * batch, dtype=torch.int64)))
    return out


def file_batches(path, rows, batch, max_batches):
    """Streams batches of a Criteo TSV / leanemb binary file (leanemb's reader, one batch held)."""
    import leanemb  # noqa: PLC0415
    reader = leanemb._C.CtrReader(path, NUM_DENSE, NUM_SPARSE, rows, batch)
    for n, (labels, dense, values, lengths) in enumerate(reader):
        if max_batches and n >= max_batches:
            break
        yield torch.from_numpy(labels), torch.from_numpy(dense), torch.from_numpy(values), torch.from_numpy(lengths)


def group_slice(B, G, rank, P):
    """Rank `rank` of P computes gradient groups [g0, g1) = records [lo, hi) of a batch of B cut
    into G contiguous groups, group g = records [B*g/G, B*(g+1)/G) (leanemb's nn/grad_groups.h)."""
    g0, g1 = rank * G // P, (rank + 1) * G // P
    return g0, g1, B * g0 // G, B * g1 // G


def fixed_order_sum(parts):
    """The sum of equal-shaped tensors in leanemb's fixed order (dist::Communicator::
    reduce_in_fixed_order): a pairwise tree ((p0 + p1) + (p2 + p3)) + ... when their number is a
    power of two, else (((p0 + p1) + p2) + ...) in order."""
    n = len(parts)
    if n & (n - 1):
        out = parts[0].clone()
        for x in parts[1:]:
            out += x
        return out
    while len(parts) > 1:
        parts = [parts[i] + parts[i + 1] for i in range(0, len(parts), 2)]
    return parts[0].clone()


def shard_batch(batch, rank, P):
    """This rank's bags [rank * B / P, (rank + 1) * B / P) of a global batch."""
    B = batch[0].numel()
    return record_slice(batch, rank * B // P, (rank + 1) * B // P)


def record_slice(batch, lo, hi):
    """Bags [lo, hi) of a global batch (every feature's)."""
    labels, dense, values, lengths = batch
    B = labels.numel()
    off = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=off[1:])
    vals = [values[off[k * B + lo]:off[k * B + hi]] for k in range(NUM_SPARSE)]
    return labels[lo:hi], dense[lo:hi], torch.cat(vals), lengths.view(NUM_SPARSE, B)[:, lo:hi].reshape(-1)


def mlp(sizes, last_act=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class TorchBags(torch.nn.Module):
    """The same tables as torch.nn.EmbeddingBag(sparse=True) (--embedding torch), initialized as
    leanemb initializes its rows (U(-1/sqrt(rows), 1/sqrt(rows)))."""

    def __init__(self, rows):
        super().__init__()
        self.bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(rows, DIM, mode="sum", sparse=True) for _ in range(NUM_SPARSE))
        for b in self.bags:
            torch.nn.init.uniform_(b.weight, -rows ** -0.5, rows ** -0.5)

    def forward(self, kjt):
        outs = []
        for i, b in enumerate(self.bags):
            ids, off, _ = kjt.feature(f"c{i}")
            outs.append(b(ids, off[:-1]))
        return lt.KeyedTensor([f"c{i}" for i in range(NUM_SPARSE)], [DIM] * NUM_SPARSE, torch.cat(outs, 1))


class DLRM(torch.nn.Module):
    def __init__(self, rows, dtype, optimizer, lr, threads, embedding="leanemb", sharding=None, world_size=1):
        super().__init__()
        self.keys = [f"c{i}" for i in range(NUM_SPARSE)]
        if embedding == "torch":
            self.ebc = TorchBags(rows)
        else:
            self.ebc = lt.EmbeddingBagCollection(
                [lt.EmbeddingBagConfig(name=f"t{i}", num_embeddings=rows, embedding_dim=DIM, feature_names=[k],
                                       dtype=dtype, optimizer=optimizer, learning_rate=lr)
                 for i, k in enumerate(self.keys)], num_threads=threads, sharding=sharding,
                # Data parallel: each rank's loss is the mean over its own bags and the sharded
                # update sums every rank's gradient, so 1 / P makes it the global mean's gradient.
                loss_scale=float(world_size))
        self.bottom = mlp([NUM_DENSE, 64, DIM])
        n = NUM_SPARSE + 1
        self.top = mlp([n * (n - 1) // 2 + DIM, 64, 32, 1], last_act=False)
        iu = torch.triu_indices(n, n, offset=1)
        self.register_buffer("iu0", iu[0], persistent=False)
        self.register_buffer("iu1", iu[1], persistent=False)

    def embed(self, values, lengths):
        """The pooled lookups [B, 26 * D] (their backward runs the tables' fused update)."""
        return self.ebc(lt.KeyedJaggedTensor(self.keys, values, lengths=lengths)).values()

    def dense_forward(self, dense, pooled):
        x = self.bottom(dense)                                   # [B, D]
        e = pooled.view(-1, NUM_SPARSE, DIM)                     # [B, 26, D]
        z = torch.cat([x.unsqueeze(1), e], 1)                    # [B, 27, D]
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.iu0, self.iu1]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)

    def forward(self, dense, values, lengths):
        return self.dense_forward(dense, self.embed(values, lengths))


def grouped_step(model, params, batch, B, G, rank, P):
    """One step's gradients in deterministic mode (--grad-groups G): this rank's records [lo, hi)
    are looked up once; each of its groups runs the dense part on its own, its loss the sum of
    its per-sample losses / B (the global batch), and its dense gradient is kept apart; the
    step's dense gradient is the fixed-order sum of the G group gradients (this rank's groups,
    then the P ranks' partials gathered and summed in the same fixed order), left in p.grad.
    The pooled output's backward (the fused update) runs once with the gradient of every bag of
    the slice. Returns this rank's share of the loss (a float)."""
    labels, dense, values, lengths = batch
    g0, g1, lo, hi = group_slice(B, G, rank, P)
    pooled = model.embed(values, lengths)                       # [hi - lo, 26 * D], once per step
    detached = pooled.detach()
    pooled_grad = torch.zeros_like(detached)
    parts, loss = [], 0.0
    for p in params:
        p.grad = None
    for g in range(g0, g1):
        a, b = B * g // G - lo, B * (g + 1) // G - lo
        # Fresh contiguous tensors: the group's kernels see the same shapes and alignment at any P.
        e = detached[a:b].clone().requires_grad_(True)
        lg = torch.nn.functional.binary_cross_entropy_with_logits(
            model.dense_forward(dense[a:b].clone(), e), labels[a:b].clone(), reduction="sum") / B
        lg.backward()
        pooled_grad[a:b] = e.grad
        parts.append(torch.cat([p.grad.reshape(-1) for p in params]))
        for p in params:
            p.grad = None
        loss += float(lg)
    pooled.backward(pooled_grad)                                # the tables are updated here
    total = fixed_order_sum(parts)
    if P > 1:
        gathered = [torch.empty_like(total) for _ in range(P)]
        torch.distributed.all_gather(gathered, total)           # copies: exact
        total = fixed_order_sum(gathered)
    o = 0
    for p in params:
        p.grad = total[o:o + p.numel()].view_as(p)
        o += p.numel()
    return loss


def auc(labels, scores):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    npos, nneg = pos.sum(), (~pos).sum()
    if npos == 0 or nneg == 0:
        return float("nan")
    return float((ranks[pos].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="directory with train.tsv and eval.tsv (Criteo TSV); default: synthetic")
    p.add_argument("--rows", type=int, default=1000, help="rows per table (ids are hashed into them)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=200, help="training steps (0 = the whole train file)")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--optimizer", default="adagrad")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--dense-lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2,
                   help="threads of the engine and of torch (torch: 1 with --grad-groups)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--eval-batches", type=int, default=0, help="--data: eval batches read (0 = the whole eval file)")
    p.add_argument("--embedding", choices=("leanemb", "torch"), default="leanemb",
                   help="torch: the same tables as nn.EmbeddingBag(sparse=True) + the matching torch optimizer "
                        "(sgd: SGD, adagrad: Adagrad, adam: SparseAdam; fp32 rows)")
    p.add_argument("--dist", action="store_true",
                   help="under mpirun -np P: tables sharded row-wise over MPI, the dense part in DistributedDataParallel "
                        "(gloo), or in gradient groups with --grad-groups; each rank trains on its 1/P of every batch")
    p.add_argument("--grad-groups", type=int, default=0, metavar="G",
                   help="deterministic mode: every batch in G gradient groups summed in a fixed order, torch on 1 "
                        "thread; one process and mpirun -np P (G a multiple of P; G, P powers of two or P = G) "
                        "train bit-identically (0 = off: one backward per step, DDP with --dist)")
    p.add_argument("--save", metavar="DIR",
                   help="after training: the tables' checkpoint DIR/checkpoints/step-<N> (leanemb's format; sharded "
                        "with --dist) and the dense parameters DIR/dense.npz")
    p.add_argument("--check", action="store_true", help="exit 1 unless the loss decreased and the AUC > 0.55")
    a = p.parse_args()
    G = a.grad_groups
    if G < 0:
        p.error("--grad-groups must be >= 0")
    if (a.dist or G) and a.embedding != "leanemb":
        p.error("--dist and --grad-groups need --embedding leanemb")
    rank, P = lt.init_distributed("gloo") if a.dist else (0, 1)
    if G and G % P:
        p.error(f"--grad-groups {G} must be a multiple of the number of processes ({P})")
    log = print if rank == 0 else (lambda *x, **k: None)
    torch.manual_seed(a.seed)  # the same initial dense weights on every rank
    # torch's CPU kernels may split their sums by thread: deterministic mode runs torch on one.
    torch.set_num_threads(1 if G else a.threads)
    rng = np.random.default_rng(a.seed)
    if a.data:
        train = file_batches(os.path.join(a.data, "train.tsv"), a.rows, a.batch_size, a.steps)
        evals = file_batches(os.path.join(a.data, "eval.tsv"), a.rows, a.batch_size, a.eval_batches)
    else:
        teacher = {"a": rng.standard_normal(NUM_DENSE).astype(np.float32) * 0.3,
                   "b": rng.standard_normal((NUM_SPARSE, a.rows)).astype(np.float32) * 0.4}
        train = synthetic_batches(rng, a.steps * a.batch_size, a.rows, a.batch_size, teacher)
        evals = synthetic_batches(rng, 20 * a.batch_size, a.rows, a.batch_size, teacher)
    # DDP: each rank's loss is the mean over its own bags and the sharded update sums every rank's
    # gradient, so the tables divide it by P. Gradient groups normalize by the global batch.
    model = DLRM(a.rows, a.dtype, a.optimizer, a.lr, a.threads, a.embedding,
                 sharding="row_modulo" if a.dist else None, world_size=1 if G else P)
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("ebc.")]
    net = model
    if G:
        # (global batch size, this rank's records): a rank's records are its groups' records.
        train = ((b[0].numel(), record_slice(b, *group_slice(b[0].numel(), G, rank, P)[2:])) for b in train)
    elif a.dist:
        train = (shard_batch(b, rank, P) for b in train)
        net = torch.nn.parallel.DistributedDataParallel(model)  # same initial dense weights on every rank
    opt = torch.optim.Adam(dense_params, lr=a.dense_lr)
    sparse_opt = None
    if a.embedding == "torch":
        params = list(model.ebc.parameters())
        sparse_opt = {"sgd": lambda: torch.optim.SGD(params, lr=a.lr),
                      "adagrad": lambda: torch.optim.Adagrad(params, lr=a.lr, eps=1e-10),
                      "adam": lambda: torch.optim.SparseAdam(params, lr=a.lr)}[a.optimizer]()
    loss_fn = torch.nn.BCEWithLogitsLoss()
    losses = []
    t0 = time.perf_counter()
    for step, batch in enumerate(train, 1):
        opt.zero_grad()
        if sparse_opt is not None:
            sparse_opt.zero_grad()
        if G:
            B, batch = batch
            loss = grouped_step(model, dense_params, batch, B, G, rank, P)
            if P > 1:  # (for the log only: the global batch's mean loss)
                t = torch.tensor([loss], dtype=torch.float64)
                torch.distributed.all_reduce(t)
                loss = float(t)
        else:
            labels, dense, values, lengths = batch
            loss = loss_fn(net(dense, values, lengths), labels)
            loss.backward()          # leanemb: the embedding tables are updated here
        opt.step()
        if sparse_opt is not None:
            sparse_opt.step()
        losses.append(float(loss))
        if step % a.log_every == 0:
            log(f"step {step} loss {np.mean(losses[-a.log_every:]):.4f}", flush=True)
    secs = time.perf_counter() - t0
    model.eval()
    ys, ss = [], []
    with torch.no_grad():
        for labels, dense, values, lengths in evals:
            ys.append(labels.numpy())
            ss.append(model(dense, values, lengths).numpy())
    y, s = np.concatenate(ys), np.concatenate(ss)
    eval_loss = float(loss_fn(torch.from_numpy(s), torch.from_numpy(y)))
    eval_auc = auc(y, s)
    n = max(1, len(losses) // 10)
    first, last = float(np.mean(losses[:n])), float(np.mean(losses[-n:]))
    log(f"trained {len(losses)} steps in {secs:.2f} s ({len(losses) * a.batch_size / secs:.0f} samples/s); "
          f"loss first {first:.4f} last {last:.4f}; eval loss {eval_loss:.4f} auc {eval_auc:.4f}")
    import resource  # noqa: PLC0415
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    log(f"embedding {a.embedding}: samples/s {len(losses) * a.batch_size / secs:.0f}, peak RSS {peak_rss} bytes, "
          f"eval auc {eval_auc:.4f}, eval loss {eval_loss:.4f}")
    if a.embedding == "leanemb":
        log(model.ebc.memory_summary())
        log(f"embedding digest {model.ebc.digest()} (step {model.ebc.step_count})")  # collective
    if a.save:
        if a.embedding == "leanemb":
            log(f"tables saved to {model.ebc.save(a.save)}")  # collective
        if rank == 0:
            os.makedirs(a.save, exist_ok=True)
            np.savez(os.path.join(a.save, "dense.npz"),
                     **{n: p.detach().numpy() for n, p in model.named_parameters() if not n.startswith("ebc.")})
            log(f"dense parameters saved to {os.path.join(a.save, 'dense.npz')}")
    if a.dist:
        how = f"{G} gradient groups, summed in a fixed order" if G else "DDP"
        log(f"{P} ranks: tables sharded row-wise over MPI, dense part in {how} (gloo); {a.batch_size // P} bags per "
            f"rank per step; samples/s count the global batch")
        torch.distributed.destroy_process_group()
    if a.check and not (last < first and eval_auc > 0.55):
        print("check failed: the loss did not decrease or the AUC is too low", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
