"""The verdicts' test machinery: per-seed score arrays, paired tests (`sweeper.report.paired`),
intervals, Holm's adjustment, and how a finding's parts become its verdict (docs/statistics.md). What each of the
paper's findings claims, and which parts it is split into, is `sweeper.report.findings`.

Configurations (arms) are compared by their pretraining runs when each has two or more (a run's
score is the mean over its seeds: seeds nested in runs), and otherwise by the fine-tuning seeds of
their first runs: seeds share the data order and the initial head across checkpoints, so those
comparisons are paired seed by seed, and are about those checkpoints. Scores come from the dense
grid of `sweeper.report.grid`; the tasks are fixed, not sampled.

A part has two one-sided p-values, for its claim and for the opposite. The finding supports when
every part supports, contradicts when any part contradicts, and otherwise cannot tell; how the
parts share `alpha` is `VerdictConfig.parts`:

- `co-primary` (the default): a part supports when its own one-sided p for the claim is below
  alpha / 2, with no split over the parts: "every part supports" is an intersection-union test
  (Berger 1982; the co-primary endpoints of FDA's 2022 guidance "Multiple Endpoints in Clinical
  Trials"): if the finding is false some part's claim is false, and a false "supports" needs that
  part's own test to reject, probability <= alpha / 2 whatever the other parts do. "Any part
  contradicts" is a union: Holm's step-down adjustment over the parts' one-sided p against the
  claim, at alpha / 2. A finding's false verdicts are then at most alpha / 2 + alpha / 2 = alpha
  in every configuration of true and false parts.
- `holm` (the rule before #53): the part's p-value is twice the smaller one-sided p (both
  directions tried), Holm over the finding's parts at alpha, decided in the direction of the
  smaller one-sided p.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sweeper.report import analysis, provenance
from sweeper.report.power import standardized_detectable
from sweeper.report.grid import Sensitivity, TrialGrid
from sweeper.report.paired import (  # re-exported (`X as X`)
    paired_t as paired_t, paired_test as paired_test, skew_note as skew_note, skewness as skewness,
    test_name as test_name)

SUPPORTS, CONTRADICTS, CANNOT_TELL = "supports", "contradicts", "cannot tell"
CO_PRIMARY, HOLM = "co-primary", "holm"
PART_RULES = (CO_PRIMARY, HOLM)
ALONE = "as one of the finding's co-primary parts, not a result on its own"
"""Said beside a part that supports in a finding of several tested parts that does not: its level
is its own, not adjusted for the others, so it must not be read as a multiplicity-controlled
result."""

@dataclass(frozen=True, kw_only=True, slots=True)
class VerdictConfig:
    alpha: float = 0.05
    """False-verdict rate of each finding (supports or contradicts while its claim is not so), in
    every configuration of true and false parts (`parts`)."""
    parts: str = CO_PRIMARY
    """How a finding's parts share `alpha` (module docstring): `co-primary`, each part's claim at
    alpha / 2 one-sided with no split (intersection-union), its opposite by Holm over the parts at
    alpha / 2; `holm`, Holm over the parts' two-sided p-values at alpha."""
    tie_margin: float = 1.0
    """Points (scores are on 0-100) within which two scores count as tied: the margin of the
    non-inferiority tests behind 'ties or wins', 'the compromise' and 'reliable'."""
    min_seeds: int = 3
    """Fewest seeds shared by both sides of a comparison for its test to run (2 give 1 dof)."""
    reference_ratio: float = 0.4
    """The paper's default masking ratio: the MLM run that stands for MLM, and the compromise."""
    reliable_split: float = 0.25
    """The CLM share finding 4 calls the most reliable."""
    test: str = "skew-sign"
    """`skew-sign`: per direction the larger p of the `skew-t` and the exact sign-flip test
    (`paired.skew_sign`); `skew-t`: the larger p of the paired t-test and Hall's skewness-corrected
    t (`skew_corrected_t`); `t`: paired t-tests; `wilcoxon`: Wilcoxon signed-rank tests (the
    robustness card's)."""
    crossfit: bool = True
    """Score each seed at the point chosen on the other seeds (no winner's curse); False: the
    paper's selection on all seeds (the robustness card's)."""
    power: float = 0.8
    """The power at which a part states the smallest effect it could have detected."""


