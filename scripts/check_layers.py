#!/usr/bin/env python3
"""Checks the include graph between the project's folders (docs/architecture.md, "Modules").

Rules:
  1. No cycle between folders: a folder of src/ (core, kernels, table, ...), python/, tools/ and
     include/leanemb/ is one node; `#include "x/..."` of another folder is an edge. Tests,
     fuzzers and benchmarks are not counted.
  2. python/ and tools/ include only the public API (include/leanemb/) and their own headers;
     the public headers include only each other.
  3. No code downcasts a table (dynamic_cast to a collection type): every layer is reached
     through EmbeddingTables.

Known violations still open are listed in KNOWN with the reason (none today: issue 38 fixed the
last ones); the check fails on any violation not listed, and on a listed one that no longer occurs
(so the list only shrinks). Prints the graph with --graph.

    scripts/check_layers.py            exit 0: no new violation; 1: a new one (printed)
    scripts/check_layers.py --graph    the folder graph
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SKIP = re.compile(r"(_test\.cc|_testing\.h|_test_main\.cc|_fuzz\.cc)$")

# Violations still open, each with why (remove an entry when its code is fixed). Empty since
# issue 38 moved the CLI's commands behind include/leanemb/commands.h (src/cli, bench/command.cc):
# tools/ includes only the public API.
KNOWN = {}


def node_of(rel):
    parts = rel.split("/")
    if parts[0] == "src":
        return parts[1]
    if parts[0] == "include":
        return "include"
    return parts[0]


def graph():
    edges = {}
    for base in ("src", "python", "tools", "include/leanemb"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
            for f in files:
                if not f.endswith((".h", ".cc")) or SKIP.search(f):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)
                me = node_of(rel)
                with open(path, errors="replace") as fh:
                    for line in fh:
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if "/" not in inc:  # a header beside the file, or one found through -I
                            if os.path.exists(os.path.join(dirpath, inc)):
                                continue
                            where = [d for d in ("bench", "tools", "python") if os.path.exists(os.path.join(ROOT, d, inc))]
                            if not where:
                                continue
                            target = where[0]
                        else:
                            top = inc.split("/")[0]
                            target = "include" if top == "leanemb" else top
                        if target != me:
                            edges.setdefault(me, {}).setdefault(target, rel)
    return edges


def cycles(edges):
    """Pairs of folders that reach each other (each pair once, sorted)."""
    nodes = set(edges) | {t for v in edges.values() for t in v}
    reach = {n: set() for n in nodes}
    for n in nodes:
        stack = list(edges.get(n, {}))
        while stack:
            x = stack.pop()
            if x in reach[n]:
                continue
            reach[n].add(x)
            stack.extend(edges.get(x, {}))
    found = set()
    for a in nodes:
        for b in edges.get(a, {}):
            if a in reach[b]:
                found.add(" <-> ".join(sorted((a, b))))
    return found


def downcasts():
    """Files (outside tests) with a dynamic_cast to a table type."""
    pat = re.compile(r"dynamic_cast<\s*(const\s+)?(leanemb::)?(dist::)?(EmbeddingTables|EmbeddingCollection|ShardedEmbeddingCollection)")
    hits = []
    for base in ("src", "python", "tools", "include"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
            for f in files:
                if f.endswith((".h", ".cc")) and not SKIP.search(f):
                    path = os.path.join(dirpath, f)
                    with open(path, errors="replace") as fh:
                        for i, line in enumerate(fh, 1):
                            if pat.search(line):
                                hits.append(f"{os.path.relpath(path, ROOT)}:{i}")
    return hits


def main():
    edges = graph()
    if "--graph" in sys.argv:
        for n in sorted(edges):
            print(f"{n:8s} -> {', '.join(sorted(edges[n]))}")
        return 0
    seen = set()
    for c in cycles(edges):
        seen.add(("cycle", c))
    for src in ("python", "tools", "include"):
        for target, where in edges.get(src, {}).items():
            if target != "include":
                seen.add(("private", f"{src} -> {target}"))
    for hit in downcasts():
        seen.add(("downcast", hit))
    new = sorted(seen - set(KNOWN))
    gone = sorted(set(KNOWN) - seen)
    for kind, what in sorted(seen & set(KNOWN)):
        print(f"known {kind:7s} {what:20s} ({KNOWN[(kind, what)]})")
    for kind, what in new:
        example = ""
        if kind == "private":
            a, b = what.split(" -> ")
            example = f" (e.g. {edges[a][b]})"
        print(f"NEW {kind} {what}{example}")
    for kind, what in gone:
        print(f"FIXED {kind} {what}: remove it from KNOWN in scripts/check_layers.py")
    if new or gone:
        return 1
    print(f"check_layers: no new violation ({len(seen)} known)" if seen else "check_layers: no violation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
