"""The looks of a sequential replicate plan (`pretraining.sequential`, sweeper.spec.sequential).

Look k reads each run's first n replicates, n its count at that look: every run starts at
`first`; a look gives the runs of every comparison still open the next count, up to `maximum`.
The parts of the findings are computed on exactly those replicates by the code a report runs
(`findings.judge_grid` on the grid restricted to them), so a look is the fixed-design verdict of
that data, read against group-sequential boundaries:

- **Co-primary parts** (`VerdictConfig.parts`, the default): a part supports when its one-sided p
  for the claim reaches look k's nominal level of alpha / 2 (sweeper.report.boundaries:
  O'Brien-Fleming-type spending over the planned looks), with no split over the parts: a finding
  supports only when every part does (intersection-union, sweeper.report.statistics). The
  opposite side is a union: with r parts contradicted, the open part with the smallest p against
  the claim contradicts at the nominal level of alpha / 2 / (m - r), then the next, and so on
  (Holm over looks). A decided part stays decided at its look, its numbers those of that look.
- **Holm over looks** (`parts: holm`, the rule before #53): with r parts decided, the open part
  with the smallest two-sided p is decided at the nominal level of alpha / (m - r) (each
  direction half), and so on down. Holm's procedure with group-sequential levels (Ye, Li, Jiang
  and Wang 2013; Maurer and Bretz 2013), which holds the family-wise rate over parts and looks.
- **Futility.** An open part whose conditional power of a verdict by the last look (the trend so
  far, at the level it now has) is below `futility` stops: its runs get no more replicates for it
  and it ends *cannot tell*. Non-binding: the boundaries do not count on it, so stopping lowers
  no error rate's guarantee.
- **Whole pipelines.** A continued run's count raises its source's at the same look
  (`with_sources`): replicate r continues from the source's replicate r, never a shared one.
- A look whose replicates are not all recorded is **pending** (`Outcome.pending`): the driver
  trains them; the report says so. A killed driver replays the looks from the store, so it
  neither loses nor repeats a run or a look.

The finding's verdict follows the fixed design's rule: supports when every part supports,
contradicts when any part contradicts, else cannot tell.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pandas as pd

from sweeper.plan.replicates import arm_name
from sweeper.report import findings, provenance, statistics
from sweeper.report.boundaries import conditional_power, efficacy_bounds, nominal_level
from sweeper.report.findings import FINDINGS, Verdict, judge_grid
from sweeper.report.grid import TrialGrid
from sweeper.report.paired import skew_note
from sweeper.report.statistics import (
    CANNOT_TELL, CO_PRIMARY, CONTRADICTS, HOLM, SUPPORTS, Part, VerdictConfig, combine, p_text, part_family)
from sweeper.report.tables import markdown_table
from sweeper.spec.sequential import SequentialSpec
from sweeper.spec.study import PAPER_STABILITY_RANGE

FUTILE, OPEN = "futile", "continue"
FUTILITY_UNITS = 5
"""Futility is judged on 5 or more runs per arm: over 3 runs the trend's t statistic has 2 degrees
of freedom, and stopping on it lost a fifth of the power at effects the maximum finds 80 % of the
time (tests/unit/report/test_sequential_calibration.py's finding, measured)."""


@dataclass(kw_only=True, slots=True)
class PartLook:
    """One part at one look: what the report's table of looks shows."""
    finding: int
    comparison: str
    look: int
    """0-based."""
    units: int
    numbers: str
    p_value: float
    threshold: float
    """The nominal level the p-value had to reach at this look (two-sided under `holm`; the side's
    one-sided level under `co-primary`)."""
    decision: str
    """supports / contradicts / continue / futile / cannot tell (untested, or open at the last look)."""
    side: str = ""
    """`co-primary`: `for` (p_support against its one-sided level) or `against` (p_contradict);
    empty under `holm` (the two-sided p and level)."""


@dataclass(kw_only=True)
class Outcome:
    """The looks computed so far, the verdicts they reached, and what the study still needs."""
    design: SequentialSpec
    counts: list[dict[str, int]] = field(default_factory=list)
    """Replicates per run (replicate 0's name) at each look computed."""
    rows: list[PartLook] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    pending: dict[str, int] | None = None
    """Replicates per run the next look needs, while some are not recorded; None when finished."""

    @property
    def finished(self) -> bool:
        return self.pending is None

    def runs_trained(self) -> int:
        last = self.pending or (self.counts[-1] if self.counts else {})
        return sum(last.values())

    def runs_fixed(self) -> int:
        """Runs a fixed design at the maximum trains."""
        last = self.pending or (self.counts[-1] if self.counts else {})
        return len(last) * self.design.maximum


def base_runs(runs: pd.DataFrame) -> pd.Series:
    """Per checkpoint (the run table's index), the name of replicate 0 of its run."""
    replicate = runs["replicate"].fillna(0).astype(int)
    return pd.Series([arm_name(n, r) for n, r in zip(runs["run_name"], replicate)], index=runs.index)


def recorded_replicates(trials: pd.DataFrame) -> dict[str, int]:
    """Per run (replicate 0's name), how many of its replicates, from replicate 0 on, have every
    trial recorded: as many rows per checkpoint as replicate 0's (any status)."""
    own = trials[trials["run_name"].notna()]
    if own.empty:
        return {}
    replicate = own["replicate"].fillna(0).astype(int)
    base = [arm_name(n, r) for n, r in zip(own["run_name"], replicate)]
    arm = own["arm"].where(own["arm"].notna(), own["checkpoint_id"])
    rows = pd.DataFrame({"base": base, "arm": arm.to_numpy(), "replicate": replicate.to_numpy()})
    counts = rows.value_counts().unstack("replicate", fill_value=0)  # (base, arm) x replicate
    complete = counts.ge(counts[0], axis=0).groupby(level="base").all()
    leading = {}
    for base_run, flags in complete.iterrows():
        ordered = flags.sort_index()
        leading[base_run] = int(next((r for r, (index, ok) in enumerate(ordered.items()) if index != r or not ok),
                                     len(ordered)))
    return leading


def run_looks(grid: TrialGrid, runs: pd.DataFrame, design: SequentialSpec, recorded: dict[str, int] | None = None,
              lr_range: tuple[float, float] | None = PAPER_STABILITY_RANGE,
              config: VerdictConfig = VerdictConfig()) -> Outcome:
    """Every look whose replicates are recorded (`recorded`: per run, as `recorded_replicates`;
    None: all of the grid's), in order, and the counts of the next one if it is pending."""
    config = replace(config, alpha=design.alpha)
    base = base_runs(runs.reindex(grid.checkpoints))
    replicate = runs.reindex(grid.checkpoints)["replicate"].fillna(0).astype(int).to_numpy()
    looks, fractions = design.looks(), design.fractions()
    sources = study_sources(runs.reindex(grid.checkpoints), base)
    counts = {run: design.first for run in dict.fromkeys(base)}
    outcome = Outcome(design=design)
    states: dict[tuple[int, str], tuple[str, Part, int]] = {}  # (finding, part) -> (decision, part, look)
    for k in range(len(looks)):
        if recorded is not None and any(recorded.get(run, 0) < n for run, n in counts.items()):
            outcome.pending = dict(counts)
            break
        keep = replicate < base.map(counts).to_numpy()
        verdicts = judge_grid(grid.only(keep), runs, lr_range, config)
        outcome.counts.append(dict(counts))
        open_arms = decide_look(verdicts, states, k, fractions, design, outcome.rows, config.parts)
        outcome.verdicts = final_verdicts(verdicts, states, looks, config.test)
        if not open_arms or k == len(looks) - 1:
            break
        grow = {base[arm] for arm in open_arms if arm in base.index}  # an arm is its replicate 0's checkpoint
        counts = with_sources({run: looks[k + 1] if run in grow else n for run, n in counts.items()}, sources)
    return outcome


def study_sources(runs: pd.DataFrame, base: pd.Series) -> dict[str, str]:
    """Per continued run (replicate 0's name), the study run it continues (replicate 0's name);
    runs from a Hugging Face checkpoint (`hf:...`) have no source with replicates."""
    if "init_from" not in runs:  # a hand-built frame without it: no continued runs
        return {}
    replicate = runs["replicate"].fillna(0).astype(int)
    own = runs["init_from"].notna() & (replicate == 0) & ~runs["init_from"].astype(str).str.startswith("hf:")
    return {base[i]: runs.at[i, "init_from"] for i in runs.index[own]}


def with_sources(counts: dict[str, int], sources: dict[str, str]) -> dict[str, int]:
    """`counts` with each source's raised to its continued runs' at the same look: continued
    replicate r continues from the source's own replicate r (sweeper.plan.replicates), so the plan
    trains them, and the look reads (and waits for) every replicate it trains."""
    out = dict(counts)
    for run, source in sources.items():
        if run in out and source in out:
            out[source] = max(out[source], out[run])
    return out


def decide_look(verdicts: list[Verdict], states: dict, look: int, fractions: tuple[float, ...],
                design: SequentialSpec, rows: list[PartLook], rule: str = CO_PRIMARY) -> set[str]:
    """Look k's decisions over each finding's open parts by `rule` (`VerdictConfig.parts`), then
    futility; returns the arms of the parts still open."""
    open_arms: set[str] = set()
    last = look == len(fractions) - 1
    for verdict in verdicts:
        tested = [p for p in verdict.parts if not p.missing]
        family = max(len(tested) + sum(1 for (n, c), s in states.items()
                                       if n == verdict.number and c not in {p.comparison for p in tested}), 1)
        candidates = [p for p in tested if (verdict.number, p.comparison) not in states]
        if rule == HOLM:
            decided = sum(states.get((verdict.number, p.comparison), ("",))[0] in (SUPPORTS, CONTRADICTS)
                          for p in verdict.parts)
            steps = holm_step(candidates, look, fractions, design.alpha, family, decided)
        else:
            contradicted = sum(states.get((verdict.number, p.comparison), ("",))[0] == CONTRADICTS
                               for p in verdict.parts)
            steps = co_primary_step(candidates, look, fractions, design.alpha, family, contradicted)
        for part, (decision, p_value, threshold, side, bounds) in steps:
            if decision == OPEN:
                power = max(conditional_power(part.p_support, part.units, fractions[look], bounds[0]),
                            conditional_power(part.p_contradict, part.units, fractions[look], bounds[1]))
                if last:
                    decision = CANNOT_TELL
                elif part.units >= FUTILITY_UNITS and power < design.futility:
                    decision = FUTILE
            if decision != OPEN:
                states[(verdict.number, part.comparison)] = (decision, part, look)
            else:
                open_arms |= set(part.arms)
            rows.append(PartLook(finding=verdict.number, comparison=part.comparison, look=look, units=part.units,
                                 numbers=part.numbers, p_value=p_value, threshold=threshold, decision=decision,
                                 side=side))
    return open_arms


def holm_step(candidates: list[Part], look: int, fractions: tuple[float, ...], alpha: float, family: int,
              decided: int) -> list[tuple]:
    """`holm`: the open parts by two-sided p, the r-th decided at look k's nominal level of
    alpha / (m - r), stopping at the first that is not. Per part (decision, p, threshold, side,
    the final one-sided bounds for futility's support and contradict directions)."""
    out, stopped = [], False
    for part in sorted(candidates, key=lambda p: p.p_value):
        level = alpha / max(family - decided, 1)
        threshold = nominal_level(fractions, look, level)
        bound = efficacy_bounds(fractions, level / 2)[-1]
        decision = OPEN
        if not stopped and part.p_value <= threshold:
            decision = SUPPORTS if part.p_support < part.p_contradict else CONTRADICTS
            decided += 1
        else:
            stopped = True
        out.append((part, (decision, part.p_value, threshold, "", (bound, bound))))
    return out


def co_primary_step(candidates: list[Part], look: int, fractions: tuple[float, ...], alpha: float, family: int,
                    contradicted: int) -> list[tuple]:
    """`co-primary`: each open part supports when its p for the claim reaches look k's one-sided
    nominal level of alpha / 2 (group-sequential, no split over the parts: intersection-union);
    contradicts by Holm over looks on the parts' p against the claim, the r-th at the level of
    alpha / 2 / (m - r) with r parts contradicted so far (a part that supports stays in the family:
    it never rejects its opposite). Per part as `holm_step`, p and threshold one-sided."""
    share = statistics.SUPPORT_SHARE
    against_alpha = 2 * (1 - share) * alpha  # the two-sided alpha whose one side is the opposite's
    decisions, going = {}, True
    for part in sorted(candidates, key=lambda p: p.p_contradict):
        level = against_alpha / max(family - contradicted, 1)
        threshold = nominal_level(fractions, look, level) / 2
        if going and part.p_contradict < part.p_support and part.p_contradict <= threshold:
            decisions[part.comparison] = (CONTRADICTS, part.p_contradict, threshold, "against")
            contradicted += 1
        else:
            going = False
    support = nominal_level(fractions, look, 2 * share * alpha) / 2
    against = efficacy_bounds(fractions, against_alpha / max(family - contradicted, 1) / 2)[-1]
    bounds = (efficacy_bounds(fractions, share * alpha)[-1], against)
    out = []
    for part in candidates:
        if part.comparison in decisions:
            out.append((part, (*decisions[part.comparison], bounds)))
        elif part.p_support < part.p_contradict:
            decision = SUPPORTS if part.p_support <= support else OPEN
            out.append((part, (decision, part.p_support, support, "for", bounds)))
        else:
            level = against_alpha / max(family - contradicted, 1)
            out.append((part, (OPEN, part.p_contradict, nominal_level(fractions, look, level) / 2, "against", bounds)))
    return out


def final_verdicts(verdicts: list[Verdict], states: dict, design_looks: tuple[int, ...], test: str) -> list[Verdict]:
    """The findings as the looks so far decide them: each part at the look that decided it, its test
    naming the group-sequential look (of `design_looks`) that reached its verdict, its skew note
    the sequential design's rate (`paired.skew_note`), not the fixed design's."""
    looks, out = len(design_looks), []
    for verdict in verdicts:
        parts, whens = [], []
        for part in verdict.parts:
            decision, at, look = states.get((verdict.number, part.comparison), (None, part, None))
            shown = Part(**{f: getattr(at, f) for f in Part.__slots__})
            shown.verdict = decision if decision in (SUPPORTS, CONTRADICTS) else CANNOT_TELL
            when = f"look {look + 1} of {looks}" if look is not None else "open"
            why = {FUTILE: " (futile: stopped)", CANNOT_TELL: " (no boundary reached by the last look)"}.get(
                decision, ""
            )
            if not part.missing:
                if shown.rule == CO_PRIMARY:  # the side's own one-sided p, read against its look's level
                    shown.side = "for" if at.p_support < at.p_contradict else "against"
                    shown.p_adjusted = at.p_support if shown.side == "for" else at.p_contradict
                    shown.level = math.nan  # the look's boundary: the report's table of looks
                else:
                    shown.p_adjusted = at.p_value
                shown.note = skew_note(at.units, part_family(shown), at.skewness, test, design_looks)
                shown.test = f"{at.test}; group-sequential, {when}{why}"
            parts.append(shown)
            whens.append((at.test, when, why))
        overall = combine(parts)
        lines = [part.line() if part.missing else sequential_line(part, *how) for part, how in zip(parts, whens)]
        out.append(Verdict(verdict.number, FINDINGS[verdict.number - 1], overall, lines, parts))
    return out


def sequential_line(part: Part, test: str, when: str, why: str) -> str:
    """A decided or open part's line: its p (the side read, co-primary) at the look that decided it."""
    note = f" ({part.note})" if part.note else ""
    side = {"for": " for the claim, one-sided", "against": " against the claim, one-sided, Holm over looks"}.get(
        part.side, "")
    return (f"{part.comparison}: {part.numbers}; {test}; p = "
            f"{p_text(part.p_adjusted)}{side} at {when}, group-sequential -> {part.verdict_shown()}{why}{note}")


def looks_table(outcome: Outcome) -> list[list[str]]:
    """Rows of the report's table of looks: finding, comparison, look, runs per arm, p, boundary, decision."""
    return [[str(r.finding), r.comparison, f"{r.look + 1} of {len(outcome.design.looks())}", str(r.units),
             p_text(r.p_value) + (f" ({r.side})" if r.side else ""), f"<= {r.threshold:.4f}", r.decision]
            for r in outcome.rows]


def saved_text(outcome: Outcome) -> str:
    trained, fixed = outcome.runs_trained(), outcome.runs_fixed()
    if not fixed:
        return ""
    return (f"{trained} pretraining runs trained against {fixed} for a fixed design at the maximum "
            f"({outcome.design.maximum} per configuration): {1 - trained / fixed:.0%} saved")


def study_looks(trials: pd.DataFrame, design: SequentialSpec,
                lr_range: tuple[float, float] | None = PAPER_STABILITY_RANGE,
                config: VerdictConfig = VerdictConfig()) -> Outcome | None:
    """The looks of a study's trial rows (the store's, any status); None without a finished trial."""
    study = findings.study_grid(trials)
    if study is None:
        return None
    return run_looks(*study, design, recorded_replicates(provenance.findings_trials(trials)), lr_range, config)


def looks_section(outcome: Outcome) -> list[str]:
    """`## Sequential looks`: each look's comparisons, their boundary and decision, and the runs saved."""
    looks = outcome.design.looks()
    out = ["## Sequential looks", "",
           f"Replicates were added in looks (`pretraining.sequential`: {', '.join(map(str, looks))} runs per "
           f"configuration), each comparison tested at every look against O'Brien-Fleming-type boundaries that hold "
           f"a {outcome.design.alpha:.0%} false-verdict rate per finding over all looks (co-primary parts: each "
           "part's claim at half of it, the contradictions by Holm over the parts; or Holm over the parts: "
           "`report.finding_parts`); a "
           f"comparison stops when decided, or as futile when its conditional power of a verdict by "
           f"{outcome.design.maximum} runs is below {outcome.design.futility:.0%}. The findings above are these "
           "decisions (docs/statistics.md, \"Sequential replicates\").", ""]
    if outcome.pending is not None:
        waiting = {
            run: n for run, n in outcome.pending.items() if not outcome.counts or n > outcome.counts[-1].get(run, 0)
        }
        out += [f"Look {len(outcome.counts) + 1} is pending: it needs " + ", ".join(
            f"{run} x{n}" for run, n in waiting.items()) + " (`sweeper run` trains them).", ""]
    if outcome.rows:
        out += [markdown_table(["finding", "comparison", "look", "runs per arm", "p", "boundary", "decision"],
                               looks_table(outcome)), ""]
    if text := saved_text(outcome):
        out += [text + ".", ""]
    return out

