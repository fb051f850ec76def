"""The looks of a sequential replicate plan (`pretraining.sequential`, sweeper.spec.sequential).

Look k reads each run's first n replicates, n its count at that look: every run starts at
`first`; a look gives the runs of every comparison still open the next count, up to `maximum`.
The parts of the findings are computed on exactly those replicates by the code a report runs
(`findings.judge_grid` on the grid restricted to them), so a look is the fixed-design verdict of
that data, read against group-sequential boundaries:

- **Holm over looks.** Per finding, over its m parts: with r parts already decided, the open part
  with the smallest p-value is decided when p <= the nominal level of look k for alpha / (m - r)
  (sweeper.report.boundaries: O'Brien-Fleming-type spending over the planned looks, each
  direction alpha / 2), then the next at alpha / (m - r - 1), and so on; a decided part stays
  decided at its look, its numbers those of that look. This is Holm's procedure with group-
  sequential levels (Ye, Li, Jiang and Wang 2013; Maurer and Bretz 2013), which holds the
  family-wise rate over the parts and the looks.
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

from dataclasses import dataclass, field, replace

import pandas as pd

from sweeper.plan.replicates import arm_name
from sweeper.report import findings, provenance
from sweeper.report.boundaries import conditional_power, efficacy_bounds, nominal_level
from sweeper.report.findings import FINDINGS, Verdict, judge_grid
from sweeper.report.grid import TrialGrid
from sweeper.report.paired import skew_note
from sweeper.report.statistics import CANNOT_TELL, CONTRADICTS, SUPPORTS, Part, VerdictConfig, p_text
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
    """The nominal two-sided level the p-value had to reach at this look."""
    decision: str
    """supports / contradicts / continue / futile / cannot tell (untested, or open at the last look)."""


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
        open_arms = decide_look(verdicts, states, k, fractions, design, outcome.rows)
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
                design: SequentialSpec, rows: list[PartLook]) -> set[str]:
    """Holm with look k's levels over each finding's parts, then futility; returns the arms of the
    parts still open."""
    open_arms: set[str] = set()
    last = look == len(fractions) - 1
    for verdict in verdicts:
        tested = [p for p in verdict.parts if not p.missing]
        decided = sum(states.get((verdict.number, p.comparison), ("",))[0] in (SUPPORTS, CONTRADICTS)
                      for p in verdict.parts)
        family = max(len(tested) + sum(1 for (n, c), s in states.items()
                                       if n == verdict.number and c not in {p.comparison for p in tested}), 1)
        candidates = sorted((p for p in tested if (verdict.number, p.comparison) not in states),
                            key=lambda p: p.p_value)
        stopped = False
        for part in candidates:
            level = design.alpha / max(family - decided, 1)
            threshold = nominal_level(fractions, look, level)
            decision = OPEN
            if not stopped and part.p_value <= threshold:
                decision = SUPPORTS if part.p_support < part.p_contradict else CONTRADICTS
                decided += 1
            else:
                stopped = True
                bound = efficacy_bounds(fractions, level / 2)[-1]
                power = max(conditional_power(part.p_support, part.units, fractions[look], bound),
                            conditional_power(part.p_contradict, part.units, fractions[look], bound))
                if last:
                    decision = CANNOT_TELL
                elif part.units >= FUTILITY_UNITS and power < design.futility:
                    decision = FUTILE
            if decision != OPEN:
                states[(verdict.number, part.comparison)] = (decision, part, look)
            else:
                open_arms |= set(part.arms)
            rows.append(PartLook(finding=verdict.number, comparison=part.comparison, look=look, units=part.units,
                                 numbers=part.numbers, p_value=part.p_value, threshold=threshold, decision=decision))
    return open_arms


def final_verdicts(verdicts: list[Verdict], states: dict, design_looks: tuple[int, ...], test: str) -> list[Verdict]:
    """The findings as the looks so far decide them: each part at the look that decided it, its test
    naming the group-sequential look (of `design_looks`) that reached its verdict, its skew note
    the sequential design's rate (`paired.skew_note`), not the fixed design's."""
    looks, out = len(design_looks), []
    for verdict in verdicts:
        parts, lines = [], []
        for part in verdict.parts:
            decision, at, look = states.get((verdict.number, part.comparison), (None, part, None))
            shown = Part(**{f: getattr(at, f) for f in Part.__slots__})
            shown.verdict = decision if decision in (SUPPORTS, CONTRADICTS) else CANNOT_TELL
            if part.missing:
                lines.append(part.line())
            else:
                when = f"look {look + 1} of {looks}" if look is not None else "open"
                why = {FUTILE: " (futile: stopped)", CANNOT_TELL: " (no boundary reached by the last look)"}.get(
                    decision, ""
                )
                shown.note = skew_note(at.units, at.family, at.skewness, test, design_looks)
                note = f" ({shown.note})" if shown.note else ""
                lines.append(f"{at.comparison}: {at.numbers}; {at.test}; p = {p_text(at.p_value)} at {when}, "
                             f"group-sequential -> {shown.verdict}{why}{note}")
                shown.test = f"{at.test}; group-sequential, {when}{why}"
            parts.append(shown)
        outcomes = [p.verdict for p in parts]
        overall = (CONTRADICTS if CONTRADICTS in outcomes else
                   SUPPORTS if outcomes and all(o == SUPPORTS for o in outcomes) else CANNOT_TELL)
        out.append(Verdict(verdict.number, FINDINGS[verdict.number - 1], overall, lines, parts))
    return out


def looks_table(outcome: Outcome) -> list[list[str]]:
    """Rows of the report's table of looks: finding, comparison, look, runs per arm, p, boundary, decision."""
    return [[str(r.finding), r.comparison, f"{r.look + 1} of {len(outcome.design.looks())}", str(r.units),
             p_text(r.p_value), f"<= {r.threshold:.4f}", r.decision] for r in outcome.rows]


def saved_text(outcome: Outcome) -> str:
    trained, fixed = outcome.runs_trained(), outcome.runs_fixed()
    if not fixed:
        return ""
    return (f"{trained} pretraining runs trained against {fixed} for a fixed design at the maximum "
            f"({outcome.design.maximum} per configuration): {1 - trained / fixed:.0%} saved")


def study_looks(trials: pd.DataFrame, design: SequentialSpec,
                lr_range: tuple[float, float] | None = PAPER_STABILITY_RANGE) -> Outcome | None:
    """The looks of a study's trial rows (the store's, any status); None without a finished trial."""
    study = findings.study_grid(trials)
    if study is None:
        return None
    return run_looks(*study, design, recorded_replicates(provenance.findings_trials(trials)), lr_range)


def looks_section(outcome: Outcome) -> list[str]:
    """`## Sequential looks`: each look's comparisons, their boundary and decision, and the runs saved."""
    looks = outcome.design.looks()
    out = ["## Sequential looks", "",
           f"Replicates were added in looks (`pretraining.sequential`: {', '.join(map(str, looks))} runs per "
           f"configuration), each comparison tested at every look against O'Brien-Fleming-type boundaries that hold "
           f"a {outcome.design.alpha:.0%} false-verdict rate per finding over all looks (Holm over its parts); a "
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

