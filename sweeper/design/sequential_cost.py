"""What a sequential replicate plan (`pretraining.sequential`) is expected to train, for `sweeper
plan`: the study's own decision rule simulated over its own findings' parts at the effect the
spec plans for (`planning_effect`, `planning_run_sd`; points on the 0-100 scale).

- **The parts** are those the report would test on this plan: `findings.judge_grid` runs once on
  the first look's checkpoints with placeholder scores (one task per category; `study_parts`), and
  each tested part keeps its finding and the runs of its arms.
- **A part's units** are its replicates, paired by index; each unit's difference has mean
  `planning_effect` and SD sqrt(2) x sqrt(run_sd^2 + SEED_SD^2 / seeds): the run-to-run SD plus
  the fine-tuning seeds' noise on a replicate's category score, averaged over the spec's seeds
  (the shared seed effect cancels in the pairing; averaging over a category's tasks is not
  counted, so the figure leans high). Every part is modelled as a plain paired comparison at that
  effect, margins and spread parts included, drawn independently of the others (parts that share
  arms are correlated in a study: not modelled).
- **The rule** is sweeper.report.sequential's, vectorised over simulated studies: at look k the
  p-values come from `statistics.paired_test` (the report's test) over the first n_k units; per
  finding, by `VerdictConfig.parts`: co-primary (each part's claim at look k's one-sided
  `boundaries.nominal_level` of alpha / 2, its opposite by Holm over the parts at alpha / 2 /
  (m - r)), or Holm over the two-sided p at alpha / (m - r); an open part from
  FUTILITY_UNITS units on is futile when `boundaries.conditional_power` of a verdict is below
  `futility` (solved once per look and level for the p-value where it crosses, as the power falls
  with the p-value); the last look closes every part. A run grows while a part of its arms is
  open, and a source as much as the runs continued from it (`sequential.with_sources`).
  tests/unit/design/test_sequential_cost.py checks the stopping looks against `decide_look` on
  the same data, and the expected runs against the report's `run_looks` over whole simulated
  studies of one 610m group at the planning effect: this model's share leans high by about 0.04
  of the maximum (docs/statistics.md, "Against the rule end to end").

The expectation and the 10th-90th percentiles of runs and GPU-hours are over PATHS simulated
studies, seeded (the same figure on every call).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize

from sweeper.report.analysis import RUN_COLUMNS
from sweeper.report.boundaries import conditional_power, efficacy_bounds, nominal_level
from sweeper.report.findings import judge_grid
from sweeper.report.grid import OK, TrialGrid
from sweeper.report.statistics import HOLM, VerdictConfig, paired_test, verdict_config
from sweeper.spec.sequential import SequentialSpec

PATHS = 2000
"""Simulated studies: the expected runs' Monte Carlo SE is under 1 % of the maximum."""
SEED_SD = 1.0
"""SD (points) of one fine-tuning seed's score about its checkpoint's mean, after the seed's effect
shared by every checkpoint (which the pairing removes): the verdicts' calibration's model noise
(tests/support/verdict_simulation.py, SIGMA)."""


LOWEST_LOG_P = math.log(1e-15)
"""Where the futility crossing is looked for from: t.isf of a far smaller p is infinite, and the
conditional power there reads as 0."""


@dataclass(frozen=True, slots=True)
class StudyParts:
    """The tested parts of a plan's findings, as the rule sees them."""
    findings: tuple[tuple[int, ...], ...]
    """Per finding with a tested part, the indices of its parts."""
    runs: tuple[tuple[str, ...], ...]
    """Per part, the runs (replicate 0's names) of its arms."""
    sources: dict[str, str]
    """Per continued run, the study run it continues."""


