#!/usr/bin/python3
"""How often SM3's column accumulators bind: after a `leanemb train` run of a CTR config with
`embedding.optimizer = "sm3"` (and `train.checkpoint_every = 0`, so the final checkpoint exists),
loads its checkpoint into a leanemb.torch module of the same tables and prints, per table, the
touched rows (row accumulator > 0), the fraction of their elements where col_acc_j < row_acc_i
(where min(row_acc, col_acc) is the column's, i.e. where SM3 differs from the row-wise rule
nu = row_acc + g^2) and the median accumulators (docs/accuracy.md, "SM3 (issue 39)").

    PYTHONPATH=build/release/python /usr/bin/python3 bench/sm3_cover.py CHECKPOINT_DIR \
        --tables 16 --rows 65536 --dim 16 --dtype bf16

Tables are named C1..C<tables>, as `leanemb train` names a CTR model's fields.
"""
import argparse

import numpy as np

import leanemb.torch as lt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--tables", type=int, default=16)
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--dtype", default="bf16")
    a = ap.parse_args()
    names = [f"C{i}" for i in range(1, a.tables + 1)]
    cfgs = [lt.EmbeddingBagConfig(num_embeddings=a.rows, embedding_dim=a.dim, name=n, feature_names=[n], dtype=a.dtype,
                                  optimizer="sm3") for n in names]
    ebc = lt.EmbeddingBagCollection(cfgs, num_threads=1)
    ebc.load(a.checkpoint)
    rows = elements = bound = 0
    for i, n in enumerate(names):
        row = ebc.optimizer_state(n)[:, 0].numpy()
        col = ebc._tables.column_state(i)
        r = row[row > 0]
        if r.size == 0:
            continue
        active = col[None, :] < r[:, None]
        print(f"{n}: touched rows {r.size:6d}, elements where col_acc < row_acc: {active.mean():.4f}, "
              f"median col_acc {np.median(col):.3g}, median row_acc {np.median(r):.3g} "
              f"(x{np.median(col) / np.median(r):.0f})")
        rows, elements, bound = rows + r.size, elements + active.size, bound + int(active.sum())
    print(f"all tables: {rows} touched rows, {bound / max(elements, 1):.4f} of their elements use the column bound")


if __name__ == "__main__":
    main()
