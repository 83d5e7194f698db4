#!/usr/bin/python3
"""Builds a second labeled text-classification dataset from the man pages on this machine.

The Google Cloud CLI installs one man page per command (/usr/share/man/man1/gcloud_*.1.gz: about
16.6k pages here, GA, beta and alpha variants of some 150 command groups). Each paragraph of a
page's DESCRIPTION, POSITIONAL ARGUMENTS and FLAGS sections (plus the NAME line's summary) becomes
one line in fastText's supervised format, labeled with the page's command group:

  label  the group, the first word after `gcloud` (after `alpha` / `beta`): compute, container,
         iam, ...; groups with fewer than MIN_PAGES distinct commands are dropped
  text   the paragraph without groff markup, without bold / fixed-width spans that contain
         `gcloud` (command references, which would name the group), lower-cased, with
         . ! ? , ' / ( ) separated into tokens (as scripts/debian_text_dataset.py does)

Deduplication and split (deterministic, no randomness but a fixed-seed shuffle):
  * the alpha / beta / GA variants of one command are one command (their key drops alpha/beta),
    and a command's paragraphs all go to one side: test when md5(command key) % 10 == 0;
  * a paragraph text that occurs under more than one label (the shared flag texts such as
    --project, --format) is dropped everywhere; a text kept once per side (train / test);
  * paragraphs of fewer than 4 tokens are dropped; the training lines are shuffled with a fixed
    seed.

Usage: scripts/gcloud_text_dataset.py [OUT_DIR] (default data/gcloud-text). Writes
OUT_DIR/train.txt, OUT_DIR/test.txt, OUT_DIR/meta.json. Exits 2 when no gcloud man pages exist.
"""
import collections
import glob
import gzip
import os
import re
import sys

from text_dataset import is_test, tokenize, write_dataset

MAN_DIR = "/usr/share/man/man1"
MIN_PAGES = 10
SECTIONS = {"NAME", "DESCRIPTION", "POSITIONAL ARGUMENTS", "FLAGS", "REQUIRED FLAGS", "OPTIONAL FLAGS"}
SPAN = re.compile(r"\\f[B5I](.*?)\\f[RP]")
ESC = re.compile(r"\\f[A-Z0-9]|\\\(..|\\[-e&|^ ]|\\\*\([a-zA-Z]{2}|\\\*[a-zA-Z]")


def clean(line):
    # Drop command references (they name the group), keep the other spans' text.
    line = SPAN.sub(lambda m: "" if "gcloud" in m.group(1) else m.group(1), line)
    line = line.replace("\\-", "-").replace("\\e", "\\")
    line = ESC.sub(" ", line)
    return line


def paragraphs(path):
    """Yields the paragraphs of the wanted sections of one man page."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    section, para = None, []
    for line in lines:
        if line.startswith(".SH"):
            if para and section in SECTIONS:
                yield " ".join(para)
            para = []
            section = line[3:].strip().strip('"')
            continue
        if section not in SECTIONS:
            continue
        if not line.strip() or line.startswith((".RE", ".RS", ".sp", ".TP", ".PP", ".LP", ".P", ".HP", ".IP")):
            if para:
                yield " ".join(para)
            para = []
            continue
        if line.startswith((".", "'")):
            continue
        if section == "NAME":  # "gcloud compute instances create \- create Compute Engine ..."
            _, sep, rest = line.partition(" \\- ")
            line = rest if sep else ""
        para.append(clean(line))
    if para and section in SECTIONS:
        yield " ".join(para)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "data/gcloud-text"
    pages = sorted(glob.glob(os.path.join(MAN_DIR, "gcloud_*.1.gz")))
    if not pages:
        sys.stderr.write(f"gcloud_text_dataset: no gcloud_*.1.gz man pages under {MAN_DIR}\n")
        return 2
    items = []  # (command key, label, text)
    for path in pages:
        words = os.path.basename(path)[: -len(".1.gz")].split("_")[1:]
        while words and words[0] in ("alpha", "beta"):
            words = words[1:]
        if not words:
            continue
        key, label = "_".join(words), words[0]
        for p in paragraphs(path):
            text = tokenize(p)
            if len(text.split()) >= 4:
                items.append((key, label, text))
    commands = collections.defaultdict(set)
    labels_of_text = collections.defaultdict(set)
    for key, label, text in items:
        commands[label].add(key)
        labels_of_text[text].add(label)
    kept_labels = {l for l, cmds in commands.items() if len(cmds) >= MIN_PAGES}
    train, test, seen = [], [], set()
    for key, label, text in items:
        if label not in kept_labels or len(labels_of_text[text]) > 1:
            continue
        side = "test" if is_test(key) else "train"
        if (side, text) in seen:
            continue
        seen.add((side, text))
        (test if side == "test" else train).append(f"__label__{label} {text}\n")
    meta = {
        "source": f"gcloud man pages ({MAN_DIR}/gcloud_*.1.gz)",
        "pages": len(pages),
        "commands": sum(len(c) for l, c in commands.items() if l in kept_labels),
        "labels": len(kept_labels),
        "train_lines": len(train),
        "test_lines": len(test),
        "split": "test when md5(command without alpha/beta) % 10 == 0; texts under several labels dropped; "
                 "train shuffled with seed 20261202",
    }
    write_dataset(out_dir, train, test, meta, seed=20261202)
    print(f"gcloud_text_dataset: {len(train)} train, {len(test)} test lines, {len(kept_labels)} labels in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
