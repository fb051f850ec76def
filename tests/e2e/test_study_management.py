"""Study management end to end, on a real local Ray cluster: an edited spec whose changed cells
are refused, then recomputed with `--recompute-changed`; trials that failed, left failed on a
rerun, then run again with `--retry-failed`. Each count is per trial key: nothing run twice, no
old row in the report.

Both studies train the same corpus and run (same keys): the second starts from a copy of the
first's prepared corpus and finished run (`seeded_from`), as a study folder extended by hand
would, so the module prepares and pretrains once."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sweeper.contract import registry
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table, read_trials

from conftest import ROOT, run_sweeper

pytestmark = pytest.mark.e2e
PLUGINS = ROOT / "tests" / "plugins"


def small_spec(path: Path, study: str, tasks: list[str], task_budgets: dict | None = None,
               seeds: tuple[int, ...] = (0, 1)) -> Path:
    """The resume spec cut down: one 12-step nano MLM run, one learning rate, short trials."""
    spec = yaml.safe_load((ROOT / "tests" / "specs" / "resume.yaml").read_text())
    spec["study"] = study
    spec["pretraining"].update(steps=12, log_every=6)
    spec["finetuning"].update(tasks=tasks, learning_rates=[0.001], seeds=list(seeds), max_steps=4,
                              max_train_examples=64, max_eval_examples=16, task_budgets=task_budgets or {})
    path.write_text(yaml.safe_dump(spec))
    return path


def planned_keys(study: Path) -> list[str]:
    return json.loads((study / "plan.json").read_text())["trial_keys"]


def raw_rows(study: Path):
    """Every row the store holds, duplicates and superseded cells included."""
    return read_table(StudyLayout(str(study)), TRIALS).to_pandas()


def coverage_line(study: Path) -> str:
    return next(line for line in (study / "report.md").read_text().splitlines() if "result rows recorded" in line)


@pytest.fixture(scope="module")
def changed_study(ray_head, tmp_path_factory):
    """The first study after its first run (module-scoped: the second study copies its corpus and
    run); returns (spec, study folder, the run's result)."""
    folder = tmp_path_factory.mktemp("changed")
    study, tasks = folder / "study", ["wordnet-supersense-cls", "wordnet-supersense-tag"]
    spec = small_spec(folder / "spec.yaml", "changed", tasks, {"wordnet-supersense-tag": {"max_steps": 2}})
    return spec, study, run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])


def seeded_from(source: Path, study: Path) -> Path:
    """A new study folder holding `source`'s prepared corpus and task data and its finished runs:
    what the planner keys (corpus, run) is the same, so the new study reuses them as its own."""
    for part in ("cache", "pretraining"):
        shutil.copytree(source / part, study / part)
    return study


def test_changed_cells_are_refused_then_recomputed_alone(ray_head, changed_study):
    """A per-task budget changed after the study finished: the tag cells depend on it, the cls
    cells do not."""
    (spec, study, first), address = changed_study, ray_head[0]
    tasks = ["wordnet-supersense-cls", "wordnet-supersense-tag"]
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-3000:]
    old_keys, before = planned_keys(study), raw_rows(study)
    assert len(before) == 4 and set(before["status"]) == {"ok"}
    old_tag_keys = set(before.loc[before["task"] == "wordnet-supersense-tag", "trial_key"])

    small_spec(spec, "changed", tasks, {"wordnet-supersense-tag": {"max_steps": 3}})
    refused = run_sweeper("run", str(spec), "--storage", str(study), address=address)
    assert refused.returncode == 3, refused.stdout[-4000:] + refused.stderr[-3000:]
    assert "2 recorded fine-tuning cell(s) would be recomputed" in refused.stderr
    changed = [line for line in refused.stderr.splitlines() if line.startswith("  ") and " / lr " in line]
    assert len(changed) == 2 and all("/ wordnet-supersense-tag /" in line for line in changed), refused.stderr
    # Each cell says why: the setting, its old and its new value.
    assert all("task_protocol.wordnet-supersense-tag.max_steps: 2 -> 3" in line for line in changed), changed
    assert "Nothing was started" in refused.stderr and "[study]" not in refused.stdout
    assert raw_rows(study).equals(before) and planned_keys(study) == old_keys

    recomputed = run_sweeper("run", str(spec), "--recompute-changed", "--storage", str(study), address=address)
    assert recomputed.returncode == 0, recomputed.stdout[-4000:] + recomputed.stderr[-3000:]
    assert "[study] recomputing changed cells:" in recomputed.stdout
    assert "4 trials: 2 already recorded, 0 blocked by failed runs, 2 to run" in recomputed.stdout
    after, new_keys = raw_rows(study), planned_keys(study)
    assert after["trial_key"].value_counts().eq(1).all(), "no cell run twice"
    assert len(after) == 6 and set(after["trial_key"]) == set(old_keys) | set(new_keys)
    current = after[after["trial_key"].isin(new_keys)]
    assert len(current) == 4 and set(current["status"]) == {"ok"}
    assert set(current.loc[current["task"] == "wordnet-supersense-cls", "trial_key"]) == set(old_keys) - old_tag_keys
    assert set(current.loc[current["task"] == "wordnet-supersense-tag", "train_steps"]) == {3}
    # The old tag rows stay in the store, with their 2 steps, and leave the report.
    superseded = after[after["trial_key"].isin(old_tag_keys)]
    assert len(superseded) == 2 and set(superseded["train_steps"]) == {2}
    assert coverage_line(study) == "4 result rows recorded (4 ok)"
    # `sweeper results` writes exactly the rows the report used; --all marks the old tag rows superseded.
    written = run_sweeper("results", str(study), "--format", "json", address=address)
    assert written.returncode == 0, written.stderr[-3000:]
    rows = json.loads(written.stdout)
    assert sorted(r["trial_key"] for r in rows) == sorted(new_keys) and {r["standing"] for r in rows} == {"current"}
    every = run_sweeper("results", str(study), "--all", "--output", str(study.parent / "all.parquet"), address=address)
    standing = pd.read_parquet(study.parent / "all.parquet").set_index("trial_key")["standing"]
    assert every.returncode == 0 and standing.to_dict() == {**dict.fromkeys(new_keys, "current"),
                                                            **dict.fromkeys(old_tag_keys, "superseded")}


