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
# Both tiers run on both cores (pytest-xdist). Their current times, with the machine and date,
# are in docs/benchmarks.md section 17; the machine's speed drifts from day to day, so compare
# figures run side by side.
# Extra arguments go to pytest (`bash scripts/test.sh quick tests/unit/spec -k limits`); an
# argument naming a test path replaces the tier's folder. No test collected is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# Bytecode cached (__pycache__/, git-ignored): otherwise each of pytest's three processes compiles
# the project and rewrites every test module's asserts again (~5 CPU-s a process).
unset PYTHONDONTWRITEBYTECODE
folders=(tests)
# Both cores, a file at a time on one worker: a module's study (or the session's smoke study,
# whose readers share tests/e2e/test_smoke_study.py) is built once, on one worker. Files go out
# in the order tests/conftest.py gives them: tests/e2e/ (few tests, long) as collected, then the
# unit files with a test marked `long`, then the others, most tests first, so the short ones fill
# the end; xdist's own order (most tests first) left single-test studies and fresh interpreters
# running alone on one worker at the end.
tier=(-n 2 --dist loadfile --no-loadscope-reorder)
if [ "${1:-}" = quick ]; then
  folders=(tests/unit)
  tier=(-m "not slow" -n 2 --dist loadfile --no-loadscope-reorder)  # tests/conftest.py orders the files
  shift
fi
for arg in "$@"; do
  if [[ "$arg" == tests* && -e "${arg%%::*}" ]]; then
    folders=()
    break
  fi
done
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "${tier[@]}" "${folders[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no test (exit status 5): nothing was checked" >&2
fi
exit "$status"
