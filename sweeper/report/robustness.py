"""The robustness card: the five verdicts recomputed under other reasonable analysis choices, and
the parts whose verdict flips (docs/statistics.md).

A verdict that holds only under one choice of test, margin or seed set is weaker than one that
holds under all of them; the card says which parts are fragile, without choosing among the
alternatives (the report's verdicts stay those of the pre-registered analysis). Each variant is
one `findings.judge_grid` call on the study's dense grid (`grid.TrialGrid`), so the card costs a
few dozen judgements: seconds on an 18,000-row store (benchmarks/robustness_card.py).

An alternative whose test cannot reach the decision threshold at a part's sample size (the exact
Wilcoxon signed-rank test's smallest two-sided p is 0.25 over 3 units, 0.0625 over 5) turns every
decided part into *cannot tell* whatever the data say: that is no fragility. Such a part is shown
as "cannot decide at n = N" and not counted as a flip, and the card says which alternatives could
have decided at the study's sample sizes.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy import stats

from sweeper.report.findings import Verdict, judge
from sweeper.report.grid import TrialGrid
from sweeper.report.paired import SKEW_UNITS
from sweeper.report.statistics import CANNOT_TELL, Part, SeedScores, Spreads, VerdictConfig, p_text


@dataclass
class Variant:
    """One alternative analysis: its name, its verdicts, the parts whose verdict differs from the
    report's (comparison -> 'report's verdict -> this one's), and the decided parts it could not
    decide at their sample size (comparison -> why), which are not flips."""
    name: str
    verdicts: list[Verdict]
    flips: dict[str, str]
    undecidable: dict[str, str] = field(default_factory=dict)
    floors: dict[int, float] = field(default_factory=dict)
    """Sample sizes of the parts it tested at which its test cannot reach alpha -> its smallest p there."""


@functools.lru_cache(maxsize=64)
def smallest_p(test: str, units: int) -> float:
    """The smallest p-value a part's test can give over `units` paired units, both directions tried
    (twice the smaller one-sided p, as `statistics.Part.p_value`): 0 for the t-tests (continuous);
    2^(1-n) for the skew-sign test (its sign-flip), from SKEW_UNITS units;
    for the Wilcoxon signed-rank test, scipy's exact test on units that all point one way."""
    if test in ("t", "skew-t") or units < 1 or (test == "skew-sign" and units < SKEW_UNITS):
        return 0.0
    if test == "skew-sign":  # the sign-flip's: every unit pointing one way
        return min(1.0, 2.0 ** (1 - units))
    one_sided = stats.wilcoxon(np.arange(1.0, units + 1), alternative="greater", method="exact").pvalue
    return min(1.0, 2 * float(one_sided))


def cannot_decide(part: Part, config: VerdictConfig) -> str | None:
    """Why the part's test could not reach `config.alpha` at its sample size, or None when it could."""
    floor = smallest_p(config.test, part.units)
    if part.missing or not part.units or floor < config.alpha:
        return None
    return f"cannot decide at n = {part.units} (its smallest p is {p_text(floor)}, not below {config.alpha:g})"


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
    return {name: part.verdict for name, part in named_parts(verdicts).items()}


def named_parts(verdicts: list[Verdict]) -> dict[str, Part]:
    return {f"{v.number}. " + re.sub(r"[\d.]+-point margin", "margin", part.comparison): part
            for v in verdicts for part in v.parts}


