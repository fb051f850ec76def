"""The (key, reason) checks the spec's dataclasses and the worker contract's configs share: each
yields one pair per value it refuses, for `sweeper.spec` to name with the file and line."""
from __future__ import annotations

import math
import reprlib


def positive(owner, *keys: str):
    """(key, reason) for each named field that is not a positive, finite number."""
    for key in keys:
        value = getattr(owner, key)
        if value is not None and not (value > 0 and math.isfinite(value)):
            yield key, f"must be positive, got {value}"


def each_positive(owner, *keys: str):
    """(key[i], reason) for each item of the named list fields that is not positive and finite."""
    for key in keys:
        for i, value in enumerate(getattr(owner, key) or []):
            if not (value > 0 and math.isfinite(value)):
                yield f"{key}[{i}]", f"must be positive, got {value}"


def non_negative(owner, *keys: str):
    """(key, reason) for each named field that is negative or not finite."""
    for key in keys:
        value = getattr(owner, key)
        if value is not None and not (value >= 0 and math.isfinite(value)):
            yield key, f"must not be negative, got {value}"


def non_empty(owner, *keys: str):
    """(key, reason) for each named list field that is empty (a grid of nothing)."""
    for key in keys:
        if getattr(owner, key) == []:
            yield key, "empty grid: give at least one value"


def non_blank(owner, *keys: str):
    """(key, reason) for each named text field that is empty or only spaces."""
    for key in keys:
        value = getattr(owner, key)
        if value is not None and not value.strip():
            yield key, f"must not be empty, got {value!r}"


def distinct(owner, *keys: str):
    """(key[i], reason) for each item of the named list fields that repeats an earlier item (the
    cells it plans would be planned twice, under one key)."""
    for key in keys:
        first: dict = {}
        for i, value in enumerate(getattr(owner, key) or []):
            if value in first:
                yield f"{key}[{i}]", (f"{reprlib.repr(value)} is listed twice ({key}[{first[value]}] and [{i}]): "
                                      "give each value once")
            else:
                first[value] = i


SEED_LIMIT = 2**32
"""Seeds lie in [0, 2**32): what numpy, Optuna's sampler and every torch generator accept."""


def seeds(owner, *keys: str):
    """(key, reason) for each named seed field (or key[i] for each item of a seed list) outside
    [0, 2**32)."""
    for key in keys:
        value = getattr(owner, key)
        items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, seed in items:
            if seed is not None and not 0 <= seed < SEED_LIMIT:
                yield (key if i is None else f"{key}[{i}]"), f"a seed must lie in [0, 2**32), got {seed}"
