"""Do the user's results support the paper's five findings? Each verdict comes from tests with a
known false-positive rate, and names them with their numbers (docs/statistics.md).

Each finding is split into parts (one claim about one group of runs), tested on the per-seed
category scores with the machinery of `sweeper.report.statistics` (paired tests over runs or
seeds; a finding's parts as co-primary claims, or Holm over them: `VerdictConfig.parts`). Only
checkpoints of one model size and one budget (total steps) are compared with each other, and only
checkpoints whose objective, size and budget are known: the study's own runs, and checkpoints from
elsewhere whose meta says enough, in the comparisons of objectives only
(`sweeper.report.provenance`). The finding supports when every part supports, contradicts when
any part contradicts, and otherwise cannot tell, saying what is missing (runs, seeds) or that the
data cannot show it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sweeper.plan.run_names import format_steps
from sweeper.report import analysis, provenance
from sweeper.report.grid import TrialGrid
from sweeper.spec.study import PAPER_STABILITY_RANGE
from sweeper.report.statistics import (CANNOT_TELL, Part, SeedScores, Spreads, VerdictConfig, decide, describe,
                                       pair_part, paired_test, skewness, spread_part, test_name,
                                       unit_name)

CATEGORIES = ("SC", "TC", "QA", "IR")  # the paper's categories, which its findings speak of

FINDINGS = (
    "MLM beats CLM on SC and QA at every size; CLM ties or wins on TC.",
    "No masking ratio is best everywhere; 40 % is the compromise.",
    "CLM is more data-efficient early and less sensitive to the fine-tuning learning rate.",
    "At a fixed budget, CLM then MLM beats MLM alone; 25 % CLM is the most reliable split.",
    "MLM continued pretraining from a CLM checkpoint beats continuing MLM from an MLM checkpoint.",
)


@dataclass
class Verdict:
    """One finding's verdict, with its parts and one line of evidence per part."""
    number: int
    claim: str
    verdict: str
    evidence: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)


# --- the study's runs, grouped for comparison ---------------------------------------------------

def budget(steps) -> str:
    return format_steps(int(steps))


def ratio_text(ratio: float) -> str:
    return f"{ratio:.0%}"


def closest_mlm(group: pd.DataFrame, config: VerdictConfig) -> str | None:
    """The MLM checkpoint standing for MLM: the study's own before one from elsewhere; among them
    the reference ratio when trained, else the closest (a ratio not stated: last)."""
    # Arrays, not frames: a plan's decidable block asks this for every group of a 1,000-run spec.
    is_mlm = group["objective"].to_numpy() == "mlm"
    if not is_mlm.any():
        return None
    own = is_mlm & ~group["external"].to_numpy(dtype=bool)
    pick = np.flatnonzero(own if own.any() else is_mlm)
    distance = np.abs(group["mask_ratio"].to_numpy(dtype=float)[pick] - config.reference_ratio)
    return group.index[pick[int(np.argmin(np.where(np.isnan(distance), np.inf, distance)))]]


def final_scratch(runs: pd.DataFrame) -> pd.DataFrame:
    """Final checkpoints of the study's own runs from scratch."""
    return runs[(runs["checkpoint_step"] == runs["total_steps"]) & runs["init_from"].isna() & ~runs["external"]]


def comparable_finals(runs: pd.DataFrame) -> pd.DataFrame:
    """`final_scratch` and the checkpoints from elsewhere the findings read, ordered for grouping by
    (size, budget): the study's own by size and steps, then the others; a checkpoint from elsewhere
    after the study's runs of its size and budget."""
    finals = runs[runs.index.isin(final_scratch(runs).index) | runs["external"]]
    return finals.sort_values(["external", "size", "total_steps"], kind="stable")


# --- the five findings ---------------------------------------------------------------------------

