#!/usr/bin/env python3
"""A small causal sequence model whose input table is a leanemb EmbeddingCollection.

The seed's workload at a scale this machine runs: token sequences over a hashed vocabulary
(`--rows`, default 1e6 rows x `--dim`), a sequence lookup (pooling none, [B, L, dim]), one causal
transformer layer with learned positions, and a head predicting the class of the next token.

Synthetic data: `--vocab` raw tokens, each with a hidden class (of `--classes`); the next token is
drawn from the class the current token points to (a random map, 90%) or at random (10%), so the
model must learn each token's row. Raw tokens are hashed into the table's rows.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_seq.py               # 1e6 rows
    PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_seq.py --compare     # + torch

--compare also trains the same model (same dense init, same initial rows, same batches) with
torch.nn.Embedding(sparse=True) + SparseAdam in fp32 and prints both held-out losses, the
embedding bytes of each (leanemb: its memory stats; torch: weight + SparseAdam's two state
tensors) and leanemb.plan's prediction of the table's memory. --check exits 1 unless the
training loss decreased (CI runs `--rows 100000 --steps 30 --check`).
"""
import argparse
import sys
import time

import leanemb  # before torch: OpenMP waits passively (docs/python.md)
import numpy as np
import torch

import leanemb.torch as lt


def make_data(rng, a):
    cls = rng.integers(0, a.classes, size=a.vocab)          # each token's class
    points = rng.integers(0, a.classes, size=a.vocab)       # the class its successor comes from
    by_class = [np.flatnonzero(cls == c) for c in range(a.classes)]
    by_class = [b if len(b) else np.arange(a.vocab) for b in by_class]

    def sequences(n):
        toks = np.empty((n, a.seq_len + 1), np.int64)
        toks[:, 0] = rng.integers(0, a.vocab, size=n)
        for t in range(a.seq_len):
            cur = toks[:, t]
            follow = rng.random(n) < 0.9
            nxt = rng.integers(0, a.vocab, size=n)
            for i in np.flatnonzero(follow):
                pool = by_class[points[cur[i]]]
                nxt[i] = pool[rng.integers(0, len(pool))]
            toks[:, t + 1] = nxt
        return toks

    hash_rows = lambda t: (t * 2654435761 + 97) % a.rows  # noqa: E731  raw token -> row
    return sequences, cls, hash_rows


