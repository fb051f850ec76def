"""The robustness card counts as a flip only what could have gone the other way: an alternative
whose test cannot reach the threshold at a part's sample size (the exact Wilcoxon signed-rank
test over 3 runs or 5 seeds) shows the part as "cannot decide at n = N", not as fragile."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

import verdict_simulation
from sweeper.report import findings, robustness
from sweeper.report.statistics import CANNOT_TELL, VerdictConfig
from sweeper.spec.study import PAPER_STABILITY_RANGE
from test_verdict_calibration import planted

WILCOXON = "Wilcoxon signed-rank instead of t"


def card_of(study, config: VerdictConfig = VerdictConfig()):
    verdicts = findings.judge_grid(*study, config=config)
    return verdicts, {v.name: v for v in robustness.robustness_card(*study, verdicts, PAPER_STABILITY_RANGE, config)}


@pytest.fixture
def wilcoxon_only(monkeypatch):
    """The card's variants (`robustness.variants`) cut to the Wilcoxon one, the one a test reads:
    each other variant is a judgement of its own (a dozen at 10 seeds: ten seeds left out, tasks,
    margins, splits) and none changes the Wilcoxon one's. The complete card: the test above and
    test_findings.py's robustness test."""
    every = robustness.variants
    monkeypatch.setattr(robustness, "variants", lambda *args: [v for v in every(*args) if v[0] == WILCOXON])


def decided(verdicts) -> set[str]:
    return {part for part, verdict in robustness.part_verdicts(verdicts).items() if verdict != CANNOT_TELL}


def test_smallest_p_is_the_exact_tests_own():
    # Both directions tried: twice the one-sided exact p of n units all of one sign, 2 / 2^n.
    assert robustness.smallest_p("wilcoxon", 3) == pytest.approx(0.25)
    assert robustness.smallest_p("wilcoxon", 5) == pytest.approx(0.0625)
    assert robustness.smallest_p("wilcoxon", 6) == pytest.approx(0.03125)
    assert robustness.smallest_p("t", 3) == 0.0
    assert robustness.smallest_p("wilcoxon", 5) == pytest.approx(
        2 * stats.wilcoxon([0.3, 1.2, 2.0, 0.7, 5.1], alternative="greater").pvalue)


@pytest.mark.parametrize("replicates, units", [(1, 5), (3, 3)])
def test_wilcoxon_at_5_seeds_or_3_runs_flips_nothing_and_says_why(replicates, units):
    scenario = replace(planted(+1.0), replicates=replicates, run_sd=0.3 if replicates > 1 else 0.0)
    verdicts, card = card_of(verdict_simulation.simulate(np.random.default_rng(0), scenario))
    wilcoxon = card[WILCOXON]
    assert decided(verdicts) and set(wilcoxon.undecidable) == decided(verdicts)
    assert wilcoxon.flips == {}, "a test that cannot reach p < 0.05 at this size flips nothing"
    floor = robustness.smallest_p("wilcoxon", units)
    assert all(
        f"cannot decide at n = {units}" in why and f"{floor:.3f}" in why for why in wilcoxon.undecidable.values()
    )
    lines = "\n".join(robustness.robustness_lines(list(card.values()), verdicts))
    row = next(line for line in lines.splitlines() if line.startswith(f"| {WILCOXON} |"))
    assert f"{len(decided(verdicts))} decided part(s) not counted: cannot decide at n = {units} " in row
    assert row.split(" | ")[-2] == "", "no flip counted in the row"
    assert f"Could not decide every part: {WILCOXON}" in lines
    assert not any(WILCOXON in line for line in lines.split("Parts whose verdict flips:")[-1].splitlines())


def test_a_real_flip_at_a_size_the_test_can_decide_is_still_counted(monkeypatch, wilcoxon_only):
    """10 seeds: the exact test's smallest p is 0.002, so a part the t-test decides and Wilcoxon
    does not is a choice the verdict rests on (a weak planted effect, study 0; the plain t-test,
    which decides it: the skew-corrected one does not at this effect; Holm's rule over the parts, the
    scenario this study was drawn for: co-primary parts decide more of it under both tests)."""
    monkeypatch.setattr(verdict_simulation, "SEEDS", 10)
    verdicts, card = card_of(
        verdict_simulation.simulate(np.random.default_rng(0), planted(0.3)), VerdictConfig(test="t", parts="holm")
    )
    wilcoxon = card[WILCOXON]
    assert wilcoxon.undecidable == {} and wilcoxon.floors == {}
    assert wilcoxon.flips and all(change == "supports -> cannot tell" for change in wilcoxon.flips.values())
    lines = "\n".join(robustness.robustness_lines(list(card.values()), verdicts))
    assert "Parts whose verdict flips:" in lines and "Could not decide every part" not in lines
    flipped = lines.split("Parts whose verdict flips:")[-1]
    assert all(
        f"- {part}: " in flipped and f"{WILCOXON} (supports -> cannot tell)" in flipped for part in wilcoxon.flips
    )
