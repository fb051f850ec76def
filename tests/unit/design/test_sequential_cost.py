"""The expected cost `sweeper plan` prints for a sequential plan (sweeper.design.sequential_cost):
its vectorised rule against the report's own look code on the same simulated data, and the real
command line, in a child process (tests/support/cli_process.py), on paper.yaml and on the
end-to-end test's spec (no Ray)."""
from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

from sweeper.report import sequential
from sweeper.report.findings import Verdict
from sweeper.design.sequential_cost import StudyParts, close_looks, run_counts
from sweeper.report.statistics import Part, VerdictConfig, paired_test
from sweeper.spec.sequential import SequentialSpec

from cli_process import sweeper_cli
from conftest import ROOT
from test_sequential_study import planted_study  # (the e2e study's spec, planned here)

FINDINGS = ((0, 1, 2), (3, 4))
PARTS = StudyParts(findings=FINDINGS, runs=(("mlm", "clm"), ("mlm", "split"), ("clm", "split"), ("mlm", "cpt-mlm"),
                                            ("cpt-clm", "cpt-mlm")),
                   sources={"cpt-clm": "clm", "cpt-mlm": "mlm"})
RUNS = ["mlm", "clm", "split", "cpt-clm", "cpt-mlm"]
MEANS = np.array([0.9, 0.0, 1.6, 0.6, 0.3])
"""Per part, the planted mean difference (unit SD 1): parts decided early, late, futile, never."""


def report_looks(differences: np.ndarray, design: SequentialSpec) -> tuple[list[int], dict[str, int]]:
    """One study through `sequential.decide_look` (what `run_looks` calls at every look), with the
    run counts grown as `run_looks` grows them: each part's closing look, and the runs' counts."""
    states: dict = {}
    looks = design.looks()
    counts = dict.fromkeys(RUNS, looks[0])
    for look, n in enumerate(looks):
        p_support, p_contradict = paired_test(differences[:, :n], 0.0, VerdictConfig())
        parts = [Part(comparison=f"part {i}", arms=PARTS.runs[i], p_support=float(p_support[i]),
                      p_contradict=float(p_contradict[i]), units=n) for i in range(len(differences))]
        verdicts = [Verdict(f + 1, "claim", "", [], [parts[i] for i in members]) for f, members in enumerate(FINDINGS)]
        open_arms = sequential.decide_look(verdicts, states, look, design.fractions(), design, [])
        if not open_arms or look == len(looks) - 1:
            break
        counts = sequential.with_sources({r: looks[look + 1] if r in open_arms else c for r, c in counts.items()},
                                         PARTS.sources)
    closing = {label: at for (_, label), (_, _, at) in states.items()}
    return [closing[f"part {i}"] for i in range(len(differences))], counts


@pytest.mark.parametrize("design", [SequentialSpec(), SequentialSpec(first=4, step=2, maximum=12, futility=0.2)])
def test_the_vectorised_rule_stops_where_the_reports_look_code_stops(design):
    rng = np.random.default_rng(53)
    differences = rng.normal(MEANS[None, :, None], 1.0, (40, len(MEANS), design.maximum))
    closing = close_looks(differences, FINDINGS, design)
    counts = run_counts(closing, PARTS, RUNS, design)
    for study in range(len(differences)):
        expected, expected_counts = report_looks(differences[study], design)
        assert closing[study].tolist() == expected, study
        assert dict(zip(RUNS, counts[study].tolist())) == expected_counts, study
    assert len(np.unique(closing)) >= 3, "the studies stop at several looks"
    assert (counts[:, RUNS.index("clm")] >= counts[:, RUNS.index("cpt-clm")]).all()


def plan_output(spec, *overrides, env=None) -> str:
    printed = sweeper_cli("plan", str(spec), *overrides, cwd=ROOT, env={**os.environ, **(env or {})})
    assert printed.returncode == 0, printed.stdout + printed.stderr
    return printed.stdout


def cost_shares(out: str) -> tuple[float, float, str]:
    """(expected, first look) over the maximum of the printed pretraining GPU-hours, and the line."""
    cost = next(line for line in out.splitlines() if "pretraining GPU-h: first look" in line)
    first, expected, maximum = (
        float(x.replace(",", ""))
        for x in re.search(r"first look ([0-9,.]+); expected ([0-9,.]+) .*maximum ([0-9,.]+)", cost).groups()
    )
    low, high = (float(x.replace(",", "")) for x in re.search(r"10-90 %: ([0-9,.]+)-([0-9,.]+)\)", cost).groups())
    assert low <= expected <= high, cost
    return expected / maximum, first / maximum, cost


