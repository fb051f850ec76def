"""Pretraining loss curves from the stored rows; a branched run with its trunk's steps dashed
(sweeper.report.pretraining_curves)."""
from __future__ import annotations

import pandas as pd

from sweeper.plan.branches import Branch
from sweeper.report.pretraining_curves import current_rows, histories, loss_curves


def rows(run: str, key: str, steps) -> list[dict]:
    return [{"run_name": run, "run_key": key, "step": s, "phase": "mlm", "loss": 10 / (1 + s)} for s in steps]


def test_a_branched_run_shows_its_trunk_steps_up_to_the_branch_point():
    frame = pd.DataFrame(rows("long", "k1", range(0, 101, 10)) + rows("short", "k2", range(60, 81, 10)))
    branches = {"short": Branch("short", "long", 50)}
    history = histories(current_rows(frame, None), branches)
    before, own = history["short"]
    assert list(before["step"]) == [0, 10, 20, 30, 40, 50] and list(own["step"]) == [60, 70, 80]
    assert history["long"][0].empty
    fig = loss_curves(current_rows(frame, None), branches)
    styles = [(line.get_linestyle(), len(line.get_xdata())) for line in fig.axes[0].get_lines()]
    assert ("--", 7) in styles  # trunk's 6 steps, joined to the branch's first
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "short (from long at step 50)" in labels


def test_only_the_current_plans_runs_and_one_row_per_step():
    frame = pd.DataFrame(rows("a", "old", [0, 10]) + rows("a", "new", [0, 10, 10]) + rows("gone", "x", [0]))
    kept = current_rows(frame, {"a": "new"})
    assert list(kept["run_key"]) == ["new", "new"] and list(kept["step"]) == [0, 10]


def test_no_rows_no_figure():
    assert loss_curves(pd.DataFrame(columns=["run_name", "run_key", "step", "phase", "loss"]), {}) is None
