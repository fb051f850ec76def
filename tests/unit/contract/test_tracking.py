"""W&B settings a spec may give (`tracking.wandb`, `project`, `entity`, `mode`): accepted,
checked, handed to `wandb.init`, and part of no run or trial key."""
from __future__ import annotations


import pytest
from conftest import ROOT

from sweeper.contract.tracking import start_wandb
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.spec.reading import SpecError

SMOKE = (ROOT / "search_spaces" / "smoke.yaml").read_text()


def spec_with(tmp_path, tracking: str):
    path = tmp_path / "spec.yaml"
    path.write_text(SMOKE + f"\ntracking: {tracking}\n")
    return load_study(path).spec


def keys(spec) -> tuple[list, list]:
    plan = plan_study(spec)
    return sorted(run.run_key for run in plan.runs), sorted(trial.trial_key for trial in plan.trials)


def test_entity_project_and_mode_are_accepted_and_change_no_key(tmp_path):
    spec = spec_with(tmp_path, "{wandb: true, mode: online, project: encoders, entity: my-team}")
    assert (spec.tracking.entity, spec.tracking.project, spec.tracking.mode) == ("my-team", "encoders", "online")
    assert keys(spec) == keys(load_study(ROOT / "search_spaces" / "smoke.yaml").spec)


@pytest.mark.parametrize("tracking, key, words", [
    ("{wandb: true, mode: sometimes}", "tracking.mode", "online"),
    ("{wandb: true, entity: a/b}", "tracking.entity", "without '/'"),
    ("{wandb: true, team: x}", "tracking.team", "entity"),
])
def test_a_bad_tracking_setting_names_its_key(tmp_path, tracking, key, words):
    with pytest.raises(SpecError) as error:
        spec_with(tmp_path, tracking)
    assert error.value.key_path == key and words in str(error.value)


def test_the_entity_reaches_wandb(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    spec = spec_with(tmp_path, "{wandb: true, mode: disabled, project: encoders, entity: my-team}")
    run = start_wandb(spec.tracking, name="t", run_id="t", location=str(tmp_path / "study"), config={})
    try:
        assert (run.entity, run.project) == ("my-team", "encoders")
    finally:
        run.finish()
