"""Do the user's results support the paper's five findings? Each verdict comes from tests with a
known false-positive rate, and names them with their numbers (docs/statistics.md).

The unit of replication is the fine-tuning seed: seeds share the data order and the initial
head across checkpoints, so two checkpoints are compared seed by seed (paired), on the per-seed
category scores of `analysis.per_seed_category_scores`; the tasks are fixed, not sampled. Only
checkpoints of one model size and one budget (total steps) are compared with each other.

Each finding is split into parts (one claim about one group of runs). A part has two one-sided
p-values, for the claim and for its opposite; its p-value is twice the smaller (both directions
tried), and Holm's step-down adjustment runs over the parts of the finding, so the chance that a
finding says "supports" or "contradicts" while nothing differs is at most `alpha`. A part is
decided when its adjusted p-value is below `alpha`, in the direction of its smaller one-sided
p-value. The finding supports when every part supports, contradicts when any part contradicts,
and otherwise cannot tell, saying what is missing (runs, seeds) or that the data cannot show it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from sweeper import analysis
from sweeper.runs import format_steps

SUPPORTS, CONTRADICTS, CANNOT_TELL = "supports", "contradicts", "cannot tell"
CATEGORIES = ("SC", "TC", "QA", "IR")  # the paper's categories, which its findings speak of

FINDINGS = (
    "MLM beats CLM on SC and QA at every size; CLM ties or wins on TC.",
    "No masking ratio is best everywhere; 40 % is the compromise.",
    "CLM is more data-efficient early and less sensitive to the fine-tuning learning rate.",
    "At a fixed budget, CLM then MLM beats MLM alone; 25 % CLM is the most reliable split.",
    "MLM continued pretraining from a CLM checkpoint beats continuing MLM from an MLM checkpoint.",
)


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


@dataclass
class Verdict:
    number: int
    claim: str
    verdict: str
    evidence: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)


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

def size_of(run_name: str) -> str:
    return run_name.split("-")[0]


def budget(steps) -> str:
    return format_steps(int(steps))


def ratio_text(ratio: float) -> str:
    return f"{ratio:.0%}"


@dataclass(kw_only=True, slots=True)
class SeedScores:
    """Per-seed category scores as an array (checkpoint, category, seed), NaN where absent."""
    cube: np.ndarray
    checkpoints: dict[str, int]
    categories_in_order: list[str]
    runs: pd.DataFrame
    """One row per checkpoint (run columns + `size`), indexed by checkpoint_id."""

    @classmethod
    def of(cls, per_seed: pd.DataFrame, value: str = "score") -> SeedScores:
        checkpoint, checkpoints = pd.factorize(per_seed["checkpoint_id"])
        category, categories = pd.factorize(per_seed["task_category"])
        seed, _ = pd.factorize(per_seed["seed"])
        cube = np.full((len(checkpoints), len(categories), seed.max() + 1), np.nan)
        cube[checkpoint, category, seed] = per_seed[value].to_numpy()
        runs = analysis.run_table(per_seed).set_index("checkpoint_id")
        return cls(cube=cube, checkpoints={c: i for i, c in enumerate(checkpoints)},
                   categories_in_order=list(categories), runs=runs.assign(size=runs["run_name"].map(size_of)))

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


def closest_mlm(group: pd.DataFrame, config: VerdictConfig) -> str | None:
    """The MLM checkpoint standing for MLM: the reference ratio when trained, else the closest."""
    mlm = group[group["objective"] == "mlm"]
    if mlm.empty:
        return None
    return mlm.iloc[(mlm["mask_ratio"] - config.reference_ratio).abs().argmin()].name


def final_scratch(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[(runs["checkpoint_step"] == runs["total_steps"]) & runs["init_from"].isna()]


# --- the five findings ---------------------------------------------------------------------------

def finding_1(scores: SeedScores, config: VerdictConfig) -> list[Part]:
    parts = []
    for (size, steps), group in final_scratch(scores.runs).groupby(["size", "total_steps"]):
        where = f"{size} @ {budget(steps)}"
        clm = group.index[group["objective"] == "clm"]
        mlm = closest_mlm(group, config)
        if len(clm) == 0 or mlm is None:
            if len(clm) or mlm is not None:
                parts.append(Part(comparison=where, missing=f"no {size} {'MLM' if mlm is None else 'CLM'} run at "
                                                            f"{budget(steps)}"))
            continue
        scored = scores.categories([mlm, clm[0]])
        for category in ("SC", "QA", "TC"):
            if category not in scored:
                parts.append(Part(comparison=f"{where}, {category}", missing=f"{category} not scored for {mlm} and {clm[0]}"))
            elif category != "TC":
                parts.append(pair_part(scores, mlm, clm[0], f"{where}, {category}: MLM beats CLM", [category], config))
            else:  # 'ties or wins' is a non-inferiority claim: CLM - MLM > -margin
                parts.append(pair_part(scores, clm[0], mlm, f"{where}, TC: CLM ties or wins ("
                                       f"{config.tie_margin:g}-point margin)", ["TC"], config, shift=-config.tie_margin))
    if not parts:
        parts.append(Part(comparison="MLM vs CLM",
                          missing="needs a pure MLM and a pure CLM run of the same size and budget"))
    return parts


def ratio_matrix(scores: SeedScores, group: pd.DataFrame) -> tuple[list[float], list[str], np.ndarray]:
    by_ratio = group.reset_index().drop_duplicates("mask_ratio").sort_values("mask_ratio")
    ids = list(by_ratio["checkpoint_id"])
    categories = scores.categories(ids)
    return list(by_ratio["mask_ratio"]), categories, scores.matrix(ids, categories)


def finding_2(scores: SeedScores, config: VerdictConfig) -> list[Part]:
    parts = []
    scratch = final_scratch(scores.runs)
    mlm = scratch[scratch["objective"] == "mlm"]
    for (size, steps), group in mlm.groupby(["size", "total_steps"]):
        if group["mask_ratio"].nunique() < 2:
            continue
        where = f"{size} @ {budget(steps)}"
        ratios, categories, y = ratio_matrix(scores, group)  # y: (ratio, category, seed)
        everywhere = Part(comparison=f"{where}: no ratio is best in every category")
        compromise = Part(comparison=f"{where}: {ratio_text(config.reference_ratio)} is the compromise (category "
                                     f"mean within a {config.tie_margin:g}-point margin of every other ratio)")
        parts += [everywhere, compromise]
        if len(categories) < 2:
            everywhere.missing = compromise.missing = "needs two or more categories scored for every ratio"
            continue
        if y.shape[2] < config.min_seeds:
            everywhere.missing = compromise.missing = f"needs >= {config.min_seeds} seeds shared by the ratios"
            continue
        best_everywhere_test(everywhere, ratios, categories, y)
        if config.reference_ratio not in ratios:
            compromise.missing = f"no {size} MLM {ratio_text(config.reference_ratio)} run at {budget(steps)}"
        else:
            compromise_test(compromise, ratios, categories, y, config)
    if not parts:
        parts.append(Part(comparison="masking ratios",
                          missing="needs MLM runs at two or more masking ratios of one size and budget"))
    return parts


def best_everywhere_test(part: Part, ratios: list[float], categories: list[str], y: np.ndarray) -> None:
    """'No ratio is best everywhere' holds when every ratio is beaten by another in some category.

    For ratio r, 'r is best everywhere' is rejected when any one-sided paired t-test 'another
    ratio beats r in a category' rejects, Bonferroni over the C(R-1) of them; the claim needs this
    for every r (intersection-union: the largest of the R p-values, no further adjustment). Its
    opposite, 'one ratio is best everywhere', needs every test 'it beats each other ratio in each
    category' to reject (the largest p-value), Bonferroni over the R candidates."""
    n_ratios, n_categories = len(ratios), len(categories)
    # above[i, j, c]: p for 'ratio i beats ratio j in category c'.
    above, _ = paired_t(y[:, None, :, :] - y[None, :, :, :])
    off_diagonal = ~np.eye(n_ratios, dtype=bool)
    beaten = np.array([np.nanmin(above[off_diagonal[:, j], j]) for j in range(n_ratios)])
    part.p_support = float(min(1.0, n_categories * (n_ratios - 1) * beaten.max()))
    best = np.array([np.max(above[i, off_diagonal[i]]) for i in range(n_ratios)])
    part.p_contradict = float(min(1.0, n_ratios * np.nanmin(best)))
    means = y.mean(axis=2)
    part.numbers = "; ".join(f"{c}: " + ", ".join(f"{ratio_text(r)} {means[i, k]:.2f}" for i, r in enumerate(ratios))
                             + f" (best {ratio_text(ratios[int(means[:, k].argmax())])})"
                             for k, c in enumerate(categories))
    part.test = (f"one-sided paired t-tests over {y.shape[2]} seeds per (ratio pair, category); intersection-union "
                 "over ratios, Bonferroni within")
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the seeds do not vary: no test"


