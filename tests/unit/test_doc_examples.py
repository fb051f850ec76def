"""Examples are code: every ```yaml block of README.md and docs/*.md is planned by `sweeper plan`.

A block plans with exit 0, unless a marker comment in it says otherwise:
- `# expect-error: <text>`: the plan exits 2 and its error holds <text>;
- `# fragment: <why>`: a section to add to a whole spec, not a spec: skipped, with the reason.
A relative local folder a block names as a checkpoint `source` is built first as a tiny checkpoint
(tests/tiny_checkpoints.py; the family is the first of its kinds the path names, else BERT), in
the folder the plan runs in.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from tiny_checkpoints import KINDS, build_tiny_checkpoint

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.M | re.S)


def blocks() -> list:
    found = []
    for document in DOCUMENTS:
        text = document.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(pytest.param(match.group(1), id=f"{document.relative_to(ROOT)}:{line}"))
    return found


def marker(block: str, name: str) -> str | None:
    match = re.search(rf"#\s*{name}:\s*(.+)$", block, re.M)
    return match.group(1).strip() if match else None


def build_local_sources(block: str, where: Path) -> None:
    """A tiny checkpoint at each relative local folder the block names as a checkpoint source."""
    data = yaml.safe_load(block) or {}
    for entry in (data.get("finetuning") or {}).get("checkpoints") or []:
        source = str(entry.get("source", ""))
        if source and "://" not in source and not source.startswith(("hf:", "/")):
            kind = next((kind for kind in KINDS if kind in source.lower()), "bert")
            if not (where / source).exists():
                build_tiny_checkpoint(kind, where / source)


def test_the_documents_hold_examples():
    assert len(blocks()) >= 2, "README.md's worked specs were not found"


@pytest.mark.parametrize("block", blocks())
def test_every_yaml_block_of_the_docs_plans(block, tmp_path):
    if (why := marker(block, "fragment")) is not None:
        pytest.skip(f"a fragment, not a whole spec: {why}")
    build_local_sources(block, tmp_path)
    spec = tmp_path / "example.yaml"
    spec.write_text(block)
    result = subprocess.run([sys.executable, "-m", "sweeper", "plan", str(spec)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in result.stderr, result.stderr
    if (expected := marker(block, "expect-error")) is not None:
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert expected in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr
