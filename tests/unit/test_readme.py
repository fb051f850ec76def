"""The README a newcomer reads: what it is, the commands and what they produce on the first
screen; its links lead somewhere; dated measurements and commit ids live in docs/benchmarks.md
(docs/example-report.md is a generated report, dates and all)."""
from __future__ import annotations

import re
from conftest import ROOT

README = (ROOT / "README.md").read_text()
DATED = ("benchmarks.md", "example-report.md")


def test_the_first_screen_holds_the_commands_what_they_produce_and_the_contents():
    first = "\n".join(README.splitlines()[:60])
    for needed in ("bash scripts/run_micro.sh", "bash scripts/test.sh", "bash scripts/test.sh quick", "report.md",
                   "docs/example-report.md", "## Contents"):
        assert needed in first, needed


def test_no_date_or_commit_id_outside_the_benchmarks():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.name in DATED:
            continue
        text = path.read_text()
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), f"{path.name}: a date (move it to docs/benchmarks.md)"
        ids = [m for m in re.findall(r"(?<![\w/.-])[0-9a-f]{7,12}(?![\w-])", text) if re.search(r"[a-f]", m)
               and re.search(r"\d", m)]
        assert not ids, f"{path.name}: commit ids {ids} (move them to docs/benchmarks.md)"


def test_every_relative_link_and_image_of_the_readme_and_the_glossary_exists():
    for path in (ROOT / "README.md", ROOT / "docs" / "glossary.md", ROOT / "docs" / "example-report.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" not in target:
                assert (path.parent / target).exists(), f"{path.name} links to {target}, which is not there"


def test_the_contents_anchors_are_headings():
    headings = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", README, re.M)}
    for anchor in re.findall(r"\]\(#([^)]+)\)", README):
        assert anchor in headings, f"#{anchor} names no heading"


def test_the_example_report_is_small_and_has_its_figures():
    figures = sorted((ROOT / "docs" / "example-report").glob("*.png"))
    size = (ROOT / "docs" / "example-report.md").stat().st_size + sum(f.stat().st_size for f in figures)
    assert figures and size < 1 << 20


def test_the_python_version_is_stated_once_and_agreed():
    """pyproject.toml's requires-python is the statement; the README, the image and the `ray up`
    nodes use that version."""
    minimum = re.search(r'^requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f"Python {minimum}+ (`requires-python` in `pyproject.toml`" in README
    assert f"python{minimum} -m venv" in (ROOT / "Dockerfile").read_text()
    assert f"python{minimum} -m venv" in (ROOT / "cluster" / "ray-cluster.yaml").read_text()


def test_the_readme_is_one_screen_and_the_benchmarks_current_results_only():
    """A README of one screen and a map (the reference is docs/), and docs/benchmarks.md holding
    current results only (history lives in git): both within their issue #58 bounds."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    assert len((ROOT / "docs" / "benchmarks.md").read_text().splitlines()) <= 500