def robustness_card(grid: TrialGrid, runs: pd.DataFrame, baseline: list[Verdict], lr_range: tuple[float, float],
                    config: VerdictConfig = VerdictConfig()) -> list[Variant]:
    """Every variant's verdicts and its flips against `baseline` (the report's verdicts)."""
    before = part_verdicts(baseline)
    replicated = "replicate" in runs and bool((runs["replicate"].fillna(0) > 0).any())
    card = []
    # Variants that change only the test or the margin judge the same arrays: built once per grid
    # (held with it, so that no later grid can take its id) and cross-fitting.
    arrays: dict[tuple[int, bool], tuple[TrialGrid, SeedScores, Spreads]] = {}
    for name, variant_grid, variant_config in variants(grid, config, replicated):
        key = (id(variant_grid), variant_config.crossfit)
        if key not in arrays:
            arrays[key] = (variant_grid, SeedScores.of(variant_grid, runs, variant_config.crossfit),
                           Spreads.of(variant_grid, runs, lr_range))
        verdicts = judge(*arrays[key][1:], variant_config)  # findings.judge_grid, arrays shared
        parts = named_parts(verdicts)
        undecidable = {name: why for name, part in parts.items() if name in before and before[name] != CANNOT_TELL
                       and part.verdict == CANNOT_TELL and (why := cannot_decide(part, variant_config))}
        after = {name: parts[name].verdict if name in parts and not parts[name].missing else "not tested"
                 for name in before}
        # Undecided before and after (cannot tell, or no longer tested) is no change of conclusion.
        flips = {name: f"{before[name]} -> {after[name]}" for name in before if name not in undecidable
                 and after[name] != before[name] and not (before[name] == CANNOT_TELL and after[name] == "not tested")}
        floors = {part.units: smallest_p(variant_config.test, part.units) for part in parts.values()
                  if cannot_decide(part, variant_config)}
        card.append(Variant(name=name, verdicts=verdicts, flips=flips, undecidable=undecidable, floors=floors))
    return card


def robustness_lines(card: list[Variant], baseline: list[Verdict]) -> list[str]:
    """The card as the report prints it: a table of the findings' verdicts per variant, then the
    parts that flip and under which variants."""
    if not card:
        return []
    head = "| analysis | " + " | ".join(str(v.number) for v in baseline) + " | parts that flip | cannot decide |"
    rows = [head, "|" + "---|" * (len(baseline) + 3),
            "| **the report's** | " + " | ".join(v.verdict for v in baseline) + " | | |"]
    for variant in card:
        cells = [
            v.verdict if v.verdict == b.verdict else f"**{v.verdict}**" for v, b in zip(variant.verdicts, baseline)
        ]
        rows.append(f"| {variant.name} | " + " | ".join(cells) + f" | {len(variant.flips) or ''} | "
                    f"{undecidable_cell(variant)} |")
    fragile: dict[str, list[str]] = {}
    for variant in card:
        for part, change in variant.flips.items():
            fragile.setdefault(part, []).append(f"{variant.name} ({change})")
    out = ["## Robustness card", "",
           "The verdicts recomputed under other analysis choices (leave one seed or task out, another test, "
           "other margins, the splits swapped). Bold: a finding's verdict differs from the report's. A part "
           "listed below is fragile: its verdict rests on the choice named. *Cannot decide*: decided parts that "
           "an alternative's test cannot decide at the part's sample size whatever the scores (an exact rank "
           "test over a few units cannot reach p < alpha); those are not flips.", ""] + rows + [""]
    could = [v.name for v in card if not v.floors]
    could_not = [v.name for v in card if v.floors]
    if could_not:
        out += [f"Could decide at this study's sample sizes: {', '.join(could) or 'none'}. "
                f"Could not decide every part: {', '.join(could_not)} (its *cannot tell* says nothing about "
                "fragility).", ""]
    if fragile:
        out += ["Parts whose verdict flips:", ""] + [
            f"- {part}: " + "; ".join(why) for part, why in sorted(fragile.items())
        ]
    else:
        out += ["No part's verdict flips under any of these choices."]
    return out + [""]


def undecidable_cell(variant: Variant) -> str:
    """`7 decided part(s) not counted: cannot decide at n = 3, 5 (smallest p 0.250, 0.062)`, or empty."""
    if not variant.floors:
        return ""
    sizes = sorted(variant.floors)
    counted = f"{len(variant.undecidable)} decided part(s) not counted: " if variant.undecidable else ""
    return (f"{counted}cannot decide at n = {', '.join(map(str, sizes))} "
            f"(smallest p {', '.join(p_text(variant.floors[n]) for n in sizes)})")