class SeqModel(torch.nn.Module):
    def __init__(self, a, lookup):
        super().__init__()
        self.lookup = lookup  # callable: rows [B, L] -> [B, L, D]
        D = a.dim
        self.pos = torch.nn.Parameter(torch.randn(a.seq_len, D) * 0.02)
        self.layer = torch.nn.TransformerEncoderLayer(D, nhead=2, dim_feedforward=2 * D, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(D, a.classes)
        self.register_buffer("mask", torch.triu(torch.full((a.seq_len, a.seq_len), float("-inf")), 1), persistent=False)

    def forward(self, rows):
        x = self.lookup(rows) + self.pos
        return self.head(self.layer(x, src_mask=self.mask))


def leanemb_lookup(ec, B, L):
    lengths = torch.full((B,), L, dtype=torch.int64)

    def f(rows):
        kjt = lt.KeyedJaggedTensor(["tok"], rows.reshape(-1), lengths=lengths)
        return ec(kjt)["tok"].values().view(B, L, -1)
    return f


def train(model, params, batches, evals, dense_lr, extra_step=None):
    opt = torch.optim.Adam(params, lr=dense_lr)
    ce = torch.nn.CrossEntropyLoss()
    losses = []
    t0 = time.perf_counter()
    for rows, target in batches:
        opt.zero_grad()
        logits = model(rows)
        loss = ce(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        loss.backward()
        opt.step()
        if extra_step:
            extra_step()
        losses.append(float(loss))
    secs = time.perf_counter() - t0
    with torch.no_grad():
        ev = [float(ce(model(r).reshape(-1, model.head.out_features), t.reshape(-1))) for r, t in evals]
    return losses, float(np.mean(ev)), secs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--classes", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-batches", type=int, default=10)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--optimizer", default="rowwise_adagrad")
    p.add_argument("--lr", type=float, default=0.1, help="leanemb table learning rate")
    p.add_argument("--torch-lr", type=float, default=0.01, help="SparseAdam learning rate (--compare)")
    p.add_argument("--dense-lr", type=float, default=3e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compare", action="store_true")
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    sequences, cls, hash_rows = make_data(rng, a)
    B, L = a.batch_size, a.seq_len

    def to_batches(n):
        out = []
        for _ in range(n):
            toks = sequences(B)
            out.append((torch.from_numpy(np.ascontiguousarray(hash_rows(toks[:, :-1]))),
                        torch.from_numpy(cls[toks[:, 1:]])))
        return out

    t = time.perf_counter()
    batches, evals = to_batches(a.steps), to_batches(a.eval_batches)
    print(f"data: {a.steps} + {a.eval_batches} batches of {B} x {L} tokens ({time.perf_counter() - t:.1f} s)", flush=True)

    cfg = lt.EmbeddingConfig(name="tokens", num_embeddings=a.rows, embedding_dim=a.dim, feature_names=["tok"],
                             dtype=a.dtype, optimizer=a.optimizer, learning_rate=a.lr)
    ec = lt.EmbeddingCollection([cfg], num_threads=a.threads, seed=a.seed)
    init_rows = ec.weight("tokens") if a.compare else None
    torch.manual_seed(a.seed)
    model = SeqModel(a, leanemb_lookup(ec, B, L))
    losses, ev, secs = train(model, list(model.parameters()), batches, evals, a.dense_lr)
    m = ec.memory_stats()
    emb_bytes = sum(m[t]["categories"][c]["current_bytes"] for t in ("device", "host") for c in ("weights", "optimizer_state"))
    n = max(1, len(losses) // 10)
    first, last = float(np.mean(losses[:n])), float(np.mean(losses[-n:]))
    print(f"leanemb ({a.dtype} rows, {a.optimizer}): {len(losses)} steps in {secs:.1f} s, loss first {first:.4f} "
          f"last {last:.4f}, held-out loss {ev:.6f}, embedding bytes {emb_bytes}")
    pred = leanemb.plan([cfg], batch_size=B, ids_per_sample=L, dtype=a.dtype, optimizer=a.optimizer)
    pred_emb = pred["device"]["peak_by_category"]["weights"] + pred["device"]["peak_by_category"]["optimizer_state"]
    print(f"plan: embedding bytes predicted {pred_emb} (table_bytes {pred['table_bytes']}), measured {emb_bytes} "
          f"({100 * (pred_emb / emb_bytes - 1):+.2f}%); device peak predicted {pred['device']['peak_bytes']}, "
          f"measured {m['device']['peak_bytes']}")
    if a.compare:
        emb = torch.nn.Embedding(a.rows, a.dim, sparse=True)
        with torch.no_grad():
            emb.weight.copy_(init_rows)
        sparse_opt = torch.optim.SparseAdam(emb.parameters(), lr=a.torch_lr)
        torch.manual_seed(a.seed)
        ref = SeqModel(a, emb)
        dense = [p_ for n_, p_ in ref.named_parameters() if not n_.startswith("lookup.")]  # Adam: dense part

        def sparse_step():
            sparse_opt.step()
            sparse_opt.zero_grad()
        rl, rev, rsecs = train(ref, dense, batches, evals, a.dense_lr, sparse_step)
        torch_bytes = emb.weight.numel() * 4 + sum(v.numel() * v.element_size() for st in sparse_opt.state.values()
                                                   for v in st.values() if torch.is_tensor(v))
        print(f"torch (fp32 rows, SparseAdam): {len(rl)} steps in {rsecs:.1f} s, held-out loss {rev:.6f} (loss first {np.mean(rl[:n]):.4f} last {np.mean(rl[-n:]):.4f}), "
              f"embedding bytes {torch_bytes}")
        print(f"held-out loss leanemb / torch - 1 = {100 * (ev / rev - 1):+.2f}%; embedding bytes ratio "
              f"{emb_bytes / torch_bytes:.3f}")
    if a.check and not last < first:
        print("check failed: the training loss did not decrease", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
