#!/usr/bin/env bash
# The Debian package (ctest: package; docs/package.md): builds the .deb of a built tree with
# cpack (into a scratch directory, not the tree's own leanemb_*.deb), unpacks it with `dpkg -x`
# into a scratch root and uses only the unpacked files:
#   - the .deb: its name, control fields (Depends names python3-numpy and python3-torch) and
#     the files it must hold (CLI, Python package with module and pycs, docs, man page, completion);
#   - no RPATH/RUNPATH and no path of the source or build tree in the binaries;
#   - `leanemb --version` (with an empty environment, from another directory);
#   - `python3 -c "import leanemb.torch"` with PYTHONPATH at the root's dist-packages (the
#     package is not installed), and the import writes nothing (the pycs are current);
#   - the man page: valid gzip, troff that `man -l` renders with every subcommand (without man:
#     the .TH header and the command sections);
#   - the bash completion: parses, and completes `leanemb tr` to train and `leanemb ckpt v` to verify;
#   - a 50-step training run of a tiny CTR model, its checkpoint verified by the unpacked CLI
#     and by the unpacked Python package.
#
#   tests/package_test.sh BUILD_DIR [VERSION]
#
# Prints "ok ..." per check, "FAIL ..." for a failed one; exits 0 only if every check passed.
# About 20 s on 2 cores (cpack strips and compresses about 11 MB; the run is a few seconds).
set -u
BUILD=${1:?usage: tests/package_test.sh BUILD_DIR [VERSION]}
BUILD=$(cd "$BUILD" && pwd -P)
SRC=$(cd "$(dirname "$0")/.." && pwd -P)
VERSION=${2:-$(sed -n 's/^project(leanemb VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")}
[[ -f "$BUILD/CPackConfig.cmake" ]] || { echo "FAIL: $BUILD/CPackConfig.cmake missing (configure the build first)"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_package.XXXXXX")
W=$(cd "$W" && pwd -P)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
FAILED=0
ok() { echo "ok $*"; }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
check() {  # check NAME CMD...: ok when CMD succeeds
  local name=$1; shift
  if "$@" > "$W/out" 2>&1; then ok "$name"; else fail "$name: $(tail -5 "$W/out")"; fi
}

# ---- build the .deb ---------------------------------------------------------------------------
if ! (cd "$W" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$W/pkg") > "$W/cpack.log" 2>&1; then
  echo "FAIL cpack: $(tail -20 "$W/cpack.log")"
  exit 1
fi
ARCH=$(dpkg --print-architecture)
DEB="$W/pkg/leanemb_${VERSION}_${ARCH}.deb"
[[ -f "$DEB" ]] || { echo "FAIL the package is not $DEB: $(ls "$W/pkg")"; exit 1; }
ok "cpack built $(basename "$DEB") ($(stat -c %s "$DEB") bytes)"

field() { dpkg-deb -f "$DEB" "$1"; }
[[ "$(field Package)" == leanemb && "$(field Version)" == "$VERSION" && "$(field Architecture)" == "$ARCH" ]] \
  && ok "control: leanemb $VERSION $ARCH" || fail "control: $(field Package) $(field Version) $(field Architecture)"
deps=$(field Depends)
for d in python3 python3-numpy python3-torch libc6 libgomp1; do  # the last two: dpkg-shlibdeps
  [[ ",$deps," =~ [,\ ]$d[\ ,] ]] && ok "Depends names $d" || fail "Depends lacks $d: $deps"
done
dpkg-deb -c "$DEB" | awk '{print $6}' | sed 's|^\./|/|' > "$W/files"
PY=/usr/lib/python3/dist-packages/leanemb
for f in /usr/bin/leanemb $PY/__init__.py $PY/torch.py $PY/sparse.py "$PY/__pycache__/__init__.cpython-311.pyc" \
         /usr/share/doc/leanemb/README.md /usr/share/doc/leanemb/train.md /usr/share/doc/leanemb/package.md \
         /usr/share/man/man1/leanemb.1.gz /usr/share/bash-completion/completions/leanemb; do
  grep -qxF "$f" "$W/files" && ok "holds $f" || fail "does not hold $f"
done
grep -q "^$PY/_leanemb\.cpython-.*\.so$" "$W/files" && ok "holds $PY/_leanemb.*.so" || fail "no _leanemb module in $PY"
# Nothing outside /usr, nothing of the developer install (static library, headers).
bad=$(grep -v '^/usr/\(bin\|lib/python3/dist-packages\|share/\(doc\|man\|bash-completion\)\)' "$W/files" \
      | grep -vx '/usr/\|/usr/lib/\|/usr/lib/python3/\|/usr/share/' || true)
[[ -z "$bad" ]] && ok "only /usr/bin, dist-packages, doc, man, completion" || fail "unexpected paths: $bad"
# No maintainer scripts: installing creates nothing but the package's files.
dpkg-deb -e "$DEB" "$W/control"
scripts=$(ls "$W/control" | grep -v '^\(control\|md5sums\|shlibs\|triggers\)$' || true)
[[ -z "$scripts" ]] && ok "no maintainer scripts" || fail "maintainer scripts: $scripts"

# ---- unpack and use the files -----------------------------------------------------------------
R="$W/root"
dpkg -x "$DEB" "$R"
CLI="$R/usr/bin/leanemb"
for f in "$CLI" "$R"$PY/_leanemb.*.so; do
  if readelf -d "$f" | grep -q 'RPATH\|RUNPATH'; then fail "$(basename "$f") has an RPATH/RUNPATH: $(readelf -d "$f" | grep PATH)"
  else ok "$(basename "$f"): no RPATH/RUNPATH"; fi
  if grep -qF -e "$BUILD" -e "$SRC" "$f"; then fail "$(basename "$f") names the build or source tree"
  else ok "$(basename "$f"): no build or source path"; fi
done
touch "$W/before"
sleep 1  # file times: what the steps below write is newer than $W/before

v=$(cd "$W" && env -i PATH=/usr/bin:/bin "$CLI" --version 2>&1)
[[ "$v" == "leanemb $VERSION" ]] && ok "leanemb --version: $v" || fail "leanemb --version: '$v'"

check "import leanemb.torch from the unpacked dist-packages" \
  env -i PATH=/usr/bin:/bin HOME="$W" PYTHONPATH="$R/usr/lib/python3/dist-packages" OMP_NUM_THREADS=2 \
  /usr/bin/python3 -c "
import leanemb, leanemb.torch
assert leanemb.__file__.startswith('$R/'), leanemb.__file__
assert leanemb.torch.EmbeddingBagCollection
"

# ---- man page ---------------------------------------------------------------------------------
MAN="$R/usr/share/man/man1/leanemb.1.gz"
check "man page is valid gzip" gzip -t "$MAN"
zcat "$MAN" | head -1 | grep -q '^\.TH LEANEMB 1 ' && ok "man page starts with .TH LEANEMB 1" || fail "man page header: $(zcat "$MAN" | head -1)"
cmds=$(env -i PATH=/usr/bin:/bin "$CLI" --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF {print $1}')
[[ -n "$cmds" ]] || fail "no subcommands in leanemb --help"
if command -v man > /dev/null; then
  MANWIDTH=100 LC_ALL=C.UTF-8 man -l "$MAN" > "$W/man.txt" 2> "$W/man.err"
  [[ ! -s "$W/man.err" ]] && ok "man -l renders without warnings" || fail "man -l: $(head -5 "$W/man.err")"
  text="$W/man.txt"
else
  echo "  (man is not installed: checking the troff source)"
  zcat "$MAN" > "$W/man.txt"
  text="$W/man.txt"
fi
for c in $cmds; do
  grep -q "leanemb $c" "$text" && ok "man page documents leanemb $c" || fail "man page lacks leanemb $c"
done
grep -q -- "--steps" "$text" && grep -q "EXIT STATUS" "$text" && ok "man page: options and EXIT STATUS" \
  || fail "man page lacks --steps or EXIT STATUS"

# ---- bash completion --------------------------------------------------------------------------
COMP="$R/usr/share/bash-completion/completions/leanemb"
check "completion parses (bash -n)" bash -n "$COMP"
if [[ -f /usr/share/bash-completion/bash_completion ]]; then
  complete_words() {  # complete_words WORD...: what <TAB> offers after them
    bash -c 'source /usr/share/bash-completion/bash_completion; source "$0"
             COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
             _leanemb; echo "${COMPREPLY[*]}"' "$COMP" "$@" 2>&1
  }
  [[ "$(complete_words leanemb tr)" == train ]] && ok "completion: leanemb tr -> train" || fail "completion of 'leanemb tr': $(complete_words leanemb tr)"
  [[ "$(complete_words leanemb ckpt v)" == verify ]] && ok "completion: leanemb ckpt v -> verify" || fail "completion of 'leanemb ckpt v': $(complete_words leanemb ckpt v)"
  [[ " $(complete_words leanemb train --st) " == *" --steps "* ]] && ok "completion: leanemb train --st -> --steps" || fail "completion of 'leanemb train --st': $(complete_words leanemb train --st)"
else
  echo "  (bash-completion is not installed: completion behaviour not checked)"
fi

# ---- a 50-step run with the unpacked CLI ------------------------------------------------------
TINY=(--set "data.dir=\"$W/data\"" --set data.gen.train_rows=8192 --set data.gen.eval_rows=512
      --set data.gen.vocab=50 --set data.num_sparse=4 --set model.table_rows=64 --set model.embedding_dim=8
      --set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2
      --set train.log_every=10 --set train.checkpoint_every=25)
if (cd "$W" && env -i PATH=/usr/bin:/bin HOME="$W" OMP_NUM_THREADS=2 "$CLI" train "${TINY[@]}" --steps 50 --out "$W/run" \
      --json-summary "$W/summary.json") > "$W/train.out" 2> "$W/train.err"; then
  ok "leanemb train --steps 50 (exit 0)"
else
  fail "leanemb train --steps 50 (exit $?): $(tail -5 "$W/train.err")"
fi
grep -q 'step 50 |' "$W/train.err" && ok "train printed step 50" || fail "no 'step 50' line: $(tail -3 "$W/train.err")"
/usr/bin/python3 -c "import json,sys; s=json.load(open('$W/summary.json')); sys.exit(0 if s['steps']==50 else 1)" 2>/dev/null \
  && ok "summary: 50 steps" || fail "summary.json: $(head -c 300 "$W/summary.json" 2>/dev/null)"
ck=$(ls -d "$W"/run/checkpoints/step-* 2>/dev/null | grep -v '\.tmp$' | sort | tail -1)
check "leanemb ckpt verify $(basename "${ck:-none}")" env -i PATH=/usr/bin:/bin "$CLI" ckpt verify "${ck:-$W/run/none}"
check "leanemb.checkpoint_verify (the unpacked Python package)" \
  env -i PATH=/usr/bin:/bin HOME="$W" PYTHONPATH="$R/usr/lib/python3/dist-packages" \
  /usr/bin/python3 -c "import leanemb; print(leanemb.checkpoint_verify('${ck:-$W/run/none}')['step'])"

# Nothing was written into the unpacked root (no __pycache__ from the imports, no run files).
new=$(find "$R" -newer "$W/before" | head -5)
[[ -z "$new" ]] && ok "nothing written under the unpacked root" || fail "written under the root: $new"

echo "package_test: $FAILED failed"
[[ $FAILED -eq 0 ]]
