"""YAML -> typed dataclasses, with errors that name the file, the line, the key path and why.

Generic over the spec's dataclasses: field types come from their annotations (int, float, str,
bool, `X | None`, `list[X]`, `dict`, `Literal[...]`, nested dataclasses), unknown keys get a
"did you mean" suggestion, and a list-typed field also accepts one scalar (`seeds: 0`).
YAML is safe-loaded: nothing in a spec is executed.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path

import yaml


class SpecError(Exception):
    """A spec mistake: `file:line: key.path: reason`. The CLI prints it and exits with 2."""

    def __init__(self, file: str, key_path: str, reason: str, line: int | None = None):
        self.file, self.key_path, self.reason, self.line = file, key_path, reason, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key_path or '<top>'}: {reason}")


class LineIndex:
    """Line numbers (1-based) of every key path in a YAML document, from its node tree."""

    def __init__(self, text: str):
        self.lines: dict[str, int] = {}
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:
            root = None
        if root is not None:
            self._walk(root, "")

    def _walk(self, node, path: str) -> None:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = f"{path}.{key.value}" if path else str(key.value)
                self.lines[child] = key.start_mark.line + 1
                self._walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for index, value in enumerate(node.value):
                self._walk(value, f"{path}[{index}]")

    def line(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path.rsplit(".", 1)[0] if "." in path else ""
        return self.lines.get("")


class Context:
    """Where we are while converting: raises SpecErrors with file, line and key path."""

    def __init__(self, file: str, lines: LineIndex):
        self.file, self.lines = file, lines

    def fail(self, path: str, reason: str) -> typing.NoReturn:
        raise SpecError(self.file, path, reason, self.lines.line(path))


def load_yaml(path: str | Path) -> tuple[dict, Context]:
    """The file's mapping (a path, or the URI of a study's copy of its spec)."""
    from sweeper import storage

    try:
        text = storage.read_text(str(path))
    except OSError as error:
        raise SpecError(str(path), "", f"cannot read the file: {error.strerror or error}") from None
    context = Context(str(path), LineIndex(text))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SpecError(str(path), "", f"malformed YAML: {problem}", mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        context.fail("", f"the file must hold a mapping of keys, not {type_name(data)}")
    return data, context


def type_name(value) -> str:
    return {type(None): "nothing (null)", dict: "a mapping", list: "a list", str: "a string",
            bool: "a boolean", int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


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
            hint = suggestion(str(value), [str(a) for a in args])
            context.fail(path, f"{value!r} is not one of {', '.join(map(repr, args))}{hint}")
        return value
    if origin is list:
        items = value if isinstance(value, list) else [value]
        if value is None:
            context.fail(path, "expected a list, got nothing (null)")
        return [convert(item, args[0], f"{path}[{i}]", context) for i, item in enumerate(items)]
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
        return build_dataclass(annotation, value, path, context)
    if annotation is bool:
        if not isinstance(value, bool):
            context.fail(path, f"expected true or false, got {type_name(value)} {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            context.fail(path, f"expected an integer, got {type_name(value)} {value!r}")
        return value
    if annotation is float:
        if isinstance(value, str):  # PyYAML reads 1e-5 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            context.fail(path, f"expected a number, got {type_name(value)} {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            context.fail(path, f"expected a string, got {type_name(value)} {value!r}")
        return value
    raise TypeError(f"spec field type {annotation!r} is not supported")  # a bug, not a user error


def suggestion(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build_dataclass(cls, value, path: str, context: Context):
    if value is None:
        value = {}
    if not isinstance(value, dict):
        context.fail(path, f"expected a mapping, got {type_name(value)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in value:
        if key not in fields:
            where = f"{path}.{key}" if path else str(key)
            context.fail(where, f"unknown key{suggestion(str(key), list(fields))}; "
                                f"known keys: {', '.join(fields)}")
    kwargs = {}
    for name, field in fields.items():
        where = f"{path}.{name}" if path else name
        if name in value:
            kwargs[name] = convert(value[name], hints[name], where, context)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            context.fail(where, "required key is missing")
    instance = cls(**kwargs)
    check = getattr(instance, "check", None)
    if check is not None:
        for key, reason in check():  # (relative key, reason) pairs from the dataclass itself
            context.fail(f"{where_of(path, key)}", reason)
    return instance


def where_of(path: str, key: str) -> str:
    if not key:
        return path
    return f"{path}.{key}" if path and not key.startswith("[") else f"{path}{key}"
