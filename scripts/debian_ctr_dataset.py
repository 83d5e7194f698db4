#!/usr/bin/python3
"""Builds a real CTR-format dataset (binary label, dense and categorical fields) from the Debian
package index on this machine (/var/lib/apt/lists/*_Packages*; no network).

One record per binary package (packages in several index files count once, the first stanza in
sorted file order wins), in the TSV format of docs/data.md with `data.categorical = "string"`
(raw string values, hashed by the reader; multi-hot fields are `,`-separated lists):

  label   1 when the package's Installed-Size is at least the median Installed-Size of all the
          packages (about half are 1). Neither Installed-Size nor Size, Filename or the checksums
          are features, so the label is no field of the record: it has to be predicted from what
          the package is (its section, dependencies, tags, description words, ...).
  dense   I1 Depends+Pre-Depends count, I2 Recommends count, I3 Suggests count, I4 Tag count,
          I5 words of the short description, I6 characters of the name, I7 Provides count,
          I8 characters of the version (counts; the reader takes log(1 + x))
  C1  Section (without an archive-area prefix)     C10 Multi-Arch
  C2  Priority                                     C11 words of the short description (multi-hot)
  C3  Maintainer's e-mail address                  C12 parts of the name split at - . + (multi-hot)
  C4  Architecture (all, amd64)                    C13 Provides names (multi-hot)
  C5  Source package (the package's own name       C14 the Homepage's host
      when it has no Source field)                 C15 Breaks, Replaces, Conflicts names (multi-hot)
  C6  Depends + Pre-Depends names (multi-hot; the  C16 the version's non-numeric parts and epoch
      alternatives of a | each count, versions        marker (multi-hot: "dfsg", "deb12u1", ...)
      dropped)                                     C17 Built-Using names (multi-hot)
  C7  Recommends names (multi-hot)                 C18 Enhances names (multi-hot)
  C8  Suggests names (multi-hot)
  C9  Tag values (debtags, multi-hot)

An empty field is an empty bag. Values are lower-cased where the source is free text (C11) and
have any `,`, tab or white space replaced by `_`. The split is the text sets' (scripts/
text_dataset.py): a package is in the eval set when md5(its name) % 10 == 0 (about 10%); the
training records are shuffled with a fixed seed (the index is sorted by name).

Usage: scripts/debian_ctr_dataset.py [OUT_DIR] (default data/debian-ctr). Writes
OUT_DIR/train.tsv, OUT_DIR/eval.tsv and OUT_DIR/meta.json (counts, label rate, the median,
distinct values per field). Exits 2 with a message when no package index is present.
Trained by examples/ctr_debian.toml.
"""
import glob
import os
import re
import statistics
import sys

from ctr_dataset import clean, dedupe, write_records
from debian_text_dataset import LISTS, read_index, stanzas

SEED = 20261203
SPARSE = ["section", "priority", "maintainer", "architecture", "source", "depends", "recommends", "suggests", "tags",
          "multi_arch", "description_words", "name_parts", "provides", "homepage_host", "breaks_replaces_conflicts",
          "version_parts", "built_using", "enhances"]
DENSE = ["n_depends", "n_recommends", "n_suggests", "n_tags", "n_description_words", "name_chars", "n_provides",
         "version_chars"]
WORD = re.compile(r"[a-z0-9][a-z0-9+#._-]*")


def relation_names(field):
    """'a (>= 1) | b, c:any' -> ['a', 'b', 'c']."""
    out = []
    for part in field.replace("\n", " ").split(","):
        for alt in part.split("|"):
            name = alt.strip().split(" ")[0].split("(")[0].split(":")[0].strip()
            if name:
                out.append(clean(name))
    return out


def record(st):
    name = st["Package"]
    depends = relation_names(st.get("Depends", "") + ("," + st["Pre-Depends"] if "Pre-Depends" in st else ""))
    recommends = relation_names(st.get("Recommends", ""))
    suggests = relation_names(st.get("Suggests", ""))
    tags = [clean(t) for t in st.get("Tag", "").replace("\n", " ").split(",") if t.strip()]
    desc = st.get("Description", "").split("\n")[0].lower()
    words = WORD.findall(desc)
    provides = relation_names(st.get("Provides", ""))
    maint = st.get("Maintainer", "")
    m = re.search(r"<([^>]+)>", maint)
    homepage = st.get("Homepage", "")
    hm = re.match(r"[a-z]+://([^/:]+)", homepage.lower())
    version = st.get("Version", "")
    vparts = [p for p in re.split(r"[^A-Za-z]+", version.split(":")[-1]) if p]
    if ":" in version:
        vparts.append("epoch")
    sparse = {
        "section": [clean(st.get("Section", "").split("/")[-1])],
        "priority": [clean(st.get("Priority", ""))],
        "maintainer": [clean((m.group(1) if m else maint).lower())],
        "architecture": [clean(st.get("Architecture", ""))],
        "source": [clean(st.get("Source", name).split(" ")[0])],
        "depends": dedupe(depends),
        "recommends": dedupe(recommends),
        "suggests": dedupe(suggests),
        "tags": dedupe(tags),
        "multi_arch": [clean(st.get("Multi-Arch", ""))],
        "description_words": dedupe(words),
        "name_parts": dedupe(clean(p) for p in re.split(r"[-.+]", name)),
        "provides": dedupe(provides),
        "homepage_host": [clean(hm.group(1))] if hm else [],
        "breaks_replaces_conflicts": dedupe(relation_names(st.get("Breaks", "")) + relation_names(st.get("Replaces", "")) +
                                            relation_names(st.get("Conflicts", ""))),
        "version_parts": dedupe(clean(p.lower()) for p in vparts),
        "built_using": dedupe(relation_names(st.get("Built-Using", ""))),
        "enhances": dedupe(relation_names(st.get("Enhances", ""))),
    }
    dense = [len(depends), len(recommends), len(suggests), len(tags), len(words), len(name), len(provides), len(version)]
    return sparse, dense


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "data/debian-ctr"
    packages = sorted(p for p in glob.glob(os.path.join(LISTS, "*_Packages*")) if not p.endswith(".diff_Index"))
    if not packages:
        sys.stderr.write(f"debian_ctr_dataset: no package index (*_Packages*) under {LISTS}; "
                         "run `apt-get update` first (any Debian machine can), then rerun\n")
        return 2
    seen, rows = set(), []
    for path in packages:
        for st in stanzas(read_index(path)):
            name = st.get("Package")
            if not name or name in seen or not st.get("Installed-Size", "").isdigit():
                continue
            seen.add(name)
            rows.append((name, int(st["Installed-Size"]), *record(st)))
    median = statistics.median(r[1] for r in rows)
    meta = {
        "source": "Debian package index (" + LISTS + ")",
        "index_files": [os.path.basename(p) for p in packages],
        "packages": len(rows), "train_rows": None, "eval_rows": None,  # these Nones: filled in by write_records
        "label": f"Installed-Size >= median ({median} KiB)", "label_rate": None,
        "dense": DENSE, "sparse": SPARSE, "distinct_values": None,
        "split": f"eval when md5(package name) % 10 == 0; train shuffled with seed {SEED}",
    }
    records = ((name, 1 if size >= median else 0, dense, sparse) for name, size, sparse, dense in rows)
    write_records(out_dir, records, SPARSE, meta, SEED, "debian_ctr_dataset")
    return 0


if __name__ == "__main__":
    sys.exit(main())
