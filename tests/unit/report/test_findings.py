"""Verdicts: Holm's adjustment, what a comparison may pair (one size, one budget), what "cannot
tell" says, the spread's test, and the figures' clipped intervals. The error rates themselves
are measured in test_verdict_calibration.py."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sweeper.report import analysis
from sweeper.report.figures import clipped_interval, score_ranges
from sweeper.report.findings import check_findings
from sweeper.report.statistics import (
    ALONE, CANNOT_TELL, CO_PRIMARY, CONTRADICTS, HOLM, PART_RULES, SUPPORTS, Part, VerdictConfig, decide, holm,
    holm_along, paired_t, part_codes, verdict_config)
from sweeper.report.verdict_text import findings_section
from sweeper.contract import registry
from sweeper.contract.registry import FamilyInfo
from sweeper.spec.study import PAPER_STABILITY_RANGE
from test_verdict_calibration import synthetic_study


def test_holm_step_down_by_hand():
    # Sorted: 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to 0.06 (monotone).
    # NaN is a part that was not tested: it stays NaN and does not count in m.
    adjusted = holm([0.01, 0.04, 0.03, math.nan])  # statsmodels' products in float64: approx's default
    assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06]) and math.isnan(adjusted[3])
    assert holm([0.5, 0.9]) == [1.0, 1.0] and holm([]) == []  # 0.5 x 2 capped at 1; 0.9 raised to 1


def test_co_primary_parts_support_without_a_split_and_contradict_by_holm():
    """Co-primary: each claim at 0.025 one-sided alone (Holm over the same parts' two-sided p
    decides one of them); the opposite side by Holm over the parts at 0.025."""
    p_support = np.array([0.02, 0.015, 0.001])
    codes, read, level = part_codes(p_support, 1 - p_support, 0.05, CO_PRIMARY)
    assert codes.tolist() == [1, 1, 1] and read.tolist() == p_support.tolist() and level.tolist() == [0.025] * 3
    assert part_codes(p_support, 1 - p_support, 0.05, HOLM)[0].tolist() == [0, 0, 1]  # 0.03 x 2 = 0.06
    for smallest, expected in ((0.01, 0), (0.008, -1)):  # Holm: 0.03 is not below 0.025; 0.024 is
        p_contradict = np.array([smallest, 0.6, 0.7])
        assert part_codes(1 - p_contradict, p_contradict, 0.05, CO_PRIMARY)[0].tolist() == [expected, 0, 0]
    rng = np.random.default_rng(0)  # findings at once (rows) as one by one; untested parts (NaN) not counted
    p = rng.uniform(0, 0.05, (50, 4)) ** 2
    p[::7, 1] = np.nan
    assert np.allclose(holm_along(p), [holm(row) for row in p], equal_nan=True)


def test_a_co_primary_part_that_supports_in_a_finding_that_does_not_says_so():
    parts = [Part(comparison=c, numbers="n", test="t", p_support=ps, p_contradict=1 - ps, units=9)
             for c, ps in (("a", 0.004), ("b", 0.3))]
    assert decide(parts, VerdictConfig()) == CANNOT_TELL
    assert parts[0].verdict == SUPPORTS and parts[0].qualifier == ALONE and ALONE in parts[0].line()
    assert "p = 0.004 (for the claim, one-sided, co-primary, level 0.025)" in parts[0].line()
    for part, p_support in zip(parts, (0.02, 0.015)):
        part.p_support, part.p_contradict = p_support, 1 - p_support
    assert decide(parts, VerdictConfig()) == SUPPORTS and not any(p.qualifier for p in parts)
    assert decide(parts, VerdictConfig(parts=HOLM)) == CANNOT_TELL  # two-sided 0.03 x 2 is not below 0.05


def test_the_specs_finding_parts_are_the_rules_and_choose_the_config():
    import typing

    from sweeper.spec.study import ReportSpec
    assert typing.get_args(typing.get_type_hints(ReportSpec)["finding_parts"]) == PART_RULES
    assert verdict_config(ReportSpec(finding_parts=HOLM)).parts == HOLM and verdict_config(None) == VerdictConfig()
    with pytest.raises(ValueError, match="co-primary"):
        decide([], VerdictConfig(parts="bonferroni"))


def test_paired_t_matches_scipy_and_its_margin():
    from scipy import stats
    d = np.array([1.0, 2.5, 0.3, 1.7, 0.9])
    above, below = paired_t(d)  # the same statistic as scipy's in float64: approx's default (here below, too)
    assert above == pytest.approx(stats.ttest_1samp(d, 0, alternative="greater").pvalue)
    assert below == pytest.approx(stats.ttest_1samp(d, 0, alternative="less").pvalue)
    above, _ = paired_t(d, shift=-1.0)
    assert above == pytest.approx(stats.ttest_1samp(d + 1.0, 0, alternative="greater").pvalue)
    assert np.isnan(paired_t(np.ones(5))[0]), "no seed-to-seed variation: no test, no verdict"


@pytest.fixture(scope="module")
def planted() -> pd.DataFrame:
    return synthetic_study(np.random.default_rng(7), +1.0)


def test_a_planted_study_supports_every_finding_with_tests_and_adjusted_p(planted):
    verdicts = check_findings(planted)
    assert [v.verdict for v in verdicts] == [SUPPORTS] * 5, [v.evidence for v in verdicts]
    for verdict in verdicts:
        for part in verdict.parts:  # co-primary: each claim's own one-sided p, below alpha / 2
            assert part.p_adjusted == part.p_support and part.p_adjusted < 0.025 and "seeds" in part.test
            assert part.side == "for" and "(for the claim, one-sided, co-primary, level 0.025)" in part.line()
    text = "\n".join(findings_section(verdicts))
    assert "| part | numbers | test | p | detectable (80 %) | verdict |" in text
    assert "co-primary claims" in text
    assert "paired t-test over 5 seeds" in text and "How a verdict follows from its parts" in text
    assert "About checkpoints, not objectives" in text  # one run per configuration


def test_runs_of_different_sizes_are_never_compared(planted):
    """A 610m CLM -> MLM run beside a 210m MLM run: no comparison, and the missing run is named."""
    rows = planted[~planted["run_name"].isin(["610m-mlm40-42k", "610m-mlm30-42k"])].copy()
    moved = planted[planted["run_name"] == "610m-mlm40-42k"].copy()
    moved["run_name"] = moved["run_name"].str.replace("610m", "210m")
    moved["checkpoint_id"] = moved["checkpoint_id"].str.replace("610m", "210m")
    verdicts = check_findings(pd.concat([rows, moved]))
    biphasic = verdicts[3]
    assert biphasic.verdict == CANNOT_TELL and "no 610m MLM 40% run at 42k" in " ".join(biphasic.evidence)
    assert verdicts[0].verdict == CANNOT_TELL and "no 610m MLM run at 42k" in " ".join(verdicts[0].evidence)


def test_two_seeds_cannot_tell_and_say_how_many_are_needed(planted):
    verdicts = check_findings(planted[planted["seed"] < 2])
    assert all(v.verdict == CANNOT_TELL for v in verdicts)
    assert "needs >= 3 seeds" in " ".join(verdicts[0].evidence)


def test_equal_spreads_are_not_a_verdict(planted):
    """The old check called any difference in spread a verdict (3.72 vs 3.72 'contradicts'): CLM's
    trials here are MLM's, shifted by a constant, so both spreads are equal seed by seed."""
    mlm = planted[planted["checkpoint_id"] == "610m-mlm40-42k"]
    clm = planted[planted["checkpoint_id"] == "610m-clm-42k"][["task", "learning_rate", "seed"]]
    copied = clm.merge(mlm.drop(columns=["checkpoint_id", "run_name", "objective", "mask_ratio", "clm_fraction"]),
                       on=["task", "learning_rate", "seed"])
    copied = copied.assign(checkpoint_id="610m-clm-42k", run_name="610m-clm-42k", objective="clm",
                           mask_ratio=math.nan, clm_fraction=1.0, test_score=copied["test_score"] + 5)
    rows = pd.concat([planted[planted["checkpoint_id"] != "610m-clm-42k"], copied])
    table, _ = analysis.stability(rows, PAPER_STABILITY_RANGE)
    spreads = table.set_index("checkpoint_id")["spread"]
    # float64 spreads of x + 5 and x: equal up to the rounding of the + 5 (~1e-14).
    assert spreads["610m-clm-42k"].to_numpy() == pytest.approx(spreads["610m-mlm40-42k"].to_numpy())
    stability = next(p for p in check_findings(rows)[2].parts if "stability" in p.comparison)
    assert stability.verdict == CANNOT_TELL


