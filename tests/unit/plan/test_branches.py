"""The run graph (sweeper.plan.branches): which runs train their first steps exactly as another
run does, found from the per-step learning rates and phases, and what `sweeper plan` says of it."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from conftest import ROOT, edited_spec
from hypothesis import given, settings, strategies as st

from sweeper.contract.configs import PhaseConfig, phase_at
from sweeper.contract.schedules import wsd_lr
from sweeper.plan.branches import phase_steps, phase_text, prefix_branches, shared_steps, shared_with
from sweeper.plan.cost import parameter_count, pretraining_cost
from sweeper.plan.load import load_study
from sweeper.plan.plan_text import plan_lines
from sweeper.plan.study_plan import plan_study


@pytest.fixture(scope="module")
def paper():
    study = load_study(ROOT / "search_spaces" / "paper.yaml")
    return study, prefix_branches(study.plan.runs)


def runs_of(tmp_path, runs_yaml: str, *changes, name="spec.yaml"):
    """smoke.yaml with these run entries (and `changes`): its runs by name."""
    text = (ROOT / "search_spaces" / "smoke.yaml").read_text()
    start, end = text.index("  runs:"), text.index("finetuning:")
    spec = load_study(
        edited_spec(tmp_path, *changes, name=name, text=text[:start] + "  runs:\n" + runs_yaml + text[end:])
    ).spec
    return {run.name: run for run in plan_study(spec).runs}


def test_the_papers_biphasic_runs_branch_from_the_clm_run_at_their_switch(paper):
    _, branches = paper
    start = {name: (b.trunk, b.step) for name, b in branches.items()}
    assert start["610m-clm-10k-mlm40-42k"] == ("610m-clm-42k", 10_000)
    assert start["610m-clm-32k-mlm40-42k"] == ("610m-clm-42k", 32_000)
    assert start["610m-clm-3k-mlm40-12k"] == ("610m-clm-42k", 3_000)
    assert start["610m-mlm40-12k"] == ("610m-mlm40-42k", 10_000)  # where the 12k run's decay begins
    assert start["610m-mlm40-22k"] == ("610m-mlm40-42k", 20_000)
    assert start["1b-clm-10k-mlm40-42k"] == ("1b-clm-42k", 10_000)
    # CPT: the +12k run is the +22k run (same decayed source) until its own decay (1,000 steps)
    assert start["610m-clm-dec42k-mlm40-54k"] == ("610m-clm-dec42k-mlm40-64k", 11_000)
    for base in ("610m-clm-42k", "610m-mlm40-42k", "610m-mlm20-42k", "1b-clm-42k", "610m-clm-dec42k-mlm40-64k"):
        assert base not in branches
    assert not any(b.trunk.startswith("210m") for b in branches.values())  # nothing shares across sizes


def test_the_papers_pretraining_with_each_prefix_trained_once_is_within_the_issues_figure(paper):
    study, branches = paper
    spec, runs = study.spec, study.plan.runs
    every, shared = pretraining_cost(spec, runs), pretraining_cost(spec, runs, branches)
    assert every.gpu_hours == pytest.approx(7924.8, abs=0.1)  # what `sweeper run` trains today
    assert shared.gpu_hours <= 5800
    pfs = [run for run in runs if run.preset == "610m" and run.init_from is None
           and run.name not in ("610m-clm-42k", "610m-mlm20-42k", "610m-mlm30-42k", "610m-mlm40-42k", "610m-mlm50-42k")]
    new = sum(run.total_steps - branches[run.name].step for run in pfs)
    assert 120_000 <= new <= 140_000  # the paper: 17 new models in 120,000 new steps
    counted = sum(6 * parameter_count(r.model_config) * r.tokens_per_step * (r.total_steps - (
        branches[r.name].step if r.name in branches else 0)) for r in runs)
    assert shared.flops == pytest.approx(counted)


def test_every_branch_agrees_on_each_shared_step_and_differs_at_the_next(paper):
    study, branches = paper
    runs = {run.name: run for run in study.plan.runs}

    def step_of(run, t):
        p = phase_at(run.phases, t)
        return (wsd_lr(t, peak_lr=run.peak_lr, total_steps=run.total_steps, warmup_steps=run.warmup_steps,
                       decay_steps=run.decay_steps), p.objective, p.settings)

    for branch in branches.values():
        run, trunk = runs[branch.run], runs[branch.trunk]
        for t in (0, branch.step // 2, branch.step - 1):
            assert step_of(run, t) == step_of(trunk, t)
        if branch.step < min(run.total_steps, trunk.total_steps):
            assert step_of(run, branch.step) != step_of(trunk, branch.step)


def test_runs_that_differ_in_anything_but_their_schedule_share_nothing(tmp_path):
    pair = "    - objective: mlm\n      mask_ratio: [0.4]\n      steps: [40, 24]\n"
    assert {b.run: (b.trunk, b.step) for b in prefix_branches(list(runs_of(tmp_path, pair).values())).values()} \
        == {"nano-mlm40-24": ("nano-mlm40-40", 16)}  # 24 - 8 decay steps
    replicated = runs_of(tmp_path, pair + "      replicates: 2\n", name="rep.yaml")
    branches = prefix_branches(list(replicated.values()))
    assert {b.run: b.trunk for b in branches.values()} == {"nano-mlm40-24": "nano-mlm40-40",
                                                            "nano-mlm40-24-rep1": "nano-mlm40-40-rep1"}
    ratios = runs_of(tmp_path, "    - objective: mlm\n      mask_ratio: [0.4, 0.3]\n", name="ratios.yaml")
    assert prefix_branches(list(ratios.values())) == {}  # the masking differs from step 0
    lrs = runs_of(tmp_path, pair, ("    peak_lr: 0.002", "    peak_lr: [0.002, 0.001]"), name="lr.yaml")
    assert {b.run for b in prefix_branches(list(lrs.values())).values()} == {"nano-mlm40-24", "nano-mlm40-24-lr1e-3"}
    assert all(
        b.trunk.endswith("lr1e-3") == b.run.endswith("lr1e-3") for b in prefix_branches(list(lrs.values())).values()
    )


@settings(max_examples=40, deadline=None)
@given(short=st.integers(1, 60), extra=st.integers(0, 60), warmup=st.integers(0, 10), decay=st.integers(0, 10),
       switch=st.integers(0, 60))
def test_under_wsd_two_lengths_share_until_the_shorter_decay_and_a_switch_at_most_there(short, extra, warmup, decay,
                                                                                     switch):
    long = short + extra

    def lrs(total):
        return np.array([wsd_lr(t, peak_lr=1.0, total_steps=total, warmup_steps=warmup, decay_steps=decay)
                         for t in range(total)])

    clm_long, switched = np.zeros(long, dtype=np.int64), np.array([0 if t < switch else 1 for t in range(short)])
    shared = shared_steps((lrs(short), switched), (lrs(long), clm_long))
    differ = [t for t in range(short) if lrs(short)[t] != lrs(long)[t] or switched[t] != 0]
    assert shared == (differ[0] if differ else short)
    if extra and decay and short - decay >= warmup:  # a decay that starts after the warmup
        assert shared == min(short - decay, switch)  # the decay start, or the switch before it


@settings(max_examples=60, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(-5, 50), st.integers(0, 60), st.sampled_from(["clm", "mlm"]),
                                st.sampled_from([0.3, 0.4])), min_size=1, max_size=4), total=st.integers(1, 60))
def test_phase_codes_filled_by_span_are_the_workers_phase_of_each_step(spans, total):
    # gaps, overlaps and spans past the run's end included: each step's code names phase_at's phase
    phases = tuple(PhaseConfig(objective=obj, loss=f"{obj}:loss", start_step=start, end_step=end,
                               settings={"mask_ratio": ratio}) for start, end, obj, ratio in spans)
    codes: dict[str, int] = {}
    steps = phase_steps(tuple((p.start_step, p.end_step, phase_text(p)) for p in phases), total, codes)
    named = {code: text for text, code in codes.items()}
    for t in range(total):
        p = phase_at(phases, t)
        assert named[int(steps[t])] == json.dumps([p.objective, p.loss, p.settings], sort_keys=True)


def test_shared_with_names_every_run_that_trains_the_same_first_steps(paper):
    study, branches = paper
    runs = study.plan.runs
    assert shared_with(runs, "610m-mlm40-12k") == {"610m-mlm40-42k": 10_000, "610m-mlm40-22k": 10_000}
    around = shared_with(runs, "610m-clm-10k-mlm40-42k")
    assert around["610m-clm-42k"] == 10_000 and around["610m-clm-12k"] == 10_000  # the 12k run decays from 10,000
    for name, branch in branches.items():  # the planned trunk is one of them, sharing the planned steps
        assert shared_with(runs, name)[branch.trunk] == branch.step


def test_plan_counts_new_steps_and_says_what_sharing_saved(paper):
    study, _ = paper
    lines = plan_lines(study, verbose=True)
    text = "\n".join(lines)
    assert "    pretraining       5,643.7 GPU-h" in text
    assert "22 runs start from another run's checkpoint (368,000 shared steps, `plan -v`): 2,281.1 GPU-h saved" in text
    line = next(line for line in lines if line.startswith("    610m-clm-10k-mlm40-42k  ("))
    assert "from 610m-clm-42k at step 10,000, trains 32,000" in line


def test_share_prefixes_false_counts_every_step_and_keeps_every_key(paper):
    study, _ = paper
    alone = replace(study, spec=replace(study.spec, pretraining=replace(study.spec.pretraining, share_prefixes=False)))
    text = "\n".join(plan_lines(alone, verbose=True))
    assert "    pretraining       7,924.8 GPU-h" in text
    assert (
        "every run from scratch (pretraining.share_prefixes: false); sharing prefixes would save 2,281.1 GPU-h" in text
    )
    assert "610m-clm-10k-mlm40-42k  (clm-mlm, 42,000 steps, 756M params, from scratch (shares its first 10,000 " \
           "steps with 610m-clm-42k)" in text
    again = plan_study(alone.spec)
    assert [(r.name, r.run_key) for r in again.runs] == [(r.name, r.run_key) for r in study.plan.runs]
    assert [t.trial_key for t in again.trials] == [t.trial_key for t in study.plan.trials]

