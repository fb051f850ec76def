"""A trial is a point in a space: grids over fine-tuning protocol fields (search: grid).

The plan is the product of the swept fields' grids x learning rates x seeds per (checkpoint,
task), one trial per distinct protocol; the swept values travel as `params` (trial, config,
store columns, analysis), and a spec that sweeps nothing keeps its keys (tests/unit/plan/test_pinned_keys.py
pins the shipped ones).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, edited_spec
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import finetune_protocol, plan_study, task_points
from sweeper.report import analysis
from sweeper.run.recording import trial_row
from sweeper.spec.reading import SpecError
from sweeper.store.layout import StudyLayout
from sweeper.store.results import EVAL_CURVE_SCHEMA, PROTOCOL_COLUMNS, TRIAL_SCHEMA, TRIALS, read_trials, write_rows


def smoke_with(tmp_path: Path, *changes: tuple[str, str], name: str = "sweep.yaml") -> Path:
    """smoke.yaml with each (old line start, new text) replaced once, written into tmp_path."""
    return edited_spec(tmp_path, *changes, name=name)


WD_GRID = ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: [0.1, 0.0] ")
TWO_LRS = ("  learning_rates: [0.001] ", "  learning_rates: [0.001, 0.002] ")


def test_lr_x_weight_decay_grid_plans_the_product_per_checkpoint_and_task(tmp_path):
    spec = load_study(smoke_with(tmp_path, WD_GRID, TWO_LRS)).spec
    plan = plan_study(spec)
    ft = spec.finetuning
    assert len(plan.trials) == len(plan.checkpoints) * len(ft.tasks) * 2 * 2 * len(ft.seeds)
    cells = [
        (t.checkpoint.checkpoint_id, t.task, t.learning_rate, t.params["weight_decay"], t.seed) for t in plan.trials
    ]
    assert len(set(cells)) == len(cells)
    assert len({t.trial_key for t in plan.trials}) == len(plan.trials)
    for trial in plan.trials:  # the point's value is the protocol's, and so the key's
        assert trial.protocol.optimizer.weight_decay == trial.params["weight_decay"]
        assert set(trial.params) == {"weight_decay"}


def test_sweeping_a_field_from_its_current_value_keeps_every_recorded_key(tmp_path):
    """weight_decay is 0.1 by default: [0.1, 0.0] plans the old trials under their old keys, plus new ones."""
    before = plan_study(
        load_study(smoke_with(tmp_path, ("  max_steps: 8 ", "  max_steps: 8 "), name="plain.yaml")).spec
    )
    after = plan_study(load_study(smoke_with(tmp_path, WD_GRID)).spec)
    assert all(t.params == {} for t in before.trials)
    old_keys = [t.trial_key for t in before.trials]
    assert [t.trial_key for t in after.trials if t.params["weight_decay"] == 0.1] == old_keys
    assert not set(old_keys) & {t.trial_key for t in after.trials if t.params["weight_decay"] == 0.0}


def test_points_that_give_a_task_the_same_protocol_are_one_trial(tmp_path):
    """doc_stride reaches QA only; a task budget replaces a swept max_steps for its task."""
    spec = load_study(smoke_with(
        tmp_path, ("  max_steps: 8 ", "  max_steps: [8, 4]\n  task_budgets: {wordnet-supersense-cls: {max_steps: 2}} "),
        ("  doc_stride: 8 ", "  doc_stride: [8, 4] "))).spec
    points = {task: task_points(spec, task) for task in spec.finetuning.tasks}
    assert [params for params, _ in points["wordnet-supersense-qa"]] == [
        {"max_steps": 8, "doc_stride": 8}, {"max_steps": 8, "doc_stride": 4},
        {"max_steps": 4, "doc_stride": 8}, {"max_steps": 4, "doc_stride": 4}]
    assert [params for params, _ in points["wordnet-supersense-tag"]] == [{"max_steps": 8}, {"max_steps": 4}]
    assert [params for params, _ in points["wordnet-supersense-cls"]] == [{}]  # its budget wins
    assert points["wordnet-supersense-cls"][0][1].max_steps == 2
    plan = plan_study(spec)
    per_task = pd.Series([t.task for t in plan.trials]).value_counts() / len(plan.checkpoints) / 2  # seeds
    assert per_task.to_dict() == {"wordnet-supersense-qa": 4, "wordnet-supersense-tag": 2, "wordnet-supersense-cls": 1,
                                  "wordnet-usage-retrieval": 2, "wordnet-definition-retrieval": 2}
    smallest = [
        t for t in plan.trials if t.task == "wordnet-supersense-qa" and t.params == {"max_steps": 4, "doc_stride": 4}
    ]
    assert smallest and all(t.protocol.family_settings == {"doc_stride": 4} and t.protocol.max_steps == 4
                            for t in smallest)


def test_a_combination_of_grid_values_the_checks_refuse_is_a_spec_error(tmp_path):
    """Each value is checked alone when read; doc_stride 20 is fine at max_length 48, not at 32."""
    path = smoke_with(
        tmp_path, ("  max_length: 48 ", "  max_length: [48, 32] "), ("  doc_stride: 8 ", "  doc_stride: [8, 20] ")
    )
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    assert caught.value.key_path == "finetuning.doc_stride"
    assert "with max_length 32, doc_stride 20" in caught.value.reason and "max_length / 2" in caught.value.reason
    assert caught.value.line is not None


def test_task_data_is_prepared_once_per_length_and_stride_a_trial_reads(tmp_path):
    from sweeper.run.task_prep import data_variant, task_data_dir, task_folder_name

    base = load_study(smoke_with(tmp_path, ("  max_steps: 8 ", "  max_steps: 8 "), name="plain.yaml")).spec
    qa = "wordnet-supersense-qa"
    # Unswept: one folder, named by the task, its length and the key of what shapes it
    # (tests/unit/store/test_cache_keys.py).
    assert task_folder_name(qa, "0123abcd", finetune_protocol(base, qa)).startswith("wordnet-supersense-qa-len48-")
    spec = load_study(smoke_with(tmp_path, ("  max_length: 48 ", "  max_length: [48, 32] "),
                                ("  doc_stride: 8 ", "  doc_stride: [8, 4] "))).spec
    variants = {task: {data_variant(task, protocol) for _, protocol in task_points(spec, task)}
                for task in spec.finetuning.tasks}
    assert variants[qa] == {(48, 8), (48, 4), (32, 8), (32, 4)}
    assert variants["wordnet-supersense-cls"] == {(48,), (32,)}
    trial = next(t for t in plan_study(spec).trials if t.task == qa and t.params == {"max_length": 32, "doc_stride": 4})
    dirs = {("tok", qa, variant): f"/data/{variant}" for variant in variants[qa]} | {("tok", qa): "/data/first"}
    assert task_data_dir(dirs, "tok", qa, trial.protocol) == "/data/(32, 4)"
    assert task_data_dir({("tok", qa): "/only"}, "tok", qa, trial.protocol) == "/only"  # a map built by hand


def test_the_trial_config_carries_the_point(tmp_path):
    from sweeper.run.shards import EvaluationSets, trial_config
    from sweeper.contract.configs import TrialRuntime

    spec = load_study(smoke_with(tmp_path, WD_GRID)).spec
    plan = plan_study(spec)
    trial = next(t for t in plan.trials if t.params == {"weight_decay": 0.0} and t.task == "wordnet-usage-retrieval")
    task_dirs = {(c.run.tokenizer, task): f"/data/{task}" for c in plan.checkpoints for task in spec.finetuning.tasks}
    sets = EvaluationSets(plan, spec.finetuning.tasks)
    config = trial_config(trial, StudyLayout(str(tmp_path / "study")), task_dirs, sets, TrialRuntime())
    assert config.params == {"weight_decay": 0.0} and config.protocol.optimizer.weight_decay == 0.0
    (companion,) = config.companions  # the evaluation-only set's trial at the same point
    partner = next(t for t in plan.trials if t.trial_key == companion.trial_key)
    assert partner.task == "wordnet-definition-retrieval" and partner.params == trial.params


def test_store_columns_read_without_project_code_and_old_parts_read_as_unswept(tmp_path):
    spec = load_study(smoke_with(tmp_path, WD_GRID, TWO_LRS)).spec
    plan = plan_study(spec)
    rows = [trial_row("s", t, {"validation_score": 50.0 + t.seed + 10 * t.params["weight_decay"],
                               "test_score": 40.0 + t.seed + 20 * t.params["weight_decay"]}, "ok", None)
            for t in plan.trials]
    study = tmp_path / "study"
    write_rows(StudyLayout(str(study)), TRIALS, rows)
    table = pq.read_table(study / "results" / "trials")  # pyarrow alone
    assert {"weight_decay", "params", "betas", "doc_stride"} <= set(table.column_names)
    frame = table.to_pandas()
    assert frame.groupby(["checkpoint_id", "task", "learning_rate", "weight_decay", "seed"]).size().eq(1).all()
    assert {json.loads(text)["weight_decay"] for text in frame["params"]} == {0.0, 0.1}
    assert frame.loc[frame["task"] != "wordnet-supersense-qa", "doc_stride"].isna().all()
    assert frame.loc[frame["task"] == "wordnet-supersense-qa", "doc_stride"].eq(8).all()
    assert {name for name, _ in PROTOCOL_COLUMNS} <= set(EVAL_CURVE_SCHEMA.names)

    # A part written before the columns existed reads with them null, and as unswept.
    protocol = {name for name, _ in PROTOCOL_COLUMNS}
    old_schema = pa.schema([f for f in TRIAL_SCHEMA if f.name not in protocol and f.name != "task"])
    old = tmp_path / "old"
    (old / "results" / "trials" / "task=sst2").mkdir(parents=True)
    unswept = plan_study(
        load_study(smoke_with(tmp_path, ("  max_steps: 8 ", "  max_steps: 8 "), name="plain.yaml")).spec
    )
    old_rows = [trial_row("s", t, {"validation_score": 50.0, "test_score": 40.0 + t.seed}, "ok", None)
                for t in unswept.trials]
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in old_schema.names} for r in old_rows], schema=old_schema),
                   old / "results" / "trials" / "task=sst2" / "part-old.parquet")
    recorded = read_trials(StudyLayout(str(old))).to_pandas()
    assert len(recorded) == len(old_rows) and recorded["params"].isna().all()
    best = analysis.best_params_table(recorded)
    assert not analysis.axes(best) and len(best) == len(unswept.checkpoints)


def test_selection_is_the_best_params_tuple_on_seed_averaged_validation(tmp_path):
    spec = load_study(smoke_with(tmp_path, WD_GRID, TWO_LRS)).spec
    plan = plan_study(spec)
    # Validation favours wd 0.0 at lr 0.002 by a margin no seed noise undoes; test follows it.
    favoured = (0.002, 0.0)
    rows = [trial_row("s", t, {"validation_score": 50.0 + 0.3 * t.seed
                               + (5.0 if (t.learning_rate, t.params["weight_decay"]) == favoured else 0.0),
                               "test_score": 40.0 + t.seed + 10 * t.params["weight_decay"]}, "ok", None)
            for t in plan.trials]
    trials = pd.DataFrame(rows)
    best = analysis.best_params_table(trials)
    assert len(best) == len(plan.checkpoints) * len(spec.finetuning.tasks)
    assert (best["learning_rate"] == 0.002).all() and (best["params.weight_decay"] == 0.0).all()
    assert best["test_mean"].eq(40.5).all() and best["seeds"].eq(2).all()
    per_value = analysis.axis_scores(trials, "params.weight_decay")
    assert per_value.groupby(["checkpoint_id", "task"]).size().eq(2).all()
    assert per_value.set_index("params.weight_decay").loc[0.1, "test_mean"].eq(41.5).all()


def test_a_changed_fixed_value_names_the_swept_cells_it_changes(tmp_path):
    from sweeper.plan.changes import find_changes, record_settings

    study = tmp_path / "study"
    spec = load_study(smoke_with(tmp_path, WD_GRID)).spec
    plan = plan_study(spec)
    layout = StudyLayout(str(study))
    record_settings(spec, plan, layout)
    write_rows(layout, TRIALS, [trial_row("s", t, {"validation_score": 1.0, "test_score": 1.0}, "ok", None)
                               for t in plan.trials[:4]])
    assert not find_changes(spec, plan, layout)  # nothing changed
    more = load_study(smoke_with(tmp_path, WD_GRID, ("  seeds: [0, 1] ", "  seeds: [0, 1, 2] "), name="more.yaml")).spec
    assert not find_changes(more, plan_study(more), layout), "adding a seed adds cells, changes none"
    changed = load_study(
        smoke_with(tmp_path, WD_GRID, ("  max_steps: 8\n", "  max_steps: 6\n"), name="changed.yaml")
    ).spec
    found = find_changes(changed, plan_study(changed), layout)
    assert len(found.trials) == 4
    cell, why = found.trials[0]
    assert "weight_decay" in cell and any("max_steps: 8 -> 6" in reason for reason in why), found.describe()


def test_grid_points_keep_optuna_mode_as_it_was(tmp_path):
    spec = load_study(ROOT / "tests" / "specs" / "optuna.yaml").spec
    assert all(t.params == {} for t in plan_study(spec).trials)
    assert spec.finetuning.points() == [{}] and spec.finetuning.swept() == {}
