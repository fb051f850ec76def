"""Replicates: a run configuration trained R times (`pretraining.replicates`, or a run entry's).

Replicate 0 is the run as planned without replicates: its name, its key and so every trial key
of its checkpoints stay what they were. Replicate r >= 1 is named `<name>-rep<r>`
(`nano-mlm40-600-rep1`, intermediate checkpoint `nano-mlm40-600-rep1-200`); its key hashes the
run's identity plus `replicate: r` (present only from 1 on, as fields added later are left out
of keys at their defaults). It trains with its own initialisation and masking seed
(`init_seed`) and reads the one prepared corpus in its own order (`trainables.corpus`).

Replicates are whole pipelines: a continued-pretraining replicate r continues from its source's
own replicate r, so no two replicates of one configuration share a source run (they would share
its run-to-run difference, and the paired tests count them as independent). A study-run source
is therefore trained as many times as the most replicated run continued from it
(`grown_sources`; `sweeper plan` names each source grown), in a fixed design and at every look
of a sequential one (sweeper.report.sequential raises a source's count with its continued runs').
A Hugging Face source (`init_from: hf:...`) is one fixed checkpoint: every replicate continues
from it, and its replicates measure the spread of continued pretraining from that checkpoint
(`sweeper plan` says so). Replicate 0 of every run comes first in the plan (of the runs from
scratch, then of the continued ones), then replicate 1, ...

A checkpoint's *arm* is the checkpoint id of replicate 0 of its configuration: the rows of every
replicate of `nano-mlm40-600-200` carry `arm = nano-mlm40-600-200`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from sweeper.contract.configs import SEED_LIMIT, stable_key
from sweeper.spec.study import StudySpec

SEED_STRIDE = 1_000_003
"""Replicate r's seed is pretraining.seed + r x this, modulo 2**32. Odd, hence invertible modulo
2**32: a study's replicates get distinct seeds in the seed range (the masking draws read a
seed's low 32 bits); large, so a study whose `seed` is a neighbour's (seed + 1) does not train
that neighbour's replicate 1."""


def init_seed(seed: int, replicate: int) -> int:
    """Weight-initialisation (and masking) seed of replicate `replicate` of a study seeded with
    `seed`: `seed` itself for replicate 0, which trains as the run did before replicates."""
    return (seed + SEED_STRIDE * replicate) % SEED_LIMIT


def replicate_name(name: str, replicate: int) -> str:
    """`tiny-mlm40-600` for replicate 0, `tiny-mlm40-600-rep2` for replicate 2."""
    return f"{name}-rep{replicate}" if replicate else name


def arm_name(name: str, replicate: int) -> str:
    """The name of replicate 0 of the run `name`, replicate `replicate` of its configuration."""
    return name.removesuffix(f"-rep{replicate}") if replicate else name


def replicated(spec: StudySpec, run, replicate: int, origin=None):
    """Replicate `replicate` of the planned `run` (a PretrainingRun): replicate 0 is `run` with
    the study's seed; r >= 1 is renamed, keyed with its index, seeded by `init_seed`, and (a CPT
    run from a study run) continues from `origin`, its source's replicate r."""
    seed = init_seed(spec.pretraining.seed, replicate)
    if replicate == 0:
        return replace(run, seed=seed)
    identity = {**run.identity, "replicate": replicate}
    if origin is not None:
        identity["init_from"] = origin.run_key
    return replace(run, name=replicate_name(run.name, replicate), run_key=stable_key(identity), identity=identity,
                   replicate=replicate, seed=seed, init_from_run=origin.name if origin else run.init_from_run)


def by_replicate(planned: list[tuple]) -> list[tuple]:
    """(entry, run, replicate, source) of `planned` (entry, run, replicates, source) tuples,
    replicate-major: every run's replicate 0 in plan order first (today's plan), then every
    replicate 1, ... so an interrupted study holds whole comparisons first."""
    rounds = max((count for _, _, count, _ in planned), default=0)
    return [(entry, run, r, source) for r in range(rounds) for entry, run, count, source in planned if r < count]


@dataclass(frozen=True, slots=True)
class SourceGrowth:
    """A study run trained more times than its entry (or its look) asks: runs continued from it
    have more replicates, and each continues from the source's own replicate."""
    source: str
    entry: int
    """The run entry (`pretraining.runs[i]`) that plans the source."""
    count: int
    """Replicates the entry (or the look) asks of the source."""
    grown: int
    """Replicates trained: the most of any run continued from it."""
    by: tuple[str, ...]
    """The continued runs that have more replicates than `count`."""

    def line(self) -> str:
        return (f"{self.source} (runs[{self.entry}] x{self.count}) trained x{self.grown}: every replicate r of "
                f"{', '.join(self.by)} continues from its own replicate r of the source")


def grown_sources(scratch: list[tuple], continued: list[tuple]) -> tuple[list[tuple], list[SourceGrowth]]:
    """`scratch` (entry, run, replicates, None) with each study-run source's count raised to the
    most replicates of a `continued` (entry, run, replicates, source) run from it, and what grew.
    Hugging Face sources (`hf:...`) have no replicates: nothing grows for them."""
    need: dict[str, list[tuple[str, int]]] = {}
    for _, run, count, source in continued:
        if not source.startswith("hf:"):
            need.setdefault(source, []).append((run.name, count))
    out, growth = [], []
    for entry, run, count, origin in scratch:
        wanted = max((n for _, n in need.get(run.name, ())), default=0)
        if wanted > count:
            by = tuple(dict.fromkeys(name for name, n in need[run.name] if n > count))
            growth.append(SourceGrowth(run.name, entry, count, wanted, by))
        out.append((entry, run, max(count, wanted), origin))
    return out, growth


def shared_sources(continued: list[tuple]) -> list[str]:
    """The continued runs (of `continued` (entry, run, replicates, source)) whose replicates all
    continue from one Hugging Face checkpoint, as `name x<replicates> from hf:...`."""
    return [f"{run.name} x{count} from {source}" for _, run, count, source in continued
            if source.startswith("hf:") and count > 1]
