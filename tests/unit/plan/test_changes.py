"""Change detection in every search mode (sweeper.plan.changes): a cell is (checkpoint, task, point,
seed), the point being the learning rate and swept values in grid mode and the sample number in
optuna and random modes. Changing a fixed value lists the recorded cells it changes and
`sweeper run` exits 3 before anything starts; adding a value or a sample adds cells only.

Rows are recorded as the driver records them (`recording.trial_row` of the trial as it ran: an
Optuna trial at the point its search picked), without Ray.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SMOKE_SPEC as SMOKE, edited_spec
from sweeper.plan.changes import OPTUNA_SEEDS, find_changes, record_settings
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import at_point, plan_study
from sweeper.run.recording import trial_row
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, write_rows


MODES = {
    "grid": ("  learning_rates: [0.001] ", "  learning_rates: [0.001, 0.002]\n  weight_decay: [0.1, 0.0] "),
    "optuna": ("  learning_rates: [0.001] ", "  search: optuna\n  optuna: {samples: 2}\n"
                                             "  weight_decay: {uniform: [0.0, 0.2]} "),  # no grid of learning rates
    "random": ("  learning_rates: [0.001] ", "  search: random\n  random: {samples: 2}\n"
                                             "  weight_decay: {uniform: [0.0, 0.2]} "),
}
MORE = {  # one more value / sample per cell
    "grid": ("[0.001, 0.002]", "[0.001, 0.002, 0.004]"),
    "optuna": ("optuna: {samples: 2}", "optuna: {samples: 3}"),
    "random": ("random: {samples: 2}", "random: {samples: 3}"),
}
CHANGED = ("  max_steps: 8 ", "  max_steps: 6 ")


def spec_file(tmp_path: Path, mode: str, *changes: tuple[str, str], name: str = "spec.yaml") -> Path:
    return edited_spec(tmp_path, *changes, name=name, text=SMOKE.replace(*MODES[mode], 1))


def as_run(trial, number: int):
    """The trial as the driver records it: an Optuna trial at a point its search could pick."""
    if trial.search_mode != "optuna":
        return trial
    return at_point(trial, {"learning_rate": 1e-4 * (1 + trial.sample), "weight_decay": 0.05 + 0.01 * trial.sample})


def record(tmp_path: Path, mode: str, count: int = 6) -> tuple[StudyLayout, list]:
    spec = load_study(spec_file(tmp_path, mode)).spec
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path / "study"))
    record_settings(spec, plan, layout)
    recorded = list(plan.trials[:count])
    write_rows(layout, TRIALS, [trial_row("smoke", as_run(t, i), {"validation_score": 50.0, "test_score": 40.0},
                                               "ok", None) for i, t in enumerate(recorded)])
    return layout, recorded


@pytest.mark.parametrize("mode", list(MODES))
def test_a_changed_fixed_value_lists_the_recorded_cells_and_more_samples_change_none(tmp_path, mode):
    layout, recorded = record(tmp_path, mode)
    same = load_study(spec_file(tmp_path, mode)).spec
    assert not find_changes(same, plan_study(same), layout), "nothing changed"

    more = load_study(spec_file(tmp_path, mode, MORE[mode], name="more.yaml")).spec
    more_plan = plan_study(more)
    assert not find_changes(more, more_plan, layout), "more values or samples add cells, change none"
    assert {t.trial_key for t in recorded} <= {t.trial_key for t in more_plan.trials}

    changed = load_study(spec_file(tmp_path, mode, CHANGED, name="changed.yaml")).spec
    found = find_changes(changed, plan_study(changed), layout)
    assert len(found.trials) == len(recorded), found.describe()
    cell, why = found.trials[0]
    assert any("max_steps: 8 -> 6" in reason for reason in why), found.describe()
    if mode == "grid":
        assert "lr 0.001 / weight_decay 0.1 / seed 0" in cell
    else:
        assert cell.endswith("/ sample 0 / seed 0") and recorded[0].task in cell


@pytest.mark.parametrize("mode", ["optuna", "random"])
def test_a_changed_search_space_lists_the_recorded_samples_with_why(tmp_path, mode):
    layout, recorded = record(tmp_path, mode)
    changed = load_study(
        spec_file(tmp_path, mode, ("{uniform: [0.0, 0.2]}", "{uniform: [0.0, 0.3]}"), name="wider.yaml")
    ).spec
    found = find_changes(changed, plan_study(changed), layout)
    assert len(found.trials) == len(recorded)
    assert "search.space.weight_decay: ['uniform', [0.0, 0.2]] -> ['uniform', [0.0, 0.3]]" in found.trials[0][1], \
        found.describe()


REFUSED_RUN = """
import contextlib, io, json, sys
from sweeper.cli import main
outcomes = {}
for mode, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(argv)
    outcomes[mode] = {"status": status, "stderr": err.getvalue(), "ray": "ray" in sys.modules}
print(json.dumps(outcomes))
"""


@pytest.fixture(scope="module")
def refused_runs(tmp_path_factory) -> dict[str, tuple[dict, list]]:
    """`sweeper run` of a changed spec over a recorded study, in optuna and random mode, both in one
    fresh interpreter (what is checked is that it never imports Ray; one start instead of two):
    each mode's outcome (exit status, stderr, Ray imported by then) and recorded trials."""
    runs, recorded = {}, {}
    for mode in ("optuna", "random"):
        folder = tmp_path_factory.mktemp(mode)
        layout, recorded[mode] = record(folder, mode)
        runs[mode] = ["run", str(spec_file(folder, mode, CHANGED, name="changed.yaml")), "--storage", layout.root]
    result = subprocess.run([sys.executable, "-c", REFUSED_RUN, json.dumps(runs)], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    return {mode: (outcomes[mode], recorded[mode]) for mode in runs}


@pytest.mark.parametrize("mode", ["optuna", "random"])
def test_sweeper_run_exits_3_naming_the_changed_cells_before_anything_starts(refused_runs, mode):
    outcome, recorded = refused_runs[mode]
    assert outcome["status"] == 3, outcome["stderr"][-3000:]
    assert f"{len(recorded)} recorded fine-tuning cell(s) would be recomputed" in outcome["stderr"]
    assert "/ sample 0 / seed 0: " in outcome["stderr"] and "max_steps: 8 -> 6" in outcome["stderr"]
    assert not outcome["ray"], "Ray was imported for a refused run"


@pytest.mark.parametrize("mode", list(MODES))
def test_a_seed_added_to_an_optuna_study_recomputes_saying_why_once(tmp_path, mode):
    """Optuna tells TPE seed-averaged scores, so its points depend on the seed list: every recorded
    cell is recomputed, and the one note says why and what extends instead (random, grid)."""
    layout, recorded = record(tmp_path, mode)
    more = load_study(spec_file(tmp_path, mode, ("  seeds: [0, 1] ", "  seeds: [0, 1, 2] "), name="seeds.yaml")).spec
    more_plan = plan_study(more)
    found = find_changes(more, more_plan, layout)
    if mode != "optuna":
        assert not found and {t.trial_key for t in recorded} <= {t.trial_key for t in more_plan.trials}
        return
    assert len(found.trials) == len(recorded) and found.notes == [OPTUNA_SEEDS]
    assert found.trials[0][1] == ["search.seeds: [0, 1] -> [0, 1, 2]"]
    assert found.describe().endswith(f"why: {OPTUNA_SEEDS}") and found.describe().count("why:") == 1
