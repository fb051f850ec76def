"""ruff over the whole checkout with the configuration in pyproject.toml (`[tool.ruff]`): the
quick tier fails on a lint error as it does on a failing test."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).parent / "ruff"
NOQA_LIMIT = 10


def test_ruff_finds_nothing():
    result = subprocess.run([str(RUFF), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_few_noqa_comments_each_saying_why():
    """A `noqa` silences one rule on one line; each says why (text after its codes), and there are
    few: a rule the code keeps breaking belongs in the configuration, with its reason."""
    found = []
    for folder in ("sweeper", "trainables", "tests", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if match := re.search(r"#\s*noqa\b(:\s*[A-Z]+[0-9]+(?:,\s*[A-Z]+[0-9]+)*)?(.*)", line):
                    found.append((f"{path.relative_to(ROOT)}:{number}", match.group(2).strip()))
    assert len(found) <= NOQA_LIMIT, found
    assert all(why for _, why in found), [where for where, why in found if not why]