def finding_1(scores: SeedScores, config: VerdictConfig) -> list[Part]:
    parts = []
    for (size, steps), group in comparable_finals(scores.runs).groupby(["size", "budget"], sort=False):
        where = f"{size} @ {steps}"
        clm = group.index[group["objective"] == "clm"]
        mlm = closest_mlm(group, config)
        if len(clm) == 0 or mlm is None:
            if len(clm) or mlm is not None:
                parts.append(Part(comparison=where, missing=f"no {size} {'MLM' if mlm is None else 'CLM'} run at "
                                                            f"{steps}"))
            continue
        scored = scores.categories([mlm, clm[0]])
        for category in ("SC", "QA", "TC"):
            if category not in scored:
                parts.append(
                    Part(comparison=f"{where}, {category}", missing=f"{category} not scored for {mlm} and {clm[0]}")
                )
            elif category != "TC":
                parts.append(pair_part(scores, mlm, clm[0], f"{where}, {category}: MLM beats CLM", [category], config))
            else:  # 'ties or wins' is a non-inferiority claim: CLM - MLM > -margin
                parts.append(pair_part(scores, clm[0], mlm, f"{where}, TC: CLM ties or wins ("
                                       f"{config.tie_margin:g}-point margin)", ["TC"], config,
                                       shift=-config.tie_margin))
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
        ratios, categories, y = ratio_matrix(scores, group)  # y: (ratio, category, unit)
        units = scores.units(list(group.index), y.shape[2])
        everywhere = Part(comparison=f"{where}: no ratio is best in every category", arms=tuple(group.index))
        compromise = Part(comparison=f"{where}: {ratio_text(config.reference_ratio)} is the compromise (category "
                                     f"mean within a {config.tie_margin:g}-point margin of every other ratio)",
                          arms=tuple(group.index))
        parts += [everywhere, compromise]
        if len(categories) < 2:
            everywhere.missing = compromise.missing = "needs two or more categories scored for every ratio"
            continue
        if y.shape[2] < config.min_seeds:
            everywhere.missing = compromise.missing = (f"needs >= {config.min_seeds} "
                                                       f"{unit_name(scores, list(group.index))} shared by the ratios")
            continue
        best_everywhere_test(everywhere, ratios, categories, y, units, config)
        if config.reference_ratio not in ratios:
            compromise.missing = f"no {size} MLM {ratio_text(config.reference_ratio)} run at {budget(steps)}"
        else:
            compromise_test(compromise, ratios, categories, y, units, config)
    if not parts:
        parts.append(Part(comparison="masking ratios",
                          missing="needs MLM runs at two or more masking ratios of one size and budget"))
    return parts


def best_everywhere_test(part: Part, ratios: list[float], categories: list[str], y: np.ndarray, units: str,
                         config: VerdictConfig) -> None:
    """'No ratio is best everywhere' holds when every ratio is beaten by another in some category.

    For ratio r, 'r is best everywhere' is rejected when any one-sided paired t-test 'another
    ratio beats r in a category' rejects, Bonferroni over the C(R-1) of them; the claim needs this
    for every r (intersection-union: the largest of the R p-values, no further adjustment). Its
    opposite, 'one ratio is best everywhere', needs every test 'it beats each other ratio in each
    category' to reject (the largest p-value), Bonferroni over the R candidates."""
    n_ratios, n_categories = len(ratios), len(categories)
    # above[i, j, c]: p for 'ratio i beats ratio j in category c'.
    above, _ = paired_test(y[:, None, :, :] - y[None, :, :, :], 0.0, config)
    off_diagonal = ~np.eye(n_ratios, dtype=bool)
    beaten = np.array([np.nanmin(above[off_diagonal[:, j], j]) for j in range(n_ratios)])
    part.p_support = float(min(1.0, n_categories * (n_ratios - 1) * beaten.max()))
    best = np.array([np.max(above[i, off_diagonal[i]]) for i in range(n_ratios)])
    part.p_contradict = float(min(1.0, n_ratios * np.nanmin(best)))
    means = y.mean(axis=2)
    part.numbers = "; ".join(f"{c}: " + ", ".join(f"{ratio_text(r)} {means[i, k]:.2f}" for i, r in enumerate(ratios))
                             + f" (best {ratio_text(ratios[int(means[:, k].argmax())])})"
                             for k, c in enumerate(categories))
    part.test = (
        f"one-sided {test_name(config, y.shape[2])}s over {units} per (ratio pair, category); intersection-union "
        "over ratios, Bonferroni within"
    )
    pairs = (y[:, None] - y[None, :])[off_diagonal]
    part.skewness = skewness(pairs)
    part.noise, part.units = float(np.median(pairs.std(axis=-1, ddof=1))), y.shape[2]
    part.inside, part.one_sided = n_categories * (n_ratios - 1), True
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the units do not vary: no test"


def compromise_test(part: Part, ratios: list[float], categories: list[str], y: np.ndarray, units: str,
                    config: VerdictConfig) -> None:
    """On the mean over categories, the reference ratio minus each other ratio is above -margin
    (non-inferiority, intersection-union: the largest p-value); contradicted when some ratio
    beats it by more than the margin (Bonferroni over the other ratios)."""
    average = y.mean(axis=1)  # (ratio, seed)
    reference = ratios.index(config.reference_ratio)
    others = [i for i in range(len(ratios)) if i != reference]
    above, below = paired_test(average[reference] - average[others], -config.tie_margin, config)
    part.noise = float((average[reference] - average[others]).std(axis=-1, ddof=1).max())
    part.skewness = skewness(average[reference] - average[others])
    part.units, part.one_sided = y.shape[2], True
    part.p_support = float(np.max(above))
    part.p_contradict = float(min(1.0, len(others) * np.min(below)))
    part.numbers = ("mean of " + "/".join(categories) + ": "
                    + ", ".join(f"{ratio_text(r)} {describe(average[i])}" for i, r in enumerate(ratios))
                    + "; " + ", ".join(f"{ratio_text(config.reference_ratio)} minus {ratio_text(ratios[i])} "
                                       f"{describe(average[reference] - average[i])}" for i in others))
    part.test = (f"{test_name(config, y.shape[2])}s over {units} against a {config.tie_margin:g}-point margin, "
                 "intersection-union over the other ratios")
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the units do not vary: no test"


