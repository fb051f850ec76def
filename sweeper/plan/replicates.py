"""Replicates: a run configuration trained R times (`pretraining.replicates`, or a run entry's).

Replicate 0 is the run as planned without replicates: its name, its key and so every trial key
of its checkpoints stay what they were. Replicate r >= 1 is named `<name>-rep<r>`
(`nano-mlm40-600-rep1`, intermediate checkpoint `nano-mlm40-600-rep1-200`); its key hashes the
run's identity plus `replicate: r` (present only from 1 on, as fields added later are left out
of keys at their defaults). It trains with its own initialisation and masking seed
(`init_seed`) and reads the one prepared corpus in its own order (`trainables.corpus`). A
continued-pretraining replicate r continues from its source's replicate r when the source has
one, else from the source itself. Replicate 0 of every run comes first in the plan (of the
runs from scratch, then of the continued ones), then replicate 1, ...

A checkpoint's *arm* is the checkpoint id of replicate 0 of its configuration: the rows of every
replicate of `nano-mlm40-600-200` carry `arm = nano-mlm40-600-200`.
"""
from __future__ import annotations

from dataclasses import replace

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
    run) continues from `origin`, its source's replicate r, when that exists."""
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
