"""A checkpoint source is a tree the study may read, and nothing else (docs/security.md).

A local source folder is given by whoever wrote the spec, but its files may come from anyone: a
weight file that is a link to `/etc/passwd` must not be hashed into a key, copied into the
study or uploaded with it. Every file the plan hashes and the import copies must therefore
resolve (all links followed) to a regular file inside the source folder itself or, for a folder
laid out as the Hugging Face hub cache lays out a snapshot
(`<cache>/models--org--name/snapshots/<commit>/<file> -> ../../blobs/<sha>`), inside that
model's own `blobs/`. Anything else (a link out of the tree, a FIFO, a device, a folder) is
refused naming the file and where it points.

Reading is bounded as for any hostile input: `read_json` stats the file before it reads it
(`MAX_JSON_BYTES`) and measures its nesting before it parses it (`MAX_JSON_DEPTH`), so a 3 GiB
config or ten thousand nested brackets is a one-line refusal, never a MemoryError or a
RecursionError. `open_inside` opens what was checked without following a link in its last
component and compares the opened file with the one checked (device and inode): a file swapped
for a link between the check and the open is refused, not read (the import also hashes what it
copied against the plan's key).
"""
from __future__ import annotations

import json
import os
import re
import stat

MAX_JSON_BYTES = 1 << 20
"""Largest config.json / tokenizer_config.json / shard index read (a real one is a few KiB;
a shard index of a 400-layer model some 100 KiB)."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of brackets accepted in those files (a real config nests 3 or 4 levels)."""
HUB_BLOBS = "blobs"
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


class OutsideSource(ValueError):
    """A file of a source that is not a regular file inside the source's tree: `str()` says which
    and where it points."""


def allowed_roots(folder: str) -> tuple[str, ...]:
    """The real folders files of `folder` may resolve into: itself, and for a hub-cache snapshot
    (`models--*/snapshots/<commit>`) its model's `blobs/` beside `snapshots/`."""
    real = os.path.realpath(folder)
    snapshots, model = os.path.dirname(real), os.path.dirname(os.path.dirname(real))
    if os.path.basename(snapshots) == "snapshots" and os.path.basename(model).startswith("models--"):
        return real, os.path.join(model, HUB_BLOBS)
    return (real,)


def points_to(path: str) -> str:
    """Where a link points (its text, then its end), or '' for a file that is no link."""
    if not os.path.islink(path):
        return ""
    try:
        return f" (a link to {os.readlink(path)}, which resolves to {os.path.realpath(path)})"
    except OSError:
        return " (a link that cannot be read)"


def inside(folder: str, name: str) -> str:
    """The real path of the file `name` of the local `folder`, once checked to be a regular file
    inside the folder's tree (`allowed_roots`); OutsideSource otherwise."""
    if not name or os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise OutsideSource(f"{name!r} is not a file name inside {folder}")
    path = os.path.join(folder, name)
    real = os.path.realpath(path)
    if not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in allowed_roots(folder)):
        raise OutsideSource(f"{path} resolves outside the source folder{points_to(path)}: a checkpoint's files "
                            "must lie in its own folder (or, for a hub-cache snapshot, in its model's blobs/)")
    try:
        mode = os.stat(real).st_mode
    except OSError as error:
        raise OutsideSource(f"{path} cannot be read{points_to(path)}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise OutsideSource(f"{path} is not a regular file{points_to(path)}")
    return real


def check_inside(folder: str, names) -> None:
    """`inside` for each of `names` (the first one that is not raises)."""
    for name in names:
        inside(folder, name)


def open_inside(folder: str, name: str):
    """A binary file object of `name` in `folder`, opened without following a link in its last
    component, and checked to be the very file `inside` approved (device and inode)."""
    real = inside(folder, name)
    checked = os.stat(real)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(real, flags)
    except OSError as error:
        raise OutsideSource(f"{os.path.join(folder, name)} changed while it was read: {error.strerror}") from None
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino) or not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        raise OutsideSource(f"{os.path.join(folder, name)} changed while it was read (another file took its place)")
    return os.fdopen(fd, "rb")


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of JSON `text` (brackets inside strings not counted)."""
    depth = deepest = 0
    for char in _STRINGS.sub('""', text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def read_json(folder: str, name: str):
    """The JSON value of the file `name` of the local `folder`, read like hostile input: inside
    the source's tree, at most MAX_JSON_BYTES (checked before reading) and MAX_JSON_DEPTH deep.
    ValueError (OutsideSource among them) with a one-line reason otherwise."""
    with open_inside(folder, name) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_JSON_BYTES:
            raise ValueError(f"is {size:,} bytes, more than the {MAX_JSON_BYTES:,} read of such a file")
        data = handle.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"holds more than the {MAX_JSON_BYTES:,} bytes read of such a file")
    return parse_json(data)


def parse_json(data: bytes):
    """`data` as JSON, within MAX_JSON_DEPTH; ValueError with a one-line reason."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"is not UTF-8 text ({error.reason} at byte {error.start})") from None
    if (depth := nesting_depth(text)) > MAX_JSON_DEPTH:
        raise ValueError(f"nests {depth} levels deep, more than the {MAX_JSON_DEPTH} accepted")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"is not JSON: {str(error).splitlines()[0][:200]}") from None