def verdict_config(report=None) -> VerdictConfig:
    """The verdicts' settings a study's spec chooses (its `report` section, a `spec.study.ReportSpec`;
    None: the defaults): `finding_parts` is `VerdictConfig.parts`."""
    return VerdictConfig(parts=report.finding_parts) if report is not None else VerdictConfig()


@dataclass(kw_only=True, slots=True)
class Part:
    """One tested claim of a finding: what is compared, the numbers, the test and its outcome."""
    comparison: str
    arms: tuple[str, ...] = ()
    """The arms the part compares (their replicates are what a sequential look adds to)."""
    numbers: str = ""
    test: str = ""
    p_support: float = math.nan
    """One-sided p-value of the test whose rejection supports the claim."""
    p_contradict: float = math.nan
    """One-sided p-value of the test whose rejection contradicts it."""
    p_adjusted: float = math.nan
    """The p-value the verdict is read from (`side`): `holm`, the Holm-adjusted two-sided p within
    the finding; `co-primary`, p_support (for the claim), or Holm-adjusted p_contradict (against)."""
    rule: str = CO_PRIMARY
    """`VerdictConfig.parts` of the verdict."""
    side: str = ""
    """`co-primary`: `for` when p_support is the smaller one-sided p (read at alpha / 2 alone), else
    `against` (read Holm-adjusted at alpha / 2); empty under `holm`."""
    level: float = math.nan
    """`co-primary`: the level the side's p had to be below (NaN in a sequential design: the look's
    boundary, in the report's table of looks)."""
    qualifier: str = ""
    """Said after the verdict (`ALONE` for a co-primary part supporting in a finding that does not)."""
    verdict: str = CANNOT_TELL
    missing: str = ""
    """Why the part could not be tested (runs or seeds missing); empty when it was."""
    noise: float = math.nan
    """SD of the tested differences over units (points; points squared for a spread part)."""
    units: int = 0
    """Units the test ran over (seeds, or pretraining runs)."""
    inside: int = 1
    """Tests inside the part that share its level (Bonferroni within the part)."""
    one_sided: bool = False
    """Whether the part's claim rests on one-sided tests (intersection-union parts)."""
    family: int = 1
    """Parts tested in its finding (Holm's first step divides alpha by this many)."""
    alpha: float = 0.05
    skewness: float = math.nan
    """Adjusted sample skewness of the tested differences (the largest in size over its tests)."""
    note: str = ""
    """What skewed differences do to the part's error rate (`skew_note`), when they look skewed."""

    @property
    def detectable(self) -> float:
        """The smallest true difference the part's test would find with 80 % power at its observed
        noise, at the level a verdict for the claim needs (and the Bonferroni inside the part):
        `co-primary`, alpha / 2 one-sided; `holm`, Holm's first-step level alpha / family: so a
        'cannot tell' reads as 'underpowered' when the effect of interest is below this."""
        if self.missing or not self.units or math.isnan(self.noise):
            return math.nan
        return self.noise * standardized_detectable(self.units, *self.power_level())

    def power_level(self) -> tuple[float, bool]:
        """(level, one-sided) at which the claim must be found: `co-primary`, alpha / 2 one-sided,
        no split over the parts; `holm`, Holm's first step alpha / family (two-sided unless the
        part is one-sided); both with the Bonferroni inside the part."""
        if self.rule == CO_PRIMARY:
            return SUPPORT_SHARE * self.alpha / self.inside, True
        return self.alpha / (self.family * self.inside), self.one_sided

    @property
    def p_value(self) -> float:
        """Both directions tried: twice the smaller one-sided p-value (Bonferroni over two)."""
        if math.isnan(self.p_support) or math.isnan(self.p_contradict):
            return math.nan
        return min(1.0, 2 * min(self.p_support, self.p_contradict))

    def line(self) -> str:
        if self.missing:
            return f"{self.comparison}: cannot tell ({self.missing})"
        note = f" ({self.note})" if self.note else ""
        return f"{self.comparison}: {self.numbers}; {self.test}; p = {self.p_shown()} -> {self.verdict_shown()}{note}"

    def p_shown(self) -> str:
        """The p-value the verdict is read from, which side it tests and the level it needed."""
        if self.rule != CO_PRIMARY:
            return f"{p_text(self.p_adjusted)} (Holm)"
        level = "group-sequential" if math.isnan(self.level) else f"level {self.level:g}"
        if self.side == "for":
            return f"{p_text(self.p_adjusted)} (for the claim, one-sided, co-primary, {level})"
        return f"{p_text(self.p_adjusted)} (against the claim, one-sided, Holm over {self.family}, {level})"

    def verdict_shown(self) -> str:
        return f"{self.verdict} ({self.qualifier})" if self.qualifier else self.verdict


