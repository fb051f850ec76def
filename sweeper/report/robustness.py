"""The robustness card: the five verdicts recomputed under other reasonable analysis choices, and
the parts whose verdict flips (docs/statistics.md).

A verdict that holds only under one choice of test, margin or seed set is weaker than one that
holds under all of them; the card says which parts are fragile, without choosing among the
alternatives (the report's verdicts stay those of the pre-registered analysis). Each variant is
one `findings.judge_grid` call on the study's dense grid (`grid.TrialGrid`), so the card costs a
few dozen judgements: seconds on an 18,000-row store (benchmarks/robustness_card.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

import pandas as pd

from sweeper.report.findings import Verdict, judge_grid
from sweeper.report.grid import TrialGrid
from sweeper.report.statistics import VerdictConfig


@dataclass
class Variant:
    """One alternative analysis: its name, its verdicts, and the parts whose verdict differs from
    the report's (comparison -> 'report's verdict -> this one's')."""
    name: str
    verdicts: list[Verdict]
    flips: dict[str, str]


def variants(grid: TrialGrid, config: VerdictConfig, replicated: bool):
    """(name, grid, config) of each alternative analysis."""
    for j, seed in enumerate(grid.seeds):
        if len(grid.seeds) > 2:
            yield f"seed {seed} left out", grid.without_seed(j), config
    for i, task in enumerate(grid.tasks):
        if len(grid.tasks) > 1:
            yield f"task {task} left out", grid.without_task(i), config
    yield "Wilcoxon signed-rank instead of t", grid, replace(config, test="wilcoxon")
    for margin in (0.5, 2.0):
        if margin != config.tie_margin:
            yield f"tie margin {margin:g} point(s)", grid, replace(config, tie_margin=margin)
    yield "validation and test swapped (choose on one split, score on the other)", grid.swapped(), config
    if config.crossfit and replicated:
        yield "runs' seeds not cross-fitted (selection on the scored seeds)", grid, replace(config, crossfit=False)


def part_verdicts(verdicts: list[Verdict]) -> dict[str, str]:
    """Per part (its finding and comparison, the margin's size left out of its name), its verdict."""
    return {f"{v.number}. " + re.sub(r"[\d.]+-point margin", "margin", part.comparison): part.verdict
            for v in verdicts for part in v.parts}


def robustness_card(grid: TrialGrid, runs: pd.DataFrame, baseline: list[Verdict], lr_range: tuple[float, float],
                    config: VerdictConfig = VerdictConfig()) -> list[Variant]:
    """Every variant's verdicts and its flips against `baseline` (the report's verdicts)."""
    before = part_verdicts(baseline)
    replicated = "replicate" in runs and bool((runs["replicate"].fillna(0) > 0).any())
    card = []
    for name, variant_grid, variant_config in variants(grid, config, replicated):
        verdicts = judge_grid(variant_grid, runs, lr_range, variant_config)
        after = part_verdicts(verdicts)
        flips = {part: f"{before[part]} -> {after.get(part, 'not tested')}" for part in before
                 if after.get(part, "not tested") != before[part]}
        card.append(Variant(name=name, verdicts=verdicts, flips=flips))
    return card


def robustness_lines(card: list[Variant], baseline: list[Verdict]) -> list[str]:
    """The card as the report prints it: a table of the findings' verdicts per variant, then the
    parts that flip and under which variants."""
    if not card:
        return []
    head = "| analysis | " + " | ".join(str(v.number) for v in baseline) + " | parts that flip |"
    rows = [head, "|" + "---|" * (len(baseline) + 2),
            "| **the report's** | " + " | ".join(v.verdict for v in baseline) + " | |"]
    for variant in card:
        cells = [v.verdict if v.verdict == b.verdict else f"**{v.verdict}**" for v, b in zip(variant.verdicts, baseline)]
        rows.append(f"| {variant.name} | " + " | ".join(cells) + f" | {len(variant.flips) or ''} |")
    fragile: dict[str, list[str]] = {}
    for variant in card:
        for part, change in variant.flips.items():
            fragile.setdefault(part, []).append(f"{variant.name} ({change})")
    out = ["## Robustness card", "",
           "The verdicts recomputed under other analysis choices (leave one seed or task out, another test, "
           "other margins, the splits swapped). Bold: a finding's verdict differs from the report's. A part "
           "listed below is fragile: its verdict rests on the choice named.", ""] + rows + [""]
    if fragile:
        out += ["Parts whose verdict flips:", ""] + [f"- {part}: " + "; ".join(why) for part, why in sorted(fragile.items())]
    else:
        out += ["No part's verdict flips under any of these choices."]
    return out + [""]
