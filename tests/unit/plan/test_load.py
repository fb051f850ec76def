"""One way into a study (sweeper.plan.load.load_study): the four commands go through it, the
steps it takes are private, and a spec is checked, resolved and planned once."""
from __future__ import annotations


import inspect
import re

import pytest

from conftest import ROOT, SMOKE_SPEC, edited_spec
from sweeper import cli
from sweeper.plan import load as loading
from sweeper.plan import study_plan
from sweeper.spec.reading import SpecError, SpecErrors
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, write_rows
from test_statistics import CLEAR, synthetic_trials


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """Every load_study call of the commands (they call it through the module: a wrapper sees them)."""
    seen, real = [], loading.load_study
    monkeypatch.setattr(
        loading,
        "load_study",
        lambda path, overrides=(), **options: seen.append(str(path)) or real(path, overrides, **options),
    )
    return seen


def test_plan_run_status_and_report_each_load_their_spec_through_load_study_once(calls, tmp_path, capsys):
    assert cli.main(["plan", str(ROOT / "search_spaces" / "smoke.yaml")]) == 0
    assert calls == [str(ROOT / "search_spaces" / "smoke.yaml")]
    # A GPU run that cannot fit its 1 GB: refused after loading, before any folder or Ray exists.
    refused = edited_spec(tmp_path, ("cpus_per_worker: 1 ", "cpus_per_worker: 1\n  gpus_per_worker: 1\n"
                                     "  gpu_memory_gb: 0.001\n "))
    assert cli.main(["run", str(refused), "--storage", str(tmp_path / "never")]) == 2
    assert calls[1:] == [str(refused)] and not (tmp_path / "never" / "spec.yaml").exists()
    study = StudyLayout(str(tmp_path / "study"))
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "spec.yaml").write_text(SMOKE_SPEC)
    write_rows(study, TRIALS, synthetic_trials(CLEAR, noise={"mlm": 1.0, "clm": 3.0})[:40])
    assert cli.main(["status", str(tmp_path / "study")]) == 0
    assert cli.main(["report", str(tmp_path / "study")]) == 0
    assert calls[2:] == [study.spec, study.spec], calls
    assert "study smoke" in capsys.readouterr().out


def test_load_study_is_the_modules_one_public_entry_and_the_commands_plan_nowhere_else():
    public = [name for name, value in vars(loading).items()
              if inspect.isfunction(value) and value.__module__ == loading.__name__ and not name.startswith("_")]
    assert public == ["load_study"]
    # Within sweeper/, only load_study plans a spec or builds a StudySpec from a file's mapping.
    for path in (ROOT / "sweeper").rglob("*.py"):
        text = path.read_text()
        if path != ROOT / "sweeper" / "plan" / "load.py":
            assert not re.search(r"\bplan_study\(", text.replace("def plan_study(", "")), path
            assert "build_dataclass(StudySpec" not in text and "load_yaml(" not in text.replace("def load_yaml(", ""), (
                path
            )


def test_external_checkpoints_are_resolved_once_and_the_plan_uses_them(monkeypatch, tmp_path):
    from tiny_checkpoints import build_tiny_checkpoint  # a real local folder, read by the resolver

    folder = build_tiny_checkpoint("llama", tmp_path / "ckpt")
    spec = edited_spec(
        tmp_path, ("  learning_rates:", f"  checkpoints: [{{name: outside, source: {folder}}}]\n  learning_rates:")
    )
    resolved, real = [], loading.resolve_all
    monkeypatch.setattr(loading, "resolve_all", lambda entries: resolved.append(entries) or real(entries))
    monkeypatch.setattr(study_plan, "resolve_all", lambda entries: pytest.fail("resolved a second time"))
    study = loading.load_study(spec)
    assert len(resolved) == 1
    assert [c.checkpoint_id for c in study.plan.checkpoints if c.external] == ["outside"]


def test_the_plan_holds_each_cells_whole_search_space():
    study = loading.load_study(ROOT / "tests" / "specs" / "optuna.yaml")
    for task in study.spec.finetuning.tasks:
        space = study.plan.spaces[task]
        assert next(iter(space)) == "learning_rate" and set(space) == {"learning_rate", *study.plan.trials[0].params}
    grid = loading.load_study(ROOT / "search_spaces" / "smoke.yaml")
    assert grid.plan.spaces == {}


def test_three_independent_mistakes_are_all_reported_in_line_order(tmp_path):
    spec = edited_spec(
        tmp_path,
        ("  preset: nano ", "  prest: nano "),
        ("  global_batch_size: 8 ", "  global_batch_size: -8 "),
        ("  max_length: 48 ", "  max_lenght: 48 "),
    )
    with pytest.raises(SpecErrors) as raised:
        loading.load_study(spec)
    errors = raised.value.errors
    assert [e.key_path for e in errors] == ["model.prest", "pretraining.global_batch_size", "finetuning.max_lenght"]
    assert [e.line for e in errors] == sorted(e.line for e in errors)
    assert "did you mean 'preset'" in errors[0].reason and "did you mean 'max_length'" in errors[2].reason


def test_a_mistake_skips_only_the_checks_that_depend_on_it(tmp_path):
    """A bad value inside `pretraining.optimizer` skips pretraining's own check (it would judge the
    section without that value: here that warmup is longer than the runs) but not finetuning's."""
    spec = edited_spec(
        tmp_path,
        ("    peak_lr: 0.002 ", "    peak_lr: fast "),
        ("  doc_stride: 8 ", "  doc_stride: 48 "),
        ("  warmup_steps: 4 ", "  warmup_steps: 400 "),
    )
    with pytest.raises(SpecError) as raised:
        loading.load_study(spec)
    assert [(e.key_path, e.line) for e in raised.value.errors] == [
        ("pretraining.optimizer.peak_lr", 19), ("finetuning.doc_stride", 38)]
    fixed = edited_spec(tmp_path, ("  warmup_steps: 4 ", "  warmup_steps: 400 "), name="fixed.yaml")
    with pytest.raises(SpecError, match="shorter than warmup"):  # the check skipped above, once the value reads
        loading.load_study(fixed)
