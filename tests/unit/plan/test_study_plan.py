"""Planning: run names in the authors' scheme, stable keys, grid sizes."""
from dataclasses import replace
from pathlib import Path

import pytest
from cli_process import sweeper_cli

from sweeper.plan.load import load_study
from sweeper.plan.run_names import format_steps, run_name
from sweeper.plan.study_plan import plan_study
from sweeper.contract.configs import PhaseConfig
from sweeper.spec.reading import SpecError

SPECS = Path(__file__).resolve().parents[3] / "search_spaces"


def test_run_names_follow_the_authors_scheme():
    mlm40, mlm, clm = {"mask_ratio": 0.4}, "trainables.objectives:mlm_loss", "trainables.objectives:clm_loss"
    assert run_name("610m", (PhaseConfig(objective="mlm", loss=mlm, start_step=0, end_step=42_000, settings=mlm40),)) \
        == "610m-mlm40-42k"
    assert run_name("610m", (PhaseConfig(objective="clm", loss=clm, start_step=0, end_step=42_000),)) == "610m-clm-42k"
    assert run_name("610m", (PhaseConfig(objective="clm", loss=clm, start_step=0, end_step=10_000),
                             PhaseConfig(objective="mlm", loss=mlm, start_step=10_000, end_step=42_000,
                                         settings=mlm40))) \
        == "610m-clm-10k-mlm40-42k"
    assert format_steps(300) == "300" and format_steps(12_000) == "12k"


def test_micro_plan_counts_and_names():
    plan = plan_study(load_study(SPECS / "micro.yaml").spec)
    names = [run.name for run in plan.runs]
    assert names == ["nano-mlm40-600", "nano-mlm20-600", "nano-clm-600", "nano-clm-150-mlm40-600",
                     "nano-clm-300-mlm40-600",
                     "nano-mlm40-600-rep1", "nano-clm-600-rep1", "nano-mlm40-600-rep2", "nano-clm-600-rep2",
                     "nano-clm-dec600-mlm40-700", "nano-mlm40-dec600-mlm40-700"]
    ids = [c.checkpoint_id for c in plan.checkpoints]
    assert "nano-mlm40-600-200" in ids and "nano-clm-600-rep2-200" in ids and len(ids) == 17
    assert len(plan.trials) == 17 * 5 * 1 * 5  # checkpoints x data sets x learning rates x seeds
    assert {t.task for t in plan.trials} >= {"wordnet-usage-retrieval", "wordnet-definition-retrieval"}
    assert len({t.trial_key for t in plan.trials}) == len(plan.trials)


def test_keys_are_stable_and_extending_a_grid_keeps_existing_keys():
    spec = load_study(SPECS / "micro.yaml").spec
    first = {t.trial_key for t in plan_study(spec).trials}
    assert first == {t.trial_key for t in plan_study(load_study(SPECS / "micro.yaml").spec).trials}
    more_seeds = replace(spec, finetuning=replace(spec.finetuning, seeds=[*spec.finetuning.seeds, 5]))
    extended = {t.trial_key for t in plan_study(more_seeds).trials}
    assert first < extended and len(extended - first) == 17 * 5 * 1
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
    spec = load_study(SPECS / "micro.yaml").spec
    grid = replace(spec.pretraining.runs[3], clm_fraction=[0.0, 0.25, 1.0])
    plan = plan_study(replace(spec, pretraining=replace(spec.pretraining, runs=[grid])))
    assert [r.name for r in plan.runs] == ["nano-mlm40-600", "nano-clm-150-mlm40-600", "nano-clm-600"]
    assert [r.objective for r in plan.runs] == ["mlm", "clm-mlm", "clm"]


def test_paper_plan_counts_runs_checkpoints_and_trials():
    result = sweeper_cli("plan", str(SPECS / "paper.yaml"), "-v", cwd=SPECS.parent)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "pretraining runs:       39" in out
    assert "evaluated checkpoints:  51 (39 final + 12 intermediate)" in out
    assert "fine-tuning trials:     15,300 (each msmarco trial is also scored on mldr-en and nq)" in out
    assert "result rows:            18,360 = 51 checkpoints x 12 datasets x 6 learning rates x 5 seeds" in out
    assert "GPU-h" in out
    for name in ("610m-mlm40-42k", "610m-clm-42k", "610m-clm-10k-mlm40-42k", "610m-clm-40k-mlm20-42k",
                 "610m-clm-dec42k-mlm40-64k", "610m-mlm40-dec42k-mlm40-44k", "1b-clm-10k-mlm40-42k",
                 "610m-clm-3k-mlm40-12k", "610m-clm-17k-mlm40-22k", "610m-clm-12k", "610m-clm-22k"):
        assert f"    {name}  (" in out, name
    plan = plan_study(load_study(SPECS / "paper.yaml").spec)
    assert "610m-mlm40-42k-1000" in {c.checkpoint_id for c in plan.checkpoints}
    cpt = next(r for r in plan.runs if r.name == "610m-clm-dec42k-mlm40-64k")
    assert cpt.init_from_run == "610m-clm-42k" and cpt.steps_before == 42_000 and cpt.total_steps == 22_000


