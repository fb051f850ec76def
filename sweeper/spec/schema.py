"""The spec as a JSON Schema (draft 2020-12), generated from the dataclasses that parse it.

`sweeper schema` prints it and `search_spaces/schema.json` holds it, so that an editor running
yaml-language-server (VS Code's YAML extension, PyCharm, Neovim) completes keys, shows each
field's docstring on hover and flags a misspelled key or a value of the wrong type in a spec
whose first line is `# yaml-language-server: $schema=schema.json`.

The schema follows `sweeper.spec.parsing.convert` type by type: the same fields (no other key),
the same required keys, a list where a list is required (`seeds: 3` is refused), a field of
`GRID_FIELDS` also as a grid, one of `SEARCH_FIELDS` also as a distribution of its kind (randint
for integers, the real-valued forms for numbers, choice for anything). It is the shape of a spec
only: the checks that span keys or need the registry (a task's name, lo < hi, a divisible batch)
stay with `sweeper plan`, whose errors name file, line, key and reason.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing

from sweeper.spec.field_docs import class_doc, field_default, field_docs
from sweeper.spec.parsing import FORMS
from sweeper.spec.reading import MAX_INT
from sweeper.spec.study import StudySpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"
FLOAT_TEXT = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
"""A number PyYAML reads as text (`1e-5`, without a dot, is a string to YAML 1.1); the converter
takes it as the number it spells (sweeper.spec.parsing.finite_number)."""
REAL_FORMS = tuple(form for form in FORMS if form not in ("grid_search", "choice", "randint"))


def spec_schema() -> dict:
    """The JSON Schema of a whole spec: `StudySpec` at the root, every section in `$defs`."""
    defs: dict[str, dict] = {}
    root = section(StudySpec, defs)
    return {"$schema": DIALECT, "title": "sweeper study spec",
            **root, "$defs": dict(sorted(defs.items()))}


def schema_text() -> str:
    """The schema as `sweeper schema` prints it and search_spaces/schema.json holds it."""
    return json.dumps(spec_schema(), indent=1) + "\n"


def section(cls, defs: dict) -> dict:
    """A dataclass as an object schema: its fields as properties, no other key."""
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    grids, searched = getattr(cls, "GRID_FIELDS", ()), getattr(cls, "SEARCH_FIELDS", ())
    properties = {}
    required = []
    for field in dataclasses.fields(cls):
        value = type_schema(hints[field.name], defs)
        if field.name in grids or field.name in searched:
            value = sweep_schema(value, hints[field.name], distributions=field.name in searched)
        properties[field.name] = {**value, **({"description": docs[field.name]} if field.name in docs else {}),
                                  **default_of(field)}
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            required.append(field.name)
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    if doc := class_doc(cls):
        schema["description"] = doc
    return schema


def default_of(field: dataclasses.Field) -> dict:
    """`{"default": ...}` where the field's default is plain data (editors show it), else {}."""
    value = field_default(field)
    if value is dataclasses.MISSING:
        return {}
    try:
        return {"default": json.loads(json.dumps(value))}  # tuples become lists; a section is not plain data
    except TypeError:
        return {}


def type_schema(annotation, defs: dict) -> dict:
    """`annotation` as the converter reads it (sweeper.spec.parsing.convert)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [type_schema(a, defs) for a in args if a is not type(None)]
        return {"anyOf": [*inner, {"type": "null"}]} if type(None) in args else (
            inner[0] if len(inner) == 1 else {"anyOf": inner})
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": type_schema(args[0], defs)}
    if origin is tuple:
        if args[-1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0], defs)}
        return {"type": "array", "prefixItems": [type_schema(a, defs) for a in args], "items": False,
                "minItems": len(args)}
    if origin is dict or annotation is dict:
        return {"type": "object", **({"additionalProperties": type_schema(args[1], defs)} if args else {})}
    if dataclasses.is_dataclass(annotation):
        if annotation.__name__ not in defs:
            defs[annotation.__name__] = {}  # placed first: a section met again while this one is built refers to it
            defs[annotation.__name__] = section(annotation, defs)
        return {"anyOf": [{"$ref": f"#/$defs/{annotation.__name__}"}, {"type": "null"}]}  # null: all defaults
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        defs["integer"] = {"type": "integer", "minimum": -MAX_INT, "maximum": MAX_INT,
                           "description": "a 64-bit integer"}
        return {"$ref": "#/$defs/integer"}
    if annotation is float:
        defs["number"] = {"anyOf": [{"type": "number"}, {"type": "string", "pattern": FLOAT_TEXT}],
                          "description": "a finite number (1e-5 also as YAML 1.1 reads it: text)"}
        return {"$ref": "#/$defs/number"}
    if annotation is str:
        return {"type": "string"}
    raise TypeError(f"spec field type {annotation!r} has no schema")  # a bug: the converter refuses it too


def sweep_schema(value: dict, annotation, distributions: bool) -> dict:
    """A sweepable field: its value, a grid (a YAML list or `{grid_search: [...]}`) and, for a
    field of `SEARCH_FIELDS`, a distribution of the forms its type takes."""
    grid = {"type": "array", "items": value, "minItems": 1}
    forms = [value, grid, one_form("grid_search", grid)]
    if distributions:
        forms.append(one_form("choice", grid))
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
        if kinds[0] is int:
            forms.append(one_form("randint", ends(value, 2)))
        elif kinds[0] is float:
            forms += [one_form(form, ends(value, FORMS[form])) for form in REAL_FORMS]
    return {"anyOf": forms}


def ends(value: dict, count: int) -> dict:
    """A range's [lo, hi] or [lo, hi, q]: `count` values of the field's own type."""
    number = {k: v for k, v in value.items() if k != "anyOf"} if "anyOf" not in value else {
        "anyOf": [v for v in value["anyOf"] if v != {"type": "null"}]}
    return {"type": "array", "items": number, "minItems": count, "maxItems": count}


def one_form(name: str, args: dict) -> dict:
    return {"type": "object", "properties": {name: args}, "required": [name], "additionalProperties": False}
