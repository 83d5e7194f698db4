#!/usr/bin/python3
"""Builds a real CTR-format dataset from the files that the installed Debian packages own on this
machine (/var/lib/dpkg/info/*.list and /var/lib/dpkg/status; no network, no package index).

One record per regular file listed by an installed package (os.lstat: directories, symbolic links,
devices and files missing on disk are skipped; a path listed by several packages counts once, for
the first list file in sorted order), in the TSV format of docs/data.md with
`data.categorical = "string"` (raw string values, hashed by the reader; multi-hot fields are
`,`-separated lists):

  label   1 when the file's size is at least the median size of all the records (about half are
          1). No size-derived value of the file itself is a feature (nor its blocks, its
          checksum or its modification time): the label has to be predicted from where the file
          is, what it is called and which package it belongs to.
  dense   I1 path depth (directories above the file), I2 characters of the file name,
          I3 tokens of the file name (C12), I4 digits in the file name, I5 regular files of the
          package, I6 directories the package lists, I7 regular files in the same directory (over
          all packages), I8 directories listed directly below the file's directory
          (counts; the reader takes log(1 + x))
  C1  the owning package (without :arch)    C9   the parent directory (the full path)
  C2  its Section                           C10  the extension (after the last `.`, lower-cased;
  C3  its Priority                               empty when the name has none)
  C4  its Architecture                      C11  the name looks versioned (`1.2` or `.so.N`: "v",
  C5  its Multi-Arch                             else "-")
  C6  its Source package (its own name      C12  the file name's tokens, split at - _ . and
      when it has no Source field)               digits, lower-cased (multi-hot)
  C7  each directory component of the path  C13  the permission bits (octal, e.g. 644, 4755)
      (multi-hot: usr, share, doc, ...)     C14  executable by anyone ("x") or not ("-")
  C8  the first directory and the first     C15  the owner and group (root:root, ...)
      two (multi-hot: "/usr", "/usr/share") C16  the file is one of the package's conffiles
                                                 ("conffile", else "-")

The records depend only on which packages (and versions) are installed: meta.json has their
number and an MD5 of the sorted "package version architecture" lines, so a different machine
can tell whether it rebuilt the same set. Values have any `,`, tab or white space replaced by `_`.
The split is the other sets' (scripts/text_dataset.py): a file is in the eval set when
md5(its path) % 10 == 0 (about 10%); the training records are shuffled with a fixed seed.

Usage: scripts/debian_files_dataset.py [OUT_DIR] (default data/debian-files). Writes
OUT_DIR/train.tsv, OUT_DIR/eval.tsv and OUT_DIR/meta.json (counts, label rate, the median,
distinct values per field). Exits 2 with a message when there is no dpkg database.
Trained by examples/ctr_debfiles.toml.
"""
import collections
import glob
import grp
import hashlib
import os
import pwd
import re
import stat
import statistics
import sys

from ctr_dataset import clean, dedupe, write_records
from debian_text_dataset import stanzas

DPKG = "/var/lib/dpkg"
SEED = 20261204
SPARSE = ["package", "section", "priority", "architecture", "multi_arch", "source", "dir_parts", "top_dirs",
          "parent_dir", "extension", "versioned", "name_tokens", "mode", "executable", "owner", "conffile"]
DENSE = ["depth", "name_chars", "n_name_tokens", "name_digits", "package_files", "package_dirs", "dir_files",
         "dir_subdirs"]
VERSIONED = re.compile(r"\d+\.\d+|\.so\.\d")
TOKEN_SPLIT = re.compile(r"[-_.0-9]+")


def printable(path):
    """A path read with surrogateescape as text for the records (undecodable bytes replaced)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def installed_packages():
    """(name, arch) -> the status stanza of every installed package."""
    with open(os.path.join(DPKG, "status"), encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = {}
    for st in stanzas(text):
        if st.get("Status", "").endswith(" installed") and "Package" in st:
            out[(st["Package"], st.get("Architecture", ""))] = st
    return out


def stanza_of(status, list_name):
    """The stanza of a list file's package: "name:arch" names one; a bare name its only one."""
    name, _, arch = list_name.partition(":")
    if arch:
        return name, status.get((name, arch))
    for (n, _), st in sorted(status.items()):
        if n == name:
            return name, st
    return name, None


