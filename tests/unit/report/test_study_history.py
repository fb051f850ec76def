"""A study record that only grows: every spec the study ran is kept, and report.md reads every
recorded trial but the superseded ones and those recorded under settings the current spec
changed, naming what it leaves out and why.

Synthetic records check which rows are read (current, kept, superseded, other settings); an end
to end study on a real local Ray cluster is extended with a spec that lists fewer tasks and seeds
and one more learning rate, and still reports on every trial of the first spec.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from sweeper.plan.changes import cell_id, trial_cell
from sweeper.report.writer import build_report
from sweeper.store import spec_history
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, write_rows

from conftest import ROOT, run_sweeper
from test_study_management import small_spec

TASKS = {"sc1": "SC", "tc1": "TC"}
RESOLVED = {"protocol": {"max_steps": 8}, "tasks": {"sc1": {"name": "sc1"}, "tc1": {"name": "tc1"}},
            "task_protocol": {"sc1": {}, "tc1": {}}}


def row(task: str, lr: float, seed: int, version: str = "v1") -> dict:
    score = 60.0 + seed + (5 if version == "v2" else 0)
    return {"study": "record", "trial_key": f"{task}/{lr}/{seed}/{version}", "run_name": "m-mlm40-100",
            "run_key": "run-1", "checkpoint_id": "m-mlm40-100", "objective": "mlm", "clm_fraction": 0.0,
            "mask_ratio": 0.4, "checkpoint_step": 100, "total_steps": 100, "tokens_seen": 204800, "task": task,
            "task_category": TASKS[task], "metric": "accuracy", "search_mode": "grid", "learning_rate": lr,
            "seed": seed, "params": "{}", "status": "ok", "validation_score": score, "test_score": score,
            "source": "study", "finished_at": datetime.now(timezone.utc)}


def planned(rows: list[dict], resolved: dict) -> dict:
    return {"trials": len(rows), "trial_keys": [r["trial_key"] for r in rows],
            "trial_cells": [cell_id(trial_cell(r["checkpoint_id"], r["task"], r["learning_rate"], "{}", r["seed"]))
                            for r in rows],
            "runs": {"m-mlm40-100": "run-1"}, "resolved": resolved}


@pytest.fixture
def recompute_record(tmp_path) -> StudyLayout:
    """Spec 1 ran sc1 and tc1 at two learning rates; spec 2 (current) plans sc1 at the first rate
    alone, with sc1's budget changed (`--recompute-changed`), and its trials are recorded."""
    layout = StudyLayout(str(tmp_path))
    first = [row(task, lr, seed) for task in TASKS for lr in (1e-4, 3e-4) for seed in range(3)]
    second = [row("sc1", 1e-4, seed, "v2") for seed in range(3)]
    write_rows(layout, TRIALS, first + second)
    changed = {**RESOLVED, "task_protocol": {"sc1": {"max_steps": 12}}, "tasks": {"sc1": {"name": "sc1"}}}
    spec_history.keep_spec(layout, "study: record\n# first\n", planned(first, RESOLVED))
    spec_history.keep_spec(layout, "study: record\n# second\n", planned(second, changed))
    Path(layout.plan).write_text(json.dumps({k: v for k, v in planned(second, changed).items() if k != "resolved"}))
    return layout


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def test_superseded_kept_and_other_settings_rows(recompute_record):
    text, _ = build_report(recompute_record)
    assert "9 trials recorded (9 ok)" in text, "3 of the current spec + 6 kept tc1 trials"
    assert "It leaves out 6 recorded trial(s): 3 superseded, 3 recorded under other settings" in text
    record = section(text, "Study history")
    assert "`specs/001-" in record and "`specs/002-" in record and "(= `spec.yaml`)" in record
    assert "**Kept, not in the current spec** (6 trials" in record and "m-mlm40-100 / tc1: 6 trial(s)" in record
    superseded = record.split("**Superseded**")[1].split("**Other settings**")[0]
    assert "(3 trials, left out)" in superseded and "m-mlm40-100 / sc1: 3 trial(s), e.g. m-mlm40-100 / sc1 / lr 0.0001" \
        in superseded
    other = record.split("**Other settings**")[1]
    assert "sc1 / lr 0.0003" in other and "task_protocol.sc1.max_steps: None -> 12" in other, other
    # The category table reads the new sc1 rows (v2 scores are 5 points up) and the kept tc1 ones.
    table = section(text, "Category averages")
    assert "| m-mlm40-100 | mlm | 66.00 ± " in table and " | 61.00 ± " in table, table


def test_a_study_from_before_the_record_keeps_what_it_cannot_compare(recompute_record):
    for name in os.listdir(recompute_record.specs):
        os.remove(os.path.join(recompute_record.specs, name))
    plan = json.loads(Path(recompute_record.plan).read_text())
    Path(recompute_record.plan).write_text(json.dumps({k: v for k, v in plan.items() if k != "trial_cells"}))
    text, _ = build_report(recompute_record)
    assert "12 trials recorded (12 ok)" in text and "3 superseded" in text, "cells of the recorded current rows"
    assert "9 recorded before the study kept its specs, not compared" in text
    assert "the study kept no earlier ones" in section(text, "Study history")


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
    assert "5 trials recorded (5 ok)" in report, "the 4 of the first spec and the new one"
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