def compromise_test(part: Part, ratios: list[float], categories: list[str], y: np.ndarray,
                    config: VerdictConfig) -> None:
    """On the mean over categories, the reference ratio minus each other ratio is above -margin
    (non-inferiority, intersection-union: the largest p-value); contradicted when some ratio
    beats it by more than the margin (Bonferroni over the other ratios)."""
    average = y.mean(axis=1)  # (ratio, seed)
    reference = ratios.index(config.reference_ratio)
    others = [i for i in range(len(ratios)) if i != reference]
    above, below = paired_t(average[reference] - average[others], -config.tie_margin)
    part.p_support = float(np.max(above))
    part.p_contradict = float(min(1.0, len(others) * np.min(below)))
    part.numbers = ("mean of " + "/".join(categories) + ": "
                    + ", ".join(f"{ratio_text(r)} {describe(average[i])}" for i, r in enumerate(ratios))
                    + "; " + ", ".join(f"{ratio_text(config.reference_ratio)} minus {ratio_text(ratios[i])} "
                                       f"{describe(average[reference] - average[i])}" for i in others))
    part.test = (f"paired t-tests over {y.shape[2]} seeds against a {config.tie_margin:g}-point margin, "
                 "intersection-union over the other ratios")
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the seeds do not vary: no test"


