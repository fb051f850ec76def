"""The run graph: which planned runs train identically for their first steps, and so could
start from another run's state there instead of from scratch (issue #55).

Two runs share their first `s` steps when everything that shapes those steps is equal: the
model and its initialisation (preset, model config, init seed, replicate, starting checkpoint),
the data (corpus, sequence length, batch, and so the sample order, a function of the step and the
replicate: trainables.corpus), the optimizer, and for every step t < s the learning rate
(`sweeper.contract.schedules.wsd_lr`, the worker's own schedule) and the phase trained
(`sweeper.contract.configs.phase_at`, the worker's own lookup: objective, loss and settings). The
loss draws are a function of (seed, step, row) (trainables.objectives.RowDraws), so they agree
too. Under warmup-stable-decay the learning rates agree until the shorter run's decay begins; a
CLM -> MLM run agrees with the CLM run until its switch step. Nothing is matched by name.

Each run's trunk is the run it shares the most steps with among the runs before it in the order
longest first (then plan order): the graph has no cycle, the longest run of a family trains from
scratch, and, as in a trie, the steps left to train are the fewest any order gives. Replicates
never share (their seeds and sample orders differ), so each has its own trunk.
"""
from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from sweeper.contract.schedules import wsd_lr
from sweeper.plan.runs import PretrainingRun
from sweeper.spec.study import StudySpec


@dataclass(frozen=True, slots=True)
class Branch:
    """A run that starts from its trunk's state at `step` (weights, optimizer, data position)."""

    run: str
    trunk: str
    step: int
    """Steps shared with the trunk: the run trains from `step` to its total_steps."""


