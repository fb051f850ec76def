"""scripts/setup.sh stops with a clear message when an install fails (it used to hide pip's
status behind `|| true` and go on)."""
from __future__ import annotations

import shutil
import subprocess

from conftest import ROOT

FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the venv's python: pip fails as it does offline without a wheel; anything else works.
if [ "$1 $2 $3" = "-m pip install" ]; then
  echo "ERROR: Could not find a version that satisfies the requirement torch==2.13.0" >&2
  exit 1
fi
exit 0
"""


def test_a_failed_install_stops_setup_with_pip_s_message(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    result = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Could not find a version that satisfies the requirement torch==2.13.0" in result.stderr
    assert "setup failed: 'pip install torch==2.13.0' exited with status 1" in result.stderr


def test_setup_goes_on_when_the_installs_succeed(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/usr/bin/env bash\nexit 0\n")
    python.chmod(0o755)
    result = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


LOGGING_PYTHON = """#!/usr/bin/env bash
# Stands in for the venv's python: every call is logged; everything works.
echo "$*" >> "$(dirname "$0")/calls.log"
exit 0
"""


def test_setup_skips_pip_while_pyproject_and_constraints_match_the_last_install(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(LOGGING_PYTHON)
    python.chmod(0o755)
    log = python.parent / "calls.log"

    def pip_calls() -> int:
        log.unlink(missing_ok=True)
        result = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        return sum(line.startswith("-m pip install") for line in log.read_text().splitlines())

    assert pip_calls() == 2, "a first setup installs torch, then the package"
    assert pip_calls() == 0, "nothing changed: no pip"
    with open(tmp_path / "constraints.txt", "a") as constraints:
        constraints.write("polars==1.0.0\n")
    assert pip_calls() == 2, "constraints.txt changed: installed again"
    assert pip_calls() == 0
    (tmp_path / ".venv" / ".setup-stamp").write_text("stale\n")
    assert pip_calls() == 2, "a stamp of other files: installed again"
