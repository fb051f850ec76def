"""The verdicts' error rates, measured by simulation (docs/statistics.md quotes these numbers).

Simulated studies (tests/support/verdict_simulation.py: the paper's 610m grid per size and budget, run
through the very code a report runs) under several nulls, each a scenario in which no finding's
claim is true:

- NULL_RUNS: nothing differs between objectives, but runs do (SD 0.5 point per run and category),
  three sizes/budgets, 3 pretraining replicates per configuration: the tests compare runs;
- NULL_SINGLE: nothing differs at all, one group, one run per configuration (finding 5 is then a
  single two-sided test: where a p that is not doubled shows at once);
- UNEQUAL_CURVES: the same peak scores, flat learning-rate curves for the CLM family and steep ones
  for MLM (the paper's description), which favoured the flat ones when the rate was chosen on the
  seeds that are then tested (the winner's curse);
- UNEQUAL_NOISE: the same learning-rate curves, CLM's seed noise a third of MLM's: 'less
  sensitive to the learning rate' must not be read from seed noise;
- BOUNDARY: every part of findings 1 and 4 strongly true except one placed exactly on its null:
  CLM's TC score exactly the 1-point margin below MLM's, and the 25 % split exactly the margin
  below MLM on TC; neither 'supports' nor 'contradicts' is then true.

Each allows at most MAX_FALSE false verdicts per finding in NULL_STUDIES draws: 5 % plus 2.33
binomial standard errors at NULL_STUDIES (20 of 256; a true 5 % rate passes with probability
98 %); the draws are seeded, so each count is the same on every machine.
benchmarks/verdict_calibration.py runs the same scenarios on 600 studies (the documented table)
with that size's bound (42). Each of four broken rules (no Holm on the contradicting side, superiority
instead of non-inferiority, each side at alpha, 'supports if any part supports') is
applied in a test that expects the calibration to fail; and planted effects of 3 noise SDs must
be found (power).
"""
from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sweeper.report import findings, statistics
from sweeper.report.findings import check_findings, judge_grid
from sweeper.report.statistics import CONTRADICTS, SUPPORTS, VerdictConfig
from verdict_simulation import CATEGORIES, GROUPS, SIGMA, Scenario, simulate, trial_rows

NULL_STUDIES = 256
FALSE_RATE = 0.05


def bound(studies: int) -> int:
    """The most false verdicts of `studies` a finding may give: 5 % plus 2.33 binomial standard
    errors at `studies` (a true 5 % rate passes with probability 98-99 %)."""
    return int(studies * (FALSE_RATE + 2.33 * math.sqrt(FALSE_RATE * (1 - FALSE_RATE) / studies)))


# 20 of 256 (7.8 %); 42 of 600 (7.0 %, the benchmark's size). The study-level margin is wide at
# this size: the claim at 5 % with a narrow margin is tests/unit/report/test_skew_calibration.py's
# (20,000 simulated findings, bound 5.36 %).
MAX_FALSE = bound(NULL_STUDIES)
EFFECT = 3 * SIGMA
RATIO_EFFECT = 4 * SIGMA  # finding 2 rests on one of 4 Bonferroni-adjusted crossing tests per ratio
EFFECT_STUDIES = 40
MIN_POWER = 0.80

CLM_FAMILY, MLM_FAMILY = ("clm", "split25", "split50", "cpt-clm"), ("mlm40", "mlm30", "cpt-mlm")
NULL_RUNS = Scenario(groups=GROUPS, run_sd=0.5, replicates=3)
NULL_SINGLE = Scenario(groups=GROUPS[:1])
UNEQUAL_CURVES = Scenario(groups=GROUPS[:2], run_sd=0.5, replicates=3,
                          depth={**dict.fromkeys(CLM_FAMILY, 0.2), **dict.fromkeys(MLM_FAMILY, 8.0)})
UNEQUAL_NOISE = Scenario(groups=GROUPS[:2], noise={"clm": SIGMA / 3, "mlm40": SIGMA})
BOUNDARY = Scenario(groups=GROUPS[:2], effects={
    "mlm40": {"SC": 4.0, "QA": 4.0},
    "clm": {"TC": -1.0},                                      # finding 1: TC exactly at the margin
    "split25": {"SC": 8.0, "TC": -1.0, "QA": 8.0, "IR": 4.0},  # finding 4: TC exactly at the margin
    "split50": {"SC": 7.0, "TC": 3.0, "QA": 7.0, "IR": 3.0}})
SCENARIOS = {"null, run-to-run variance, 3 replicates": (NULL_RUNS, (1, 2, 3, 4, 5)),
             "null, one group, one run each": (NULL_SINGLE, (1, 2, 3, 4, 5)),
             "null, unequal learning-rate curves": (UNEQUAL_CURVES, (1, 2, 4, 5)),
             "null, unequal seed noise": (UNEQUAL_NOISE, (2, 3, 4, 5)),
             "each non-inferiority part at its margin": (BOUNDARY, (1, 4, 5))}