def start_signature(run: PretrainingRun) -> str:
    """Everything about a run that is not a function of the step: runs of different signatures
    share no step."""
    identity = run.identity
    fixed = {"preset": run.preset, "model": run.model_config, "seed": run.seed, "replicate": run.replicate,
             "init_from_run": run.init_from_run, "init_from_hf": run.init_from_hf, "hf_init": run.hf_init,
             "steps_before": run.steps_before, "optimizer": asdict(run.optimizer),
             "global_batch_size": run.global_batch_size, "seq_len": run.seq_len,
             "study_seed": identity.get("seed"),
             **{key: identity.get(key) for key in ("data", "random_replace", "keep_original")}}
    return json.dumps(fixed, sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class RunShape:
    """What the run graph reads of a run, and all it reads (equal shapes of every run, equal
    graph): hashable, so a plan's graph is found once however many lines of `sweeper plan` ask."""

    name: str
    signature: str
    """`start_signature`: runs of different signatures share no step."""
    peak_lr: float
    total_steps: int
    warmup_steps: int
    decay_steps: int
    phases: tuple[tuple[int, int, str], ...]
    """Each phase's first step, end step and `phase_text`."""
    sized: bool
    """Its model config is known at plan time (else its steps are only known at run time)."""


def phase_text(phase) -> str:
    """A phase's objective, loss and settings as canonical JSON: equal text, equal steps."""
    return json.dumps([phase.objective, phase.loss, phase.settings], sort_keys=True, default=str)


def shape_of(run: PretrainingRun) -> RunShape:
    return RunShape(run.name, start_signature(run), run.peak_lr, run.total_steps, run.warmup_steps, run.decay_steps,
                    tuple((phase.start_step, phase.end_step, phase_text(phase)) for phase in run.phases),
                    bool(run.model_config))


def lr_steps(run: RunShape) -> np.ndarray:
    """The learning rate of each of the run's steps, as the worker sets it (read-only: shared by
    the runs of one schedule)."""
    return schedule_steps(run.peak_lr, run.total_steps, run.warmup_steps, run.decay_steps)


@functools.lru_cache(maxsize=16)  # `shared_with` asks for each run of the family at every call (~10 ms a run)
def schedule_steps(peak_lr: float, total_steps: int, warmup_steps: int, decay_steps: int) -> np.ndarray:
    """`wsd_lr` at each step of one schedule, computed once per schedule (the paper plans 6; the
    last 16 are kept, 336 kB each at its 42,000 steps)."""
    rates = np.array([wsd_lr(step, peak_lr=peak_lr, total_steps=total_steps, warmup_steps=warmup_steps,
                             decay_steps=decay_steps) for step in range(total_steps)], dtype=np.float64)
    rates.flags.writeable = False
    return rates


def phase_steps(phases: tuple[tuple[int, int, str], ...], total_steps: int, codes: dict[str, int]) -> np.ndarray:
    """A code per step for the phase (first step, end step, `phase_text`) the worker trains it in
    (equal code, equal objective, loss and settings; `codes` is shared by the runs compared).
    Filled a phase's span at a time, not a step at a time (a paper plan has runs of 42,000 steps):
    the steps no phase covers take the last phase, and where spans overlap the earlier phase
    wins, as `phase_at` decides step by step."""
    steps = np.full(total_steps, codes.setdefault(phases[-1][2], len(codes)), dtype=np.int64)
    for start, end, text in reversed(phases):
        steps[max(start, 0):max(end, 0)] = codes.setdefault(text, len(codes))
    return steps


def shared_steps(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """How many first steps two runs' (learning rates, phase codes) agree on."""
    n = min(len(a[0]), len(b[0]))
    differ = np.flatnonzero((a[0][:n] != b[0][:n]) | (a[1][:n] != b[1][:n]))
    return int(differ[0]) if len(differ) else n


def shared_with_each(run: tuple[np.ndarray, np.ndarray], earlier: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """`shared_steps` of one run against every row of `earlier` (stacked learning rates and phase
    codes of runs at least as long), in one array operation: a plan of a thousand runs of one
    family compares them in about a second instead of a million calls."""
    n = len(run[0])
    agree = (earlier[0][:, :n] == run[0]) & (earlier[1][:, :n] == run[1])
    return np.where(agree.all(axis=1), n, agree.argmin(axis=1))


def prefix_branches(runs: tuple[PretrainingRun, ...] | list[PretrainingRun]) -> dict[str, Branch]:
    """Each run that shares a prefix with another: its trunk and the shared steps (runs absent
    train from scratch). Runs whose steps are only known at run time (no model config) are left out."""
    return dict(graph(tuple(shape_of(run) for run in runs)))


@functools.lru_cache(maxsize=4)  # `sweeper plan` asks for one plan's graph three times (cost, wall time, protocol)
def graph(shapes: tuple[RunShape, ...]) -> tuple[tuple[str, Branch], ...]:
    """`prefix_branches` of the runs of these shapes, as (run name, branch) pairs."""
    families: dict[str, list[tuple[int, RunShape]]] = defaultdict(list)
    for index, run in enumerate(shapes):
        if run.sized and run.total_steps > 0:
            families[run.signature].append((index, run))
    branches: dict[str, Branch] = {}
    for family in families.values():
        if len(family) < 2:
            continue
        codes: dict[str, int] = {}
        ordered = [run for _, run in sorted(family, key=lambda item: (-item[1].total_steps, item[0]))]
        longest = ordered[0].total_steps
        rates, phases = np.full((len(ordered), longest), np.nan), np.full((len(ordered), longest), -1, dtype=np.int64)
        for row, run in enumerate(ordered):
            rates[row, :run.total_steps] = lr_steps(run)
            phases[row, :run.total_steps] = phase_steps(run.phases, run.total_steps, codes)
        for row in range(1, len(ordered)):  # longest first, so a tie keeps the longer trunk
            length = ordered[row].total_steps
            shared = shared_with_each((rates[row, :length], phases[row, :length]), (rates[:row], phases[:row]))
            best = int(shared.argmax())
            if shared[best] > 0:
                branches[ordered[row].name] = Branch(ordered[row].name, ordered[best].name, int(shared[best]))
    return tuple(branches.items())


def shared_with(runs: tuple[PretrainingRun, ...] | list[PretrainingRun], name: str) -> dict[str, int]:
    """The first steps each other run trains exactly as run `name` does (those sharing none left
    out): where else a kept training state could start it (sweeper.run.train_grid)."""
    shapes = {run.name: shape_of(run) for run in runs}
    own = shapes[name]
    if not own.sized or own.total_steps <= 0:
        return {}
    codes: dict[str, int] = {}

    def steps(shape: RunShape) -> tuple[np.ndarray, np.ndarray]:
        return lr_steps(shape), phase_steps(shape.phases, shape.total_steps, codes)

    mine = steps(own)
    found = {other.name: shared_steps(mine, steps(other)) for other in shapes.values()
             if other.name != name and other.sized and other.signature == own.signature and other.total_steps > 0}
    return {other: count for other, count in found.items() if count > 0}


def new_steps(run: PretrainingRun, branches: dict[str, Branch]) -> int:
    """Steps the run trains itself: all of them, less those its trunk trains for it."""
    branch = branches.get(run.name)
    return run.total_steps - (branch.step if branch else 0)


def shared_prefixes(spec: StudySpec, runs) -> dict[str, Branch]:
    """The branches `sweeper run` trains (`pretraining.share_prefixes`; none when false)."""
    return prefix_branches(runs) if spec.pretraining.share_prefixes else {}
