"""Each spec field's docstring (the string under its annotation), read from the source with `ast`.

Python keeps no attribute docstrings at run time, so the words a researcher reads in the JSON
Schema's hover text (sweeper.spec.schema) and in docs/spec.md (sweeper.spec.reference) are read
here, once, from the dataclasses that parse the spec: a field inherited from a base class (the
AdamW settings of `sweeper.contract.configs.AdamWConfig`) takes its base's docstring.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap


@functools.cache
def _own_docs(cls: type) -> dict[str, str]:
    """The docstrings of the fields `cls` itself declares, by field name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring, one paragraph (line breaks joined), for `cls` and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object and "__dataclass_fields__" in vars(klass):
            docs.update(_own_docs(klass))
    return {name: " ".join(text.split()) for name, text in docs.items()}


def class_doc(cls: type) -> str:
    """The class's own docstring as one paragraph, or '' (a dataclass without one gets a
    generated signature as `__doc__`, which is not documentation)."""
    doc = vars(cls).get("__doc__") or ""
    return "" if doc.startswith(f"{cls.__name__}(") else " ".join(doc.split())


def field_default(field: dataclasses.Field):
    """The field's default value (its factory called), or dataclasses.MISSING for a required one."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING
