#!/usr/bin/python3
"""Builds a real CTR-format dataset from the dynamic symbols of the ELF files that the installed
Debian packages own on this machine (/var/lib/dpkg/info/*.list and /var/lib/dpkg/status, and
`readelf --dyn-syms --dynamic -W` of binutils; no network).

One record per symbol that a shared library exports (defined in its .dynsym: not UND, not a
section or file symbol), for every regular file listed by an installed package that is an ELF
shared object (ET_DYN with a SONAME, or a name containing ".so"), in the TSV format of
docs/data.md with `data.categorical = "string"`:

  label   1 when some other ELF file of the installed packages (a shared object or an executable)
          imports a symbol of that name (an UND entry of its .dynsym): the export is used on
          this machine. The importing files are not features: the label has to be predicted
          from the symbol, its library and the library's package.
  dense   I1 the symbol's size in bytes, I2 characters of its name, I3 tokens of its name (C9),
          I4 symbols the library exports, I5 libraries the library needs (DT_NEEDED),
          I6 symbol versions the library defines (counts; the reader takes log(1 + x))
  C1  the library's file name without its version    C9   the name's tokens (multi-hot: split at
      suffix (libz.so.1.2.13 -> libz.so)                   _ . @ $ and digits, lower-cased;
  C2  the owning package (without :arch)                  C++ names give their identifiers)
  C3  its Section                                    C10  the name's first token
  C4  its Source package                             C11  C++ (mangled, "_Z...") or C ("c")
  C5  the symbol's type (FUNC, OBJECT, IFUNC, TLS)   C12  the library's directory
  C6  its binding (GLOBAL, WEAK, UNIQUE)             C13  the libraries it needs (multi-hot)
  C7  its visibility (DEFAULT, PROTECTED)            C14  its version node's name without the
  C8  its version node (GLIBC_2.2.5; "-" if none)         numbers (GLIBC_2.2.5 -> glibc_)

Symbols of the same name exported by several libraries are separate records (the label is the
same for each). meta.json has the number of installed packages and an MD5 of their sorted
"package version architecture" lines, as the other Debian sets (scripts/debian_files_dataset.py).
The split is the other sets': a record is in the eval set when md5(library path + "\\t" + symbol
+ "@" + version) % 10 == 0 (about 10%); the training records are shuffled with a fixed seed.

Usage: scripts/elf_symbols_dataset.py [OUT_DIR] (default data/elf-symbols). Writes
OUT_DIR/train.tsv, OUT_DIR/eval.tsv and OUT_DIR/meta.json. Exits 2 without a dpkg database or
readelf. Trained by examples/ctr_elfsyms.toml.
"""
import collections
import concurrent.futures
import glob
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys

from ctr_dataset import clean, dedupe, write_records
from debian_files_dataset import installed_packages, printable, stanza_of

DPKG = "/var/lib/dpkg"
SEED = 20261207
SPARSE = ["library", "package", "section", "source", "type", "binding", "visibility", "version",
          "name_tokens", "first_token", "language", "lib_dir", "needed", "version_family"]