def p_text(p: float) -> str:
    return "n/a" if math.isnan(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


# --- tests --------------------------------------------------------------------------------------

def interval(values: np.ndarray) -> tuple[float, float, float]:
    """Mean over seeds and its 95 % Student-t interval (low, high)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    half = (
        float(analysis.t95(len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))
        if len(values) > 1
        else math.nan
    )
    return mean, mean - half, mean + half


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error rate): the i-th smallest of m p-values times
    m - i + 1, capped at 1, never below the one before. NaN (a part not tested) stays NaN and does
    not count. statsmodels' `multipletests(method="holm")` gives the same (a test checks), but runs
    a full garbage collection per call: most of the time of a calibration's thousands of studies."""
    return holm_along(np.asarray(p_values, dtype=float)).tolist()


def holm_along(p: np.ndarray) -> np.ndarray:
    """`holm` over the last axis of `p`, every other axis apart (simulated findings at once)."""
    p = np.asarray(p, dtype=float)
    if p.shape[-1] == 0:
        return p.copy()
    tested = (~np.isnan(p)).sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(np.isnan(p), np.inf, p), axis=-1, kind="stable")
    steps = np.take_along_axis(p, order, axis=-1) * (tested - np.arange(p.shape[-1]))
    adjusted = np.minimum(1.0, np.maximum.accumulate(np.nan_to_num(steps, nan=-np.inf), axis=-1))
    out = np.empty_like(p)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return np.where(np.isnan(p), np.nan, out)


SUPPORT_SHARE = 0.5
"""The share of alpha at which a co-primary part's claim is tested (one-sided, no split over the
parts); the other half guards the contradictions (Holm over the parts)."""


