"""A study extended on a real local Ray head, and figures in moto's S3 server: split from
tests/unit/report/test_study_history.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, write_rows

from conftest import ROOT, run_sweeper
from test_study_management import small_spec

from test_study_history import TASKS, row


def files_below(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def read_only(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m sweeper ...` from an empty folder, with nothing of Ray's running."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "sweeper", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.mark.e2e
def test_an_extension_keeps_the_first_spec_and_its_findings(ray_head, tmp_path):
    tasks = ["wordnet-supersense-cls", "wordnet-supersense-tag"]
    study, address = tmp_path / "study", ray_head[0]
    spec = small_spec(tmp_path / "first.yaml", "record", tasks)
    first = run_sweeper("run", str(spec), "--storage", str(study), address=address)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-3000:]
    before = (study / "report.md").read_text()
    tag_section = before.split("### wordnet-supersense-tag")[1].split("\n## ")[0]
    tc_row = next(line for line in before.splitlines() if line.startswith("| nano-mlm40-12 | mlm |"))
    (study / "figures" / "continued_pretraining.png").write_bytes(b"a figure an earlier report drew")

    # The extension: one task, one seed of the two, and a second learning rate.
    extension = small_spec(tmp_path / "extension.yaml", "record", tasks[:1], seeds=(0,))
    edited = yaml.safe_load(extension.read_text())
    edited["finetuning"]["learning_rates"] = [0.001, 0.002]
    extension.write_text(yaml.safe_dump(edited))
    second = run_sweeper("run", str(extension), "--storage", str(study), address=address)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-3000:]
    assert "2 trials: 1 already recorded, 0 blocked by failed runs, 1 to run" in second.stdout

    report = (study / "report.md").read_text()
    assert "5 result rows recorded (5 ok)" in report, "the 4 of the first spec and the new one"
    assert "It also reads 3 trial(s) of earlier specs that the current one does not plan" in report
    assert report.split("### wordnet-supersense-tag")[1].split("\n## ")[0] == tag_section, "tag's numbers as before"
    assert tc_row.split("|")[4] in report, "the TC average as before"
    # Both specs are kept, the latest is spec.yaml, and the report lists them.
    kept = sorted(p.name for p in (study / "specs").glob("*.yaml"))
    assert len(kept) == 2 and kept[0].startswith("001-") and kept[1].startswith("002-"), kept
    assert sorted(p.name for p in (study / "specs").glob("*.plan.json")) == [
        name.replace(".yaml", ".plan.json") for name in kept]
    assert (study / "specs" / kept[0]).read_text() == spec.read_text()
    assert (study / "specs" / kept[1]).read_text() == (study / "spec.yaml").read_text() == extension.read_text()
    assert f"`specs/{kept[0]}`" in report and f"`specs/{kept[1]}` (= `spec.yaml`)" in report
    # No stale figure: the folder holds exactly the figures the report shows.
    shown = {line.split("(figures/")[1].rstrip(")") for line in report.splitlines() if "](figures/" in line}
    assert {p.name for p in (study / "figures").iterdir()} == shown and "lr_sensitivity.png" in shown

    # Read-only commands write nothing outside the study (here: nothing in the folder they run in),
    # `plan` nothing at all, `status` nothing, and `report` only report.md and its figures.
    outside, state = tmp_path / "elsewhere", files_below(study)
    outside.mkdir()
    assert read_only("plan", str(extension), cwd=outside).returncode == 0
    assert read_only("status", str(study), cwd=outside).returncode == 0
    assert files_below(study) == state and not list(outside.iterdir())
    assert read_only("report", str(study), cwd=outside).returncode == 0
    changed = {name for name, mtime in files_below(study).items() if state.get(name) != mtime}
    assert changed <= {"report.md"} | {f"figures/{name}" for name in shown}, changed
    assert not list(outside.iterdir())


def test_figures_of_an_earlier_report_leave_an_object_store_study(object_store, monkeypatch, tmp_path):
    """In a bucket, too, the figures folder ends up holding the figures report.md shows, and the
    report draws them in a temporary folder that it deletes (nothing in the node cache)."""
    from sweeper.report.writer import write_report
    from sweeper.store import storage

    import tempfile

    monkeypatch.setenv("SWEEPER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    layout = StudyLayout(object_store("record"))
    write_rows(layout, TRIALS, [row(task, lr, seed) for task in TASKS for lr in (1e-4, 3e-4) for seed in range(3)])
    storage.write_bytes(storage.join(layout.figures, "biphasic.png"), b"a figure an earlier report drew")
    write_report(layout)
    text = storage.read_text(layout.report)
    shown = {line.split("(figures/")[1].rstrip(")") for line in text.splitlines() if "](figures/" in line}
    assert shown >= {"category_scores.png", "lr_sensitivity.png"} and "biphasic.png" not in shown
    assert set(storage.list_names(layout.figures, folders=False)) == shown
    assert not (tmp_path / "cache").exists(), "nothing drawn into the node cache"
    assert not list((tmp_path / "tmp").iterdir()), "the temporary folder is deleted"