def finding_3(scores: SeedScores, spreads: Spreads, config: VerdictConfig) -> list[Part]:
    parts = []
    runs = scores.runs[scores.runs["init_from"].isna() & scores.runs["objective"].isin(["clm", "mlm"])]
    early = runs[runs["checkpoint_step"] < runs["total_steps"]]
    for (size, steps), group in early.groupby(["size", "total_steps"]):
        where = f"{size} @ {budget(steps)}"
        clm_steps = set(group.loc[group["objective"] == "clm", "checkpoint_step"])
        mlm_steps = set(group.loc[group["objective"] == "mlm", "checkpoint_step"])
        common = sorted(clm_steps & mlm_steps)
        if not common:
            parts.append(Part(comparison=f"{where}, data efficiency", missing=(
                f"needs intermediate checkpoints of a {size} CLM and MLM run at a common step")))
            continue
        at = group[group["checkpoint_step"] == common[0]]
        clm, mlm = at.index[at["objective"] == "clm"][0], closest_mlm(at, config)
        parts.append(pair_part(scores, clm, mlm, f"{where}, step {common[0]}: CLM beats MLM early", None, config))
    if early.empty:
        parts.append(Part(comparison="data efficiency",
                          missing="needs intermediate checkpoints of both a CLM and an MLM run"))
    stable = final_scratch(runs)
    tested = False
    for (size, steps), group in stable.groupby(["size", "total_steps"]):
        clm, mlm = group.index[group["objective"] == "clm"], closest_mlm(group, config)
        if len(clm) == 0 or mlm is None:
            continue
        tested = True
        parts.append(spread_part(spreads, clm[0], mlm, f"{size} @ {budget(steps)}, stability: "
                                 "CLM's spread over seeds x learning rates is smaller", config))
    if not tested:
        parts.append(Part(comparison="stability", missing="needs final CLM and MLM checkpoints of one size and budget "
                                                          "(with several seeds or learning rates per cell)"))
    return parts


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


