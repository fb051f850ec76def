"""Do the user's results support the paper's five findings? Each verdict comes with its numbers.

A comparison of two category scores is decided only when their 95 % intervals do not overlap;
otherwise it is a tie, and a finding that needs a difference the data cannot show gets
"cannot tell". A finding whose runs are missing from the study gets "cannot tell" too, saying
what is missing. The verdicts: "supports", "contradicts", "cannot tell".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from sweeper.analysis import final_only

SUPPORTS, CONTRADICTS, CANNOT_TELL = "supports", "contradicts", "cannot tell"
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
    number: int
    claim: str
    verdict: str
    evidence: list[str] = field(default_factory=list)


def fmt(mean: float, ci: float) -> str:
    ci_text = "n/a" if ci is None or math.isnan(ci) else f"{ci:.2f}"
    return f"{mean:.2f} ± {ci_text}"


def compare(a: pd.Series, b: pd.Series) -> int:
    """+1 if a is above b with disjoint 95 % intervals, -1 if below, 0 if they overlap (a tie)."""
    if math.isnan(a["ci95"]) or math.isnan(b["ci95"]):
        return 0  # one seed: no interval, so no claim of a difference
    if a["mean"] - a["ci95"] > b["mean"] + b["ci95"]:
        return 1
    if a["mean"] + a["ci95"] < b["mean"] - b["ci95"]:
        return -1
    return 0


def from_sign(sign: int) -> str:
    """A claimed 'A beats B': +1 supports it, -1 contradicts it, 0 (overlapping intervals) cannot tell."""
    return SUPPORTS if sign == 1 else CONTRADICTS if sign == -1 else CANNOT_TELL


def cell(categories: pd.DataFrame, checkpoint_id: str, category: str) -> pd.Series | None:
    rows = categories[(categories["checkpoint_id"] == checkpoint_id) & (categories["task_category"] == category)]
    return rows.iloc[0] if len(rows) else None


def size_of(run_name: str) -> str:
    return run_name.split("-")[0]


def finding_1(categories: pd.DataFrame) -> Verdict:
    verdict = Verdict(1, FINDINGS[0], CANNOT_TELL)
    final = final_only(categories)
    pure = final[final["init_from"].isna()]
    outcomes = []
    for (size, steps), group in pure.groupby([pure["run_name"].map(size_of), "total_steps"]):
        clm = group[group["objective"] == "clm"]["checkpoint_id"].unique()
        mlm = group[(group["objective"] == "mlm")]
        if len(clm) == 0 or mlm.empty:
            continue
        # MLM at 40 % when trained (the paper's reference), else the ratio closest to it.
        ratio = min(mlm["mask_ratio"].unique(), key=lambda r: abs(r - 0.4))
        mlm_id = mlm[mlm["mask_ratio"] == ratio]["checkpoint_id"].iloc[0]
        for category, wanted in (("SC", 1), ("QA", 1), ("TC", 0)):
            a, b = cell(final, mlm_id, category), cell(final, clm[0], category)
            if a is None or b is None:
                continue
            sign = compare(a, b)
            # SC/QA need MLM above CLM; TC needs CLM not below MLM (a tie or a win).
            outcome = from_sign(sign) if wanted == 1 else (CONTRADICTS if sign == 1 else SUPPORTS)
            outcomes.append(outcome)
            verdict.evidence.append(f"{category}: {mlm_id} {fmt(a['mean'], a['ci95'])} vs {clm[0]} "
                                    f"{fmt(b['mean'], b['ci95'])} -> {outcome}")
    if not outcomes:
        verdict.evidence.append("needs a pure MLM and a pure CLM run of the same size and budget")
    verdict.verdict = combine(outcomes)
    return verdict


def combine(outcomes: list[str]) -> str:
    """All parts must support for `supports`; any contradiction contradicts; else cannot tell."""
    if not outcomes:
        return CANNOT_TELL
    if CONTRADICTS in outcomes:
        return CONTRADICTS
    return SUPPORTS if all(o == SUPPORTS for o in outcomes) else CANNOT_TELL


def finding_2(categories: pd.DataFrame) -> Verdict:
    verdict = Verdict(2, FINDINGS[1], CANNOT_TELL)
    final = final_only(categories)
    mlm = final[(final["objective"] == "mlm") & final["init_from"].isna()]
    outcomes = []
    for (size, steps), group in mlm.groupby([mlm["run_name"].map(size_of), "total_steps"]):
        if group["mask_ratio"].nunique() < 2:
            continue
        table = group.pivot_table(index="mask_ratio", columns="task_category", values="mean")
        best = {c: float(table[c].idxmax()) for c in table.columns}
        average = table.mean(axis=1)
        verdict.evidence.append(f"{size} @ {steps} steps: best ratio per category "
                                + ", ".join(f"{c} {r:.0%}" for c, r in best.items())
                                + f"; best average {average.idxmax():.0%} ({average.max():.2f})")
        if len(table.columns) < 2:
            continue
        outcomes.append(SUPPORTS if len(set(best.values())) > 1 else CONTRADICTS)
        if 0.4 in table.index:
            outcomes.append(SUPPORTS if average.idxmax() == 0.4 else CONTRADICTS)
        else:
            outcomes.append(CANNOT_TELL)
            verdict.evidence.append(f"{size} @ {steps} steps: no 40 % run to test the compromise")
    if not outcomes:
        verdict.evidence.append("needs MLM runs at two or more masking ratios, scored on two or more categories")
    verdict.verdict = combine(outcomes)
    return verdict


def finding_3(categories: pd.DataFrame, stability_table: pd.DataFrame) -> Verdict:
    verdict = Verdict(3, FINDINGS[2], CANNOT_TELL)
    outcomes = []
    early = categories[categories["checkpoint_step"] < categories["total_steps"]]
    early = early[early["objective"].isin(["mlm", "clm"]) & early["init_from"].isna()]
    if early["objective"].nunique() < 2:
        outcomes.append(CANNOT_TELL)
        verdict.evidence.append("data efficiency: needs intermediate checkpoints of both a CLM and an MLM run")
    else:
        step = early["checkpoint_step"].min()
        at = early[early["checkpoint_step"] == step]
        clm, mlm = at[at["objective"] == "clm"], at[at["objective"] == "mlm"]
        for category in CATEGORIES:
            a = clm[clm["task_category"] == category]
            b = mlm[mlm["task_category"] == category]
            if a.empty or b.empty:
                continue
            sign = compare(a.iloc[0], b.iloc[0])
            outcomes.append(from_sign(sign))
            verdict.evidence.append(f"step {step}, {category}: CLM {fmt(a.iloc[0]['mean'], a.iloc[0]['ci95'])} vs "
                                    f"MLM {fmt(b.iloc[0]['mean'], b.iloc[0]['ci95'])}")
    if not stability_table.empty:
        # Runs from scratch only (continued runs are another question), and only where the
        # spread exists: one seed at one learning rate has none.
        scratch = stability_table[stability_table["init_from"].isna()]
        spread = scratch.groupby("objective")["spread"].mean().dropna()
        if {"clm", "mlm"} <= set(spread.index):
            less = spread["clm"] < spread["mlm"]
            outcomes.append(SUPPORTS if less else CONTRADICTS)
            verdict.evidence.append(f"spread over seeds x learning rates: CLM {spread['clm']:.2f}, "
                                    f"MLM {spread['mlm']:.2f} (smaller is more stable)")
        else:
            outcomes.append(CANNOT_TELL)
            verdict.evidence.append("stability: needs final CLM and MLM checkpoints")
    verdict.verdict = combine(outcomes)
    return verdict


def overall(final: pd.DataFrame, checkpoint_id: str) -> pd.Series:
    """Mean over categories; its interval treats the category means as independent."""
    rows = final[final["checkpoint_id"] == checkpoint_id]
    return pd.Series({"mean": rows["mean"].mean(),
                      "ci95": math.sqrt((rows["ci95"] ** 2).sum()) / len(rows) if len(rows) else float("nan")})


def finding_4(categories: pd.DataFrame) -> Verdict:
    verdict = Verdict(4, FINDINGS[3], CANNOT_TELL)
    final = final_only(categories)
    scratch = final[final["init_from"].isna() & final["mask_ratio"].notna()]
    outcomes = []
    for (steps, ratio), group in scratch.groupby(["total_steps", "mask_ratio"]):
        mlm = group[group["objective"] == "mlm"]["checkpoint_id"].unique()
        splits = group[group["objective"] == "clm-mlm"].drop_duplicates("checkpoint_id")
        if len(mlm) == 0 or splits.empty:
            continue
        base = overall(final, mlm[0])
        wins = {}
        for _, split in splits.iterrows():
            score = overall(final, split["checkpoint_id"])
            wins[split["clm_fraction"]] = compare(score, base)
            verdict.evidence.append(f"{steps} steps: {split['checkpoint_id']} {fmt(score['mean'], score['ci95'])} vs "
                                    f"{mlm[0]} {fmt(base['mean'], base['ci95'])} (category average)")
        best = max(wins.values())
        outcomes.append(from_sign(best))
        quarter = [share for share in wins if abs(share - 0.25) < 0.05]
        if quarter:
            outcomes.append(from_sign(wins[quarter[0]]))
        else:
            outcomes.append(CANNOT_TELL)
            verdict.evidence.append(f"{steps} steps: no 25 % CLM split to test its reliability")
    if not outcomes:
        verdict.evidence.append("needs a pure MLM run and CLM -> MLM runs at the same budget and masking ratio")
    verdict.verdict = combine(outcomes)
    return verdict


def finding_5(categories: pd.DataFrame) -> Verdict:
    verdict = Verdict(5, FINDINGS[4], CANNOT_TELL)
    final = final_only(categories)
    cpt = final[final["init_from"].notna()].drop_duplicates("checkpoint_id")
    source_objective = dict(zip(final["run_name"], final["objective"]))
    outcomes = []
    for added, group in cpt.groupby("total_steps"):
        by_source = {source_objective.get(row["init_from"]): row["checkpoint_id"] for _, row in group.iterrows()}
        if "clm" not in by_source or "mlm" not in by_source:
            continue
        a, b = overall(final, by_source["clm"]), overall(final, by_source["mlm"])
        sign = compare(a, b)
        outcomes.append(from_sign(sign))
        verdict.evidence.append(f"+{added} steps: from CLM {fmt(a['mean'], a['ci95'])} vs from MLM "
                                f"{fmt(b['mean'], b['ci95'])} (category average)")
    if not outcomes:
        verdict.evidence.append("needs continued-pretraining runs from a CLM and an MLM checkpoint with the same added steps")
    verdict.verdict = combine(outcomes)
    return verdict


def check_findings(categories: pd.DataFrame, stability_table: pd.DataFrame) -> list[Verdict]:
    if categories.empty:
        return [Verdict(i + 1, claim, CANNOT_TELL, ["no finished trials"]) for i, claim in enumerate(FINDINGS)]
    return [finding_1(categories), finding_2(categories), finding_3(categories, stability_table),
            finding_4(categories), finding_5(categories)]