def finding_3(scores: SeedScores, spreads: Spreads, config: VerdictConfig) -> list[Part]:
    parts = []
    runs = scores.runs[scores.runs["init_from"].isna() & scores.runs["objective"].isin(["clm", "mlm"])]
    early = runs[(runs["checkpoint_step"] < runs["total_steps"]) & ~runs["external"]]
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
    tested = False
    for (size, steps), group in comparable_finals(runs).groupby(["size", "budget"], sort=False):
        clm, mlm = group.index[group["objective"] == "clm"], closest_mlm(group, config)
        if len(clm) == 0 or mlm is None:
            continue
        tested = True
        parts.append(spread_part(spreads, clm[0], mlm, f"{size} @ {steps}, stability: "
                                 "CLM is less sensitive to the learning rate (seed noise removed)", config))
    if not tested:
        parts.append(Part(comparison="stability", missing="needs final CLM and MLM checkpoints of one size and budget "
                                                          "(with several seeds or learning rates per cell)"))
    return parts


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
            others = [i for i in splits.index if i != quarter[0]]
            parts.append(reliable_part(scores, quarter[0], mlm[0], others, f"{where}: the "
                                       f"{ratio_text(config.reliable_split)} split is the most reliable (within a "
                                       f"{config.tie_margin:g}-point margin of MLM or above in every category, and of "
                                       "every other split or above on the mean)", config))
    if not parts:
        parts.append(Part(comparison="biphasic", missing="needs a pure MLM run and CLM -> MLM runs at the same size, "
                                                         "budget and masking ratio"))
    elif not reliable_tested:
        parts.append(Part(comparison="reliable split",
                          missing=f"no {ratio_text(config.reliable_split)} CLM split beside a pure MLM run"))
    return parts


def split_beats_part(scores: SeedScores, mlm: str, splits: pd.DataFrame, label: str, config: VerdictConfig) -> Part:
    """Some split beats MLM alone on the category mean: one-sided paired tests, Bonferroni over
    the K splits; contradicted when MLM alone beats every split (intersection-union)."""
    ids = [mlm, *splits.index]
    part = Part(comparison=label, arms=tuple(ids))
    categories = scores.categories(ids)
    y = scores.matrix(ids, categories).mean(axis=1) if categories else np.empty((len(ids), 0))
    if y.shape[1] < config.min_seeds:
        part.missing = (
            f"needs >= {config.min_seeds} {unit_name(scores, ids)} shared by MLM and the splits, has {y.shape[1]}"
        )
        return part
    above, below = paired_test(y[1:] - y[0], 0.0, config)
    part.p_support = float(min(1.0, len(splits) * np.min(above)))
    part.p_contradict = float(np.max(below))
    part.noise = float(np.max((y[1:] - y[0]).std(axis=-1, ddof=1)))
    part.skewness = skewness(y[1:] - y[0])
    part.units, part.inside, part.one_sided = y.shape[1], len(splits), True
    part.numbers = (
        "mean of "
        + "/".join(categories)
        + f": MLM {describe(y[0])}, "
        + ", ".join(f"{ratio_text(f)} CLM {describe(y[i + 1])}" for i, f in enumerate(splits["clm_fraction"]))
    )
    part.test = (f"one-sided {test_name(config, y.shape[1])}s over {scores.units(ids, y.shape[1])}, "
                 f"Bonferroni over {len(splits)} split(s)")
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the units do not vary: no test"
    return part


