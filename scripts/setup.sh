#!/usr/bin/env bash
# Create .venv and install the sweeper with its test tools and the optional W&B tracking. Idempotent; ~2 minutes the first time.
# pip is skipped when .venv/.setup-stamp holds the hash of this checkout's path, this script,
# pyproject.toml and constraints.txt as of the last install that succeeded (the package itself is
# installed editable: a change to its code needs no install) and the environment still imports.
# torch==2.13.0 goes first: these machines carry its CPU wheel, and an unpinned torch would pull
# several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
STAMP=.venv/.setup-stamp
WANTED=$({ pwd; cat scripts/setup.sh pyproject.toml constraints.txt 2>/dev/null || true; } | sha256sum | cut -d' ' -f1)
imports() { .venv/bin/python -c "import torch, ray, transformers, sweeper, trainables"; }
if [ "$(cat "$STAMP" 2>/dev/null || true)" = "$WANTED" ] && imports 2>/dev/null; then
  exit 0
fi
rm -f "$STAMP"
# pip's own status decides: a failed install stops here with pip's message, never hidden behind
# the filter that drops its "is ignored" notices.
install() {
  local log status=0
  log=$(mktemp)
  .venv/bin/python -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1 || status=$?
  grep -v "is ignored" "$log" >&2 || true
  rm -f "$log"
  if [ "$status" -ne 0 ]; then
    echo "setup failed: 'pip install $*' exited with status $status (its output is above)." >&2
    echo "Offline machines need a local wheel of torch==2.13.0 (a CPU wheel) and the packages of constraints.txt." >&2
    exit 1
  fi
}
install "torch==2.13.0"
install -c constraints.txt -e ".[test,tracking]"
imports || { echo "setup failed: the environment does not import" >&2; exit 1; }
echo "$WANTED" >"$STAMP"
