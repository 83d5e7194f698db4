#!/usr/bin/env bash
# The README's first command: install what is missing, build the release CLI, run the main job
# (`leanemb train` on its embedded default), build the Python package, and check that
# `import leanemb.torch` works.
#
# PyTorch (python3-torch and its libraries, about 1 GB installed) is the largest download and is
# needed only by `import leanemb.torch`, not by the build. On a machine without it, the script
# downloads it into apt's cache in the background while the compiler runs (network bound, almost
# no CPU), and unpacks and configures it (dpkg: CPU and disk) only after the main job has trained,
# beside the Python module's build. Everything else the build needs installs first, in the
# foreground. Log: build/install_torch.log.
#
#   scripts/quickstart.sh [leanemb train options...]
# Exit status: the first failing step's (install, configure, build, train, torch download or
# install, import).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '[quickstart] %s\n' "$*" >&2; }
t0=$SECONDS
mark() { step "$1 done in $((SECONDS - t1)) s (total $((SECONDS - t0)) s)"; t1=$SECONDS; }
t1=$SECONDS

torch_pid=""
if dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  scripts/install_deps.sh
else
  scripts/install_deps.sh --without-torch
  mkdir -p build
  step "downloading python3-torch in the background while the build runs (log: build/install_torch.log)"
  # Only the download overlaps the build: dpkg's unpacking beside the compiler slowed the CLI's
  # build from about 225 s to 273 s on 2 cores even at the lowest priority (docs/package.md).
  nice -n 19 ionice -c 3 scripts/install_deps.sh --download-only > build/install_torch.log 2>&1 &
  torch_pid=$!
fi
mark "install"

cmake --preset release
mark "configure"
# The CLI first, so the main job trains before the Python module compiles.
cmake --build build/release --target leanemb_cli
mark "build of the CLI"

build/release/leanemb train "$@"
mark "train"
step "a trained model after $((SECONDS - t0)) s"

# wait_torch STEP: waits for the background install, and on failure prints its log's end.
wait_torch() {
  if ! wait "$torch_pid"; then
    step "$1 of python3-torch failed; the end of build/install_torch.log:"
    tail -n 20 build/install_torch.log >&2
    exit 1
  fi
}
if [[ -n "$torch_pid" ]]; then
  step "waiting for the python3-torch download"
  wait_torch "the download"
  mark "python3-torch download (the part after the main job)"
  step "installing python3-torch from apt's cache in the background while the Python module builds"
  nice -n 10 scripts/install_deps.sh >> build/install_torch.log 2>&1 &
  torch_pid=$!
fi

cmake --build --preset release-cli
mark "build of the Python package"

if [[ -n "$torch_pid" ]]; then
  step "waiting for the python3-torch install"
  wait_torch "the install"
  mark "python3-torch install (the part after the module's build)"
fi

PYTHONPATH=build/release/python /usr/bin/python3 -c 'import leanemb.torch'
step "import leanemb.torch: ok (PYTHONPATH=build/release/python /usr/bin/python3)"
step "all done in $((SECONDS - t0)) s"
