#!/usr/bin/env bash
# Create .venv and install the sweeper with its test tools and the optional W&B tracking. Idempotent; ~2 minutes the first time.
# torch==2.13.0 goes first: these machines carry its CPU wheel, and an unpinned torch would pull
# several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
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
.venv/bin/python -c "import torch, ray, transformers, sweeper, trainables" \
  || { echo "setup failed: the environment does not import" >&2; exit 1; }
