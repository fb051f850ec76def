"""A newcomer's extensions: a task family and a pretraining objective, each one new module with
its registration line (tests/plugins/), loaded as plugins and run through the smoke study.

Nothing in the package names them: the driver imports them from SWEEPER_PLUGINS, the workers
resolve their `module:attribute` implementations, the plan keys and names them, the report gives
the new category its own column.
"""
from __future__ import annotations

import os

import pytest
import torch
import yaml

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.contract import registry
from sweeper.spec.reading import SpecError

from cli_process import sweeper_cli
from conftest import ROOT

PLUGINS = ROOT / "tests" / "plugins"
SMOKE = ROOT / "search_spaces" / "smoke.yaml"


@pytest.fixture
def plugins(monkeypatch):
    """The toy plugins named in SWEEPER_PLUGINS, loaded into a fresh registry that this test alone uses."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "toy_regression,toy_span_masking")
    with registry.using(registry.shipped()) as fresh:
        yield fresh


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
    plan = plan_study(load_study(toy_spec(tmp_path)).spec)
    assert [run.name for run in plan.runs] == ["nano-mlm40-40", "nano-span30x3-40", "nano-clm-20-span30x2-40"]
    span = plan.runs[2]
    assert [(p.objective, p.start_step, p.end_step) for p in span.phases] == [("clm", 0, 20), ("span-mlm", 20, 40)]
    assert span.phases[1].settings == {"mask_ratio": 0.3, "mean_span": 2} and span.mask_ratio == 0.3
    assert len({run.run_key for run in plan.runs}) == 3
    assert {t.task for t in plan.trials} == {"wordnet-supersense-cls", "toy-word-count"} and len(plan.trials) == 6
    assert registry.categories()[-1] == "REG", "a plugin family's category follows the shipped ones"


def test_without_the_plugin_its_names_are_spec_errors(tmp_path, plugins, monkeypatch):
    path = toy_spec(tmp_path)
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "")
    with registry.using(registry.shipped()), pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
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


def test_plan_costs_and_sizes_a_plugin_family_by_its_own_estimate(plugins, tmp_path):
    """`sweeper plan` (the real command line, in a child process) on a study whose one task is the
    toy regression's prints the fine-tuning FLOPs and trial memory of the family's own estimate
    (its task's sizes counted from its files, one sentence per row), not the padded fallback."""
    import math

    from toy_regression import ESTIMATE, sentence_statistics

    from sweeper.plan.cost import backbone_count
    from sweeper.plan.memory import estimate_trial_peak

    spec = yaml.safe_load(SMOKE.read_text())
    spec["model"]["preset"] = "210m"  # a trial's memory shows at 0.1 GB resolution
    spec["finetuning"].update(tasks=["toy-word-count"], max_length=512)
    path = tmp_path / "toy-plan.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, registry.PLUGINS_VARIABLE: "toy_regression", "PYTHONPATH": str(PLUGINS)}
    printed = sweeper_cli("plan", str(path), cwd=ROOT, env=env)
    assert printed.returncode == 0, printed.stderr

    loaded = load_study(path).spec  # the same spec in this process, with the plugin in this test's registry
    plan, ft = plan_study(loaded), loaded.finetuning
    config = plan.runs[0].model_config
    # The family's estimate by hand: one sentence per row, capped at max_length; 5 % of train validates.
    stats = sentence_statistics(registry.get_task("toy-word-count"))
    assert (stats.train_rows, stats.test_rows) == (240, 60) and 5 < stats.mean_tokens < 40
    train, validation, test = stats.split_rows(ft.max_train_examples, ft.max_eval_examples)
    row = min(stats.mean_tokens, ft.max_length)
    steps = min(ft.max_steps, math.ceil(ft.epochs * train / ft.batch_size))
    evaluations = 1 + (steps // ft.eval_every if ft.eval_every else 0)
    trained, scored = steps * ft.batch_size * row, (evaluations * validation + test) * row
    flops = len(plan.trials) * (6 * trained + 2 * scored) * backbone_count(config)
    padded = len(plan.trials) * (6 * ft.max_steps * ft.batch_size + 2 * loaded.cost.finetune_eval_examples) \
        * ft.max_length * backbone_count(config)
    cost_line = next(
        line for line in printed.stdout.splitlines() if line.strip().startswith("fine-tuning ") and "FLOPs" in line
    )
    assert f"({flops:.2e} FLOPs)" in cost_line, cost_line
    assert f"{padded:.2e}" != f"{flops:.2e}", "the generic fallback would print another figure"

    memory = estimate_trial_peak(config, min(ft.micro_batch_size, ft.batch_size) * ESTIMATE.forward_rows,
                                 ft.max_length, ft.eval_batch_size, "cpu-fp32")
    assert f"    210m         1 tasks   {memory.peak_gb:.1f} GB" in printed.stdout, printed.stdout


@pytest.mark.parametrize("plugin,named", [
    ("no_such_plugin", ["module 'no_such_plugin', which is not importable here", "PYTHONPATH"]),
    ("broken_plugin", ["importing module 'broken_plugin' failed at ", "broken_plugin.py:3: ModuleNotFoundError",
                       "No module named 'no_such_dependency'"]),
], ids=["not-on-the-path", "fails-while-imported"])
def test_a_plugin_that_does_not_import_is_named_and_exits_2_without_a_traceback(tmp_path, plugin, named):
    (tmp_path / "broken_plugin.py").write_text('"""A plugin whose own import fails."""\n\nimport no_such_dependency\n')
    env = {**os.environ, registry.PLUGINS_VARIABLE: plugin, "PYTHONPATH": str(tmp_path)}
    done = sweeper_cli("plan", str(SMOKE), cwd=ROOT, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr and not done.stdout, done.stderr
    assert done.stderr.startswith("plugin error: ") and all(part in done.stderr for part in named), done.stderr