def part_codes(p_support: np.ndarray, p_contradict: np.ndarray, alpha: float, rule: str
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parts' verdicts by `rule` (`VerdictConfig.parts`; module docstring) over the last axis
    (a finding's parts; NaN: not tested), every other axis apart: (+1 supports, -1 contradicts,
    0 cannot tell; the p-value each verdict is read from, as `Part.p_adjusted`; the level it needed)."""
    p_support, p_contradict = np.asarray(p_support, float), np.asarray(p_contradict, float)
    untested = np.isnan(p_support) | np.isnan(p_contradict)
    towards = np.where(p_support < p_contradict, 1, -1)
    if rule == HOLM:
        read = holm_along(np.where(untested, np.nan, np.minimum(1.0, 2 * np.fmin(p_support, p_contradict))))
        level = np.full(read.shape, alpha)
    else:  # the claim: each part alone at alpha / 2; its opposite: Holm over the parts at alpha / 2
        against = holm_along(np.where(untested, np.nan, p_contradict))
        read = np.where(towards > 0, p_support, against)
        level = np.where(towards > 0, SUPPORT_SHARE * alpha, (1 - SUPPORT_SHARE) * alpha)
    return np.where(~untested & (read < level), towards, 0), np.where(untested, np.nan, read), level


def decide(parts: list[Part], config: VerdictConfig) -> str:
    """Give each part its verdict by `config.parts` (`part_codes`), and the finding its own."""
    if config.parts not in PART_RULES:
        raise ValueError(f"VerdictConfig.parts must be one of {PART_RULES}, got {config.parts!r}")
    codes, read, levels = part_codes([p.p_support for p in parts], [p.p_contradict for p in parts], config.alpha,
                                     config.parts)
    tested = int((~np.isnan(read)).sum())
    for part, code, p, level in zip(parts, codes.tolist(), read.tolist(), levels.tolist()):
        part.family, part.alpha, part.rule, part.p_adjusted = max(tested, 1), config.alpha, config.parts, p
        part.level = level if config.parts == CO_PRIMARY else math.nan
        part.note = "" if part.missing else skew_note(part.units, part_family(part), part.skewness, config.test)
        part.side = "" if config.parts == HOLM or math.isnan(p) else ("for" if part.p_support < part.p_contradict
                                                                      else "against")
        part.verdict = SUPPORTS if code > 0 and not part.missing else CONTRADICTS if code < 0 and not part.missing \
            else CANNOT_TELL
    return combine(parts)


def part_family(part: Part) -> int:
    """The parts that share a part's level: 1 for a co-primary part's claim (no split), else its
    finding's (for `paired.skew_note`'s rates, measured per rule)."""
    return 1 if part.rule == CO_PRIMARY else part.family


def finding_codes(codes: np.ndarray) -> np.ndarray:
    """Findings' verdicts from their parts' (`part_codes`, last axis): -1 (contradicts) when any
    part contradicts, +1 (supports) when every part supports, else 0."""
    codes = np.asarray(codes)
    every = (codes > 0).all(axis=-1) & (codes.shape[-1] > 0)
    return np.where((codes < 0).any(axis=-1), -1, np.where(every, 1, 0))


def combine(parts: list[Part]) -> str:
    """The finding's verdict from its parts' (`finding_codes`); a co-primary part that supports in
    a finding of several tested parts that does not support says so (`ALONE`)."""
    code = {SUPPORTS: 1, CONTRADICTS: -1}
    overall = {1: SUPPORTS, -1: CONTRADICTS}.get(
        int(finding_codes(np.array([code.get(p.verdict, 0) for p in parts], int))), CANNOT_TELL)
    for part in parts:  # alone among the tested parts, its level is the finding's: nothing to qualify
        alone = part.rule == CO_PRIMARY and part.verdict == SUPPORTS and overall != SUPPORTS and part.family > 1
        part.qualifier = ALONE if alone else ""
    return overall


# --- the study's per-seed scores, arranged for pairing -------------------------------------------

def selectable(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` laid out for the findings' hundreds of selections: strings, index included, as Python
    objects (an Arrow-backed column makes each selection a pyarrow `take`), NumPy columns in one
    block per dtype, not one per column (benchmarks/verdict_speed.py)."""
    runs = runs.astype({column: object for column, dtype in runs.dtypes.items() if isinstance(dtype, pd.StringDtype)})
    return runs.set_axis(runs.index.astype(object)).copy()