"""Scenario -> the findings none of whose claims is true in it."""


def planted(sign: float) -> Scenario:
    """One group (610m @ 42k) with every finding's claim true (sign +1) or its opposite (-1)."""
    e, r = sign * EFFECT, sign * RATIO_EFFECT
    split = {c: e + {"SC": e, "QA": e}.get(c, 0) for c in CATEGORIES}
    return Scenario(groups=GROUPS[:1], effects={
        "mlm40": {"SC": e, "QA": e}, "clm": {"TC": e},                        # 1
        "mlm30": {"SC": e + r, "TC": r, "QA": e - r, "IR": -r},               # 2: each ratio beaten somewhere
        "clm-early": dict.fromkeys(CATEGORIES, e),                            # 3: CLM ahead early
        "split25": split, "split50": split,                                   # 4
        "cpt-clm": dict.fromkeys(CATEGORIES, e)},                             # 5
        # 3: MLM's learning-rate curve deeper (CLM's when the sign is reversed)
        depth={"mlm40": 2 + max(sign, 0) * 2 * EFFECT, "clm": 2 + max(-sign, 0) * 2 * EFFECT})


def synthetic_study(rng: np.random.Generator, sign: float) -> pd.DataFrame:
    """One single-group study's trial rows (no effect when sign == 0): what test_findings reads."""
    return trial_rows(*simulate(rng, planted(sign) if sign else Scenario(groups=GROUPS[:1])))


def count_verdicts(scenario: Scenario, checked: tuple[int, ...], seed, studies: int,
                   config: VerdictConfig = VerdictConfig(), stop_above: int | None = None) -> pd.DataFrame:
    """Per checked finding, how many of `studies` studies said supports / contradicts (stopping
    early once a finding passes `stop_above`: a broken rule needs only to be shown failing)."""
    rng = np.random.default_rng(seed)
    counts = pd.DataFrame(0, index=list(checked), columns=[SUPPORTS, CONTRADICTS])
    for _ in range(studies):
        for verdict in judge_grid(*simulate(rng, scenario), config=config):
            if verdict.number in checked and verdict.verdict in counts.columns:
                counts.loc[verdict.number, verdict.verdict] += 1
        if stop_above is not None and counts.sum(axis=1).max() > stop_above:
            break
    return counts


