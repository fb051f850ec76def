"""The study's quarantine: what `sweeper run` sets aside rather than reads, each with a note.

    <study>/quarantine/<table>/<partition>/<part>   a store part that cannot be read (sweeper.store.results)
    <study>/quarantine/<path in the study>          anything else: a folder where a marker or plan.json
                                                    should be, a link where the store keeps a folder or
                                                    a part, an Optuna journal that does not parse
    beside each, `<name>.why.txt`: its place in the study, when, why.

Nothing is deleted: a thing set aside is moved (a rename on a disk), and the user deletes it
once inspected. Two rules keep the moves inside the study:
- Only `sweeper run`, which holds the study's lease, moves anything. `sweeper status` and
  `sweeper report` name what they cannot read and leave it in place (their readers take a
  `noted` dict instead of moving; docs/security.md).
- A move never follows a link. What is moved is the name in the study: a link is set aside as a
  link and its target is left untouched (`os.rename` renames the link itself). A quarantine
  folder that is itself a link, or lies under one, is not used (`link_on_the_way`), so no note
  and no file lands outside the study.
"""
from __future__ import annotations

import os
import sys
import time
from datetime import datetime, UTC

from sweeper.store import storage
from sweeper.store.layout import StudyLayout

NOTE_SUFFIX = ".why.txt"
"""A quarantined thing's note: `<name>.why.txt` beside it."""


def relative(layout: StudyLayout, location: str) -> str:
    """`location` as a path inside the study (credentials and query left out)."""
    root, text = storage.display(layout.root).rstrip("/"), storage.display(location)
    return text[len(root) + 1:] if text.startswith(root + "/") else text


def link_on_the_way(layout: StudyLayout, location: str) -> str | None:
    """The first link (relative to the study) between the study's root and the local `location`,
    itself included, or None (always None in an object store, which has no links)."""
    if storage.is_remote(location):
        return None
    path = relative(layout, location)
    if path == location:  # not inside the study at all
        return location
    current = layout.root
    for part in path.split("/"):
        current = storage.join(current, part)
        if os.path.islink(current):
            return relative(layout, current)
    return None


def link_text(location: str) -> str:
    """`a link (to <target>)`: how a link the study should not hold is named."""
    try:
        return f"a link (to {os.readlink(location)}), not a file the study wrote"
    except OSError:
        return "a link, not a file the study wrote"


def set_aside(layout: StudyLayout, location: str, why: str, target: str | None = None, then: str = "") -> bool:
    """Move `location` (a file, a folder, a link: the name itself, never what a link points to)
    to `target` (default: the same path under `<study>/quarantine/`; a stamp is added when that
    is taken), beside its note. The note is written first: a process killed between the two leaves
    the thing in place with a note, and the next `sweeper run` moves it. Says so in one line on
    stdout, as `sweeper report` names what it finds: the file (its place in the study), why, where
    it went, and `then` (what follows for the study). False (and a line on stderr) when it cannot
    be moved: a read-only study, or a quarantine folder behind a link."""
    target = target or storage.join(layout.quarantine, relative(layout, location))
    if not storage.is_remote(target) and (os.path.lexists(target) or os.path.lexists(target + NOTE_SUFFIX)):
        target = f"{target}.{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    note = storage.join(storage.parent(target), storage.name(target) + NOTE_SUFFIX)  # a URI keeps its query
    at = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        if link := link_on_the_way(layout, storage.parent(target)):
            raise OSError(f"{link} is a link: the quarantine must lie inside the study")
        storage.write_text(note, f"file: {relative(layout, location)}\nquarantined_at: {at}\nreason: {why}\n")
        if storage.is_remote(location):
            fs, source_path = storage.filesystem(location)
            fs.move(source_path, storage.filesystem(target)[1])  # copy + delete in an object store
        else:
            os.rename(location, target)  # the name itself: a link is moved as a link
            storage.sync_path(storage.parent(target))
            storage.sync_path(storage.parent(location))
    except OSError as error:
        if not storage.is_remote(location) and not os.path.lexists(location) \
                or storage.is_remote(location) and not storage.exists(location):
            return True  # set aside meanwhile by another reader
        try:
            storage.remove(note)
        except OSError:
            pass
        print(f"[store] damaged {storage.display(location)} ({why}) could not be set aside: {error}; "
              "it is left out of this read", file=sys.stderr, flush=True)
        return False
    print(f"[store] damaged {relative(layout, location)}: {why}; set aside in quarantine/ "
          f"({relative(layout, target)}){then}", flush=True)
    return True


def quarantined(layout: StudyLayout) -> list[dict]:
    """What was set aside so far, from the notes: `file` (its place in the study),
    `quarantined_at`, `reason`, and `note` (the note's location); oldest first."""
    notes = []
    for name in storage.file_sizes(layout.quarantine):
        if not name.endswith(NOTE_SUFFIX):
            continue
        location = storage.join(layout.quarantine, name)
        try:
            text = storage.read_text(location)
        except (OSError, ValueError):  # a note that cannot be read: named by its own place
            text = ""
        fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        notes.append({"file": fields.get("file", relative(layout, location)),
                      "quarantined_at": fields.get("quarantined_at", ""), "reason": fields.get("reason", ""),
                      "note": location})
    return sorted(notes, key=lambda n: (n["quarantined_at"], n["file"]))


def set_aside_non_files(layout: StudyLayout, locations: list[str]) -> list[str]:
    """`sweeper run`, before it writes: each of `locations` (files the study writes: plan.json,
    markers, the journal) that is there but is not a regular file (a folder, a FIFO, a link to
    one) is set aside, so the run can write its file. Returns what was set aside (relative)."""
    moved = []
    for location in locations:
        why = storage.not_a_file(location)
        if why is None and not storage.is_remote(location) and os.path.islink(location) \
                and not os.path.exists(location):
            why = "a broken link, not a file"
        if why is not None and set_aside(layout, location, why):
            moved.append(relative(layout, location))
    return moved
