#!/usr/bin/python3
"""Builds a labeled text-classification dataset from the Debian package index.

Every Debian machine has the package index under /var/lib/apt/lists (after `apt-get update`):
one stanza per binary package with its Section and Description. This script turns it into
fastText's supervised format: one line per package, `__label__<section> <description text>`.

  text   the short description, plus the long description where the lists have it (in the
         Packages files themselves, or in i18n Translation-en files matched by Description-md5);
         lower-cased, with . ! ? , ' / ( ) separated into tokens (the preprocessing of fastText's
         own text-classification tutorial)
  label  the Section, without an archive-area prefix ("contrib/", "non-free/", ...)

Packages listed in several index files (bookworm, -updates, -security) count once, the first
stanza wins (files in sorted order). The split is deterministic: a package is in the test set
when the MD5 of its name is 0 mod 10 (about 10%); the training lines are shuffled with a fixed
seed (fastText reads its input in file order, and the index is sorted by name).

Usage: scripts/debian_text_dataset.py [OUT_DIR] (default data/debian-text). Writes
OUT_DIR/train.txt, OUT_DIR/test.txt and OUT_DIR/meta.json. Exits 2 with a message when no
package index is present.
"""
import glob
import os
import subprocess
import sys

from text_dataset import is_test, tokenize, write_dataset

LISTS = "/var/lib/apt/lists"
APT_HELPER = "/usr/lib/apt/apt-helper"


def read_index(path):
    """The text of one index file; apt-helper decompresses it however apt stored it (lz4, xz, gz)."""
    if os.path.exists(APT_HELPER):
        out = subprocess.run([APT_HELPER, "cat-file", path], check=True, capture_output=True)
        return out.stdout.decode("utf-8", errors="replace")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def stanzas(text):
    """Yields dicts of the fields of each stanza; continuation lines are joined with newlines."""
    fields, key = {}, None
    for line in text.split("\n"):
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, None
        elif line[0] in " \t" and key:
            fields[key] += "\n" + line[1:]
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    if fields:
        yield fields


def normalize(text):
    # Long descriptions mark paragraph breaks with a line holding a single ".".
    lines = [l for l in text.split("\n") if l.strip() != "."]
    return tokenize(" ".join(lines))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "data/debian-text"
    packages = sorted(glob.glob(os.path.join(LISTS, "*_Packages*")))
    packages = [p for p in packages if not p.endswith(".diff_Index")]
    if not packages:
        sys.stderr.write(f"debian_text_dataset: no package index (*_Packages*) under {LISTS}; "
                         "run `apt-get update` first (any Debian machine can), then rerun\n")
        return 2
    translations = {}
    tr_files = sorted(glob.glob(os.path.join(LISTS, "*_i18n_Translation-en*")))
    for path in tr_files:
        for st in stanzas(read_index(path)):
            if "Description-en" in st and "Description-md5" in st:
                translations[(st.get("Package"), st["Description-md5"])] = st["Description-en"]

    seen, rows, with_long = set(), [], 0
    for path in packages:
        for st in stanzas(read_index(path)):
            name, section, desc = st.get("Package"), st.get("Section"), st.get("Description")
            if not name or not section or not desc or name in seen:
                continue
            seen.add(name)
            if "\n" not in desc:  # the long description may live in a Translation file
                desc = translations.get((name, st.get("Description-md5")), desc)
            with_long += "\n" in desc
            label = section.split("/")[-1]
            text = normalize(desc)
            if text:
                rows.append((name, label, text))

    train, test = [], []
    for name, label, text in rows:
        line = f"__label__{label} {text}\n"
        (test if is_test(name) else train).append(line)
    labels = sorted({r[1] for r in rows})
    meta = {
        "source": "Debian package index (" + LISTS + ")",
        "index_files": [os.path.basename(p) for p in packages],
        "translation_files": [os.path.basename(p) for p in tr_files],
        "packages": len(rows),
        "with_long_description": with_long,
        "train_lines": len(train),
        "test_lines": len(test),
        "labels": len(labels),
        "split": "test when md5(package name) % 10 == 0; train shuffled with seed 20261130",
    }
    write_dataset(out_dir, train, test, meta, seed=20261130)
    print(f"debian_text_dataset: {len(train)} train, {len(test)} test lines, {len(labels)} labels "
          f"({with_long} with long descriptions) in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