def placeholder_judgement(plan, seeds: int, config: VerdictConfig = VerdictConfig()) -> tuple[list, dict[str, str]]:
    """(judge_grid's verdicts, replicate 0's run name per arm) on `plan`'s own checkpoints with random
    placeholder scores, one task per category, `seeds` seeds: which parts the report would test
    on this design, and how (their units, families), whatever the scores."""
    from sweeper.contract.registry import get_task

    checkpoints = [c for c in plan.checkpoints if c.run is not None]
    runs = pd.DataFrame([{
        "checkpoint_id": c.checkpoint_id, "run_name": c.run.name, "objective": c.run.objective,
        "clm_fraction": c.run.clm_fraction, "mask_ratio": c.run.mask_ratio, "checkpoint_step": c.step,
        "total_steps": c.run.total_steps, "tokens_seen": c.tokens_seen, "init_from": c.run.init_from,
        "steps_before": c.run.steps_before, "source": "study", "parameters": math.nan, "arm": c.arm,
        "replicate": c.run.replicate} for c in checkpoints], columns=RUN_COLUMNS).set_index("checkpoint_id")
    tasks = {}
    for trial in plan.trials:
        tasks.setdefault(get_task(trial.task).category, trial.task)
    shape = (len(checkpoints), len(tasks), 3, seeds)
    rng = np.random.default_rng(0)
    grid = TrialGrid(checkpoints=list(runs.index), tasks=list(tasks.values()), categories=list(tasks),
                     learning_rates=np.array([1e-5, 3e-5, 1e-4]), seeds=list(range(shape[3])),
                     validation=rng.normal(50, 1, shape), test=rng.normal(50, 1, shape),
                     state=np.full(shape, OK, dtype=np.int8),
                     final=(runs["checkpoint_step"] == runs["total_steps"]).to_numpy())
    run_of = runs.loc[runs["replicate"] == 0, "run_name"].to_dict()  # an arm is replicate 0's checkpoint
    return judge_grid(grid, runs, config=config), run_of


def study_parts(plan, seeds: int) -> StudyParts:
    """The parts the report would test on `plan` (a first-look `StudyPlan`): `placeholder_judgement`
    with at least the seeds a test needs."""
    verdicts, run_of = placeholder_judgement(plan, max(seeds, VerdictConfig().min_seeds))
    findings, part_runs = [], []
    for verdict in verdicts:
        tested = [p for p in verdict.parts if not p.missing]
        if tested:
            findings.append(tuple(range(len(part_runs), len(part_runs) + len(tested))))
            part_runs += [tuple(dict.fromkeys(run_of[arm] for arm in p.arms if arm in run_of)) for p in tested]
    sources = {r.name: r.init_from_run for r in plan.runs if r.replicate == 0 and r.init_from_run}
    return StudyParts(tuple(findings), tuple(part_runs), sources)


def unit_sd(design: SequentialSpec, seeds: int) -> float:
    """SD of one unit's difference between two configurations (module docstring)."""
    return math.sqrt(2 * (design.planning_run_sd ** 2 + SEED_SD ** 2 / max(seeds, 1)))


def futility_p(fraction: float, units: int, bound: float, futility: float) -> float:
    """The smaller one-sided p-value above which `conditional_power` is below `futility` (it
    falls as p rises); inf when nothing is futile."""
    if futility <= 0:
        return math.inf

    def gap(log_p: float) -> float:
        return conditional_power(math.exp(log_p), units, fraction, bound) - futility

    if gap(LOWEST_LOG_P) < 0:
        return 0.0
    return math.exp(optimize.brentq(gap, LOWEST_LOG_P, 0.0, xtol=1e-10))


def per_level(value, level: np.ndarray) -> np.ndarray:
    """`value(j)` for each entry j of `level`, computed once per distinct j."""
    distinct, inverse = np.unique(level, return_inverse=True)
    return np.array([value(int(j)) for j in distinct])[inverse.reshape(level.shape)]


def close_looks(differences: np.ndarray, findings: tuple[tuple[int, ...], ...], design: SequentialSpec,
                config: VerdictConfig = VerdictConfig()) -> np.ndarray:
    """The look (0-based) at which each part closes (decided, futile, or the last), per simulated
    study, by `config.parts`'s rule: `differences` (studies, parts, maximum) are the parts' units
    in replicate order."""
    from sweeper.report.sequential import FUTILITY_UNITS

    looks, fractions, alpha = design.looks(), design.fractions(), design.alpha
    studies, parts, _ = differences.shape
    closed, decided = np.zeros((studies, parts), bool), np.zeros((studies, parts), bool)
    closing = np.full((studies, parts), len(looks) - 1)

    @functools.cache
    def threshold(k: int, j: int) -> float:  # look k's two-sided nominal level for alpha / j
        return nominal_level(fractions, k, alpha / j)

    @functools.cache
    def futile_above(k: int, j: int) -> float:  # the one-sided p above which a side is futile
        if looks[k] < FUTILITY_UNITS or k == len(looks) - 1:
            return math.inf
        return futility_p(fractions[k], looks[k], efficacy_bounds(fractions, alpha / j / 2)[-1], design.futility)

    step = holm_look if config.parts == HOLM else co_primary_look
    for k, n in enumerate(looks):
        p_support, p_contradict = (np.asarray(p, float) for p in paired_test(differences[..., :n], 0.0, config))
        for members in findings:
            index = np.array(members)
            ends, wins = step(k, p_support[:, index], p_contradict[:, index], ~closed[:, index], decided[:, index],
                              threshold, futile_above)
            ends |= ~closed[:, index] & (k == len(looks) - 1)
            closing[:, index] = np.where(ends, k, closing[:, index])
            closed[:, index] |= ends
            decided[:, index] |= wins
        if closed.all():
            break
    return closing


