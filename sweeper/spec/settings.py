"""The spec's free-form mappings, checked value by value: model overrides (`model.overrides`,
LlamaEncoderConfig fields, each a value or a grid) and objective settings (a phase's `settings`,
each of its registered default's type), and the MLM shares of the selected tokens
(`random_replace` + `keep_original`) a study and each of its phases give.

Their values come from YAML untyped (no dataclass field says what they hold), so each is checked
here for what the typed fields get from `sweeper.spec.parsing`: finite numbers, integers within
64 bits, no distribution where runs are planned as a grid.
"""
from __future__ import annotations

import math

from sweeper.contract.catalog import MODEL_FIELDS
from sweeper.spec.parsing import FORMS
from sweeper.spec.reading import MAX_INT, key_text, shown, suggestion, type_name


class DefaultList(list):
    """A list field's default (its `default_factory` makes one): equal to the same values given
    in the spec, told apart from them by type, so a check can say a list given in a mode that does
    not read it is ignored (sweeper.spec.ignored)."""


def given(value) -> bool:
    """Whether a list field holds a value the spec gave (not its DefaultList default, nor None:
    a field whose default is derived, as clm_fraction's from switch_steps)."""
    return value is not None and not isinstance(value, DefaultList)


def number_problem(value, integer: bool) -> str | None:
    """Why `value` (from an untyped mapping: model overrides, objective settings) is not a finite
    number, or not an integer when `integer`, or None."""
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        hint = " (YAML reads 1e-5 as text: write 1.0e-5)" if not integer and parses_as_float(value) else ""
        return f"expected {'an integer' if integer else 'a number'}, got {type_name(value)} {shown(value)}{hint}"
    if isinstance(value, int) and abs(value) > MAX_INT:
        return f"{shown(value)} is beyond the 64-bit integer range"
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    return None


def parses_as_float(value) -> bool:
    try:
        return isinstance(value, str) and math.isfinite(float(value))
    except ValueError:
        return False


def override_items(key, value) -> list[tuple[str, object]]:
    """(key path, value) of each value an override takes: itself, each item of a grid (a list or
    `{grid_search: [...]}`). A distribution, or another mapping, is one item the checks refuse."""
    where = f"overrides.{key_text(key)}"
    if isinstance(value, list):
        return [(f"{where}[{i}]", item) for i, item in enumerate(value)] or [(where, value)]
    if isinstance(value, dict) and list(value) == ["grid_search"] and isinstance(value["grid_search"], list):
        return [(f"{where}.grid_search[{i}]", item) for i, item in enumerate(value["grid_search"])] or [(where, [])]
    return [(where, value)]


def override_problems(overrides: dict):
    """(key, reason) for each model override that is not a LlamaEncoderConfig field
    (catalog.MODEL_FIELDS) of its type: sizes and floats positive, token ids not negative. An
    override may be a grid (one run per value); a distribution cannot go there."""
    for key, value in overrides.items():
        where, kind = f"overrides.{key_text(key)}", MODEL_FIELDS.get(key)
        if kind is None:
            yield where, (f"unknown key{suggestion(str(key), list(MODEL_FIELDS))}; LlamaEncoderConfig fields: "
                          f"{', '.join(MODEL_FIELDS)}")
            continue
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in FORMS and "grid_search" not in value:
            yield f"{where}.{next(iter(value))}", (f"{next(iter(value))} is a distribution, and only a value or a grid "
                                                   "(a list, or {grid_search: [...]}) can go here: pretraining runs "
                                                   "are planned as a grid")
            continue
        items, seen = override_items(key, value), {}
        if items == [(where, [])]:
            yield where, "empty grid: give at least one value"
        for path, item in items:
            if problem := number_problem(item, integer=kind is int):
                yield path, problem
            elif str(key).endswith("_token_id") and item < 0:
                yield path, f"must not be negative, got {item}"
            elif not str(key).endswith("_token_id") and item <= 0:
                yield path, f"must be positive, got {item}"
            elif item in seen:
                yield path, f"{shown(item)} is listed twice ({seen[item]} and {path}): give each value once"
            else:
                seen[item] = path


def setting_problem(default, value) -> str | None:
    """Why `value` cannot replace an objective setting whose registered default is `default`: a
    number for a number (an integer for an integer), finite; otherwise a scalar of the default's type."""
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return number_problem(value, integer=isinstance(default, int))
    scalar = (str, bool, int, float, type(None))
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if default is None and isinstance(value, scalar) or type(value) is type(default) and isinstance(value, scalar):
        return None
    return f"expected {type_name(default)} like the default {shown(default)}, got {type_name(value)} {shown(value)}"


MASKING_SHARES = ("random_replace", "keep_original")
"""MLM settings that take shares of the selected tokens (the rest become [MASK]): the study sets
them for every MLM phase, a phase may set its own."""


def masking_share_problem(settings: dict, of_phase: bool) -> str | None:
    """Why an objective's settings (a phase's when `of_phase`, the study's merged in) give the
    selected tokens more than all of them, or None."""
    if all(key in settings for key in MASKING_SHARES) and not 0 <= sum(settings[k] for k in MASKING_SHARES) <= 1:
        shares = " + ".join(f"{key} {settings[key]:g}" for key in MASKING_SHARES)
        whose = " (the phase's own settings, the study's for those it leaves out)" if of_phase else ""
        return f"random_replace + keep_original must lie in [0, 1] (shares of the selected tokens), got {shares}{whose}"
    return None