@pytest.mark.slow  # a `sweeper plan` of paper.yaml's sequential design each: 10-160 s on a busy 2-core machine
@pytest.mark.parametrize("every_count", [True, False])
def test_paper_expected_cost_is_the_simulated_rules_not_a_one_comparison_floor(every_count):
    """#53's acceptance: paper.yaml made sequential (first 3, step 3, maximum 15) no longer prints
    the one-comparison z model's 50 % of the maximum. Looking at every count (3-15), the rule
    expects 86 % of the runs with the skew-sign test (84 % with the skew-t, 82 % with the t-test;
    the issue's independent simulation of that rule 64-83 %); at the looks the boundaries let
    decide (9, 12, 15) the first look alone is 60 % and the rule expects about 86 % with co-primary
    parts (91 % with Holm over the parts; docs/statistics.md says why). Shares of runs; the
    GPU-hours' are higher (below)."""
    settings = "{first: 3, step: 3, maximum: 15" + (", every_count: true}" if every_count else "}")
    out = plan_output(ROOT / "search_spaces/paper.yaml", f"pretraining.sequential={settings}")
    share, first, cost = cost_shares(out)
    runs = next(line for line in out.splitlines() if "pretraining runs: expected" in line)
    assert "(15, 6, 6, 8, 3 parts)" in runs and "seed SD 1 over 5 seeds" in runs, runs
    run_share = float(re.search(r"pretraining runs: expected ([0-9.,]+)", runs).group(1).replace(",", "")) / 585
    if every_count:
        assert 0.64 <= run_share <= 0.88, runs
    else:
        assert first == pytest.approx(9 / 15, abs=0.01) and first + 0.2 <= run_share <= 0.95, runs
    # GPU-h count new steps where runs branch (share_prefixes): the branches (CLM -> MLM splits)
    # are cheap and close first, the trunks run longest, so the GPU-h share is above the runs'
    # (measured 0.94 against 0.86 with every_count)
    assert "new steps only where runs share first steps" in cost and run_share - 0.02 <= share <= 1.0, cost


def test_plan_prints_the_looks_and_the_expected_and_maximum_cost(tmp_path):
    spec, _, env = planted_study(tmp_path, effect=30.0)
    out = plan_output(spec, env=env)
    assert "pretraining runs:       6 = 2 configurations x 3 replicates" in out, out
    assert "sequential replicates:  looks at 3, 4 runs per configuration (alpha 0.05 per finding" in out, out
    cost = next(line for line in out.splitlines() if "pretraining GPU-h: first look" in line)
    assert "(8 runs, the fixed design at 4)" in cost, cost
    runs = float(re.search(r"pretraining runs: expected ([0-9.]+)", out).group(1))
    assert 6 <= runs <= 8, out


def test_the_figure_is_the_same_on_every_call_and_quick_once_the_boundaries_are_known():
    design = SequentialSpec()
    from sweeper.design.sequential_cost import expected_cost

    parts = StudyParts(findings=((0, 1, 2),), runs=(("a", "b"), ("a", "c"), ("b", "c")), sources={})
    hours = {"a": 1.0, "b": 2.0, "c": 3.0}
    first = expected_cost(design, parts, hours, seeds=5)
    start = time.process_time()  # CPU time: wall time on a shared 2-core machine varies tenfold
    again = expected_cost(design, parts, hours, seeds=5)
    assert time.process_time() - start < 2.0  # measured 0.26 CPU-s (skew-sign), 0.08 (skew-t)
    assert first == again and first.maximum_runs == 45 and first.maximum_hours == 90.0
    assert 9 <= first.runs[1] <= first.runs[0] <= first.runs[2] <= 45


def test_a_run_branching_from_its_trunk_costs_its_new_steps_while_the_trunk_trains_its_replicate():
    """pretraining.share_prefixes: b starts from a's first steps, so a replicate of b that a also
    trains costs b's new steps (0.5 of 2.0 GPU-h); both grow to at least the first look (9)."""
    from sweeper.design.sequential_cost import expected_cost

    design = SequentialSpec()
    parts = StudyParts(findings=((0, 1, 2),), runs=(("a", "b"), ("a", "c"), ("b", "c")), sources={})
    hours = {"a": 1.0, "b": 2.0, "c": 3.0}
    whole = expected_cost(design, parts, hours, seeds=5)
    branched = expected_cost(design, parts, hours, seeds=5, branched={"b": ("a", 0.5)})
    assert branched.maximum_hours == 90.0 - 1.5 * 15 and branched.runs == whole.runs
    assert whole.hours[0] - 1.5 * 15 <= branched.hours[0] <= whole.hours[0] - 1.5 * 9


