"""YAML -> typed dataclasses, with errors that name the file, the line, the key path and why.

Generic over the spec's dataclasses: field types come from their annotations (int, float, str,
bool, `X | None`, `list[X]`, `dict`, `Literal[...]`, nested dataclasses), unknown keys get a
"did you mean" suggestion, and a list-typed field also accepts one scalar (`seeds: 0`).
A float field holds a finite number and an int field a 64-bit integer, whatever the field.
A field a dataclass names in `GRID_FIELDS` also takes a grid (a list, or Ray Tune's
`{grid_search: [...]}`: a `Grid`), and one named in `SEARCH_FIELDS` also a distribution in
Tune's vocabulary (`FORMS`: a `Distribution`); the dataclass's own check then runs once per
grid value and range end, so a bound names the value's place (`weight_decay.uniform[0]`).

YAML is safe-loaded (nothing in a spec is executed) and read within fixed bounds, whatever the
file holds: at most MAX_SPEC_BYTES of UTF-8, MAX_DEPTH levels of nesting and MAX_NODES values
(alias references counted). An alias is resolved once: it becomes a reference to its anchor's
node, and every pass over the document (line index, construction) visits each node once, so an
"alias bomb" costs what its text costs. A key given twice in one mapping is refused (YAML 1.2
forbids it; PyYAML would keep the last silently).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
import types
import typing
from pathlib import Path

import yaml

MAX_SPEC_BYTES = 1 << 20
"""A spec is a few KB (paper.yaml: ~6 KB); a larger file is refused unread."""
MAX_DEPTH = 64
"""Levels of nesting (mappings and lists); the deepest shipped spec has 5."""
MAX_NODES = 10_000
"""Values, keys and alias references composed (paper.yaml has 276); PyYAML composes ~20,000 a second."""
MAX_INT = 2**63 - 1
"""An int field holds a 64-bit integer (what torch, numpy and Parquet store)."""

_shown = reprlib.Repr()
_shown.maxstring, _shown.maxother, _shown.maxlevel, _shown.maxlist, _shown.maxdict = 80, 80, 1, 4, 4


def shown(value) -> str:
    """A bounded repr of a spec value for an error message (a long string or a deep list is cut)."""
    return _shown.repr(value)


def key_text(key) -> str:
    """A mapping key as it appears in a key path: itself, or a bounded repr when it is long, not
    printable or not a string."""
    return key if isinstance(key, str) and len(key) <= 100 and key.isprintable() else shown(key)


class SpecError(Exception):
    """A spec mistake: `file:line: key.path: reason`. The CLI prints it and exits with 2."""

    def __init__(self, file: str, key_path: str, reason: str, line: int | None = None):
        self.file, self.key_path, self.reason, self.line = file, key_path, reason, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key_path or '<top>'}: {reason}")


class SpecLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader within the bounds above. Composing (`get_single_node`) refuses nesting
    deeper than MAX_DEPTH and more than MAX_NODES nodes, and records every key repeated in one
    mapping (`duplicates`: mapping node, key, first line, second line); timestamps stay text
    (no spec field is a date, and `2024-13-45` would raise)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.depth = self.nodes = 0
        self.duplicates: list[tuple[yaml.MappingNode, str, int, int]] = []

    def compose_node(self, parent, index):
        self.nodes += 1
        mark = self.peek_event().start_mark
        if self.nodes > MAX_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_NODES:,} values: not a spec", mark)
        if self.depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        first: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if (key.tag, key.value) in first:
                    self.duplicates.append((node, key.value, first[(key.tag, key.value)], line))
                else:
                    first[(key.tag, key.value)] = line
        return node

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as error:  # `!!int x`, `!!float x`, a 5,000-digit integer
            reason = str(error).split(";")[0][:200]
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value: {reason}",
                                                    node.start_mark) from None


SpecLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


class LineIndex:
    """Line numbers (1-based) of every key path in a YAML document, from its node tree (each
    node visited once: a node reached again through an alias keeps its first path), and the key
    path of every mapping node (`paths`, by node id)."""

    MAX_PATH = 1000
    """Longer key paths (absurd keys nested deep) are not indexed: their ancestor's line is used."""

    def __init__(self, source: str | yaml.Node | None):
        self.lines: dict[str, int] = {}
        self.paths: dict[int, str] = {}
        root = source
        if isinstance(source, str):
            loader = None
            try:
                loader = SpecLoader(source)
                root = loader.get_single_node()
            except yaml.YAMLError:
                root = None
            finally:
                if loader is not None:
                    loader.dispose()
        if root is not None:
            self._index(root)

    def _index(self, root: yaml.Node) -> None:
        seen: set[int] = set()
        stack = [(root, "")]
        while stack:
            node, path = stack.pop()
            self.lines.setdefault(path, node.start_mark.line + 1)
            if id(node) in seen:
                continue
            seen.add(id(node))
            children = []
            if isinstance(node, yaml.MappingNode):
                self.paths[id(node)] = path
                for key, value in node.value:
                    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                    child = f"{path}.{name}" if path else str(name)
                    if len(child) <= self.MAX_PATH:
                        self.lines.setdefault(child, key.start_mark.line + 1)
                        children.append((value, child))
            elif isinstance(node, yaml.SequenceNode):
                children = [(value, f"{path}[{i}]") for i, value in enumerate(node.value)]
                children = [(value, child) for value, child in children if len(child) <= self.MAX_PATH]
            stack.extend(reversed(children))  # popped in document order: the first path wins

    def path_at(self, line: int) -> str:
        """The deepest key path given on `line` ('' when none is)."""
        return max((path for path, at in self.lines.items() if at == line), key=len, default="")

    def line(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            if path.endswith("]"):
                path = path[:path.rindex("[")]
            else:
                path = path.rsplit(".", 1)[0] if "." in path else ""
        return self.lines.get("")


class Context:
    """Where we are while converting: raises SpecErrors with file, line and key path."""

    def __init__(self, file: str, lines: LineIndex):
        self.file, self.lines = file, lines

    def fail(self, path: str, reason: str) -> typing.NoReturn:
        raise SpecError(self.file, path, reason, self.lines.line(path))


def read_spec_bytes(location: str) -> bytes:
    """The file's bytes (a path, a file:// URI, or the URI of a study's copy of its spec), or a
    SpecError when it cannot be read or is larger than MAX_SPEC_BYTES (never read past that)."""
    from sweeper.store import storage

    try:
        if storage.is_remote(location):
            fs, inner = storage.filesystem(location)
            with fs.open_input_stream(inner) as stream:
                data = stream.read(MAX_SPEC_BYTES + 1)
        else:
            with open(storage.normalize(location), "rb") as stream:
                data = stream.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise SpecError(location, "", f"cannot read the file: {error.strerror or error}") from None
    except ValueError as error:  # a NUL byte in the path, a malformed URI
        raise SpecError(location, "", f"cannot read the file: {error}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(location, "", f"the file is larger than {MAX_SPEC_BYTES // 1024:,} KiB: not a spec")
    return data


def decode_spec(location: str, data: bytes) -> str:
    """UTF-8 text (a UTF-8 byte-order mark dropped), or a SpecError naming the line of the first
    byte that is not UTF-8, a UTF-16/32 file, or a NUL character."""
    for bom, encoding in ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
                          (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16")):
        if data.startswith(bom):
            raise SpecError(location, "", f"the file is {encoding} text: save it as UTF-8", 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise SpecError(location, "", f"not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}): "
                                      "save the file as UTF-8", line) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise SpecError(location, "", "the file holds a NUL character (UTF-16 text without a byte-order mark, "
                                      "or a binary file?): save it as UTF-8 text", line)
    return text.removeprefix("\ufeff")


def load_yaml(path: str | Path) -> tuple[dict, Context]:
    """The file's mapping (a path, or the URI of a study's copy of its spec), read within the
    bounds of this module."""
    file = str(path)
    text = decode_spec(file, read_spec_bytes(file))
    loader = None
    try:
        loader = SpecLoader(text)
        root = loader.get_single_node()
        lines = LineIndex(root)
        if loader.duplicates:
            node, key, first, second = min(loader.duplicates, key=lambda d: d[3])
            parent, key = lines.paths.get(id(node), ""), key_text(key)
            where = (f"given twice on line {first}" if first == second
                     else f"given on line {first} and again on line {second}")
            raise SpecError(file, f"{parent}.{key}" if parent else key,
                            f"duplicate key: {where} (YAML forbids repeating a key in one mapping; keep one)", second)
        data = loader.construct_document(root) if root is not None else None
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        character = f" (#x{error.character:04x})" if isinstance(error.character, int) else ""
        raise SpecError(file, "", f"malformed YAML: {error.reason}{character}", line) from None
    except yaml.constructor.ConstructorError as error:  # the document is composed: name the key
        line = error.problem_mark.line + 1 if error.problem_mark else None
        raise SpecError(file, lines.path_at(line) if line else "", f"malformed YAML: {error.problem}", line) from None
    except yaml.YAMLError as error:
        mark, context_mark = getattr(error, "problem_mark", None), getattr(error, "context_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        if context := getattr(error, "context", None):  # "found duplicate anchor 'a'; first occurrence"
            at = "" if not (context_mark and mark) else (
                f" (line {context_mark.line + 1})" if context_mark.line != mark.line
                else f" (column {context_mark.column + 1})" if context_mark.column != mark.column else "")
            problem = f"{context}{at}, {problem}"
        raise SpecError(file, "", f"malformed YAML: {problem}", mark.line + 1 if mark else None) from None
    finally:
        if loader is not None:
            loader.dispose()
    context = Context(file, lines)
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
            hint = suggestion(value, [str(a) for a in args]) if isinstance(value, str) else ""
            context.fail(path, f"{shown(value)} is not one of {', '.join(map(repr, args))}{hint}")
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


def suggestion(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word[:100], options, n=1, cutoff=0.6)
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
            name = key_text(key)
            where = f"{path}.{name}" if path else name
            context.fail(where, f"unknown key{suggestion(str(key), list(fields))}; "
                                f"known keys: {', '.join(fields)}")
    kwargs = {}
    grids, searched = getattr(cls, "GRID_FIELDS", ()), getattr(cls, "SEARCH_FIELDS", ())
    for name, field in fields.items():
        where = f"{path}.{name}" if path else name
        if name in value and (name in grids or name in searched):
            kwargs[name] = convert_space(value[name], hints[name], where, context, distributions=name in searched)
        elif name in value:
            kwargs[name] = convert(value[name], hints[name], where, context)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            context.fail(where, "required key is missing")
    instance = cls(**kwargs)
    if getattr(instance, "check", None) is None:
        return instance
    # The dataclass's own check sees plain values: each value of a sweep in turn (a grid's values,
    # a range's ends), the other sweeps at their first value; a reason about the swept field names
    # the value's place in the sweep (`peak_lr[1]`, `weight_decay.uniform[0]`).
    swept = {name: representatives(kwargs[name]) for name in kwargs if isinstance(kwargs[name], (Grid, Distribution))}
    probe = {**kwargs, **{name: pairs[0][1] for name, pairs in swept.items()}}
    at_first = set(cls(**probe).check()) if swept else set()
    for name, pairs in swept.items():
        for suffix, value in pairs:
            for key, reason in cls(**{**probe, name: value}).check():
                if key == name or key.startswith((f"{name}[", f"{name}.")) or (key, reason) not in at_first:
                    context.fail(where_of(path, f"{name}{suffix}"), reason)  # this value's own problem
    for key, reason in cls(**probe).check():  # (relative key, reason) pairs from the dataclass itself
        context.fail(where_of(path, key), reason)
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
    of a grid or a choice, both ends of a range (randint's upper end is excluded)."""
    if isinstance(space, Grid):
        return [(f"{space.form}[{i}]", value) for i, value in enumerate(space.values)]
    if space.kind == "choice":
        return [(f".choice[{i}]", value) for i, value in enumerate(space.args)]
    high = space.args[1] - 1 if space.kind == "randint" else space.args[1]
    return [(f".{space.kind}[0]", space.args[0]), (f".{space.kind}[1]", high)]


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
        context.fail(f"{path}.{key_text(keys[0])}", f"unknown form{suggestion(keys[0], list(FORMS))}; "
                                                    f"a sweepable field takes a value, a list, or one of {', '.join(FORMS)}")
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
        context.fail(path, f"{kind} draws one number, and this field takes a list of {len(typing.get_args(annotation))}: "
                           "use choice over whole values (choice: [[0.9, 0.95], [0.9, 0.98]])")
    if not isinstance(args, list):
        context.fail(path, f"{kind} takes a list {shape}, got {type_name(args)} {shown(args)}")
    if len(args) != arity:
        context.fail(path, f"{kind} takes {arity} numbers {shape}, got {len(args)}")
    if kind == "randint":
        if kind_of_field is not int:
            context.fail(path, f"randint draws integers, and this field takes {KIND_WORDS.get(kind_of_field, 'other values')}: "
                               "use uniform or loguniform")
    elif kind_of_field is not float:
        context.fail(path, f"{kind} draws real numbers, and this field takes {KIND_WORDS.get(kind_of_field, 'other values')}: "
                           "use randint or choice")
    numbers = tuple(convert(item, kind_of_field, f"{path}[{i}]", context) for i, item in enumerate(args))
    low, high = numbers[0], numbers[1]
    if not low < high:
        context.fail(path, f"needs lo < hi, got lo {low} and hi {high}")
    if kind in ("loguniform", "qloguniform") and low <= 0:
        context.fail(f"{path}[0]", f"{kind} needs lo > 0 (a log scale), got {low}")
    if arity == 3 and not numbers[2] > 0:
        context.fail(f"{path}[2]", f"q (the step values are rounded to) must be positive, got {numbers[2]}")
    if arity == 3:  # values are rounded to multiples of q: so are the ends, or a value could fall outside them
        for i, end in enumerate(numbers[:2]):
            if abs(end / numbers[2] - round(end / numbers[2])) > 1e-9:
                context.fail(f"{path}[{i}]", f"{end} is not a multiple of q {numbers[2]}: {kind} rounds every value to "
                                             "a multiple of q, so lo and hi must be multiples too")
    return Distribution(kind, numbers)


def where_of(path: str, key: str) -> str:
    if not key:
        return path
    return f"{path}.{key}" if path and not key.startswith("[") else f"{path}{key}"
