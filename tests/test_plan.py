"""Planning: run names in the authors' scheme, stable keys, grid sizes."""
from dataclasses import replace
from pathlib import Path

from sweeper.plan import format_steps, plan_study, run_name
from sweeper.spec import load_spec

SPECS = Path(__file__).parent.parent / "search_spaces"


def test_run_names_follow_the_authors_scheme():
    assert run_name("610m", "mlm", 42_000, 0.4, 0) == "610m-mlm40-42k"
    assert run_name("610m", "clm", 42_000, None, 42_000) == "610m-clm-42k"
    assert run_name("610m", "clm-mlm", 42_000, 0.4, 10_000) == "610m-clm-10k-mlm40-42k"
    assert format_steps(300) == "300" and format_steps(12_000) == "12k"


def test_micro_plan_counts_and_names():
    plan = plan_study(load_spec(SPECS / "micro.yaml"))
    names = [run.name for run in plan.runs]
    assert names == ["tiny-mlm40-600", "tiny-clm-600", "tiny-clm-150-mlm40-600", "tiny-clm-300-mlm40-600"]
    ids = [c.checkpoint_id for c in plan.checkpoints]
    assert "tiny-mlm40-600-200" in ids and "tiny-clm-600-200" in ids and len(ids) == 6
    assert len(plan.trials) == 6 * 5 * 2 * 2
    assert {t.task for t in plan.trials} >= {"wordnet-usage-retrieval", "wordnet-definition-retrieval"}
    assert len({t.trial_key for t in plan.trials}) == len(plan.trials)


def test_keys_are_stable_and_extending_a_grid_keeps_existing_keys():
    spec = load_spec(SPECS / "micro.yaml")
    first = {t.trial_key for t in plan_study(spec).trials}
    assert first == {t.trial_key for t in plan_study(load_spec(SPECS / "micro.yaml")).trials}
    more_seeds = replace(spec, finetuning=replace(spec.finetuning, seeds=[0, 1, 2]))
    extended = {t.trial_key for t in plan_study(more_seeds).trials}
    assert first < extended and len(extended - first) == 6 * 5 * 2
    trials = plan_study(spec).trials
    changed = replace(spec, finetuning=replace(spec.finetuning, max_steps=41))
    kept = first & {t.trial_key for t in plan_study(changed).trials}
    budgeted = {"wordnet-supersense-tag", "wordnet-supersense-qa"}  # micro.yaml's task_budgets
    assert kept == {t.trial_key for t in trials if t.task in budgeted}, (
        "a protocol change alters every cell but those of a task with its own step budget")
    stride = replace(spec, finetuning=replace(spec.finetuning, doc_stride=8))
    altered = first - {t.trial_key for t in plan_study(stride).trials}
    assert altered == {t.trial_key for t in trials if t.task == "wordnet-supersense-qa"}, (
        "a family's own setting alters that family's cells only")


def test_pure_splits_of_a_biphasic_grid_collapse_into_pure_runs():
    spec = load_spec(SPECS / "micro.yaml")
    grid = replace(spec.pretraining.runs[2], clm_fraction=[0.0, 0.25, 1.0])
    plan = plan_study(replace(spec, pretraining=replace(spec.pretraining, runs=[grid])))
    assert [r.name for r in plan.runs] == ["tiny-mlm40-600", "tiny-clm-150-mlm40-600", "tiny-clm-600"]
    assert [r.objective for r in plan.runs] == ["mlm", "clm-mlm", "clm"]


def test_paper_plan_counts_runs_checkpoints_and_trials():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "sweeper", "plan", str(SPECS / "paper.yaml"), "-v"],
                            capture_output=True, text=True, cwd=SPECS.parent)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "pretraining runs:       38" in out
    assert "evaluated checkpoints:  50 (38 final + 12 intermediate)" in out
    assert "fine-tuning trials:     18,000 = 50 checkpoints x 12 datasets x 6 learning rates x 5 seeds" in out
    assert "GPU-h" in out
    for name in ("610m-mlm40-42k", "610m-clm-42k", "610m-clm-10k-mlm40-42k", "610m-clm-40k-mlm20-42k",
                 "610m-clm-dec42k-mlm40-64k", "610m-mlm40-dec42k-mlm40-44k", "1b-clm-30k-mlm40-42k"):
        assert f"    {name}  (" in out, name
    plan = plan_study(load_spec(SPECS / "paper.yaml"))
    assert "610m-mlm40-42k-1000" in {c.checkpoint_id for c in plan.checkpoints}
    cpt = next(r for r in plan.runs if r.name == "610m-clm-dec42k-mlm40-64k")
    assert cpt.init_from_run == "610m-clm-42k" and cpt.steps_before == 42_000 and cpt.total_steps == 22_000


def test_gpu_hour_estimate_follows_the_documented_cost_model():
    from sweeper.cost import parameter_count, pretraining_cost

    spec = load_spec(SPECS / "paper.yaml")
    run = next(r for r in plan_study(spec).runs if r.name == "210m-mlm40-42k")
    n = parameter_count(run.model_config)
    # 12 layers x (4 x 768^2 attention + 3 x 768 x 3072 MLP + 2 x 768 norms) + norm + LM head 128,257 x 768
    assert n == 12 * (4 * 768 * 768 + 3 * 768 * 3072 + 2 * 768) + 768 + 128_257 * 768
    tokens = 42_000 * 2304 * 1024
    expected_hours = 6 * n * tokens / (989e12 * 0.4 * 3600)
    assert abs(pretraining_cost(spec, (run,)).gpu_hours - expected_hours) < 1e-6
