#!/usr/bin/env bash
# Set up (pip only when pyproject.toml or constraints.txt changed, scripts/setup.sh), then run
# the tests. Two tiers (tests/README.md says where a test goes):
#
#   bash scripts/test.sh quick   tests/unit but its few `slow` tests: starts no Ray, no server and no
#                                study (the guard in tests/support/quick_tier.py fails a test that
#                                does); after each edit.
#   bash scripts/test.sh         the whole suite, tests/unit and tests/e2e (studies, Ray Tune and
#                                Train on a real local Ray cluster, moto's S3 server); what CI runs.
#
# Measured on 2 cores shared with other work (not idle figures; the fresh-clone idle runs are to
# be recorded here): quick, 639 tests (of 719) in 4m51s of pytest at load average ~5, 165 CPU-s of
# the process and its children (an idle 2-core machine gives about its CPU time). The whole suite
# was not run in one go here: the verdict calibration now takes 132 CPU-s (was ~270); the merged
# Optuna study test 130 s (alone, load ~5).
# Extra arguments go to pytest (`bash scripts/test.sh quick tests/unit/spec -k limits`); an
# argument naming a test path replaces the tier's folder. No test collected is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
folders=(tests)
quick=()
if [ "${1:-}" = quick ]; then
  folders=(tests/unit)
  quick=(-m "not slow")
  shift
fi
for arg in "$@"; do
  if [[ "$arg" == tests* && -e "${arg%%::*}" ]]; then
    folders=()
    break
  fi
done
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "${quick[@]}" "${folders[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no test (exit status 5): nothing was checked" >&2
fi
exit "$status"