DENSE = ["size", "name_chars", "n_name_tokens", "lib_exports", "lib_needed", "lib_versions"]
TOKEN_SPLIT = re.compile(r"[_.@$0-9]+")
LIB_VERSION = re.compile(r"(\.so)(\.[0-9][0-9.]*)?$")
# readelf -W --dyn-syms: "   Num:    Value          Size Type    Bind   Vis      Ndx Name"
SYM = re.compile(r"^\s*\d+:\s+[0-9a-fA-F]+\s+(\d+|0x[0-9a-fA-F]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
SONAME = re.compile(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]")


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def read_elf(path):
    """(soname, needed, [(name, version, size, type, bind, vis, defined)]) of one ELF file."""
    r = subprocess.run(["readelf", "--dyn-syms", "--dynamic", "-W", path], capture_output=True,
                       text=True, errors="replace", check=False)
    soname = SONAME.search(r.stdout)
    needed = NEEDED.findall(r.stdout)
    syms = []
    for line in r.stdout.splitlines():
        m = SYM.match(line)
        if not m:
            continue
        size, typ, bind, vis, ndx, name = m.groups()
        # Defined section, file and untyped symbols are not exports; an import (UND) of any type is.
        if not name or (typ in ("SECTION", "FILE", "NOTYPE") and ndx != "UND"):
            continue
        name, _, version = name.partition("@")
        version = version.lstrip("@").split(" ")[0]
        syms.append((name, version, int(size, 0), typ, bind, vis, ndx != "UND"))
    return (soname.group(1) if soname else ""), needed, syms


def elf_files(status):
    """(path, package name, status stanza) of every ELF regular file the packages list, once."""
    seen, out = set(), []
    for path in sorted(glob.glob(os.path.join(DPKG, "info", "*.list"))):
        name, st = stanza_of(status, os.path.basename(path)[: -len(".list")])
        if st is None:
            continue
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for p in (line.rstrip("\n") for line in f):
                if not p or p in seen:
                    continue
                try:
                    info = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode) and info.st_size > 64 and is_elf(p):
                    seen.add(p)
                    out.append((p, name, st))
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "data/elf-symbols"
    if not os.path.exists(os.path.join(DPKG, "status")) or shutil.which("readelf") is None:
        sys.stderr.write("elf_symbols_dataset: needs a dpkg database and readelf (binutils)\n")
        return 2
    status = installed_packages()
    files = elf_files(status)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        parsed = list(ex.map(read_elf, (p for p, _, _ in files)))
    imported = collections.defaultdict(set)  # symbol name -> the files that import it
    for (p, _, _), (_, _, syms) in zip(files, parsed):
        for s in syms:
            if not s[6]:
                imported[s[0]].add(p)
    records = []
    for (p, name, st), (soname, needed, syms) in zip(files, parsed):
        base = os.path.basename(p)
        if not soname and ".so" not in base:
            continue  # an executable: imports only
        exports = [s for s in syms if s[6]]
        versions = {s[1] for s in exports if s[1]}
        text = printable(p)
        library = LIB_VERSION.sub(r"\1", printable(base))
        for sym, version, size, typ, bind, vis, _ in exports:
            tokens = dedupe(clean(t.lower()) for t in TOKEN_SPLIT.split(sym))
            sparse = {
                "library": [clean(library)],
                "package": [clean(name)],
                "section": [clean(st.get("Section", "").split("/")[-1])],
                "source": [clean(st.get("Source", name).split(" ")[0])],
                "type": [typ], "binding": [bind], "visibility": [vis],
                "version": [clean(version) if version else "-"],
                "name_tokens": tokens,
                "first_token": tokens[:1],
                "language": ["c++" if sym.startswith("_Z") else "c"],
                "lib_dir": [clean(os.path.dirname(text))],
                "needed": dedupe(clean(LIB_VERSION.sub(r"\1", n)) for n in needed),
                "version_family": [clean(re.sub(r"[0-9.]+", "", version).lower()) if version else "-"],
            }
            dense = [size, len(sym), len(tokens), len(exports), len(needed), len(versions)]
            label = 1 if imported.get(sym, set()) - {p} else 0
            records.append((f"{text}\t{sym}@{version}", label, dense, sparse))
    versions = sorted(f"{st['Package']} {st.get('Version', '')} {st.get('Architecture', '')}" for st in status.values())
    meta = {
        "source": f"dynamic symbols of the installed Debian packages' ELF files ({DPKG}/info/*.list, readelf)",
        "installed_packages": len(status),
        "installed_md5": hashlib.md5("\n".join(versions).encode()).hexdigest(),
        "elf_files": len(files),
        "records": len(records), "train_rows": None, "eval_rows": None,  # filled in by write_records
        "label": "another ELF file of the installed packages imports the symbol's name", "label_rate": None,
        "dense": DENSE, "sparse": SPARSE, "distinct_values": None,
        "split": f"eval when md5(path, symbol) % 10 == 0; train shuffled with seed {SEED}",
    }
    write_records(out_dir, records, SPARSE, meta, SEED, "elf_symbols_dataset")
    return 0


if __name__ == "__main__":
    sys.exit(main())