def owner(st):
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group}"


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "data/debian-files"
    lists = sorted(glob.glob(os.path.join(DPKG, "info", "*.list")))
    if not lists or not os.path.exists(os.path.join(DPKG, "status")):
        sys.stderr.write(f"debian_files_dataset: no dpkg database (info/*.list, status) under {DPKG}\n")
        return 2
    status = installed_packages()
    seen, files, dirs = set(), [], collections.defaultdict(set)  # dirs: package -> its directories
    for path in lists:
        name, st = stanza_of(status, os.path.basename(path)[: -len(".list")])
        if st is None:
            continue  # a list file of a package not (or no longer fully) installed
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            entries = [line.rstrip("\n") for line in f if line.strip() and line.rstrip("\n") != "/."]
        conffiles = {line.split()[0] for line in st.get("Conffiles", "").split("\n") if line.strip()}
        for p in entries:
            try:
                info = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                dirs[name].add(p)
            if not stat.S_ISREG(info.st_mode) or p in seen:
                continue
            seen.add(p)
            files.append((p, name, st, info, p in conffiles))
    per_package = collections.Counter(name for _, name, _, _, _ in files)
    per_dir = collections.Counter(os.path.dirname(p) for p, _, _, _, _ in files)
    all_dirs = set().union(*dirs.values())
    subdirs = collections.Counter(os.path.dirname(d) for d in all_dirs)
    median = statistics.median(info.st_size for _, _, _, info, _ in files)
    median = int(median) if median == int(median) else median  # "2044 bytes", not "2044.0"

    records = []
    for p, name, st, info, is_conffile in files:
        text = printable(p)
        parent, base = os.path.split(text)
        parts = [c for c in parent.split("/") if c]
        tokens = dedupe(clean(t.lower()) for t in TOKEN_SPLIT.split(base))  # clean first: " " -> "" -> dropped
        ext = base.rsplit(".", 1)[1].lower() if "." in base.lstrip(".") else ""
        mode = stat.S_IMODE(info.st_mode)
        sparse = {
            "package": [clean(name)],
            "section": [clean(st.get("Section", "").split("/")[-1])],
            "priority": [clean(st.get("Priority", ""))],
            "architecture": [clean(st.get("Architecture", ""))],
            "multi_arch": [clean(st.get("Multi-Arch", ""))],
            "source": [clean(st.get("Source", name).split(" ")[0])],
            "dir_parts": dedupe(clean(c) for c in parts),
            "top_dirs": dedupe(clean("/" + "/".join(parts[:k])) for k in (1, 2) if len(parts) >= k),
            "parent_dir": [clean(parent)],
            "extension": [clean(ext)] if ext else [],
            "versioned": ["v" if VERSIONED.search(base) else "-"],
            "name_tokens": tokens,
            "mode": [f"{mode:o}"],
            "executable": ["x" if mode & 0o111 else "-"],
            "owner": [clean(owner(info))],
            "conffile": ["conffile" if is_conffile else "-"],
        }
        dense = [len(parts), len(base), len(tokens), sum(c.isdigit() for c in base), per_package[name],
                 len(dirs[name]), per_dir[os.path.dirname(p)], subdirs[os.path.dirname(p)]]
        records.append((p, 1 if info.st_size >= median else 0, dense, sparse))
    versions = sorted(f"{st['Package']} {st.get('Version', '')} {st.get('Architecture', '')}" for st in status.values())
    meta = {
        "source": f"files of the installed Debian packages ({DPKG}/info/*.list, {DPKG}/status)",
        "installed_packages": len(status),
        "installed_md5": hashlib.md5("\n".join(versions).encode()).hexdigest(),
        "records": len(records), "train_rows": None, "eval_rows": None,  # these Nones: filled in by write_records
        "label": f"file size >= median ({median} bytes)", "label_rate": None,
        "dense": DENSE, "sparse": SPARSE, "distinct_values": None,
        "split": f"eval when md5(path) % 10 == 0; train shuffled with seed {SEED}",
    }
    write_records(out_dir, records, SPARSE, meta, SEED, "debian_files_dataset")
    return 0


if __name__ == "__main__":
    sys.exit(main())
