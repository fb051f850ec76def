"""A plugin family and objective through a study on a real local Ray head: split from
tests/unit/contract/test_extending.py."""
from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest

from sweeper.contract import registry

from conftest import run_sweeper

from test_extending import PLUGINS, toy_spec


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
