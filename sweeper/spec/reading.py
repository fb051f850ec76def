"""A spec file -> its YAML mapping, read within fixed bounds, with the line of every key path.

YAML is safe-loaded (nothing in a spec is executed) and read within fixed bounds, whatever the
file holds: at most MAX_SPEC_BYTES of UTF-8, MAX_DEPTH levels of nesting and MAX_NODES values
(alias references counted). An alias is resolved once: it becomes a reference to its anchor's
node, and every pass over the document (line index, construction) visits each node once, so an
"alias bomb" costs what its text costs. A key given twice in one mapping is refused (YAML 1.2
forbids it; PyYAML would keep the last silently). Errors are SpecErrors naming the file, the
line, the key path and why (`Context.fail`); `shown`, `key_text`, `type_name` and `suggestion`
word the values in them.
"""
from __future__ import annotations

import difflib
import reprlib
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


class SpecErrors(SpecError):
    """Several independent spec mistakes at once (sweeper.spec.parsing says which are independent),
    one `file:line: key.path: reason` a line: the file's in line order, then those of the command
    line's overrides. Its file, key path, reason and line are the first one's."""

    LISTED = 50
    """Errors named one by one (a list of 10,000 bad values is one mistake repeated), then a count."""

    def __init__(self, errors: list[SpecError]):
        self.errors = sorted(errors, key=lambda e: (e.file.startswith(OVERRIDE), e.line or 0))
        first = self.errors[0]
        self.file, self.key_path, self.reason, self.line = first.file, first.key_path, first.reason, first.line
        Exception.__init__(self, "\n".join(self.lines()))

    def lines(self, prefix: str = "") -> list[str]:
        more = len(self.errors) - self.LISTED
        return ([f"{prefix}{error}" for error in self.errors[:self.LISTED]]
                + ([f"{prefix}... and {more} more"] if more > 0 else []))


def raise_all(errors: list[SpecError]) -> None:
    """Raise nothing for no error, the error itself for one, a SpecErrors for several."""
    unique = list({str(error): error for error in errors}.values())
    if len(unique) == 1:
        raise unique[0]
    if unique:
        raise SpecErrors(unique)


OVERRIDE = "override "
"""What an error found in a command-line override names as its file: `override finetuning.seeds=[0]`."""


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
    """Where we are while converting: makes SpecErrors with file, line and key path, and keeps
    those noted so far (`errors`: the conversion goes on past them). A key path at or under a
    command-line override's (`overrides`: key path -> the override as given) names the override
    instead of the file's line."""

    def __init__(self, file: str, lines: LineIndex, overrides: dict[str, str] | None = None, text: str = ""):
        self.file, self.lines, self.overrides, self.text = file, lines, overrides or {}, text
        self.errors: list[SpecError] = []

    def error(self, path: str, reason: str) -> SpecError:
        given = [key for key in self.overrides if path == key or path.startswith((f"{key}.", f"{key}["))]
        if given:
            return SpecError(f"{OVERRIDE}{self.overrides[max(given, key=len)]}", path, reason)
        return SpecError(self.file, path, reason, self.lines.line(path))

    def fail(self, path: str, reason: str) -> typing.NoReturn:
        raise self.error(path, reason)

    def note(self, path: str, reason: str) -> None:
        self.errors.append(self.error(path, reason))


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
    context = Context(file, lines, text=text)
    if not isinstance(data, dict):
        context.fail("", f"the file must hold a mapping of keys, not {type_name(data)}")
    return data, context


def type_name(value) -> str:
    return {type(None): "nothing (null)", dict: "a mapping", list: "a list", str: "a string",
            bool: "a boolean", int: "an integer", float: "a number"}.get(type(value), type(value).__name__)



def suggestion(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word[:100], options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
