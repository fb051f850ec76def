"""A learning rate x weight decay grid through a study on a real local Ray head: split from
tests/unit/plan/test_sweep_grid.py."""
from __future__ import annotations

import itertools
import json

import pyarrow.parquet as pq
import pytest

from conftest import nano_study
from sweeper.report import analysis
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials


E2E_SPEC = nano_study("grid-lr-wd", "    - {objective: mlm}\n", """\
  tasks: [wordnet-supersense-cls]
  learning_rates: [0.001, 0.003]
  weight_decay: [0.0, 0.1]
  seeds: [0, 1]
  batch_size: 8
  micro_batch_size: 8
  max_steps: 4
  eval_every: 2
  max_length: 32
  max_train_examples: 64
  max_eval_examples: 32
""")


@pytest.mark.e2e
def test_a_learning_rate_x_weight_decay_grid_runs_records_selects_and_reports(ray_head, tmp_path):
    from conftest import run_sweeper

    spec, study = tmp_path / "grid.yaml", tmp_path / "study"
    spec.write_text(E2E_SPEC)
    result = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    table = pq.read_table(study / "results" / "trials").to_pandas()
    cells = table.groupby(["checkpoint_id", "task", "learning_rate", "weight_decay", "seed"]).size()
    expected = set(itertools.product(["nano-mlm40-12"], ["wordnet-supersense-cls"], [0.001, 0.003], [0.0, 0.1], [0, 1]))
    assert set(cells.index) == expected and cells.eq(1).all()
    assert set(table["status"]) == {"ok"}
    assert {json.loads(text)["weight_decay"] for text in table["params"]} == {0.0, 0.1}
    curves = pq.read_table(study / "results" / "eval_curves").to_pandas()
    assert set(curves["params"]) == set(table["params"]) and curves["weight_decay"].notna().all()

    best = analysis.best_params_table(read_trials(StudyLayout(str(study))).to_pandas())
    assert len(best) == 1 and best.loc[0, "params.weight_decay"] in (0.0, 0.1) and best.loc[0, "seeds"] == 2
    report = (study / "report.md").read_text()
    assert "## Swept: finetuning.weight_decay" in report and "best params" in report
    assert (study / "figures" / "swept_weight_decay.png").exists()
