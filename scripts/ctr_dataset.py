"""What scripts/debian_ctr_dataset.py and scripts/debian_files_dataset.py share.

Both write real CTR-format records (docs/data.md, `data.categorical = "string"`): a 0/1 label,
the dense counts, then one column per categorical field holding raw string values, a `,`-separated
list for multi-hot fields (an empty column is an empty bag). The split and the output files are
scripts/text_dataset.py's (eval when md5(key) % 10 == 0; OUT_DIR/train.tsv, eval.tsv, meta.json,
the training records shuffled with a fixed seed).
"""

import re

from text_dataset import is_test, write_dataset


def clean(v):
    """A value without `,`, tab or white space (each run of them becomes `_`)."""
    return re.sub(r"[\s,\t]+", "_", v.strip())


def dedupe(values):
    """The non-empty values in first-seen order, each once."""
    seen, out = set(), []
    for v in values:
        if v and v not in seen:
            seen.add(v)
            out.append(v)
    return out


def write_records(out_dir, records, sparse_names, meta, seed, prog):
    """Writes `records` ((key, label, dense, sparse) tuples: label 0/1, dense a list of numbers,
    sparse a dict field -> list of values, every field of `sparse_names`) split by key; sets
    train_rows, eval_rows, label_rate and distinct_values (per field) in `meta` (keys the caller
    placed keep their order in meta.json) and prints one line, `prog: N train, M eval records,
    label rate R (meta["label"]) in OUT_DIR`. Returns (train, eval) counts."""
    train, test, distinct, positives = [], [], [set() for _ in sparse_names], 0
    for key, label, dense, sparse in records:
        positives += label
        cols = [str(label)] + [str(x) for x in dense]
        for k, f in enumerate(sparse_names):
            cols.append(",".join(sparse[f]))
            distinct[k].update(sparse[f])
        (test if is_test(key) else train).append("\t".join(cols) + "\n")
    meta["train_rows"], meta["eval_rows"] = len(train), len(test)
    meta["label_rate"] = positives / (len(train) + len(test))
    meta["distinct_values"] = {f: len(d) for f, d in zip(sparse_names, distinct)}
    write_dataset(out_dir, train, test, meta, seed, names=("train.tsv", "eval.tsv"))
    print(f"{prog}: {len(train)} train, {len(test)} eval records, label rate {meta['label_rate']:.3f} "
          f"({meta['label']}) in {out_dir}")
    return len(train), len(test)