@dataclass(kw_only=True, slots=True)
class SeedScores:
    """Category scores arranged for pairing, per arm (a configuration: the checkpoint of its first
    replicate names it). `cube` is (checkpoint, category, seed), the cross-fitted per-seed scores
    (`grid.TrialGrid.category_cube`); `replicate_cube` is (arm, category, replicate), each run's mean
    over its seeds. `matrix` compares arms by their runs when every arm compared has >= 2 runs
    (pretraining replicates: the run is the replicated unit, seeds are nested in it), and by the
    seeds of their first run otherwise (a verdict about those checkpoints)."""
    cube: np.ndarray
    checkpoints: dict[str, int]
    categories_in_order: list[str]
    runs: pd.DataFrame
    """One row per arm (run columns + `external`, `size` and `budget`:
    `provenance.comparison_keys`), indexed by the arm's id, the study's own first."""
    replicate_cube: np.ndarray | None = None
    arms: dict[str, int] | None = None
    replicates: dict[str, int] | None = None
    """Per arm, how many runs (replicates) it has."""

    @classmethod
    def of(cls, grid: TrialGrid, runs: pd.DataFrame, crossfit: bool = True) -> SeedScores:
        """From a `grid.TrialGrid` and its checkpoints' run columns (`analysis.run_table`, indexed by
        checkpoint id, with `arm` and `replicate`)."""
        # Seeds of one run: the paper's selection (every seed at the point best on their mean). A
        # cross-fitted seed's point is chosen by the other seeds, so the seeds would share that
        # choice's luck, which a test over them cannot see (measured: 7.7 % false verdicts at a
        # margin). Runs choose apart: there each run's seeds are cross-fitted (no winner's curse).
        cube, categories = grid.category_cube(crossfit=False)
        scores = grid.category_cube(crossfit)[0] if crossfit else cube
        runs = runs.reindex(grid.checkpoints).rename_axis("checkpoint_id").reset_index()
        arm = runs["arm"].where(runs["arm"].notna(), runs["checkpoint_id"])
        replicate = runs["replicate"].fillna(0).astype(int)
        first = runs.assign(_arm=arm, _replicate=replicate).sort_values("_replicate", kind="stable")
        first = first.drop_duplicates("_arm").set_index("_arm").drop(columns=["_replicate"])
        arms = {a: i for i, a in enumerate(first.index)}
        copies = replicate.max() + 1 if len(replicate) else 1
        by_run = np.full((len(arms), len(categories), copies), np.nan)
        with warnings.catch_warnings():  # a checkpoint without a seed in a category: NaN, no warning
            warnings.simplefilter("ignore", RuntimeWarning)
            by_run[arm.map(arms).to_numpy(), :, replicate.to_numpy()] = np.nanmean(scores, axis=2)
        counts = (~np.isnan(by_run)).any(axis=1).sum(axis=1)
        # The checkpoint cube's rows follow the arms: each arm's first run stands for it.
        index = {a: grid.checkpoints.index(c) for a, c in zip(first.index, first["checkpoint_id"])}
        return cls(cube=cube, checkpoints=index, categories_in_order=categories,
                   runs=selectable(provenance.comparison_keys(
                       first.drop(columns="checkpoint_id").rename_axis("checkpoint_id"))),
                   replicate_cube=by_run, arms=arms, replicates=dict(zip(arms, counts.tolist())))

    def by_runs(self, arm_ids: Sequence[str]) -> bool:
        """Whether these arms are compared by their runs (each has >= 2 pretraining replicates)."""
        return self.replicates is not None and all(self.replicates.get(a, 1) >= 2 for a in arm_ids)

    def units(self, arm_ids: Sequence[str], count: int) -> str:
        if self.by_runs(arm_ids):
            return f"{count} pretraining runs per arm (seeds averaged within each run)"
        return f"{count} seeds (about these checkpoints: one run each)"

    def categories(self, checkpoint_ids: Sequence[str]) -> list[str]:
        """Categories scored for every one of the checkpoints, in the report's order."""
        rows = self.cube[[self.checkpoints[c] for c in checkpoint_ids]]
        scored = (~np.isnan(rows)).any(axis=2).all(axis=0)
        return analysis.ordered_categories(c for c, ok in zip(self.categories_in_order, scored) if ok)

    def matrix(self, checkpoint_ids: Sequence[str], categories: Sequence[str]) -> np.ndarray:
        """Scores as (arm, category, unit) over the units every arm has in every category: its runs
        when `by_runs`, else its first run's seeds."""
        columns = [self.categories_in_order.index(c) for c in categories]
        if self.by_runs(checkpoint_ids):
            rows = self.replicate_cube[np.ix_([self.arms[c] for c in checkpoint_ids], columns)]
        else:
            rows = self.cube[np.ix_([self.checkpoints[c] for c in checkpoint_ids], columns)]
        return rows[:, :, ~np.isnan(rows).any(axis=(0, 1))]


