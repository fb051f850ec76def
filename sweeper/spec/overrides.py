"""Command-line overrides: `sweeper plan|run SPEC key.path=value ...`, applied to the spec's
parsed YAML before anything is checked.

An override names a key path as errors do (`finetuning.seeds`, `pretraining.runs[0].steps`) and
gives a YAML value (`[0, 1]`, `100`, `{uniform: [0.0, 0.1]}`, nothing for null), read within the
spec's own bounds (sweeper.spec.reading). A missing mapping on the way is created; a list item
must exist. The spec is then checked exactly as if the file said so, and a mistake in an
overridden value names the override (`override finetuning.seedz=[0]: finetuning.seedz: unknown
key ...`). A run keeps the effective spec (`effective_text`) with the overrides beside it.
"""
from __future__ import annotations

import copy
import re

import yaml

from sweeper.spec.reading import OVERRIDE, SpecError, SpecLoader, raise_all, shown, type_name

KEY_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[\d+\])*(\.[A-Za-z_][A-Za-z0-9_]*(\[\d+\])*)*")
"""A key path as errors print it: names joined by dots, each maybe followed by list indices."""
STEP = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def parse_override(text: str) -> tuple[str, object]:
    """(key path, value) of `key.path=value`, or a SpecError naming the override."""
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals:
        raise SpecError(f"{OVERRIDE}{text}", "", "an override is key.path=value (e.g. finetuning.seeds=[0])")
    if not KEY_PATH.fullmatch(key):
        raise SpecError(f"{OVERRIDE}{text}", "", f"{shown(key)} is not a key path (names joined by dots, "
                                                 "list items as [0]: pretraining.runs[0].steps)")
    loader = SpecLoader(value)
    try:
        return key, loader.get_single_data()
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SpecError(f"{OVERRIDE}{text}", key, f"malformed YAML value: {problem}") from None
    finally:
        loader.dispose()


def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> tuple[dict, dict[str, str]]:
    """A copy of the spec's mapping with every override applied in order, and key path -> the
    override as given (the last one for a path given twice); every malformed override is
    raised at once (sweeper.spec.reading.raise_all)."""
    data, given, errors = copy.deepcopy(data), {}, []
    for text in overrides:
        try:
            key, value = parse_override(text)
            set_path(data, key, value, text)
        except SpecError as error:
            errors.append(error)
            continue
        given[key] = text
    raise_all(errors)
    return data, given


def set_path(data: dict, key: str, value, text: str) -> None:
    steps = [(name, int(index) if index else None) for name, index in STEP.findall(key)]
    node, walked = data, ""
    for i, (name, index) in enumerate(steps):
        last = i == len(steps) - 1
        if index is None:
            if not isinstance(node, dict):
                raise SpecError(f"{OVERRIDE}{text}", key, f"{walked} is {type_name(node)}, not a mapping of keys")
            walked = f"{walked}.{name}" if walked else name
            if last:
                node[name] = value
            else:
                if node.get(name) is None:  # a section the file leaves out (or null): created
                    node[name] = {}
                node = node[name]
        else:
            if not isinstance(node, list) or index >= len(node):
                size = f"a list of {len(node)}" if isinstance(node, list) else type_name(node)
                raise SpecError(f"{OVERRIDE}{text}", key, f"{walked} is {size}: no item [{index}] to set")
            walked = f"{walked}[{index}]"
            if last:
                node[index] = value
            else:
                node = node[index]


def effective_text(text: str, data: dict, overrides: tuple[str, ...]) -> str:
    """The spec a run keeps: the file's text itself without overrides, else the mapping the
    overrides made, as YAML, under a comment naming them."""
    if not overrides:
        return text
    header = "".join(f"#   {override}\n" for override in overrides)
    return (f"# The effective spec: the file with these command-line overrides applied:\n{header}"
            + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
