"""The study's state files as `sweeper run` finds them before it writes: what is not a file where
a file goes, and an Optuna journal Optuna cannot read, are set aside (sweeper.store.quarantine),
saying so, so that the run writes its own files and rebuilds what it needs from the record.

The read-only commands never call this: they name what they cannot read and leave it in place.
"""
from __future__ import annotations

import json
import os

from sweeper.store import quarantine, storage
from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout

RUN_MARKERS = ("sweeper_run.json", "sweeper_done.json", "sweeper_failed.json", "progress.json")


def state_files(layout: StudyLayout) -> list[str]:
    """The local files a run reads and writes by name: the study's own, each run's markers and
    each checkpoint's marker (found by listing; an object store has no folders to misplace)."""
    if storage.is_remote(layout.root):
        return []
    found = [layout.spec, layout.plan, layout.resolved, layout.live, layout.report, layout.optuna_journal]
    for run in storage.list_names(layout.pretraining, folders=True):
        folder = storage.join(layout.pretraining, run)
        found += [storage.join(folder, name) for name in RUN_MARKERS]
        found += [storage.join(folder, step, CHECKPOINT_MARKER)
                  for step in storage.list_names(folder, folders=True) if step.startswith("step-")]
    found += [storage.join(layout.specs, name) for name in storage.list_names(layout.specs)]
    return found


WORK_FOLDERS = ("tune", "optuna", "logs", "specs", "figures")
"""Folders the run writes into, and Tune's state it removes after each shard: a link there would
have it write, or delete, outside the study. (`results/` is the store's: sweeper.store.results;
`pretraining/` and `cache/` may be links a user made to another disk, and are followed.)"""


def linked_work_folders(layout: StudyLayout) -> list[str]:
    """The `WORK_FOLDERS` of a local study that are links, or not folders."""
    if storage.is_remote(layout.root):
        return []
    found = [layout.path(name) for name in WORK_FOLDERS]
    return [f for f in found if os.path.islink(f) or (os.path.lexists(f) and not os.path.isdir(f))]


def set_aside_misplaced(layout: StudyLayout) -> list[str]:
    """Before `sweeper run` writes: set aside each state file that is not a file (a folder, a FIFO,
    a broken link), each work folder that is a link or not a folder, and a journal that does not
    parse; print what was set aside; return it."""
    moved = [quarantine.relative(layout, location) for location in linked_work_folders(layout)
             if quarantine.set_aside(layout, location, quarantine.link_text(location) if os.path.islink(location)
                                     else "not a folder")]
    moved += quarantine.set_aside_non_files(layout, state_files(layout))
    for location in moved:
        print(f"[study] {location} was not what the study writes there: set aside in quarantine/ (read as absent; "
              "the run writes its own)", flush=True)
    if set_aside_damaged_journal(layout):
        moved.append(quarantine.relative(layout, layout.optuna_journal))
    return moved


def journal_problem(location: str) -> str | None:
    """Why the journal at `location` cannot be opened by Optuna, or None (also when there is none).
    Optuna reads every line as JSON and applies it: a line that is not UTF-8 JSON, or not one of
    its records (an object with an `op_code`), stops it. A last line without its newline is an
    append a killed driver left half done, which Optuna skips: not damage."""
    if why := storage.not_a_file(location):
        return why
    try:
        data = storage.read_bytes(location)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be read ({error})"
    lines = data.split(b"\n")[:-1]  # the part after the last newline: an append cut short
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            return f"line {number} is not JSON ({' '.join(str(error).split())[:120]})"
        if not (isinstance(record, dict) and isinstance(record.get("op_code"), int)):
            return f"line {number} is not an Optuna journal record"
    return None


def set_aside_damaged_journal(layout: StudyLayout) -> bool:
    """A journal Optuna cannot open is set aside in the study's quarantine (kept, never deleted),
    saying so: the searches start from an empty journal and are rebuilt from the results store,
    the record (`CellSearcher.reconcile` adds each cell's recorded samples as its search starts).
    True when one was set aside."""
    location = layout.optuna_journal
    why = journal_problem(location)
    if why is None:
        return False
    if not quarantine.set_aside(layout, location, why):
        raise OSError(f"the Optuna journal {storage.display(location)} does not parse ({why}) and could not be "
                      "set aside: move it away, and the searches are rebuilt from the results store")
    print(f"[search] the Optuna journal {quarantine.relative(layout, location)} does not parse ({why}): set aside in "
          "quarantine/; each cell's search is rebuilt from the results store as it starts", flush=True)
    return True