# --- one paired comparison as a part ------------------------------------------------------------

def describe(values: np.ndarray) -> str:
    mean, low, high = interval(values)
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]" if not math.isnan(low) else f"{mean:.2f}"


def two_sided(shift: float) -> str:
    return "two-sided" if shift == 0 else f"two-sided about a margin of {shift:+g} point(s)"


def pair_part(scores: SeedScores, a: str, b: str, label: str, categories: Sequence[str] | None,
              config: VerdictConfig, shift: float = 0.0) -> Part:
    """The claim 'a - b > shift' on one category (or the mean over `categories`), by a paired
    test over the units both arms have (`SeedScores.matrix`: runs, else seeds)."""
    categories = list(categories) if categories is not None else scores.categories([a, b])
    part = Part(comparison=label, arms=(a, b))
    if not categories:
        part.missing = f"{a} and {b} share no scored category"
        return part
    both = scores.matrix([a, b], categories).mean(axis=1)  # (2, units): category mean per unit
    if both.shape[1] < config.min_seeds:
        part.missing = (
            f"needs >= {config.min_seeds} {unit_name(scores, [a, b])} shared by {a} and {b}, has {both.shape[1]}"
        )
        return part
    difference = both[0] - both[1]
    part.p_support, part.p_contradict = (float(p) for p in paired_test(difference, shift, config))
    part.noise, part.units = float(difference.std(ddof=1)), both.shape[1]
    part.skewness = skewness(difference)
    what = categories[0] if len(categories) == 1 else "mean of " + "/".join(categories)
    part.numbers = (f"{what}: {a} {describe(both[0])} vs {b} {describe(both[1])}, "
                    f"difference {describe(difference)}")
    part.test = f"{test_name(config, both.shape[1])} over {scores.units([a, b], both.shape[1])}, {two_sided(shift)}"
    if np.isnan(part.p_support):
        part.missing = "the units do not vary: no test"
    return part


def unit_name(scores: SeedScores, arm_ids: Sequence[str]) -> str:
    return "pretraining runs" if scores.by_runs(arm_ids) else "seeds"


# --- learning-rate sensitivity --------------------------------------------------------------------

@dataclass(kw_only=True, slots=True)
class Spreads:
    """Learning-rate sensitivity per final checkpoint (`grid.Sensitivity`), and per arm its runs'
    checkpoints (replicate -> checkpoint id) for the comparison by runs."""
    sensitivity: Sensitivity | None
    runs_of: dict[str, dict[int, str]]

    @classmethod
    def of(cls, grid: TrialGrid, runs: pd.DataFrame, lr_range: tuple[float, float] | None) -> Spreads:
        sensitivity = Sensitivity.of(grid, lr_range) if grid.final.any() else None
        runs = runs.reindex(grid.checkpoints)
        arm = runs["arm"].where(runs["arm"].notna(), runs.index.to_series())
        runs_of: dict[str, dict[int, str]] = {}
        for checkpoint, a, r in zip(runs.index, arm, runs["replicate"].fillna(0).astype(int)):
            runs_of.setdefault(a, {})[r] = checkpoint
        return cls(sensitivity=sensitivity, runs_of=runs_of)

    def checkpoint(self, arm: str) -> str:
        """The arm's first run's checkpoint."""
        runs = self.runs_of.get(arm, {arm: arm})
        return runs[min(runs)]


