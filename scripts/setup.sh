#!/usr/bin/env bash
# Create .venv and install the sweeper with its test tools and the optional W&B tracking. Idempotent; ~2 minutes the first time.
# torch==2.13.0 goes first: these machines carry its CPU wheel, and an unpinned torch would pull
# several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v "is ignored" || true
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test,tracking]" 2>&1 \
  | grep -v "is ignored" || true
.venv/bin/python -c "import torch, ray, transformers, sweeper, trainables" \
  || { echo "setup failed: the environment does not import" >&2; exit 1; }