def holm_look(k: int, p_support: np.ndarray, p_contradict: np.ndarray, open_: np.ndarray, decided: np.ndarray,
              threshold, futile_above) -> tuple[np.ndarray, np.ndarray]:
    """`holm` at look k over one finding's parts (studies, m): the open parts by two-sided p, each
    at the level of the parts not yet decided; returns (closes, decided) per part."""
    studies, m = p_support.shape
    rows = np.arange(studies)
    smaller = np.fmin(p_support, p_contradict)
    p_value = np.minimum(1.0, 2 * smaller)
    order = np.argsort(np.where(open_, np.nan_to_num(p_value, nan=2.0), np.inf), axis=1, kind="stable")
    count, going = decided.sum(axis=1), np.ones(studies, bool)
    ends, wins = np.zeros_like(open_), np.zeros_like(open_)
    for i in range(m):
        column = order[:, i]
        valid = open_[rows, column]
        level = np.maximum(m - count, 1)
        win = valid & going & (p_value[rows, column] <= per_level(lambda j: threshold(k, j), level))
        count, going = count + win, going & (win | ~valid)
        futile = valid & ~win & (smaller[rows, column] > per_level(lambda j: futile_above(k, j), level))
        wins[rows, column] |= win
        ends[rows, column] |= win | futile
    return ends, wins


def co_primary_look(k: int, p_support: np.ndarray, p_contradict: np.ndarray, open_: np.ndarray,
                    contradicted: np.ndarray, threshold, futile_above) -> tuple[np.ndarray, np.ndarray]:
    """`co-primary` at look k over one finding's parts (studies, m): Holm over looks on the open
    parts' p against the claim at alpha / 2 (the r-th at alpha / 2 / (m - r), r the parts
    contradicted), then each other open part supports at look k's one-sided level of alpha / 2;
    `contradicted` marks the parts contradicted at earlier looks. Returns (closes, contradicted)."""
    studies, m = p_support.shape
    rows = np.arange(studies)
    toward = p_contradict < p_support
    order = np.argsort(np.where(open_, np.nan_to_num(p_contradict, nan=2.0), np.inf), axis=1, kind="stable")
    count, going = contradicted.sum(axis=1), np.ones(studies, bool)
    against = np.zeros_like(open_)
    for i in range(m):
        column = order[:, i]
        valid = open_[rows, column]
        level = np.maximum(m - count, 1)
        win = valid & going & toward[rows, column] & (
            p_contradict[rows, column] <= per_level(lambda j: threshold(k, j), level) / 2)
        count, going = count + win, going & (win | ~valid)
        against[rows, column] |= win
    supports = open_ & ~against & (p_support < p_contradict) & (p_support <= threshold(k, 1) / 2)
    level = np.maximum(m - count, 1)[:, None]
    futile = (open_ & ~against & ~supports & (p_support > futile_above(k, 1))
              & (p_contradict > per_level(lambda j: futile_above(k, j), np.broadcast_to(level, open_.shape))))
    return against | supports | futile, against


def run_counts(closing: np.ndarray, parts: StudyParts, runs: list[str], design: SequentialSpec) -> np.ndarray:
    """Replicates per run (columns in `runs` order) per simulated study: a run grows to the look
    after the last at which a part of its arms was open, and a source to its continued runs'."""
    looks = np.array(design.looks())
    column = {run: i for i, run in enumerate(runs)}
    last_open = np.full((closing.shape[0], len(runs)), -1)
    for part, part_runs in enumerate(parts.runs):
        for run in part_runs:
            if run in column:
                last_open[:, column[run]] = np.maximum(last_open[:, column[run]], closing[:, part] - 1)
    counts = looks[np.minimum(last_open + 1, len(looks) - 1)]
    for run, source in parts.sources.items():
        if run in column and source in column:
            counts[:, column[source]] = np.maximum(counts[:, column[source]], counts[:, column[run]])
    return counts


@dataclass(frozen=True, slots=True)
class ExpectedCost:
    runs: tuple[float, float, float]
    """Expected pretraining runs, and the 10th and 90th percentiles."""
    hours: tuple[float, float, float]
    """Expected pretraining GPU-hours, and the 10th and 90th percentiles."""
    maximum_runs: int
    maximum_hours: float


