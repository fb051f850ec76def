"""YAML mapping -> typed dataclasses, with errors that name the file, the line, the key path and why.

Generic over the spec's dataclasses: field types come from their annotations (int, float, str,
bool, `X | None`, `list[X]`, `dict`, `Literal[...]`, nested dataclasses), unknown keys get a
"did you mean" suggestion, and a list-typed field takes a list only (`seeds: 3` is refused: three
seeds, or the seed 3?).
A float field holds a finite number and an int field a 64-bit integer, whatever the field.
A field a dataclass names in `GRID_FIELDS` also takes a grid (a list, or Ray Tune's
`{grid_search: [...]}`: a `Grid`), and one named in `SEARCH_FIELDS` also a distribution in
Tune's vocabulary (`FORMS`: a `Distribution`); the dataclass's own check then runs once per
grid value and range end, so a bound names the value's place (`weight_decay.uniform[0]`).
The mapping comes from `sweeper.spec.reading` (the file read within bounds).

Every independent mistake is reported, not the first alone: a mistake is noted in the context
(`Context.note`) and the conversion goes on with the next key, the next list item, the next
section. What depends on a mistake is skipped, by one rule: a dataclass's own `check` (the
checks that span its keys) runs only when every key of it was read, and a mistake found in a
section (a value, or its check) skips the checks of every section enclosing it (`Skipped`).
An unknown key skips nothing (the keys beside it are read as if it were absent). Within one
check, the first reason given for each key path is kept.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing

from sweeper.spec.reading import MAX_INT, Context, SpecError, key_text, raise_all, shown, suggestion, type_name


class Skipped(Exception):
    """A section held a mistake, already noted in the context: the checks that need it are skipped."""


def gathered(context: Context, items):
    """The converted values of `items` ((path, thunk) pairs), every mistake among them noted;
    raises Skipped after converting all of them when one had a mistake."""
    values, failed = [], False
    for _, thunk in items:
        try:
            values.append(thunk())
        except SpecError as error:
            context.errors.append(error)
            failed = True
        except Skipped:
            failed = True
    if failed:
        raise Skipped
    return values


def convert(value, annotation, path: str, context: Context):
    """`value` converted to `annotation`, or a SpecError at `path`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return convert(value, inner[0], path, context)
    if origin is typing.Literal:
        if value not in args:
            hint = suggestion(value, [str(a) for a in args]) if isinstance(value, str) else ""
            context.fail(path, f"{shown(value)} is not one of {', '.join(map(repr, args))}{hint}")
        return value
    if origin is list:
        if value is None:
            context.fail(path, "expected a list, got nothing (null)")
        if not isinstance(value, list):  # `seeds: 3` reads as three seeds to some and as seed 3 to others
            context.fail(path, f"expected a list, got {type_name(value)} {shown(value)}: write [{shown(value)}] "
                               "for a list of that one value")
        return gathered(context, [(f"{path}[{i}]",
                                   lambda item=item, i=i: convert(item, args[0], f"{path}[{i}]", context))
                                  for i, item in enumerate(value)])
    if origin is tuple:  # tuple[X, ...] or a fixed length, e.g. betas: tuple[float, float]
        if not isinstance(value, list):
            context.fail(path, f"expected a list, got {type_name(value)}")
        if args[-1] is not Ellipsis and len(value) != len(args):
            context.fail(path, f"expected {len(args)} values, got {len(value)}")
        inner = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        return tuple(convert(item, kind, f"{path}[{i}]", context) for i, (item, kind) in enumerate(zip(value, inner)))
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            context.fail(path, f"expected a mapping, got {type_name(value)}")
        if not args:
            return dict(value)
        return {convert(key, args[0], path, context): convert(item, args[1], f"{path}.{key}", context)
                for key, item in value.items()}
    if dataclasses.is_dataclass(annotation):
        return read_section(annotation, value, path, context)
    if annotation is bool:
        if not isinstance(value, bool):
            context.fail(path, f"expected true or false, got {type_name(value)} {shown(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            context.fail(path, f"expected an integer, got {type_name(value)} {shown(value)}")
        if abs(value) > MAX_INT:
            context.fail(path, f"{shown(value)} is beyond the 64-bit integer range")
        return value
    if annotation is float:
        return finite_number(value, path, context)
    if annotation is str:
        if not isinstance(value, str):
            context.fail(path, f"expected a string, got {type_name(value)} {shown(value)}")
        return value
    raise TypeError(f"spec field type {annotation!r} is not supported")  # a bug, not a user error


def finite_number(value, path: str, context: Context) -> float:
    """A float field's value: a finite number (NaN, .inf, 1e999 or an integer beyond the float
    range would corrupt training silently or fail hours later)."""
    number = value
    if isinstance(value, str):  # PyYAML reads 1e-5 (no dot) as a string
        try:
            number = float(value)
        except ValueError:
            pass
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        context.fail(path, f"expected a number, got {type_name(value)} {shown(value)}")
    try:
        number = float(number)
    except OverflowError:
        context.fail(path, f"{shown(value)} is beyond the range of a number")
    if not math.isfinite(number):
        context.fail(path, f"must be a finite number, got {shown(value)}")
    return number


def build_dataclass(cls, value, path: str, context: Context):
    """`value` (a mapping) as a `cls`, its own check passed, or a SpecError naming every
    independent mistake (SpecErrors for several; module docstring: which are independent)."""
    try:
        instance = read_section(cls, value, path, context)
    except Skipped:
        instance = None
    raise_all(context.errors)
    return instance


def read_section(cls, value, path: str, context: Context):
    """`build_dataclass` within a conversion: every mistake is noted in `context` and raises
    Skipped at the end, so the enclosing sections skip their checks."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        context.fail(path, f"expected a mapping, got {type_name(value)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in value:
        if key not in fields:
            name = key_text(key)
            context.note(f"{path}.{name}" if path else name, f"unknown key{suggestion(str(key), list(fields))}; "
                                                             f"known keys: {', '.join(fields)}")
    grids, searched = getattr(cls, "GRID_FIELDS", ()), getattr(cls, "SEARCH_FIELDS", ())

    def read(name: str, where: str):
        if name in grids or name in searched:
            return convert_space(value[name], hints[name], where, context, distributions=name in searched)
        return convert(value[name], hints[name], where, context)

    given = [name for name in fields if name in value]
    for name, field in fields.items():
        if name not in value and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            context.note(where_of(path, name), "required key is missing")
            given = None
    kwargs, failed = {}, given is None
    for name in given or []:
        try:
            kwargs[name] = read(name, where_of(path, name))
        except SpecError as error:
            context.errors.append(error)
            failed = True
        except Skipped:
            failed = True
    # A field's own check (`FIELD_CHECKS`: one that needs no other field) runs on every field that
    # converted, so its mistakes are named beside a sibling's (an unknown task beside a bad seed).
    checked = False
    for name, field_check in getattr(cls, "FIELD_CHECKS", {}).items():
        if name in kwargs:
            for key, reason in field_check(kwargs[name]):
                context.note(where_of(path, key), reason)
                checked = True
    if failed or checked:
        raise Skipped
    instance = cls(**kwargs)
    if getattr(instance, "check", None) is None:
        return instance
    # The dataclass's own check sees plain values: each value of a sweep in turn (a grid's values,
    # a range's ends), the other sweeps at their first value; a reason about the swept field names
    # the value's place in the sweep (`peak_lr[1]`, `weight_decay.uniform[0]`).
    problems: dict[str, str] = {}  # key path -> its first reason
    swept = {name: representatives(kwargs[name]) for name in kwargs if isinstance(kwargs[name], (Grid, Distribution))}
    probe = {**kwargs, **{name: pairs[0][1] for name, pairs in swept.items()}}
    at_first = set(cls(**probe).check()) if swept else set()
    for name, pairs in swept.items():
        for suffix, value_ in pairs:
            for key, reason in cls(**{**probe, name: value_}).check():
                if key == name or key.startswith((f"{name}[", f"{name}.")) or (key, reason) not in at_first:
                    problems.setdefault(where_of(path, f"{name}{suffix}"), reason)  # this value's own problem
    # The probe's check at the first values: reasons about a swept field already named at its values are not repeated.
    named = {name for name in swept if any(where.startswith(where_of(path, name)) for where in problems)}
    for key, reason in cls(**probe).check():  # (relative key, reason) pairs from the dataclass itself
        if not any(key == name or key.startswith((f"{name}[", f"{name}.")) for name in named):
            problems.setdefault(where_of(path, key), reason)
    for where, reason in problems.items():
        context.note(where, reason)
    if problems:
        raise Skipped
    return instance


# --- sweeps: a field given several values (a grid) or a distribution (Ray Tune's vocabulary) ---

@dataclasses.dataclass(frozen=True, slots=True)
class Grid:
    """A field given several values: one run or trial per value. Written as a YAML list or as
    `{grid_search: [...]}` (Ray Tune's spelling); a one-value list is the value itself."""

    values: tuple
    form: str = dataclasses.field(default="", compare=False)
    """'' for a YAML list, '.grid_search' for Tune's mapping: where its items sit in the key path."""


@dataclasses.dataclass(frozen=True, slots=True)
class Distribution:
    """A field sampled by a search: `{choice: [...]}`, `{uniform: [lo, hi]}`, `{loguniform: [lo, hi]}`,
    `{randint: [lo, hi]}` (hi excluded), `{quniform: [lo, hi, q]}` or `{qloguniform: [lo, hi, q]}`."""

    kind: str
    args: tuple
    """choice: its values; the others: lo, hi (and q)."""


FORMS = {"grid_search": None, "choice": None, "uniform": 2, "loguniform": 2, "randint": 2, "quniform": 3,
         "qloguniform": 3}
"""Ray Tune's search-space vocabulary a sweepable field takes: form -> number of arguments (None: a list of values)."""


KIND_WORDS = {int: "integers", float: "numbers", str: "text", bool: "true or false", tuple: "lists"}


def values_of(value) -> tuple:
    """The values a field takes in a grid: a Grid's values, else the value alone."""
    return value.values if isinstance(value, Grid) else (value,)


def representatives(space) -> list[tuple[str, object]]:
    """(key-path suffix, value) pairs standing for a sweep in the field's own checks: every value
    of a grid or a choice, the least and the largest value a range draws (randint's upper end is
    excluded; a q-form's ends rounded to multiples of q, as its draws are)."""
    if isinstance(space, Grid):
        return [(f"{space.form}[{i}]", value) for i, value in enumerate(space.values)]
    if space.kind == "choice":
        return [(f".choice[{i}]", value) for i, value in enumerate(space.args)]
    low, high = space.args[0], space.args[1] - 1 if space.kind == "randint" else space.args[1]
    if FORMS[space.kind] == 3:
        low, high = quantize(low, space.args[2]), quantize(high, space.args[2])
    return [(f".{space.kind}[0]", low), (f".{space.kind}[1]", high)]


def quantize(value: float, q: float) -> float:
    """`value` rounded to the nearest multiple of q (Tune's q-forms), without float dust
    (3 x 0.05 is 0.15, not 0.15000000000000002)."""
    return float(f"{round(value / q) * q:.12g}")


Q_TOLERANCE = 1e-9
"""A q-form's end is a multiple of q when it is k x q within this share of itself: float dust
(0.15 / 0.05 = 2.9999999999999996) passes, an end q dwarfs (1e-9 with q 1: 0 x q) does not."""


def is_multiple(value: float, q: float) -> bool:
    return math.isclose(value, round(value / q) * q, rel_tol=Q_TOLERANCE, abs_tol=0.0)


def is_grid_list(value, annotation) -> bool:
    """A YAML list given to a sweepable field is a grid, except the value of a tuple field
    (`betas: [0.9, 0.95]`), whose grid is a list of lists."""
    if not isinstance(value, list):
        return False
    inner = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    if typing.get_origin(annotation) is tuple or any(typing.get_origin(a) is tuple for a in inner):
        return bool(value) and all(isinstance(item, list) for item in value)
    return True


def convert_space(value, annotation, path: str, context: Context, distributions: bool):
    """A sweepable field's value: a plain value (converted to `annotation`), a Grid, or (where
    `distributions`) a Distribution; every form checked for arity, types and bounds order."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in FORMS:
        (kind, args), = value.items()
        where = f"{path}.{kind}"
        if kind == "grid_search":
            if not isinstance(args, list):
                context.fail(where, f"grid_search takes a list of values, got {type_name(args)} {shown(args)}")
            return grid_of(args, annotation, where, ".grid_search", context)
        if not distributions:
            context.fail(where, f"{kind} is a distribution, and only a value or a grid (a list, or "
                                "{grid_search: [...]}) can go here: pretraining runs are planned as a grid")
        return distribution_of(kind, args, annotation, where, context)
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value) and not (
            typing.get_origin(annotation) is dict or annotation is dict):
        keys = list(value)
        if len(keys) > 1 and set(keys) & set(FORMS):
            context.fail(path, f"give one form per field, got {len(keys)} keys ({', '.join(map(key_text, keys))})")
        context.fail(
            f"{path}.{key_text(keys[0])}",
            f"unknown form{suggestion(keys[0], list(FORMS))}; "
            f"a sweepable field takes a value, a list, or one of {', '.join(FORMS)}",
        )
    if is_grid_list(value, annotation):
        return grid_of(value, annotation, path, "", context)
    return convert(value, annotation, path, context)


def grid_of(items: list, annotation, path: str, form: str, context: Context):
    if not items:
        context.fail(path, "empty grid: give at least one value")
    values = tuple(convert(item, annotation, f"{path}[{i}]", context) for i, item in enumerate(items))
    repeated(values, path, context)
    return values[0] if len(values) == 1 else Grid(values, form)


def repeated(values: tuple, path: str, context: Context) -> None:
    first: dict = {}
    for i, value in enumerate(values):
        if value in first:
            context.fail(f"{path}[{i}]", f"{shown(value)} is listed twice ([{first[value]}] and [{i}]): give each "
                                         "value once")
        first.setdefault(value, i)


def distribution_of(kind: str, args, annotation, path: str, context: Context) -> Distribution:
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    kind_of_field = kinds[0]
    if kind == "choice":
        if not isinstance(args, list) or not args:
            context.fail(path, f"choice takes a non-empty list of values, got {type_name(args)} {shown(args)}")
        values = tuple(convert(item, annotation, f"{path}[{i}]", context) for i, item in enumerate(args))
        repeated(values, path, context)
        return Distribution(kind, values)
    arity = FORMS[kind]
    shape = "[lo, hi]" if arity == 2 else "[lo, hi, q]"
    if typing.get_origin(annotation) is tuple:
        context.fail(
            path,
            f"{kind} draws one number, and this field takes a list of {len(typing.get_args(annotation))}: "
            "use choice over whole values (choice: [[0.9, 0.95], [0.9, 0.98]])",
        )
    if not isinstance(args, list):
        context.fail(path, f"{kind} takes a list {shape}, got {type_name(args)} {shown(args)}")
    if len(args) != arity:
        context.fail(path, f"{kind} takes {arity} numbers {shape}, got {len(args)}")
    if kind == "randint":
        if kind_of_field is not int:
            context.fail(
                path,
                f"randint draws integers, and this field takes {KIND_WORDS.get(kind_of_field, 'other values')}: "
                "use uniform or loguniform",
            )
    elif kind_of_field is not float:
        context.fail(
            path,
            f"{kind} draws real numbers, and this field takes {KIND_WORDS.get(kind_of_field, 'other values')}: "
            "use randint or choice",
        )
    numbers = tuple(convert(item, kind_of_field, f"{path}[{i}]", context) for i, item in enumerate(args))
    low, high = numbers[0], numbers[1]
    if not low < high:
        context.fail(path, f"needs lo < hi, got lo {low} and hi {high}")
    if kind in ("loguniform", "qloguniform") and low <= 0:
        context.fail(f"{path}[0]", f"{kind} needs lo > 0 (a log scale), got {low}")
    if arity == 3 and not numbers[2] > 0:
        context.fail(f"{path}[2]", f"q (the step values are rounded to) must be positive, got {numbers[2]}")
    if arity == 3 and numbers[2] > (high - low) * (1 + Q_TOLERANCE):
        context.fail(
            f"{path}[2]",
            f"q {numbers[2]} is larger than the range [{low}, {high}]: {kind} rounds every value "
            "to a multiple of q, and the range holds at most one: give a q no larger than hi - lo",
        )
    if arity == 3:  # values are rounded to multiples of q: so are the ends, or a value could fall outside them
        for i, end in enumerate(numbers[:2]):
            if not is_multiple(end, numbers[2]):
                context.fail(f"{path}[{i}]", f"{end} is not a multiple of q {numbers[2]}: {kind} rounds every value to "
                                             "a multiple of q, so lo and hi must be multiples too")
    return Distribution(kind, numbers)


def where_of(path: str, key: str) -> str:
    if not key:
        return path
    return f"{path}.{key}" if path and not key.startswith("[") else f"{path}{key}"
