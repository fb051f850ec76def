"""A fine-tuning cell's search space: the learning rate's log range and the protocol fields given
as distributions (`sweeper.spec.parsing.Distribution`), drawn at random, mapped to Optuna, or budgeted.

- `random_point` (search: random): one draw per field by Ray Tune's sampler semantics (uniform,
  log-uniform, randint with hi excluded, q-forms rounded to a multiple of q as `tune.quniform`
  does), each field from its own generator seeded by (seed, cell, sample, field). numpy alone:
  `sweeper plan` draws every sample of a random study at plan time, and the plan command imports
  no Ray (a Tune `Domain.sample` would pull in ray.tune, ~2 s and a Ray import for a dry run).
  Per-field generators make a draw independent of the sample count (more samples extend a cell),
  of other cells (another checkpoint), and of the other fields.
- `optuna_distribution` / `from_optuna` / `to_optuna` (search: optuna): the same forms as
  Optuna distributions; a choice of pairs (betas) is a categorical over their JSON texts, and
  qloguniform is a log-uniform draw rounded afterwards (Optuna has no stepped log scale; Ray's
  OptunaSearch does the same).
- `largest` / `planning_values`: what `sweeper plan` budgets time, memory and task data with
  while the values are chosen at run time.
"""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from sweeper.spec.parsing import Distribution, quantize

LEARNING_RATE = "learning_rate"
"""The learning rate's name in a space, in a point and in each Optuna study."""


def log_range(low: float, high: float) -> Distribution:
    """The learning rate's search range: log-uniform over [low, high]."""
    return Distribution("loguniform", (low, high))


def draw(space: Distribution, rng: np.random.Generator):
    """One value of `space`, with Tune's semantics."""
    kind, args = space.kind, space.args
    if kind == "choice":
        return args[int(rng.integers(len(args)))]
    if kind == "randint":
        return int(rng.integers(args[0], args[1]))
    if kind in ("loguniform", "qloguniform"):
        value = math.exp(rng.uniform(math.log(args[0]), math.log(args[1])))
    else:
        value = float(rng.uniform(args[0], args[1]))
    return quantize(value, args[2]) if kind.startswith("q") else value


def generator(*identity) -> np.random.Generator:
    """A generator seeded by a hash of `identity` (JSON): the same numbers on every machine."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def random_point(space: dict[str, Distribution], seed: int, checkpoint_id: str, task: str, sample: int) -> dict:
    """Sample `sample` of the cell (checkpoint_id, task): one draw of every field of `space`."""
    return {name: draw(field, generator(seed, checkpoint_id, task, sample, name)) for name, field in space.items()}


def largest(space: Distribution):
    """The largest value the field can take (a choice of pairs: the last in sort order)."""
    if space.kind == "choice":
        return max(space.args)
    return space.args[1] - 1 if space.kind == "randint" else space.args[1]


def planning_values(space: Distribution) -> tuple:
    """The values `sweeper plan` budgets with: every choice (each may shape task data or memory
    on its own), a range's largest value (the upper bound of time and memory)."""
    return tuple(space.args) if space.kind == "choice" else (largest(space),)


def identity(space: dict[str, Distribution]) -> dict:
    """The space as trial keys and resolved settings hash it: field -> [form, args]."""
    return {name: [field.kind, [list(a) if isinstance(a, tuple) else a for a in field.args]]
            for name, field in sorted(space.items())}


def choice_token(value):
    """A choice as Optuna stores it: itself when a scalar, a pair as its JSON text."""
    return json.dumps(list(value)) if isinstance(value, tuple) else value


def optuna_distribution(space: Distribution):
    import optuna

    kind, args = space.kind, space.args
    if kind == "choice":
        return optuna.distributions.CategoricalDistribution([choice_token(a) for a in args])
    if kind == "randint":
        return optuna.distributions.IntDistribution(args[0], args[1] - 1)
    if kind == "quniform":
        return optuna.distributions.FloatDistribution(args[0], args[1], step=args[2])
    return optuna.distributions.FloatDistribution(args[0], args[1], log=kind in ("loguniform", "qloguniform"))


def from_optuna(space: Distribution, value):
    """The protocol value of an Optuna parameter value."""
    if space.kind == "choice":
        return next(a for a in space.args if choice_token(a) == value)
    if space.kind == "randint":
        return int(value)
    return quantize(value, space.args[2]) if space.kind.startswith("q") else float(value)


def to_optuna(space: Distribution, value):
    """The Optuna parameter value of a protocol value (a recorded sample told to its study)."""
    if space.kind == "choice":
        return choice_token(tuple(value) if isinstance(value, list) else value)
    return int(value) if space.kind == "randint" else float(value)