def test_stability_table_has_an_interval_around_the_spread(planted):
    table, _ = analysis.stability(planted, PAPER_STABILITY_RANGE)
    assert (table["spread_low"] <= table["spread"]).all() and (table["spread"] <= table["spread_high"]).all()
    assert (table["spread_low"] >= 0).all()


def test_intervals_are_clipped_to_their_family_score_range():
    """Each category is clipped to the range of the family its rows name: 0-100 for the shipped
    ones, the plugin's own (-100..100 for a correlation x 100); a row whose family is not
    registered here takes its category's registered families, else the widest range."""
    rows = pd.DataFrame({"task_family": ["token_classification", "regression", None, "unloaded_plugin"],
                         "task_category": ["TC", "REG", "SC", "NEW"]})
    with registry.using(registry.shipped()):
        registry.register_family(FamilyInfo(name="regression", category="REG",
                                            implementation="toy_regression:Regression", score_range=(-100.0, 100.0)))
        ranges = score_ranges(rows)
    assert ranges == {"TC": (0.0, 100.0), "REG": (-100.0, 100.0), "SC": (0.0, 100.0), "NEW": (-100.0, 100.0)}
    low, high = clipped_interval(pd.Series([10.0, 95.0]), pd.Series([70.0, 20.0]), ranges["TC"])
    assert low.tolist() == [0.0, 75.0] and high.tolist() == [80.0, 100.0]  # an F1 never reaches -60
    low, high = clipped_interval(pd.Series([10.0]), pd.Series([200.0]), ranges["REG"])  # a correlation x 100
    assert low.tolist() == [-100.0] and high.tolist() == [100.0]