@pytest.fixture
def flaky_plugin(tmp_path) -> dict:
    """The flaky task's module and rows copied into a folder of the test, poisoned; returns the
    environment that loads it (its folder first on PYTHONPATH, then the toy family it extends)."""
    folder = tmp_path / "plugins"
    shutil.copytree(ROOT / "tests" / "data" / "toy-regression", folder / "flaky-data")
    shutil.copy(PLUGINS / "flaky_regression.py", folder)
    (folder / "flaky-data" / "poison").write_text("trials of flaky-word-count raise while this file exists\n")
    return {registry.PLUGINS_VARIABLE: "flaky_regression", "PYTHONPATH": os.pathsep.join([str(folder), str(PLUGINS)])}


def test_failed_trials_stay_failed_until_retried_then_are_recorded_once(ray_head, tmp_path, flaky_plugin,
                                                                         changed_study):
    study, address = seeded_from(changed_study[1], tmp_path / "study"), ray_head[0]
    spec = small_spec(tmp_path / "spec.yaml", "flaky", ["wordnet-supersense-cls", "flaky-word-count"], seeds=(0,))
    run = ("run", str(spec), "--storage", str(study))

    first = run_sweeper(*run, address=address, env=flaky_plugin)
    assert first.returncode == 1, first.stdout[-4000:] + first.stderr[-3000:]
    assert "0 pretraining run(s) and 1 trial(s) failed" in first.stdout
    assert "1 runs: 1 already done" in first.stdout, "the copied run was reused"
    rows = raw_rows(study)
    assert len(rows) == 2 and rows["trial_key"].value_counts().eq(1).all()
    flaky = rows[rows["task"] == "flaky-word-count"]
    assert set(flaky["status"]) == {"failed"} and flaky["error"].str.contains("poisoned trial").all()
    assert set(rows.loc[rows["task"] == "wordnet-supersense-cls", "status"]) == {"ok"}, "the rest of the grid ran"

    # The fault is gone and the spec is the same: a plain rerun still leaves the failures alone, and says so.
    (Path(flaky_plugin["PYTHONPATH"].split(os.pathsep)[0]) / "flaky-data" / "poison").unlink()
    rerun = run_sweeper(*run, address=address, env=flaky_plugin)
    assert rerun.returncode == 1, rerun.stdout[-4000:] + rerun.stderr[-3000:]
    assert "2 trials: 2 already recorded (1 failed before: --retry-failed reruns them), 0 blocked by failed " \
           "runs, 0 to run" in rerun.stdout
    assert "1 trial(s) failed" in rerun.stdout and "--retry-failed reruns them" in rerun.stdout
    assert raw_rows(study).equals(rows)

    retried = run_sweeper(*run, "--retry-failed", address=address, env=flaky_plugin)
    assert retried.returncode == 0, retried.stdout[-4000:] + retried.stderr[-3000:]
    assert "2 trials: 1 already recorded, 0 blocked by failed runs, 1 to run" in retried.stdout
    # Read as the README promises: one row per trial key, the ok one; and the store compacted the
    # failed rows away after the shard, so even its raw rows hold each key once.
    recorded = read_trials(StudyLayout(str(study))).to_pandas()
    assert sorted(recorded["trial_key"]) == sorted(planned_keys(study)) and set(recorded["status"]) == {"ok"}
    assert recorded.loc[recorded["task"] == "flaky-word-count", "test_score"].between(-100, 100).all()
    raw = raw_rows(study)
    assert len(raw) == 2 and raw["trial_key"].value_counts().eq(1).all() and set(raw["status"]) == {"ok"}
    assert coverage_line(study) == "2 result rows recorded (2 ok)"
