"""The tests lie where tests/README.md says, where the suite's distribution relies on it."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SMOKE_READERS = TESTS / "e2e" / "test_smoke_study.py"


def readers_outside(fixture: str, home: Path, paths: list[Path]) -> list[str]:
    """Test functions taking `fixture` in any of `paths` but `home`."""
    found = []
    for path in paths:
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and fixture in {arg.arg for arg in node.args.args}:
                found.append(f"{path.name}::{node.name}")
    return found


def test_every_reader_of_the_session_smoke_study_lies_in_one_file():
    """The whole suite hands out a file at a time to each of its workers (scripts/test.sh,
    `--dist loadfile`): readers in two files could build the session's smoke study twice."""
    assert "(smoke_study)" in SMOKE_READERS.read_text()
    assert readers_outside("smoke_study", SMOKE_READERS, sorted(TESTS.rglob("test_*.py"))) == []


def test_a_reader_elsewhere_is_named(tmp_path):
    stray = tmp_path / "test_stray.py"
    stray.write_text("def test_reads(ray_head, smoke_study):\n    pass\n\ndef test_other(tmp_path):\n    pass\n")
    assert readers_outside("smoke_study", SMOKE_READERS, [SMOKE_READERS, stray]) == ["test_stray.py::test_reads"]


def test_every_test_file_name_is_unique_across_the_folders():
    """pytest imports a test module by its file name (the folders are on sys.path, pyproject.toml's
    `pythonpath`): two files of one name are an import mismatch, found only when both are collected."""
    names = [path.name for path in sorted(TESTS.rglob("test_*.py"))]
    assert not [name for name in set(names) if names.count(name) > 1]