def spread_part(spreads: Spreads, clm: str, mlm: str, label: str, config: VerdictConfig) -> Part:
    """CLM's spread below MLM's: a paired t-test over seeds of the per-seed log ratio of the
    root-mean-square centred scores, averaged over the categories both have (a geometric mean)."""
    part = Part(comparison=label)
    cube = spreads.log_rms
    if cube is None or clm not in cube.checkpoints or mlm not in cube.checkpoints:
        part.missing = "needs final CLM and MLM checkpoints with a spread (several seeds or learning rates per cell)"
        return part
    categories = cube.categories([clm, mlm])
    both = cube.matrix([clm, mlm], categories)  # (2, category, seed)
    if both.shape[2] < config.min_seeds:
        part.missing = f"needs >= {config.min_seeds} seeds with a spread for both, has {both.shape[2]}"
        return part
    per_seed = (both[0] - both[1]).mean(axis=0)
    above, below = paired_t(per_seed)
    part.p_support, part.p_contradict = float(below), float(above)
    mean, low, high = interval(per_seed)
    shown = {c: spreads.pooled.loc[c].reindex(categories).mean() for c in (clm, mlm)}
    part.numbers = (f"spread (mean over {'/'.join(categories)}) {clm} {shown[clm]:.2f} vs {mlm} {shown[mlm]:.2f}; "
                    f"ratio CLM/MLM {math.exp(mean):.2f} [{math.exp(low):.2f}, {math.exp(high):.2f}]")
    part.test = f"paired t-test over {len(per_seed)} seeds of the log spread ratio, two-sided"
    if np.isnan(part.p_support):
        part.missing = "the seeds do not vary: no test"
    return part


def finding_4(scores: SeedScores, config: VerdictConfig) -> list[Part]:
    parts = []
    scratch = final_scratch(scores.runs)
    scratch = scratch[scratch["mask_ratio"].notna()]
    reliable_tested = False
    for (size, steps, ratio), group in scratch.groupby(["size", "total_steps", "mask_ratio"]):
        splits = group[(group["objective"] == "clm-mlm") & group["clm_fraction"].between(0, 1, inclusive="neither")]
        if splits.empty:
            continue
        where = f"{size} @ {budget(steps)}, MLM {ratio_text(ratio)}"
        mlm = group.index[group["objective"] == "mlm"]
        if len(mlm) == 0:
            parts.append(Part(comparison=where, missing=f"no {size} MLM {ratio_text(ratio)} run at {budget(steps)}"))
            continue
        splits = splits.sort_values("clm_fraction")
        parts.append(split_beats_part(scores, mlm[0], splits, f"{where}: a CLM -> MLM split beats MLM alone", config))
        quarter = splits.index[(splits["clm_fraction"] - config.reliable_split).abs() < 0.05]
        if len(quarter):
            reliable_tested = True
            parts.append(reliable_part(scores, quarter[0], mlm[0], f"{where}: the {ratio_text(config.reliable_split)} "
                                       f"split is within a {config.tie_margin:g}-point margin of MLM or "
                                       "above in every category", config))
    if not parts:
        parts.append(Part(comparison="biphasic", missing="needs a pure MLM run and CLM -> MLM runs at the same size, "
                                                         "budget and masking ratio"))
    elif not reliable_tested:
        parts.append(Part(comparison="reliable split",
                          missing=f"no {ratio_text(config.reliable_split)} CLM split beside a pure MLM run"))
    return parts


def split_beats_part(scores: SeedScores, mlm: str, splits: pd.DataFrame, label: str, config: VerdictConfig) -> Part:
    """Some split beats MLM alone on the category mean: one-sided paired t-tests, Bonferroni over
    the K splits; contradicted when MLM alone beats every split (intersection-union)."""
    part = Part(comparison=label)
    ids = [mlm, *splits.index]
    categories = scores.categories(ids)
    y = scores.matrix(ids, categories).mean(axis=1) if categories else np.empty((len(ids), 0))
    if y.shape[1] < config.min_seeds:
        part.missing = f"needs >= {config.min_seeds} seeds shared by MLM and the splits, has {y.shape[1]}"
        return part
    above, below = paired_t(y[1:] - y[0])
    part.p_support = float(min(1.0, len(splits) * np.min(above)))
    part.p_contradict = float(np.max(below))
    part.numbers = ("mean of " + "/".join(categories) + f": MLM {describe(y[0])}, "
                    + ", ".join(f"{ratio_text(f)} CLM {describe(y[i + 1])}" for i, f in enumerate(splits["clm_fraction"])))
    part.test = f"one-sided paired t-tests over {y.shape[1]} seeds, Bonferroni over {len(splits)} split(s)"
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the seeds do not vary: no test"
    return part


