"""What a study's design can decide, for `sweeper plan`: per comparison of the findings that the
spec makes, whether the report could reach a verdict on it, and the smallest difference it would
detect.

- **The comparisons the spec makes** are the parts the report tests when every arm has the seeds a
  test needs (`sequential_cost.placeholder_judgement` with at least `VerdictConfig.min_seeds`
  seeds: the plan's own checkpoints, placeholder scores); the others (no CLM run, ...) are not
  listed, as the spec does not ask them.
- **Whether the design can decide one**: the same judgement with the spec's own seeds; a part the
  report would leave untested says why, in the report's words ("needs >= 3 seeds shared by the
  ratios, has 2").
- **The smallest difference it detects** (points on the 0-100 scale): the report's own
  `standardized_detectable` (a paired t-test with 80 % power) over the part's units at the level
  its claim needs under the spec's `report.finding_parts` (`Part.power_level`: co-primary, alpha / 2
  one-sided with no split over the parts; holm, alpha / the finding's parts; both with the
  Bonferroni inside the part), times
  the SD of one unit's difference that the sequential planner assumes (`planning_run_sd`, SEED_SD:
  `sequential_cost.unit_sd` for units that are pretraining runs; sqrt(2) x SEED_SD for seeds, whose
  run is fixed). Averaging over a category's tasks is not counted, so the figure leans high. A
  spread part (learning-rate sensitivity, points squared) has no planned SD: no figure. It is
  judged on the placeholder grid's 3 learning rates, not the spec's: a grid of one learning rate
  is told it can decide it, and its report will say it cannot (not modelled yet).
"""
from __future__ import annotations

import math
from dataclasses import replace

from sweeper.design.sequential_cost import SEED_SD, placeholder_judgement, unit_sd
from sweeper.report.power import standardized_detectable
from sweeper.report.statistics import CO_PRIMARY, HOLM, verdict_config
from sweeper.spec.sequential import SequentialSpec

RULE_TEXT = {CO_PRIMARY: "co-primary parts: each claim at alpha / 2 one-sided", HOLM: "Holm over its parts"}
UNDECIDED_SHOWN = 3
"""Comparisons a finding cannot decide listed by name (`sweeper plan -v`: all of them)."""


def planned_sd(design: SequentialSpec, seeds: int, by_runs: bool) -> float:
    """SD (points) of one unit's difference between two arms (module docstring)."""
    return unit_sd(design, seeds) if by_runs else math.sqrt(2) * SEED_SD


def is_spread(part) -> bool:
    """A learning-rate-sensitivity part: its noise is in points squared."""
    return "stability" in part.comparison


def detectable(part, design: SequentialSpec, seeds: int, by_runs: bool, alpha: float) -> float:
    """The smallest difference (points) a decidable part detects at its rule's level for the claim
    (`statistics.Part.power_level` at `alpha`); NaN for a spread part."""
    if is_spread(part):
        return math.nan
    at = replace(part, alpha=alpha)
    return planned_sd(design, seeds, by_runs) * standardized_detectable(part.units, *at.power_level())


def part_line(part, effect: float, units: str) -> str:
    """One comparison's line (`plan -v`)."""
    if part.missing:
        return f"      {part.comparison}: cannot tell ({part.missing})"
    found = "a spread: no planned SD" if math.isnan(effect) else f"detects >= {effect:.2f} points"
    return f"      {part.comparison}: decidable over {units}; {found}"


def finding_lines(number: int, judged: list[tuple], verbose: bool) -> list[str]:
    """A finding's line (how many of its comparisons are decidable, over what, detecting what),
    then each comparison it cannot decide (`UNDECIDED_SHOWN` at most) or, verbose, every one."""
    decided = [(part, effect, units) for part, effect, units in judged if not part.missing]
    undecided = [part for part, _, _ in judged if part.missing]
    effects = sorted(e for _, e, _ in decided if not math.isnan(e))
    over = ", ".join(dict.fromkeys(units for _, _, units in decided))
    detects = "" if not effects else f"; detects >= {effects[0]:.2f}" + (
        f"-{effects[-1]:.2f} points" if effects[-1] - effects[0] >= 0.005 else " points")
    line = f"    finding {number}: {len(decided)} of {len(judged)} comparisons decidable" + (
        f" over {over}{detects}" if decided else "")
    if verbose:
        return [line, *(part_line(part, effect, units) for part, effect, units in judged)]
    shown = [part_line(part, math.nan, "") for part in undecided[:UNDECIDED_SHOWN]]
    more = [f"      ... and {len(undecided) - UNDECIDED_SHOWN} more (`sweeper plan -v`)"] \
        if len(undecided) > UNDECIDED_SHOWN else []
    return [line, *shown, *more]


def plan_lines(study, verbose: bool = False) -> list[str]:
    """`sweeper plan`'s block (a `plan.load.LoadedStudy`): per finding the spec tests, how many of
    its comparisons the design can decide and the smallest difference they detect, and each it
    cannot decide with the report's reason (`verbose`: every comparison)."""
    spec, plan = study.spec, study.plan
    config = verdict_config(spec.report)
    design = spec.pretraining.sequential or SequentialSpec()
    alpha = spec.pretraining.sequential.alpha if spec.pretraining.sequential else config.alpha
    seeds = len(spec.finetuning.seeds)
    if not any(c.run is not None for c in plan.checkpoints):
        return []
    made, _ = placeholder_judgement(plan, max(seeds, config.min_seeds), config)
    actual, _ = placeholder_judgement(plan, seeds, config) if seeds < config.min_seeds else (made, None)
    replicated = {r.name.removesuffix(f"-rep{r.replicate}") for r in plan.runs if r.replicate >= 1}
    lines, undecided = [], 0
    for asked, got in zip(made, actual):
        parts = {p.comparison: p for p in got.parts}
        judged = []
        for part in (p for p in asked.parts if not p.missing):
            part = parts.get(part.comparison, part)
            by_runs = bool(part.arms) and all(arm_run(arm, plan) in replicated for arm in part.arms)
            units = f"{part.units} {'pretraining runs' if by_runs else 'seeds'}"
            judged.append((part, math.nan if part.missing else detectable(part, design, seeds, by_runs, alpha), units))
            undecided += bool(part.missing)
        if judged:
            lines += finding_lines(asked.number, judged, verbose)
    if not lines:
        return ["  what it can decide:    no comparison of the paper's findings (the report will say why)"]
    head = (f"  what it can decide:    {undecided and f'{undecided} comparison(s) cannot be decided; ' or ''}"
            f"alpha {alpha:g} per finding ({RULE_TEXT[config.parts]}), 80 % power, unit SD from run SD "
            f"{design.planning_run_sd:g} "
            f"and seed SD {SEED_SD:g} over {seeds} seed(s)"
            + ("; as a fixed design of the first look's replicates" if spec.pretraining.sequential else ""))
    return [head, *lines]


def arm_run(arm: str, plan) -> str | None:
    """The run (replicate 0's name) of the checkpoint `arm`."""
    return next((c.run.name for c in plan.checkpoints if c.checkpoint_id == arm and c.run is not None), None)