def reliable_part(scores: SeedScores, split: str, mlm: str, others: list[str], label: str,
                  config: VerdictConfig) -> Part:
    """The split is non-inferior (margin) to MLM alone in every category and to every other split
    on the category mean ('most reliable'): intersection-union of those tests; contradicted when
    MLM or another split beats it by more than the margin somewhere (Bonferroni over them)."""
    ids = [split, mlm, *others]
    part = Part(comparison=label, arms=tuple(ids))
    categories = scores.categories(ids)
    y = scores.matrix(ids, categories)  # (split, MLM, other splits; category; unit)
    if y.shape[2] < config.min_seeds or not categories:
        part.missing = f"needs >= {config.min_seeds} {unit_name(scores, ids)} shared by {split}, {mlm} and the splits"
        return part
    differences = np.concatenate([y[0] - y[1], y[0].mean(axis=0) - y[2:].mean(axis=1)])  # (tests, unit)
    above, below = paired_test(differences, -config.tie_margin, config)
    part.p_support = float(np.max(above))
    part.p_contradict = float(min(1.0, len(differences) * np.min(below)))
    part.noise, part.units, part.one_sided = float(np.max(differences.std(axis=-1, ddof=1))), y.shape[2], True
    part.skewness = skewness(differences)
    part.numbers = "; ".join([f"{c} minus MLM {describe(y[0, k] - y[1, k])}" for k, c in enumerate(categories)]
                             + [f"mean minus {o} {describe(y[0].mean(axis=0) - y[2 + i].mean(axis=0))}"
                                for i, o in enumerate(others)])
    part.test = (
        f"{test_name(config, y.shape[2])}s over {scores.units(ids, y.shape[2])} against a {config.tie_margin:g}-point "
        "margin, intersection-union over categories and splits"
    )
    if np.isnan(part.p_support) or np.isnan(part.p_contradict):
        part.missing = "the units do not vary: no test"
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
            parts.append(Part(comparison=where, missing="no continued run from a "
                                                        f"{'CLM' if len(from_clm) == 0 else 'MLM'} "
                                                        "checkpoint with these steps"))
            continue
        parts.append(pair_part(scores, from_clm[0], from_mlm[0], f"{where}: from CLM beats from MLM", None, config))
    if not parts:  # causal LMs from elsewhere (init_from: hf:...), named, else the runs it needs
        parts = [Part(comparison=f"from {row.init_from} (a causal LM from elsewhere), +{budget(row.total_steps)} "
                                 f"MLM {ratio_text(row.mask_ratio)} steps",
                      missing="needs a continued run from an MLM checkpoint with the same added steps to compare "
                              "against (its scores are in the continued-pretraining table)")
                 for row in cpt[cpt["init_from"].map(lambda s: str(s).startswith("hf:"))]
                 .drop_duplicates("init_from").itertuples()]
        parts = parts or [Part(comparison="continued pretraining", missing=(
            "needs continued-pretraining runs from a CLM and an MLM checkpoint with the same added steps"))]
    return parts


def study_grid(trials: pd.DataFrame) -> tuple[TrialGrid, pd.DataFrame] | None:
    """The dense grid of the checkpoints the findings read (`provenance.findings_trials`) and their
    run columns (indexed by checkpoint id); None without a finished trial."""
    trials = provenance.findings_trials(trials)
    if not (trials["status"] == "ok").any():
        return None
    return TrialGrid.of(trials), analysis.run_table(trials).set_index("checkpoint_id")


def check_findings(trials: pd.DataFrame, lr_range: tuple[float, float] | None = PAPER_STABILITY_RANGE,
                   config: VerdictConfig = VerdictConfig()) -> list[Verdict]:
    """The five verdicts on a trials table (the store's rows, every status); `lr_range` as in
    `judge_grid`."""
    study = study_grid(trials)
    if study is None:
        return [Verdict(i + 1, claim, CANNOT_TELL, ["no finished trials"]) for i, claim in enumerate(FINDINGS)]
    return judge_grid(*study, lr_range, config)


def judge_grid(grid: TrialGrid, runs: pd.DataFrame, lr_range: tuple[float, float] | None = PAPER_STABILITY_RANGE,
               config: VerdictConfig = VerdictConfig()) -> list[Verdict]:
    """The five verdicts from a study's dense grid and its checkpoints' run columns (indexed by
    checkpoint id): what the calibration's simulated studies run. `lr_range`: the rates the
    stability part pools over (None: every rate); the report passes the spec's
    `report.stability_lr_range`, the simulations of the paper's grid take the paper's range."""
    return judge(SeedScores.of(grid, runs, config.crossfit), Spreads.of(grid, runs, lr_range), config)


def judge(scores: SeedScores, spreads: Spreads, config: VerdictConfig = VerdictConfig()) -> list[Verdict]:
    """The five verdicts from the arms' per-unit arrays."""
    all_parts = [finding_1(scores, config), finding_2(scores, config),
                 finding_3(scores, spreads, config), finding_4(scores, config), finding_5(scores, config)]
    verdicts = []
    for number, (claim, parts) in enumerate(zip(FINDINGS, all_parts), start=1):
        verdict = decide(parts, config)
        verdicts.append(Verdict(number, claim, verdict, [part.line() for part in parts], parts))
    return verdicts
