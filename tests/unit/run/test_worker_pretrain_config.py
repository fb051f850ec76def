"""What the worker's PretrainConfig gets from `pretraining.compile` and `pretraining.lm_loss`
(sweeper.run.train_grid.pretrain_config): compile resolved by the workers' device when the
spec leaves it out, lm_loss passed as given, neither in a run key; a bad lm_loss is a spec error."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.train_grid import pretrain_config
from sweeper.spec.reading import SpecError
from sweeper.store.layout import StudyLayout

SMOKE = (Path(__file__).resolve().parents[3] / "search_spaces" / "smoke.yaml").read_text()


def worker_configs(tmp_path: Path, extra: str = "", gpus: float = 0.0):
    path = tmp_path / "spec.yaml"
    path.write_text(SMOKE.replace("pretraining:                      # the pretraining grid (Ray Train)\n",
                                  "pretraining:\n" + extra, 1))
    spec = load_study(path).spec
    plan = plan_study(spec)
    spec = replace(spec, resources=replace(spec.resources, gpus_per_worker=gpus))  # no GPU plan check here
    runs = {run.name: run for run in plan.runs}
    return [pretrain_config(run, spec, StudyLayout(str(tmp_path / "study")), str(tmp_path / "corpus"), runs)
            for run in plan.runs]


def test_compile_defaults_to_on_with_a_gpu_only(tmp_path):
    assert {c.compile for c in worker_configs(tmp_path)} == {False}
    assert {c.compile for c in worker_configs(tmp_path, gpus=1)} == {True}
    assert {c.compile for c in worker_configs(tmp_path, "  compile: false\n", gpus=1)} == {False}
    assert {c.compile for c in worker_configs(tmp_path, "  compile: true\n")} == {True}


def test_lm_loss_reaches_the_worker_and_no_key(tmp_path):
    default = worker_configs(tmp_path)
    assert {c.lm_loss for c in default} == {"auto"}
    for choice in ("fused", "reference"):
        chosen = worker_configs(tmp_path, f"  lm_loss: {choice}\n  compile: true\n")
        assert {c.lm_loss for c in chosen} == {choice}
        assert [c.run_key for c in chosen] == [c.run_key for c in default]


def test_an_unknown_lm_loss_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="lm_loss"):
        worker_configs(tmp_path, "  lm_loss: fastest\n")
