#!/usr/bin/env bash
# Set up, then run the default study (search_spaces/micro.yaml) end to end with its report.
# Extra arguments go to `sweeper run` (e.g. --storage /tmp/micro).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# A laptop's local cluster needs no token auth (Ray >= 2.59 turns it on for new clusters).
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec .venv/bin/sweeper run search_spaces/micro.yaml "$@"
