"""What a spec may name and where it may point: names that become folder names (the study's, a
run's, a checkpoint's from elsewhere) and storage locations (`storage:`, a checkpoint's source or
tokenizer, `--storage`).

A name is a folder name once the study appends what it appends to it (StudyLayout: a changed run
is moved to `<run>.superseded-<key>-<time>`, an imported checkpoint kept as `<name>-<key>`), so
each kind of name has the room that leaves within 255 bytes; no name holds a control or format
character (sweeper.store.storage.folder_name_problem). A location in a spec file carries no
credentials: the file is shared, committed and copied into the study; keys go in the
environment or the provider chain, or on the command line (`--storage`), where the driver keeps
them (docs/security.md).
"""
from __future__ import annotations

from sweeper.store import storage

# What StudyLayout appends (tests/unit/spec/test_parsing.py holds these to its folder names): a key is 16 hex
# digits (sweeper.contract.configs.stable_key), a Unix time 10 digits until the year 2286.
RUN_SUFFIX_BYTES = len(".superseded-") + 16 + len("-") + 10
"""Bytes a run name gets appended in the folder of a changed run (`<run>.superseded-<key>-<time>`)."""
EXTERNAL_SUFFIX_BYTES = len("-") + 16
"""Bytes a checkpoint from elsewhere gets appended in the folder it is imported to (`<name>-<key>`)."""

WHERE_CREDENTIALS_GO = (
    "a spec file is shared and copied into the study, so it names no credentials: give them in the "
    "environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS) or the "
    "provider chain (instance role, workload identity), or on the command line with --storage "
    "s3://KEY:SECRET@bucket/..., which the driver keeps to itself")


def run_name_problem(name: str) -> str | None:
    """Why a planned run's name cannot name its folder (and its superseded folder), or None."""
    return storage.folder_name_problem(name, RUN_SUFFIX_BYTES)


def external_name_problem(name: str) -> str | None:
    """Why the name of a checkpoint from elsewhere cannot name its imported folder, or None."""
    return storage.folder_name_problem(name, EXTERNAL_SUFFIX_BYTES)


def location_problem(location: str, credentials_allowed: bool = False) -> str | None:
    """Why `location` (a path, or an s3:// / gs:// URI) cannot be used, or None: it is empty, holds
    a NUL, names a scheme that is not an object store, an object store without a bucket, or
    (unless `credentials_allowed`: the command line) carries credentials."""
    if not location.strip():
        return "must not be empty (leave an optional key out for its default)"
    if "\x00" in location:
        return "holds a NUL character"
    if problem := storage.scheme_error(location):
        return problem
    if not credentials_allowed and storage.redact(location) != location:
        return f"{storage.display(location)!r} carries credentials (user:secret@): {WHERE_CREDENTIALS_GO}"
    return None