def spread_part(spreads: Spreads, clm: str, mlm: str, label: str, config: VerdictConfig) -> Part:
    """CLM's learning-rate sensitivity below MLM's, seed noise removed (`grid.Sensitivity`): the
    difference of the two learning-rate variances (points squared, mean over the categories both
    have). By runs when both arms have >= 2 (a paired t-test over replicates of each run's
    estimate), else over the first runs' seeds by the jackknife (pseudo-values of the U-statistic,
    a t-test over them)."""
    part = Part(comparison=label, arms=(clm, mlm))
    sensitivity = spreads.sensitivity
    if sensitivity is None or sensitivity.rates < 2:
        part.missing = ("one learning rate: learning-rate sensitivity cannot be measured (the spread over "
                        "seeds alone is seed noise)")
        return part
    arms = {clm: spreads.runs_of.get(clm, {0: clm}), mlm: spreads.runs_of.get(mlm, {0: mlm})}
    if any(checkpoint not in sensitivity.checkpoints for runs in arms.values() for checkpoint in runs.values()):
        part.missing = "needs final CLM and MLM checkpoints with scores at several learning rates"
        return part
    categories = analysis.ordered_categories(set(sensitivity.categories))
    shared = sorted(set(arms[clm]) & set(arms[mlm]))
    if len(shared) >= 2 and min(len(arms[clm]), len(arms[mlm])) >= 2:
        per_run = []
        for r in shared:
            ids = [arms[clm][r], arms[mlm][r]]
            cats = [c for c in categories if sensitivity.seeds_with_curves(ids, c).sum() >= 2]
            values = [sensitivity.components(i, c, sensitivity.seeds_with_curves(ids, c))[1] for i in ids for c in cats]
            per_run.append(np.mean(values[:len(cats)]) - np.mean(values[len(cats):]) if cats else np.nan)
        units, unit_text = np.array(per_run)[~np.isnan(per_run)], "pretraining runs per arm"
        if len(units) < config.min_seeds:
            part.missing = f"needs >= {config.min_seeds} pretraining runs per arm with curves, has {len(units)}"
            return part
        estimates = None
    else:
        ids = [spreads.checkpoint(clm), spreads.checkpoint(mlm)]
        categories = [c for c in categories if sensitivity.seeds_with_curves(ids, c).sum() >= config.min_seeds]
        seeds = np.logical_and.reduce([sensitivity.seeds_with_curves(ids, c) for c in categories]) if categories else \
            np.zeros(sensitivity.centred.shape[3], bool)
        if seeds.sum() < config.min_seeds:
            part.missing = f"needs >= {config.min_seeds} seeds with a curve over the rates for both, has {seeds.sum()}"
            return part
        n, pseudo, estimates = seeds.sum(), [], {i: [] for i in ids}
        for c in categories:
            (clm_out, clm_all, _), (mlm_out, mlm_all, _) = (sensitivity.components(i, c, seeds) for i in ids)
            pseudo.append(n * (clm_all - mlm_all) - (n - 1) * (clm_out - mlm_out))  # jackknife, per seed
            estimates[ids[0]].append(clm_all), estimates[ids[1]].append(mlm_all)
        units, unit_text = np.mean(pseudo, axis=0), "seeds (jackknife; about these checkpoints)"
    above, below = paired_test(units, 0.0, config)
    part.p_support, part.p_contradict = float(below), float(above)
    part.noise, part.units = float(units.std(ddof=1)), len(units)
    part.skewness = skewness(units)
    mean, low, high = interval(units)
    shown = ({"CLM": np.mean(estimates[ids[0]]), "MLM": np.mean(estimates[ids[1]])} if estimates else {})
    sd = "; ".join(f"{k} SD over rates {math.sqrt(max(v, 0)):.2f}" for k, v in shown.items())
    part.numbers = ((sd + "; " if sd else "") + f"CLM minus MLM learning-rate variance {mean:.2f} "
                    f"[{low:.2f}, {high:.2f}] points² ({sensitivity.rates} rates, seed noise removed)")
    part.test = f"{test_name(config, len(units))} over {len(units)} {unit_text}, two-sided"
    if np.isnan(part.p_support):
        part.missing = "the units do not vary: no test"
    return part
