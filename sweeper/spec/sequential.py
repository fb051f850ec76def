"""`pretraining.sequential`: replicates added in looks until each objective comparison is decided.

A fixed design (`pretraining.replicates: N`) trains every configuration N times whatever its
comparisons show. A sequential plan trains each configuration `first` times, then looks: every
part of the findings (one objective comparison) is tested with group-sequential boundaries that
hold the false-verdict rate `alpha` over all looks (sweeper.report.sequential); a part is
decided at its boundary, or futile when its conditional power of a verdict by `maximum` is below
`futility`. The configurations of the parts still open get `step` more replicates, up to
`maximum`; the others stop. Replicate r of a run has the key it has in a fixed design, so the
runs of a look are the runs a fixed design of that size would train.

A look is only held where it can decide (`looks`): O'Brien-Fleming-type spending leaves an early
look a tiny level (at 3 of 15 runs, 1e-6 two-sided: a t statistic of 963 on 2 degrees of
freedom, which stopped nothing in 4,000 simulated studies), and a p-value that small over n runs
rests on the normal tail alone: no test free of it (the exact sign-flip test) goes below 2^(1-n)
two-sided. The first look is the first count whose level reaches that floor; with the defaults,
9 of 15 (level 0.0076 against 0.0039), then 12 and 15.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sweeper.contract.configs import positive

MIN_FIRST = 3
"""The first look tests over runs: 3 is the fewest units a verdict's test takes (VerdictConfig.min_seeds)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SequentialSpec:
    first: int = 3
    """Replicates of every configuration before the first look, raised to the first count of
    first, first + step, ... at which a look can decide (`looks`)."""
    step: int = 3
    """Replicates added at each later look to a configuration with an open comparison."""
    maximum: int = 15
    """Replicates of a configuration at most: the last look (a fixed design of this size is the
    comparison `sweeper plan` prints)."""
    alpha: float = 0.05
    """False-verdict rate of each finding held over all looks (its parts as `report.finding_parts`
    says, O'Brien-Fleming-type alpha spending over the looks)."""
    futility: float = 0.1
    """A comparison whose conditional power (under the trend seen so far) of a verdict by
    `maximum` is below this stops adding replicates: 0 never stops for futility."""
    every_count: bool = False
    """Hold a look at every count, also where a verdict would rest on the normal tail alone
    (`looks`): for small designs whose early looks only a large effect can end (the tests' nano
    studies); False: the first look is the first count that can decide."""
    planning_effect: float = 1.0
    """Difference between two configurations (points) that `sweeper plan`'s expected cost assumes:
    the median of the paper's 610m category differences (docs/statistics.md). Decides nothing."""
    planning_run_sd: float = 0.5
    """Run-to-run SD of a configuration's category score (points) for that estimate (the
    calibration's). Decides nothing."""

    def check(self):
        yield from positive(self, "step")
        if not (isinstance(self.first, int) and self.first >= MIN_FIRST):
            yield "first", f"must be a whole number >= {MIN_FIRST} (a test over runs needs 3), got {self.first}"
        if isinstance(self.first, int) and not self.maximum > self.first:
            yield "maximum", f"must be above first ({self.first}), got {self.maximum}: a plan of one look is " \
                             "`replicates: N`"
        if not (0 < self.alpha < 0.5 and math.isfinite(self.alpha)):
            yield "alpha", f"must be in (0, 0.5), got {self.alpha}"
        if not isinstance(self.every_count, bool):
            yield "every_count", f"must be true or false, got {self.every_count!r}"
        if not (0 <= self.futility < 1):
            yield "futility", f"must be in [0, 1), got {self.futility}"
        yield from positive(self, "planning_run_sd")
        if not (self.planning_effect >= 0 and math.isfinite(self.planning_effect)):
            yield "planning_effect", f"must not be negative, got {self.planning_effect}"

    def counts(self) -> tuple[int, ...]:
        """The counts the spec names: first, first + step, ..., maximum."""
        counts = list(range(self.first, self.maximum, max(self.step, 1)))
        return (*counts, self.maximum)

    def first_look_level(self, n: int) -> float:
        """The two-sided nominal level of a first look at `n` runs per configuration (the whole
        alpha: a finding of one part), by O'Brien-Fleming-type spending of alpha / 2 per direction
        (`sweeper.report.boundaries.spent` in closed form: the first look spends it alone)."""
        from scipy import stats  # here: importing scipy.stats is most of a plain `sweeper plan`'s start

        return float(4 * stats.norm.sf(stats.norm.isf(self.alpha / 4) / math.sqrt(n / self.maximum)))

    def looks(self) -> tuple[int, ...]:
        """Replicates per configuration at each look: the counts from the first whose level
        reaches 2^(1-n), the smallest two-sided p an exact sign-flip test over n runs can give;
        earlier looks could decide only on the normal tail's say-so (module docstring)."""
        counts = self.counts()
        if self.every_count:
            return counts
        first = next(i for i, n in enumerate(counts)
                     if n == self.maximum or self.first_look_level(n) >= 2.0 ** (1 - n))
        return counts[first:]

    def skipped(self) -> str:
        """Why counts of the spec hold no look, for `sweeper plan`; empty when none is skipped."""
        dropped = self.counts()[:len(self.counts()) - len(self.looks())]
        if not dropped:
            return ""
        n = dropped[-1]
        return (f"no look at {', '.join(map(str, dropped))} runs: a first look there has level "
                f"{self.first_look_level(n):.2g}, below 2^(1-n) = {2.0 ** (1 - n):.2g}, the smallest p a test "
                f"free of the normal tail reaches over {n} runs")

    def fractions(self) -> tuple[float, ...]:
        """Each look's information fraction: its replicates over the maximum."""
        return tuple(n / self.maximum for n in self.looks())