def false_verdicts(scenario: Scenario, checked: tuple[int, ...], seed: int,
                   studies: int = NULL_STUDIES) -> pd.DataFrame:
    """`count_verdicts` over `studies` studies, in two processes (CI has two cores), each
    drawing from its own child of `seed`: the same counts on every machine."""
    children = np.random.SeedSequence(seed).spawn(2)
    halves = (studies // 2, studies - studies // 2)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        parts = pool.map(count_verdicts, [scenario] * 2, [checked] * 2, children, halves)
        return sum(parts, start=pd.DataFrame(0, index=list(checked), columns=[SUPPORTS, CONTRADICTS]))


def test_the_bound_is_five_percent_and_its_margin():
    # A true 5 % rate exceeds it 1-2 % of the time (2.33 SEs, on a discrete count).
    assert MAX_FALSE == 20 and stats.binom.sf(MAX_FALSE, NULL_STUDIES, FALSE_RATE) < 0.02
    # The benchmark's size keeps the documented bound (docs/statistics.md).
    assert bound(600) == 42 and stats.binom.sf(42, 600, FALSE_RATE) < 0.02


@pytest.mark.slow  # ~10-30 CPU-s per scenario (two processes)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_true_claim_gives_a_verdict_at_most_five_percent_of_the_time(name):
    scenario, checked = SCENARIOS[name]
    counts = false_verdicts(scenario, checked, seed=2507_00994)
    print(f"\n{name}: false verdicts of {NULL_STUDIES} (bound {MAX_FALSE}):\n{counts}")
    assert (counts.sum(axis=1) <= MAX_FALSE).all(), counts


def test_the_array_path_gives_the_verdicts_of_the_trial_rows():
    """The simulated grids' verdicts are those `check_findings` gives on their trial rows: the same
    parts, numbers and adjusted p-values (over draws of 1-3 tasks, 3-6 rates, with replicates)."""
    rng = np.random.default_rng(2507)
    for scenario in (planted(+1), Scenario(groups=GROUPS[:1], replicates=3, run_sd=0.5)):
        grid, runs = simulate(rng, scenario)
        from_rows, from_grid = check_findings(trial_rows(grid, runs)), judge_grid(grid, runs)
        for rows, arrays in zip(from_rows, from_grid):
            assert (rows.verdict, rows.evidence) == (arrays.verdict, arrays.evidence)
            assert [p.p_adjusted for p in rows.parts] == pytest.approx([p.p_adjusted for p in arrays.parts],
                                                                       rel=1e-9, nan_ok=True)


@pytest.mark.long  # 40 simulated studies judged per case: ~4-5 s each
@pytest.mark.parametrize("sign, expected", [(+1, {1: SUPPORTS, 2: SUPPORTS, 3: SUPPORTS, 4: SUPPORTS, 5: SUPPORTS}),
                                            (-1, {1: CONTRADICTS, 2: SUPPORTS, 3: CONTRADICTS, 4: CONTRADICTS,
                                                  5: CONTRADICTS})])
def test_planted_effects_of_three_noise_sds_are_found_in_their_direction(sign, expected):
    rng = np.random.default_rng(18 + int(sign))
    verdicts = [[v.verdict for v in judge_grid(*simulate(rng, planted(sign)))] for _ in range(EFFECT_STUDIES)]
    counts = pd.DataFrame(verdicts, columns=[1, 2, 3, 4, 5]).apply(pd.Series.value_counts).fillna(0).astype(int).T
    print(f"\nverdicts of {EFFECT_STUDIES} studies with effects of {EFFECT:g} SD (sign {sign:+d}):\n{counts}")
    for finding, verdict in expected.items():
        power = counts.loc[finding].get(verdict, 0) / EFFECT_STUDIES
        assert power >= MIN_POWER, (finding, verdict, power, counts.loc[finding].to_dict())
        wrong = CONTRADICTS if verdict == SUPPORTS else SUPPORTS
        assert counts.loc[finding].get(wrong, 0) == 0, (finding, counts.loc[finding].to_dict())


# --- broken rules: each must make the calibration fail ---------------------------------------------

def no_holm(p_values):
    return np.asarray(p_values, dtype=float)


def each_side_at_alpha(monkeypatch):
    """Each direction of a part tested at the whole alpha (co-primary: not alpha / 2; Holm: the
    two-sided p not doubled)."""
    real = statistics.part_codes
    monkeypatch.setattr(statistics, "part_codes", lambda s, c, alpha, rule: real(s, c, 2 * alpha, rule))


def supports_if_any_part_supports(parts, config):
    statistics.decide(parts, config)  # gives each part its verdict
    outcomes = [part.verdict for part in parts]
    return CONTRADICTS if CONTRADICTS in outcomes else SUPPORTS if SUPPORTS in outcomes else statistics.CANNOT_TELL


BREAKAGES = {
    "no Holm adjustment (co-primary: on the contradicting side)": (
        NULL_RUNS, lambda mp: mp.setattr(statistics, "holm_along", no_holm), VerdictConfig()),
    "each side at alpha (the two-sided p not doubled)": (NULL_SINGLE, each_side_at_alpha, VerdictConfig()),
    "superiority instead of non-inferiority": (BOUNDARY, lambda mp: None, VerdictConfig(tie_margin=0.0)),
    "supports if any part supports": (BOUNDARY,
                                      lambda mp: mp.setattr(findings, "decide", supports_if_any_part_supports),
                                      VerdictConfig()),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BREAKAGES))
def test_a_broken_rule_makes_the_calibration_fail(name, monkeypatch):
    scenario, breaking, config = BREAKAGES[name]
    breaking(monkeypatch)
    checked = next(c for s, c in SCENARIOS.values() if s is scenario)
    counts = count_verdicts(scenario, checked, 2507_00994, NULL_STUDIES, config, stop_above=MAX_FALSE)
    print(f"\n{name}: false verdicts (bound {MAX_FALSE}):\n{counts}")
    assert (counts.sum(axis=1) > MAX_FALSE).any(), f"the calibration did not notice: {name}"


def finding_1(grid, runs, config: VerdictConfig = VerdictConfig()) -> tuple[str, list]:
    """Finding 1's verdict and parts, as `findings.judge` gives them (the finding's own parts, then
    `decide`), without the four other findings (a third of `judge_grid`'s cost)."""
    parts = findings.finding_1(findings.SeedScores.of(grid, runs, config.crossfit), config)
    return findings.decide(parts, config), parts


def test_the_margin_tests_hold_on_their_boundary_with_the_right_margin():
    """The BOUNDARY scenario is where the margin matters: with it the TC parts are decided rarely;
    the claim's other parts are decided nearly always (the scenario is a sharp one)."""
    rng = np.random.default_rng(5)
    studies = [simulate(rng, BOUNDARY) for _ in range(30)]
    judged = [finding_1(*study) for study in studies]
    parts = [study_parts for _, study_parts in judged]
    first = judge_grid(*studies[0])[0]
    assert (judged[0][0], [p.line() for p in parts[0]]) == (first.verdict, first.evidence), "as judge_grid gives it"
    sc = [p.verdict for ps in parts for p in ps if ", SC:" in p.comparison]
    assert sc.count(SUPPORTS) >= 0.8 * len(sc) and not math.isnan(parts[0][0].p_adjusted)