def expected_cost(design: SequentialSpec, parts: StudyParts, hours: dict[str, float], seeds: int,
                  paths: int = PATHS, config: VerdictConfig = VerdictConfig(),
                  branched: dict[str, tuple[str, float]] | None = None) -> ExpectedCost:
    """The rule simulated over `paths` studies at the planning effect: `hours` per replicate of
    each run (replicate 0's name). `branched`: per run that starts from its trunk's shared steps
    (`pretraining.share_prefixes`, sweeper.plan.branches), its trunk and the hours of its new
    steps; its replicate r costs those where the trunk trains replicate r too, else `hours`."""
    rng = np.random.default_rng(0)
    differences = rng.normal(design.planning_effect, unit_sd(design, seeds),
                             (paths, len(parts.runs), design.maximum))
    names = list(hours)
    counts = run_counts(close_looks(differences, parts.findings, design, config), parts, names, design)
    per_run = np.array([hours[name] for name in names])
    runs, gpu = counts.sum(axis=1), counts @ per_run
    maximum_hours = float(per_run.sum() * design.maximum)
    column = {name: i for i, name in enumerate(names)}
    for run, (trunk, new) in (branched or {}).items():
        if run in column and trunk in column:
            saved = hours[run] - new
            gpu = gpu - saved * np.minimum(counts[:, column[run]], counts[:, column[trunk]])
            maximum_hours -= saved * design.maximum

    def summary(values: np.ndarray) -> tuple[float, float, float]:
        low, high = np.percentile(values, [10, 90])
        return float(values.mean()), float(low), float(high)

    return ExpectedCost(summary(runs), summary(gpu), len(names) * design.maximum, maximum_hours)


def plan_lines(study) -> list[str]:
    """`sweeper plan`'s lines for a sequential plan (a `plan.load.LoadedStudy`): its looks, and its
    pretraining GPU-hours at the first look, expected (with a range) at the planning effect, and at
    the maximum (= the fixed design there)."""
    import time

    from sweeper.plan.branches import shared_prefixes
    from sweeper.plan.cost import pretraining_cost

    spec, plan, design = study.spec, study.plan, study.spec.pretraining.sequential
    if design is None:
        return []
    start = time.perf_counter()
    seeds = len(spec.finetuning.seeds)
    parts = study_parts(plan, seeds)
    base = [run for run in plan.runs if run.replicate == 0]
    hours = {run.name: pretraining_cost(spec, (run,)).gpu_hours for run in base}
    # runs sharing first steps train them once (pretraining.share_prefixes): new steps only
    branches = shared_prefixes(spec, base)
    branched = {run.name: (branches[run.name].trunk, pretraining_cost(spec, (run,), branches).gpu_hours)
                for run in base if run.name in branches}
    first = pretraining_cost(spec, plan.runs, shared_prefixes(spec, plan.runs)).gpu_hours
    config = verdict_config(spec.report)
    cost = expected_cost(design, parts, hours, seeds, config=config, branched=branched)
    took = time.perf_counter() - start
    (runs, runs_low, runs_high), (gpu, gpu_low, gpu_high) = cost.runs, cost.hours
    share = gpu / cost.maximum_hours if cost.maximum_hours else math.nan
    sizes = ", ".join(str(len(f)) for f in parts.findings) or "no"
    skipped = [f"    {design.skipped()}"] if design.skipped() else []
    return [f"  sequential replicates:  looks at {', '.join(map(str, design.looks()))} runs per configuration "
            f"(alpha {design.alpha:g} per finding over all looks, futility below {design.futility:.0%})",
            f"    pretraining GPU-h: first look {first:,.1f}; expected {gpu:,.1f} ({share:.0%} of the maximum; "
            f"10-90 %: {gpu_low:,.1f}-{gpu_high:,.1f}); maximum {cost.maximum_hours:,.1f} "
            f"({cost.maximum_runs} runs, the fixed design at {design.maximum})"
            f"{'; new steps only where runs share first steps' if branched else ''}",
            f"    pretraining runs: expected {runs:,.1f} (10-90 %: {runs_low:,.0f}-{runs_high:,.0f}): the "
            f"report's rule ({config.parts} parts) "
            f"simulated over {PATHS:,} studies of this plan's findings ({sizes} parts), every comparison differing "
            f"by {design.planning_effect:g} points, run SD {design.planning_run_sd:g} + seed SD {SEED_SD:g} over "
            f"{seeds} seeds ({took:.2f} s)", *skipped]
