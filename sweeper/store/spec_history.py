"""The study's spec history: every spec the study ran, kept, never overwritten.

`sweeper run` keeps the spec it runs as `specs/<n>-<hash>.yaml` (credentials left out, as
`spec.yaml`, which stays the latest's copy) with what it planned beside it,
`specs/<n>-<hash>.plan.json`: its trial keys and cells, its runs' keys, its resolved settings
and when it first ran. `<n>` counts the specs in the order they ran; `<hash>` is the spec text's.
Running the spec that ran last again (a resume) adds nothing; running an earlier one again
adds it anew, as the latest. The report reads the record to say which spec produced each
recorded trial (sweeper.report.study_history).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, UTC

from sweeper.store import storage
from sweeper.store.layout import StudyLayout

PLAN_SUFFIX = ".plan.json"


@dataclass(frozen=True, slots=True)
class SpecEntry:
    """One kept spec: its name (`<n>-<hash>`) and what it planned (the `.plan.json`)."""

    name: str
    plan: dict

    @property
    def number(self) -> int:
        return int(self.name.split("-", 1)[0])

    @property
    def trial_keys(self) -> list[str]:
        keys = self.plan.get("trial_keys")
        return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def entries(layout: StudyLayout, damaged: Callable[[str, str], None] | None = None) -> list[SpecEntry]:
    """The kept specs, oldest first; an unreadable `.plan.json` is told to `damaged` and left out."""
    found = []
    for name in storage.list_names(layout.specs, folders=False):
        entry = name.removesuffix(PLAN_SUFFIX)
        if name == entry or not entry.split("-", 1)[0].isdigit():
            continue
        plan = storage.read_json(layout.spec_plan(entry), default=None, damaged=damaged, kind=dict)
        if isinstance(plan, dict):
            found.append(SpecEntry(entry, plan))
    return sorted(found, key=lambda e: e.number)


def keep_spec(layout: StudyLayout, text: str, plan: dict) -> str:
    """Keep the spec `text` (credentials already left out) and its `plan` as the next entry,
    unless the latest entry is the same spec with the same trial keys; returns the entry's name.
    The spec is written first and its plan last: an entry (found by its plan) has its spec."""
    kept = entries(layout)
    if kept and kept[-1].name.endswith(f"-{digest(text)}") and kept[-1].trial_keys == plan.get("trial_keys"):
        return kept[-1].name
    name = f"{(kept[-1].number if kept else 0) + 1:03d}-{digest(text)}"
    storage.make_dirs(layout.specs)
    storage.write_text(layout.spec_copy(name), text)
    storage.write_json(layout.spec_plan(name), {"ran_at": datetime.now(UTC).isoformat(timespec="seconds"),
                                                **plan}, indent=None)
    return name
