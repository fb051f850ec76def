#!/usr/bin/env bash
# Set up, then run the default study (search_spaces/micro.yaml) end to end with its report.
# Extra arguments go to `sweeper run` (e.g. --storage /tmp/micro).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Without RAY_ADDRESS the study starts its own Ray instance, on 127.0.0.1 only and with Ray's
# token authentication (on by default since Ray 2.59; the token is ~/.ray/auth_token, mode 0600).
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec .venv/bin/sweeper run search_spaces/micro.yaml "$@"
