#!/usr/bin/env bash
# Set up, then run the whole test suite (unit tests and end-to-end tests on a real local Ray
# cluster; well over 20 minutes on 2 cores: 55m39s measured on a loaded 2-core machine). Extra arguments go to pytest (e.g. -m "not e2e").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
