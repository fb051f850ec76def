"""The verdicts' test machinery: per-seed score arrays, paired t-tests, intervals, Holm's
adjustment, and how a finding's parts become its verdict (docs/statistics.md). What each of the
paper's findings claims, and which parts it is split into, is `sweeper.report.findings`.

The unit of replication is the fine-tuning seed: seeds share the data order and the initial
head across checkpoints, so two checkpoints are compared seed by seed (paired), on the per-seed
category scores of `analysis.per_seed_category_scores`; the tasks are fixed, not sampled.

A part has two one-sided p-values, for its claim and for the opposite; its p-value is twice the
smaller (both directions tried), and Holm's step-down adjustment runs over the parts of one
finding, so the chance that a finding says "supports" or "contradicts" while nothing differs is
at most `alpha`. A part is decided when its adjusted p-value is below `alpha`, in the direction
of its smaller one-sided p-value. The finding supports when every part supports, contradicts
when any part contradicts, and otherwise cannot tell.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from sweeper.report import analysis, provenance

SUPPORTS, CONTRADICTS, CANNOT_TELL = "supports", "contradicts", "cannot tell"

@dataclass(frozen=True, kw_only=True, slots=True)
class VerdictConfig:
    alpha: float = 0.05
    """Family-wise error rate of each finding: Holm's adjustment runs over its parts."""
    tie_margin: float = 1.0
    """Points (scores are on 0-100) within which two scores count as tied: the margin of the
    non-inferiority tests behind 'ties or wins', 'the compromise' and 'reliable'."""
    min_seeds: int = 3
    """Fewest seeds shared by both sides of a comparison for its test to run (2 give 1 dof)."""
    reference_ratio: float = 0.4
    """The paper's default masking ratio: the MLM run that stands for MLM, and the compromise."""
    reliable_split: float = 0.25
    """The CLM share finding 4 calls the most reliable."""


@dataclass(kw_only=True, slots=True)
class Part:
    """One tested claim of a finding: what is compared, the numbers, the test and its outcome."""
    comparison: str
    numbers: str = ""
    test: str = ""
    p_support: float = math.nan
    """One-sided p-value of the test whose rejection supports the claim."""
    p_contradict: float = math.nan
    """One-sided p-value of the test whose rejection contradicts it."""
    p_adjusted: float = math.nan
    """Holm-adjusted p-value of the part (both directions counted) within its finding."""
    verdict: str = CANNOT_TELL
    missing: str = ""
    """Why the part could not be tested (runs or seeds missing); empty when it was."""

    @property
    def p_value(self) -> float:
        """Both directions tried: twice the smaller one-sided p-value (Bonferroni over two)."""
        if math.isnan(self.p_support) or math.isnan(self.p_contradict):
            return math.nan
        return min(1.0, 2 * min(self.p_support, self.p_contradict))

    def line(self) -> str:
        if self.missing:
            return f"{self.comparison}: cannot tell ({self.missing})"
        return f"{self.comparison}: {self.numbers}; {self.test}; p = {p_text(self.p_adjusted)} (Holm) -> {self.verdict}"


