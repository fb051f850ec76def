"""`pretraining.sequential`: replicates added in looks until each objective comparison is decided.

A fixed design (`pretraining.replicates: N`) trains every configuration N times whatever its
comparisons show. A sequential plan trains each configuration `first` times, then looks: every
part of the findings (one objective comparison) is tested with group-sequential boundaries that
hold the false-verdict rate `alpha` over all looks (sweeper.report.sequential); a part is
decided at its boundary, or futile when its conditional power of a verdict by `maximum` is below
`futility`. The configurations of the parts still open get `step` more replicates, up to
`maximum`; the others stop. Replicate r of a run has the key it has in a fixed design, so the
runs of a look are the runs a fixed design of that size would train.
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
    """Replicates of every configuration before the first look."""
    step: int = 3
    """Replicates added at each later look to a configuration with an open comparison."""
    maximum: int = 15
    """Replicates of a configuration at most: the last look (a fixed design of this size is the
    comparison `sweeper plan` prints)."""
    alpha: float = 0.05
    """False-verdict rate of each finding held over all looks (Holm over its parts, O'Brien-Fleming-
    type alpha spending over the looks)."""
    futility: float = 0.1
    """A comparison whose conditional power (under the trend seen so far) of a verdict by
    `maximum` is below this stops adding replicates: 0 never stops for futility."""
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
        if not (0 <= self.futility < 1):
            yield "futility", f"must be in [0, 1), got {self.futility}"
        yield from positive(self, "planning_run_sd")
        if not (self.planning_effect >= 0 and math.isfinite(self.planning_effect)):
            yield "planning_effect", f"must not be negative, got {self.planning_effect}"

    def looks(self) -> tuple[int, ...]:
        """Replicates per configuration at each look: first, first + step, ..., maximum."""
        counts = list(range(self.first, self.maximum, max(self.step, 1)))
        return (*counts, self.maximum)

    def fractions(self) -> tuple[float, ...]:
        """Each look's information fraction: its replicates over the maximum."""
        return tuple(n / self.maximum for n in self.looks())
