"""The comparisons the study's spec makes, first in the report and in the terminal: within each
group of the study's own final checkpoints of one size and budget (from scratch), each
configuration minus the one before it (ordered by objective, CLM share, masking ratio), per
category and on the category mean, as mean [95 % CI] over the units both share (the findings'
`SeedScores`: pretraining runs where replicated, else seeds). A masking-only study leads with
its masking ratios; the paper's five findings, which test claims, follow in their own section."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from sweeper.report import findings
from sweeper.report.statistics import SeedScores, describe, unit_name
from sweeper.report.tables import markdown_table

VARIED = ("objective", "clm_fraction", "mask_ratio")
"""The run columns a spec varies between the checkpoints it compares, in the order arms sort by."""
OBJECTIVE_ORDER = {"clm": 0, "clm-mlm": 1, "mlm": 2}


@dataclass(frozen=True, slots=True)
class Comparison:
    """One difference between two configurations of a group: `later` minus `earlier`."""
    label: str
    group: str
    units: str
    mean: str
    """The difference on the category mean: mean [95 % CI] ('-' without two shared units)."""
    per_category: dict[str, str]


def percent(value: float) -> str:
    return f"{value * 100:g} %"


def arm_label(row: pd.Series, varied: list[str]) -> str:
    """An arm named by the columns that vary in its group: '40 %' (masking alone varies), 'mlm (40 %
    masking)', 'clm-mlm (CLM 20 %, 40 % masking)', 'clm'."""
    detail = []
    if "clm_fraction" in varied and row["objective"] == "clm-mlm":
        detail.append(f"CLM {percent(row['clm_fraction'])}")
    if "mask_ratio" in varied and row["mask_ratio"] == row["mask_ratio"]:
        detail.append(percent(row["mask_ratio"]) + (" masking" if "objective" in varied or detail else ""))
    if "objective" in varied:
        return str(row["objective"]) + (f" ({', '.join(detail)})" if detail else "")
    return ", ".join(detail) or str(row.name)


def varied_columns(group: pd.DataFrame) -> list[str]:
    return [c for c in VARIED if group[c].nunique(dropna=False) > 1]


def group_comparisons(scores: SeedScores, group: pd.DataFrame, where: str) -> list[Comparison]:
    varied = varied_columns(group)
    ordered = group.sort_values(list(VARIED), key=lambda c: c.map(OBJECTIVE_ORDER) if c.name == "objective" else c)
    labels = {arm: arm_label(row, varied) for arm, row in ordered.iterrows()}
    if len(set(labels.values())) < len(labels):  # same settings, other names (e.g. a seed of init): by name
        labels = {arm: str(arm) for arm in ordered.index}
    # Under a varying objective, CLM share and masking ratio vary with it: the objective names it.
    what = "objective" if "objective" in varied else ", ".join(c.replace("_", " ") for c in varied) or "checkpoint"
    out = []
    for earlier, later in zip(ordered.index[:-1], ordered.index[1:]):
        categories = scores.categories([later, earlier])
        if not categories:
            continue
        y = scores.matrix([later, earlier], categories)  # (arm, category, unit)
        difference = y[0] - y[1]
        enough = difference.shape[1] >= 2
        out.append(Comparison(
            label=f"{labels[later]} minus {labels[earlier]}", group=f"{what}, {where}",
            units=f"{difference.shape[1]} {unit_name(scores, [later, earlier])}",
            mean=describe(difference.mean(axis=0)) if enough else "-",
            per_category={c: describe(difference[i]) if enough else "-" for i, c in enumerate(categories)}))
    return out


def comparisons(trials: pd.DataFrame) -> list[Comparison]:
    """Every comparison the study's own final checkpoints make, group by group (none: a study
    of one configuration per size and budget, or no finished trial)."""
    study = findings.study_grid(trials)
    if study is None:
        return []
    scores = SeedScores.of(*study)
    scratch = findings.final_scratch(scores.runs)
    out = []
    for (size, steps), group in scratch.groupby(["size", "total_steps"]):
        if len(group) > 1:
            out += group_comparisons(scores, group, f"{size} @ {findings.budget(steps)}")
    return out


def comparisons_section(found: list[Comparison]) -> list[str]:
    """`## The comparisons this study makes` (no lines without one)."""
    if not found:
        return []
    categories = [c for c in findings.CATEGORIES if any(c in f.per_category for f in found)]
    categories += sorted({c for f in found for c in f.per_category} - set(categories))
    rows = [[f.label, f.group, f.units, f.mean, *(f.per_category.get(c, "-") for c in categories)] for f in found]
    return ["## The comparisons this study makes", "",
            "Each configuration minus the one before it in its group (same size and budget): difference in test "
            "score points at each checkpoint's best point, mean [95 % CI] over the units both share; *mean* is the "
            "mean over the categories both score. The findings below test the paper's claims.", "",
            markdown_table(["comparison", "group", "units", "mean", *categories], rows), ""]


def terminal_lines(found: list[Comparison], at_chance: list[str], limit: int = 4) -> list[str]:
    """What the terminal shows of the report beside its coverage line: the comparisons (at most
    `limit`, then a count) and the tasks at chance, one line each."""
    lines = [f"  {f.label} ({f.group}; category mean over {f.units}): {f.mean}" for f in found[:limit]]
    if len(found) > limit:
        lines.append(f"  ... and {len(found) - limit} more comparisons in the report")
    return lines + [f"  at chance: {line}" for line in at_chance]