def p_text(p: float) -> str:
    return "n/a" if math.isnan(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


# --- tests --------------------------------------------------------------------------------------

def paired_t(differences: np.ndarray, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One-sided paired t-tests of the mean of `differences` (last axis: seeds) against `shift`:
    (p for 'above shift', p for 'below shift'). NaN where the seeds do not vary (no test)."""
    differences = np.asarray(differences, dtype=float)
    n = differences.shape[-1]
    sd = differences.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, (differences.mean(axis=-1) - shift) / (sd / np.sqrt(n)), np.nan)
    return stats.t.sf(t, n - 1), stats.t.cdf(t, n - 1)


def interval(values: np.ndarray) -> tuple[float, float, float]:
    """Mean over seeds and its 95 % Student-t interval (low, high)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    half = float(analysis.t95(len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else math.nan
    return mean, mean - half, mean + half


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error rate), statsmodels' `multipletests`. NaN
    (a part not tested) stays NaN and does not count among the hypotheses."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full(len(p), np.nan)
    tested = ~np.isnan(p)
    if tested.any():
        adjusted[tested] = multipletests(p[tested], method="holm")[1]
    return adjusted.tolist()


def decide(parts: list[Part], config: VerdictConfig) -> str:
    """Adjust the parts' p-values (Holm), give each part its verdict, and the finding its own."""
    for part, adjusted in zip(parts, holm([part.p_value for part in parts])):
        part.p_adjusted = adjusted
        if part.missing or math.isnan(adjusted) or adjusted >= config.alpha:
            part.verdict = CANNOT_TELL
        else:
            part.verdict = SUPPORTS if part.p_support < part.p_contradict else CONTRADICTS
    outcomes = [part.verdict for part in parts]
    if not outcomes:
        return CANNOT_TELL
    if CONTRADICTS in outcomes:
        return CONTRADICTS
    return SUPPORTS if all(o == SUPPORTS for o in outcomes) else CANNOT_TELL


# --- the study's per-seed scores, arranged for pairing -------------------------------------------

@dataclass(kw_only=True, slots=True)
class SeedScores:
    """Per-seed category scores as an array (checkpoint, category, seed), NaN where absent."""
    cube: np.ndarray
    checkpoints: dict[str, int]
    categories_in_order: list[str]
    runs: pd.DataFrame
    """One row per checkpoint (run columns + `external`, `size` and `budget`:
    `provenance.comparison_keys`), indexed by checkpoint_id, the study's own first."""

    @classmethod
    def of(cls, per_seed: pd.DataFrame, value: str = "score") -> SeedScores:
        checkpoint, checkpoints = pd.factorize(per_seed["checkpoint_id"])
        category, categories = pd.factorize(per_seed["task_category"])
        seed, _ = pd.factorize(per_seed["seed"])
        cube = np.full((len(checkpoints), len(categories), seed.max() + 1), np.nan)
        cube[checkpoint, category, seed] = per_seed[value].to_numpy()
        runs = provenance.comparison_keys(analysis.run_table(per_seed).set_index("checkpoint_id"))
        return cls(cube=cube, checkpoints={c: i for i, c in enumerate(checkpoints)},
                   categories_in_order=list(categories), runs=runs)

    def categories(self, checkpoint_ids: Sequence[str]) -> list[str]:
        """Categories scored for every one of the checkpoints, in the report's order."""
        rows = self.cube[[self.checkpoints[c] for c in checkpoint_ids]]
        scored = (~np.isnan(rows)).any(axis=2).all(axis=0)
        return analysis.ordered_categories(c for c, ok in zip(self.categories_in_order, scored) if ok)

    def matrix(self, checkpoint_ids: Sequence[str], categories: Sequence[str]) -> np.ndarray:
        """Scores as (checkpoint, category, seed) over the seeds every checkpoint has in every category."""
        rows = self.cube[np.ix_([self.checkpoints[c] for c in checkpoint_ids],
                                [self.categories_in_order.index(c) for c in categories])]
        return rows[:, :, ~np.isnan(rows).any(axis=(0, 1))]


def pooled_spread(spreads: pd.DataFrame) -> pd.Series:
    """The report's spread (std of the pooled centred scores) per (checkpoint, category)."""
    totals = (spreads["mean_square"] * spreads["count"]).groupby([spreads["checkpoint_id"], spreads["task_category"]]).sum()
    counts = spreads.groupby(["checkpoint_id", "task_category"])["count"].sum()
    return np.sqrt(totals / (counts - 1))


@dataclass(kw_only=True, slots=True)
class Spreads:
    """Per-seed log root-mean-square centred scores (`analysis.per_seed_spread`) as a cube, and
    the report's pooled spread per (checkpoint, category)."""
    log_rms: SeedScores | None
    pooled: pd.Series

    @classmethod
    def of(cls, spreads: pd.DataFrame) -> Spreads:
        if spreads.empty:
            return cls(log_rms=None, pooled=pd.Series(dtype=float))
        spreads = spreads.assign(log_rms=0.5 * np.log(spreads["mean_square"].where(spreads["mean_square"] > 0)))
        return cls(log_rms=SeedScores.of(spreads, "log_rms"), pooled=pooled_spread(spreads))


# --- one paired comparison as a part ------------------------------------------------------------

def describe(values: np.ndarray) -> str:
    mean, low, high = interval(values)
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]" if not math.isnan(low) else f"{mean:.2f}"


def two_sided(shift: float) -> str:
    return "two-sided" if shift == 0 else f"two-sided about a margin of {shift:+g} point(s)"


def pair_part(scores: SeedScores, a: str, b: str, label: str, categories: Sequence[str] | None,
              config: VerdictConfig, shift: float = 0.0) -> Part:
    """The claim 'a - b > shift' on one category (or the mean over `categories`), by a paired
    t-test over the seeds both checkpoints have."""
    categories = list(categories) if categories is not None else scores.categories([a, b])
    part = Part(comparison=label)
    if not categories:
        part.missing = f"{a} and {b} share no scored category"
        return part
    both = scores.matrix([a, b], categories).mean(axis=1)  # (2, seeds): category mean per seed
    if both.shape[1] < config.min_seeds:
        part.missing = f"needs >= {config.min_seeds} seeds shared by {a} and {b}, has {both.shape[1]}"
        return part
    difference = both[0] - both[1]
    part.p_support, part.p_contradict = (float(p) for p in paired_t(difference, shift))
    what = categories[0] if len(categories) == 1 else "mean of " + "/".join(categories)
    part.numbers = (f"{what}: {a} {describe(both[0])} vs {b} {describe(both[1])}, "
                    f"difference {describe(difference)}")
    part.test = f"paired t-test over {both.shape[1]} seeds, {two_sided(shift)}"
    if np.isnan(part.p_support):
        part.missing = "the seeds do not vary: no test"
    return part