def test_gpu_hour_estimate_follows_the_documented_cost_model():
    from sweeper.plan.cost import parameter_count, pretraining_cost

    spec = load_study(SPECS / "paper.yaml").spec
    run = next(r for r in plan_study(spec).runs if r.name == "210m-mlm40-42k")
    n = parameter_count(run.model_config)
    # 12 layers x (4 x 768^2 attention + 3 x 768 x 3072 MLP + 2 x 768 norms) + norm + LM head 128,256 x 768
    assert n == 12 * (4 * 768 * 768 + 3 * 768 * 3072 + 2 * 768) + 768 + 128_256 * 768
    tokens = 42_000 * 1152 * 2048  # rows of 2,048 tokens, two samples each (2,304 samples)
    expected_hours = 6 * n * tokens / (989e12 * 0.4 * 3600)
    assert abs(pretraining_cost(spec, (run,)).gpu_hours - expected_hours) < 1e-6  # float64, ~88 h: ~1e-14 apart


def spec_with_runs(tmp_path, runs_yaml: str):
    text = (SPECS / "smoke.yaml").read_text()
    start, end = text.index("  runs:"), text.index("finetuning:")
    path = tmp_path / "phases.yaml"
    path.write_text(text[:start] + "  runs:\n" + runs_yaml + text[end:])
    return load_study(path).spec


def test_the_long_form_plans_the_short_forms_runs_under_the_same_keys(tmp_path):
    short = {r.name: r.run_key for r in plan_study(load_study(SPECS / "smoke.yaml").spec).runs}
    long = plan_study(spec_with_runs(tmp_path, (
        "    - phases: [{objective: mlm, mask_ratio: 0.4}]\n"
        "      checkpoint_steps: [20]\n"
        "    - phases: [{objective: clm}]\n"
        "    - phases: [{objective: clm, until: 0.5}, {objective: mlm, mask_ratio: 0.4}]\n")))
    assert {r.name: r.run_key for r in long.runs} == short
    biphasic = long.runs[2]
    assert [(p.objective, p.start_step, p.end_step) for p in biphasic.phases] == [("clm", 0, 20), ("mlm", 20, 40)]
    assert (biphasic.objective, biphasic.switch_step, biphasic.clm_fraction) == ("clm-mlm", 20, 0.5)


def test_other_phase_lists_get_their_own_names_and_keys(tmp_path):
    plan = plan_study(spec_with_runs(tmp_path, (
        "    - phases: [{objective: clm, until: 0.25}, {objective: mlm, mask_ratio: 0.3, until: 0.75}, "
        "{objective: clm}]\n"
        "    - phases: [{objective: mlm, mask_ratio: 0.4, settings: {random_replace: 0.1, keep_original: 0.1}}]\n")))
    assert [r.name for r in plan.runs] == ["nano-clm-10-mlm30-30-clm-40", "nano-mlm40-40"]
    three, bert = plan.runs
    assert three.objective == "clm-mlm-clm" and three.mask_ratio == 0.3
    assert "phases" in three.identity and "phases" in bert.identity, "not one of the paper's shapes: phases are hashed"
    smoke_mlm = next(r for r in plan_study(load_study(SPECS / "smoke.yaml").spec).runs if r.name == "nano-mlm40-40")
    assert bert.name == smoke_mlm.name and bert.run_key != smoke_mlm.run_key, "80/10/10 masking is another run"


def test_two_entries_planning_different_runs_under_one_name_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError) as caught:
        spec_with_runs(tmp_path, ("    - objective: mlm\n"
                                  "    - phases: [{objective: mlm, settings: {random_replace: 0.1}}]\n"))
    assert "pretraining.runs[1]" in str(caught.value) and "'nano-mlm40-40' that runs[0] also plans" in str(caught.value)
