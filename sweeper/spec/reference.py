"""docs/spec.md, the spec reference: every section and field of a spec with its type, default and
docstring, generated from the dataclasses that parse it (the words of sweeper.spec.field_docs, as
the JSON Schema's hover text). `python -m sweeper.spec.reference > docs/spec.md` writes it;
tests/unit/spec/test_reference.py fails when it is stale.
"""
from __future__ import annotations

import dataclasses
import types
import typing

from sweeper.spec.field_docs import class_doc, field_default, field_docs
from sweeper.spec.study import StudySpec

HEAD = """# Spec reference

Every key a search-space file (`search_spaces/*.yaml`) may hold: its type, its default and what it
means, one table per section. Generated from the dataclasses in `sweeper/spec/` that parse a spec
(`python -m sweeper.spec.reference > docs/spec.md`; a test fails when this page is stale): the
words are the fields' docstrings, which the shipped YAML files repeat as comments and the JSON
Schema shows on hover. How the pieces work together, with worked examples:
[docs/search-spaces.md](search-spaces.md).

**Editors.** `sweeper schema` prints the spec's JSON Schema (`search_spaces/schema.json` holds
it); a spec whose first line is `# yaml-language-server: $schema=schema.json` (the path relative to
the spec) gets completion, hover docs and a mark on a misspelled key or a wrong type in VS Code's
YAML extension, PyCharm or Neovim. The schema checks a spec's shape only; `sweeper plan` checks
the rest and names file, line, key and reason.

**Why a hand-written converter, not pydantic.** Pydantic 2 (installed) would generate the schema
and type-check fields, and its error locations could be mapped to YAML lines, but it would not
keep the rest: a model validator raises one error and stops where a section's check here yields
every problem it finds, the sweeps (a grid or a distribution in place of a value, each value
checked and named, `weight_decay.uniform[0]`) would be custom types with their own validators, and
the reasons the hostile-spec tests pin ("did you mean", `write [3] for a list of that one value`)
would be rewritten from its messages; what would remain is a layer about as large as
`sweeper/spec/parsing.py`, so the converter stays and the schema is generated from the same
dataclasses.

**Sweeps.** A field marked *grid* also takes a YAML list or `{grid_search: [...]}` (one run or
trial per value); one marked *search* also takes `{choice: [...]}`, and by its type `{randint:
[lo, hi]}` or `{uniform|loguniform: [lo, hi]}` / `{quniform|qloguniform: [lo, hi, q]}`.
"""


def type_text(annotation) -> str:
    """A field's type as a reader writes it: `int`, `list[float]`, `ddp | fsdp`, a section's name."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # a table cell: its bars escaped
        return " \\| ".join("null" if a is type(None) else type_text(a) for a in args)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (list, tuple, dict):
        inner = ", ".join("..." if a is Ellipsis else type_text(a) for a in args)
        return f"{origin.__name__}[{inner}]" if args else origin.__name__
    if dataclasses.is_dataclass(annotation):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field: dataclasses.Field) -> str:
    value = field_default(field)
    if value is dataclasses.MISSING:
        return "required"
    if dataclasses.is_dataclass(value):
        return "its defaults"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{list(value) if isinstance(value, tuple) else value}`"


def sections() -> list[tuple[str, type]]:
    """(key path, dataclass) of every section, in the order a reader meets them (depth first)."""
    found: list[tuple[str, type]] = []
    seen: set[type] = set()

    def visit(path: str, cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        found.append((path, cls))
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            annotation = hints[field.name]
            container = next((typing.get_origin(a) for a in (annotation, *typing.get_args(annotation))
                              if typing.get_origin(a) in (list, dict)), None)
            suffix = {list: "[]", dict: ".*"}.get(container, "")  # an entry of a list, a value of a mapping
            for inner in nested(annotation):
                visit(f"{path}.{field.name}{suffix}".lstrip("."), inner)

    visit("", StudySpec)
    return found


def nested(annotation) -> list[type]:
    if dataclasses.is_dataclass(annotation):
        return [annotation]
    return [cls for arg in typing.get_args(annotation) for cls in nested(arg)]


def section_text(path: str, cls: type) -> str:
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    grids, searched = getattr(cls, "GRID_FIELDS", ()), getattr(cls, "SEARCH_FIELDS", ())
    title = f"`{path}`" if path else "the top level"
    lines = [f"## {cls.__name__}", "", f"Key: {title}." + (f" {class_doc(cls)}" if class_doc(cls) else ""), "",
             "| key | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        sweep = " (search)" if field.name in searched else " (grid)" if field.name in grids else ""
        meaning = cell(docs.get(field.name, ""))
        lines.append(f"| `{field.name}` | {type_text(hints[field.name])}{sweep} | {default_text(field)} | {meaning} |")
    return "\n".join(lines)


def cell(text: str) -> str:
    """A docstring as a table cell: its bars escaped (a column break otherwise) and its angle
    brackets outside code (`./studies/<study>` in prose would read as an HTML tag)."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "\\<") for i, part in enumerate(parts))


def reference_text() -> str:
    return HEAD + "".join(f"\n{section_text(path, cls)}\n" for path, cls in sections())


if __name__ == "__main__":
    print(reference_text(), end="")
