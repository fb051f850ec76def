"""A newcomer's extensions: a task family and a pretraining objective, each one new module with
its registration line (tests/plugins/), loaded as plugins and run through the smoke study.

Nothing in the package names them: the driver imports them from SWEEPER_PLUGINS, the workers
resolve their `module:attribute` implementations, the plan keys and names them, the report gives
the new category its own column.
"""
from __future__ import annotations

import json
import os

import pyarrow.dataset as ds
import pytest
import torch
import yaml

from sweeper.plan.load import load_spec
from sweeper.plan.study_plan import plan_study
from sweeper.spec import catalog, registry
from sweeper.spec.reading import SpecError

from conftest import ROOT, run_sweeper

PLUGINS = ROOT / "tests" / "plugins"
SMOKE = ROOT / "search_spaces" / "smoke.yaml"


@pytest.fixture
def plugins(monkeypatch):
    """The toy plugins registered in this process, and the registries restored afterwards."""
    saved = dict(registry.FAMILIES), dict(registry.OBJECTIVES), dict(catalog.TASKS)
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "toy_regression,toy_span_masking")
    yield
    for live, before in zip((registry.FAMILIES, registry.OBJECTIVES, catalog.TASKS), saved):
        live.clear()
        live.update(before)


def toy_spec(folder) -> str:
    spec = yaml.safe_load(SMOKE.read_text())
    spec["study"] = "toy-extensions"
    spec["pretraining"]["runs"] = [
        {"objective": "mlm", "mask_ratio": [0.4]},
        {"objective": "span-mlm", "mask_ratio": [0.3]},
        {"phases": [{"objective": "clm", "until": 0.5}, {"objective": "span-mlm", "settings": {"mean_span": 2}}]},
    ]
    spec["finetuning"].update(tasks=["wordnet-supersense-cls", "toy-word-count"], seeds=[0], max_steps=12)
    path = folder / "toy.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_plugins_plan_named_and_keyed_runs_and_trials(plugins, tmp_path):
    plan = plan_study(load_spec(toy_spec(tmp_path)))
    assert [run.name for run in plan.runs] == ["nano-mlm40-40", "nano-span30x3-40", "nano-clm-20-span30x2-40"]
    span = plan.runs[2]
    assert [(p.objective, p.start_step, p.end_step) for p in span.phases] == [("clm", 0, 20), ("span-mlm", 20, 40)]
    assert span.phases[1].settings == {"mask_ratio": 0.3, "mean_span": 2} and span.mask_ratio == 0.3
    assert len({run.run_key for run in plan.runs}) == 3
    assert {t.task for t in plan.trials} == {"wordnet-supersense-cls", "toy-word-count"} and len(plan.trials) == 6
    assert registry.categories()[-1] == "REG", "a plugin family's category follows the shipped ones"


def test_without_the_plugin_its_names_are_spec_errors(tmp_path, plugins):
    path = toy_spec(tmp_path)
    os.environ[registry.PLUGINS_VARIABLE] = ""
    registry.OBJECTIVES.pop("span-mlm", None)
    catalog.TASKS.pop("toy-word-count", None)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert "pretraining.runs[1].objective" in str(caught.value) and "unknown objective 'span-mlm'" in str(caught.value)


def test_span_masking_masks_spans_inside_documents(plugins):
    registry.load_plugins()
    from toy_span_masking import span_selection

    from trainables.objectives import RowDraws

    special = torch.zeros(4, 400, dtype=torch.bool)
    special[:, ::50] = True  # separators
    selected = span_selection(special, 0.3, 3, RowDraws(seed=0, step=0))
    assert not (selected & special).any()
    assert 0.2 < selected.float().mean() < 0.35
    runs = [len(run) for row in selected.tolist() for run in "".join("x" if s else " " for s in row).split()]
    assert sum(runs) / len(runs) > 2, "contiguous spans, not isolated tokens"


@pytest.mark.e2e
def test_a_plugin_family_and_objective_run_through_the_smoke_study(ray_head, tmp_path):
    spec, study = toy_spec(tmp_path), tmp_path / "study"
    env = {registry.PLUGINS_VARIABLE: "toy_regression,toy_span_masking", "PYTHONPATH": str(PLUGINS)}
    result = run_sweeper("run", spec, "--storage", str(study), address=ray_head[0], env=env)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    rows = ds.dataset(study / "results" / "trials", format="parquet", partitioning="hive").to_table().to_pandas()
    assert len(rows) == 6 and set(rows["status"]) == {"ok"}
    toy = rows[rows["task"] == "toy-word-count"]
    assert set(toy["task_category"]) == {"REG"} and set(toy["task_family"]) == {"regression"}
    assert toy["test_score"].between(-100, 100).all()
    assert "target mean" in result.stdout, "the family's own prepare line"
    # The objective trained: its phases are in the checkpoint marker and in the pretraining table.
    marker = json.loads((study / "pretraining" / "nano-clm-20-span30x2-40" / "step-40" /
                         "sweeper_checkpoint.json").read_text())
    assert [p["objective"] for p in marker["phases"]] == ["clm", "span-mlm"]
    pre = ds.dataset(study / "results" / "pretraining", format="parquet", partitioning="hive").to_table().to_pandas()
    phases = pre[pre["run_name"] == "nano-clm-20-span30x2-40"].sort_values("step")["phase"].tolist()
    assert phases == ["clm", "clm", "span-mlm", "span-mlm"]
    assert pre.groupby("run_name")["loss"].apply(lambda loss: loss.iloc[-1] < loss.iloc[0]).all(), "every run learns"
    # The report gives the new category a column of its own.
    report = (study / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("| checkpoint | objective |"))
    assert header.split("|")[3:-1] == [" SC ", " REG "], header