ONE_GROUP = ("pretraining.runs=[{objective: mlm, preset: [610m], mask_ratio: [0.3]}, "
             "{objective: mlm, preset: [610m], mask_ratio: [0.4], checkpoint_steps: [10500]}, "
             "{objective: clm, preset: [610m], checkpoint_steps: [10500]}, "
             "{objective: clm-mlm, preset: [610m], switch_steps: [10500, 21000], clm_fraction: [0.25, 0.5], "
             "mask_ratio: [0.4]}, {objective: mlm, init_from: [610m-clm-42k, 610m-mlm40-42k], steps: [2000], "
             "mask_ratio: [0.4], warmup_steps: 200, decay_steps: 1000}]")
"""paper.yaml cut to verdict_simulation's one 610m @ 42k group: MLM-30, MLM-40 and CLM (the last two
with a checkpoint at a quarter), the 25 and 50 % splits, CPT from CLM and from MLM-40."""
END_TO_END_STUDIES = 80
MODEL_GAP = 0.045
"""What the estimator's model adds to the runs' share in this world (the test below): measured
0.878 against 0.837 end to end over 400 studies (SE 0.003; benchmarks/sequential_power.py
--effect 1.0) at 1 point."""


@pytest.mark.slow  # 80 whole studies through run_looks: 42 CPU-s
def test_the_expected_runs_are_the_end_to_end_rules_in_the_estimators_world():
    """`sweeper plan`'s expected runs against the report's `run_looks` over whole simulated studies
    of the same plan (tests/support/verdict_simulation.py: 4 categories of 1-3 tasks, 5 seeds, 4
    learning rates, run SD 0.5), in the world the estimator models: every part that compares two
    arms' means claims the planning effect (`uniform_effects(1.0)`). The estimator's runs' share
    (0.878) lies within 3 Monte Carlo SEs of the end-to-end mean (0.842 over this test's 80 studies,
    SE 0.006; 0.837 over 400) or up to MODEL_GAP above it, for what the estimator leaves out, which
    on balance leans its share high (measured by the estimator's own model with the simulation's
    noise put back): averaging over a category's 1-3 tasks (+0.02), two of the ten parts (finding
    2's 'no ratio is best everywhere', finding 3's stability) with no mean difference to plant
    (+0.007), the CPT part's source run effect (-0.02), and the rest (+0.03: parts on the mean over
    categories average their run effects, parts share arms). A unit SD or effect scale that drifted
    from the end-to-end study's fails (no seed noise: 0.798; run SD 0.25 or 1: 0.806 or 0.923; 0.5
    or 1.5 points: 0.912 or 0.769); the rule's details (Holm over the parts: 0.888, no futility:
    0.887) are held exactly by the test against `decide_look` above."""
    from verdict_simulation import GROUPS, Scenario, simulate, uniform_effects

    from sweeper.design.sequential_cost import expected_cost, study_parts
    from sweeper.plan.load import load_study

    study = load_study(ROOT / "search_spaces/paper.yaml", [ONE_GROUP, "pretraining.sequential={first: 3, step: 3, "
                                                           "maximum: 15, planning_effect: 1.0, planning_run_sd: 0.5}"])
    design, seeds = study.spec.pretraining.sequential, len(study.spec.finetuning.seeds)
    parts = study_parts(study.plan, seeds)
    assert [len(f) for f in parts.findings] == [3, 2, 2, 2, 1]  # the simulated group's parts
    cost = expected_cost(design, parts, {r.name: 1.0 for r in study.plan.runs if r.replicate == 0}, seeds)
    estimated = cost.runs[0] / cost.maximum_runs

    rng = np.random.default_rng(53)
    scenario = Scenario(groups=GROUPS[:1], effects=uniform_effects(design.planning_effect), run_sd=0.5,
                        replicates=design.maximum, rates=4)
    shares = []
    for _ in range(END_TO_END_STUDIES):
        outcome = sequential.run_looks(*simulate(rng, scenario), design)
        shares.append(outcome.runs_trained() / outcome.runs_fixed())
    simulated, se = np.mean(shares), np.std(shares, ddof=1) / np.sqrt(len(shares))
    # one-sided gap: what the estimator leaves out leans its share high on balance
    assert simulated - 3 * se <= estimated <= simulated + 3 * se + MODEL_GAP, (estimated, simulated, se)