def reliable_part(scores: SeedScores, split: str, mlm: str, label: str, config: VerdictConfig) -> Part:
    """The split is non-inferior to MLM alone (margin) in every category: intersection-union of
    the per-category tests; contradicted when MLM beats it by more than the margin somewhere
    (Bonferroni over the categories)."""
    part = Part(comparison=label)
    categories = scores.categories([split, mlm])
    y = scores.matrix([split, mlm], categories)  # (2, category, seed)
    if y.shape[2] < config.min_seeds or not categories:
        part.missing = f"needs >= {config.min_seeds} seeds shared by {split} and {mlm}, has {y.shape[2]}"
        return part
    above, below = paired_t(y[0] - y[1], -config.tie_margin)
    part.p_support = float(np.max(above))
    part.p_contradict = float(min(1.0, len(categories) * np.min(below)))
    part.numbers = "; ".join(f"{c}: difference {describe(y[0, k] - y[1, k])}" for k, c in enumerate(categories))
    part.test = (f"paired t-tests over {y.shape[2]} seeds against a {config.tie_margin:g}-point margin, "
                 "intersection-union over categories")
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the seeds do not vary: no test"
    return part


def source_objective(runs: pd.DataFrame, source: str) -> str | None:
    """The objective of a continued run's source: from the study's rows, else from its name
    (`610m-clm-42k`, `610m-mlm40-42k`); None for a Hugging Face or biphasic source."""
    known = runs.loc[runs["run_name"] == source, "objective"]
    if len(known):
        return known.iloc[0]
    tokens = source.split("-")
    if len(tokens) == 3 and tokens[1] == "clm":
        return "clm"
    return "mlm" if len(tokens) == 3 and tokens[1].startswith("mlm") else None


def finding_5(scores: SeedScores, config: VerdictConfig) -> list[Part]:
    parts = []
    runs = scores.runs
    cpt = runs[runs["init_from"].notna() & (runs["checkpoint_step"] == runs["total_steps"])]
    cpt = cpt.assign(source=cpt["init_from"].map(lambda s: source_objective(runs, s)))
    keys = ["size", "steps_before", "total_steps", "mask_ratio"]
    for (size, before, added, ratio), group in cpt[cpt["source"].notna()].groupby(keys):
        where = f"{size}, +{budget(added)} MLM {ratio_text(ratio)} steps after {budget(before)}"
        from_clm, from_mlm = group.index[group["source"] == "clm"], group.index[group["source"] == "mlm"]
        if len(from_clm) == 0 or len(from_mlm) == 0:
            parts.append(Part(comparison=where, missing=f"no continued run from a {'CLM' if len(from_clm) == 0 else 'MLM'} "
                                                        "checkpoint with these steps"))
            continue
        parts.append(pair_part(scores, from_clm[0], from_mlm[0], f"{where}: from CLM beats from MLM", None, config))
    if not parts:
        parts.append(Part(comparison="continued pretraining", missing=(
            "needs continued-pretraining runs from a CLM and an MLM checkpoint with the same added steps")))
    return parts


def check_findings(trials: pd.DataFrame, lr_range: tuple[float, float] = (1e-5, 1e-4),
                   config: VerdictConfig = VerdictConfig()) -> list[Verdict]:
    """The five verdicts on a trials table (the store's rows)."""
    trials = analysis.analysis_columns(trials)
    per_seed = analysis.per_seed_category_scores(trials) if not trials.empty else pd.DataFrame()
    if per_seed.empty:
        return [Verdict(i + 1, claim, CANNOT_TELL, ["no finished trials"]) for i, claim in enumerate(FINDINGS)]
    scores = SeedScores.of(per_seed)
    spreads = Spreads.of(analysis.per_seed_spread(trials, lr_range)[0])
    all_parts = [finding_1(scores, config), finding_2(scores, config),
                 finding_3(scores, spreads, config), finding_4(scores, config), finding_5(scores, config)]
    verdicts = []
    for number, (claim, parts) in enumerate(zip(FINDINGS, all_parts), start=1):
        verdict = decide(parts, config)
        verdicts.append(Verdict(number, claim, verdict, [part.line() for part in parts], parts))
    return verdicts
