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
from datetime import datetime, UTC
from pathlib import Path

import pytest

from sweeper.plan.changes import cell_id, trial_cell
from report_text import build_report
from sweeper.store import spec_history
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, write_rows


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
            "source": "study", "finished_at": datetime.now(UTC)}


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
    assert "9 result rows recorded (9 ok)" in text, "3 of the current spec + 6 kept tc1 trials"
    assert "It leaves out 6 recorded trial(s): 3 superseded, 3 recorded under other settings" in text
    record = section(text, "Study history")
    assert "`specs/001-" in record and "`specs/002-" in record and "(= `spec.yaml`)" in record
    assert "**Kept, not in the current spec** (6 trials" in record and "m-mlm40-100 / tc1: 6 trial(s)" in record
    superseded = record.split("**Superseded**")[1].split("**Other settings**")[0]
    assert (
        "(3 trials, left out)" in superseded
        and "m-mlm40-100 / sc1: 3 trial(s), e.g. m-mlm40-100 / sc1 / lr 0.0001" in superseded
    )
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
    assert "12 result rows recorded (12 ok)" in text and "3 superseded" in text, "cells of the recorded current rows"
    assert "9 recorded before the study kept its specs, not compared" in text
    assert "the study kept no earlier ones" in section(text, "Study history")