def test_a_contradiction_is_reported_as_one(planted):
    """MLM's SC scores pushed far below CLM's: finding 1 contradicts, whatever the other parts say."""
    rows = planted.copy()
    sc_mlm = (rows["checkpoint_id"] == "610m-mlm40-42k") & (rows["task_category"] == "SC")
    rows.loc[sc_mlm, ["test_score", "validation_score"]] -= 20
    first = check_findings(rows)[0]
    assert first.verdict == CONTRADICTS
    assert next(p for p in first.parts if ", SC:" in p.comparison).verdict == CONTRADICTS


def test_holm_equals_statsmodels_multipletests(monkeypatch):
    import gc

    from statsmodels.stats.multitest import multipletests
    # Its Holm branch runs a full garbage collection per call (0.25 s each in a test process's heap).
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)
    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 13):
        p = rng.uniform(0, 0.2, size) ** 2
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1].tolist(), rel=1e-12)


def test_a_diverged_seed_scores_its_tasks_worst_finished_score_and_its_rate_loses():
    """Rate 1e-4's survivors average 76, above rate 1e-5's 75, but one of its seeds diverged: it
    scores the task's worst finished score (60), 1e-4's mean drops to 72 and 1e-5 is selected.
    Dropping the diverged seed would have selected 1e-4."""
    from sweeper.report.grid import TrialGrid
    values = {1e-5: [60.0, 80.0, 80.0, 80.0], 1e-4: [76.0, 76.0, 76.0, math.nan]}
    rows = [{"checkpoint_id": "c", "task": "t", "task_category": "SC", "learning_rate": lr, "seed": s,
             "validation_score": v, "test_score": v, "status": "ok" if v == v else "diverged",
             "checkpoint_step": 1, "total_steps": 1} for lr, vs in values.items() for s, v in enumerate(vs)]
    grid = TrialGrid.of(pd.DataFrame(rows))
    validation, _ = grid.scored()
    assert validation[0, 0, 1, 3] == 60.0  # the task's worst finished score
    scores, _ = grid.selected_scores(crossfit=False)
    assert scores[0, 0].tolist() == values[1e-5]
    assert grid.outcomes().loc["c", "diverged"] == 1


def test_one_learning_rate_measures_no_learning_rate_sensitivity(planted):
    one_rate = planted[planted["learning_rate"] == planted["learning_rate"].min()]
    stability = next(p for p in check_findings(one_rate)[2].parts if "stability" in p.comparison)
    assert stability.missing.startswith("one learning rate") and stability.numbers == ""


def test_replicated_configurations_are_compared_by_their_runs():
    from verdict_simulation import GROUPS, Scenario, simulate, trial_rows
    rows = trial_rows(*simulate(np.random.default_rng(1), Scenario(groups=GROUPS[:1], replicates=3, run_sd=0.5)))
    first = check_findings(rows)[0]
    assert all("over 3 pretraining runs per arm" in part.test for part in first.parts), [p.test for p in first.parts]
    text = "\n".join(findings_section(check_findings(rows), replicated=True))
    assert "About objectives where runs are replicated" in text


def test_the_robustness_card_names_the_parts_that_flip(planted):
    """With 5 seeds a two-sided Wilcoxon test cannot reach p < 0.05 (its smallest p is 0.0625): every
    decided part is *cannot tell* under it, which the card shows as "cannot decide", not as a flip
    (tests/test_robustness_card.py); leaving one seed out keeps >= 3 seeds."""
    from sweeper.report import findings, robustness
    study = findings.study_grid(planted)
    verdicts = findings.judge_grid(*study)
    card = {v.name: v for v in robustness.robustness_card(*study, verdicts, PAPER_STABILITY_RANGE)}
    assert {"seed 0 left out", "Wilcoxon signed-rank instead of t", "tie margin 0.5 point(s)",
            "tie margin 2 point(s)"} <= set(card)
    decided = {part for part, verdict in robustness.part_verdicts(verdicts).items() if verdict != CANNOT_TELL}
    assert decided and set(card["Wilcoxon signed-rank instead of t"].undecidable) == decided
    assert not card["Wilcoxon signed-rank instead of t"].flips
    assert all(v.verdict == CANNOT_TELL for v in card["Wilcoxon signed-rank instead of t"].verdicts)
    lines = "\n".join(robustness.robustness_lines(list(card.values()), verdicts))
    assert "## Robustness card" in lines and "Parts whose verdict flips:" in lines
