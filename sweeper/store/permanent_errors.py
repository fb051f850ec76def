"""Store errors that no retry mends (a full disk, a forbidden folder, refused credentials, a
missing bucket), said in one line naming where and why; which object-store errors are refusals,
and which are transient, is sweeper.store.filesystems'. The driver's own writes:
`permanent_line`. A worker's (a checkpoint, a node's cache entry): `location_line`, raised as a
`PermanentStorageError`, which the driver finds again inside Ray's wrapping (`cause_line`) and
records as the run's or trial's one-line error."""
from __future__ import annotations

import errno
import re

from sweeper.store import storage
from sweeper.store.filesystems import UNEXPLAINED_REFUSAL, refusal
from sweeper.store.storage import display, redact

LOCATION_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                   errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                   errno.EPERM: "operation not permitted"}
"""Errors of a local location that no retry mends: the disk or the folder's rights must change."""
_NAMED_OBJECT = re.compile(r"key '([^']*)' (?:in|to|from) bucket '([^']*)'")
_NAMED_BUCKET = re.compile(r"bucket '([^']*)'")


def permanent_line(error: OSError, where: str | None = None) -> str | None:
    """One line naming the location and the reason, for an error that stops a study until a person
    acts (a full disk, a read-only or forbidden folder, refused credentials, a missing bucket); None
    for any other error (a bug's traceback stays a traceback). The line names the file or object
    the error names, else `where` (the command's study), and carries no credentials."""
    if error.errno in LOCATION_ERRNOS:
        where = error.filename or (f"a file in {display(where)}" if where else "the study's location")
        return f"{where}: {LOCATION_ERRNOS[error.errno]} (errno {errno.errorcode[error.errno]})"
    if (reason := refusal(error)) is None:
        return None
    if reason == UNEXPLAINED_REFUSAL and where and storage.is_remote(where):
        reason = asked_again(where) or reason
    return f"{object_named(str(error)) or (display(where) if where else 'the object store')}: {reason}"


def asked_again(where: str) -> str | None:
    """The reason the store gives for refusing a listing of `where`, or None (listed, or refused
    without a reason too): one GET, whose error answer carries the reason a HEAD's lacks."""
    try:
        storage.list_names(where)
    except OSError as error:
        reason = refusal(error)
        return None if reason == UNEXPLAINED_REFUSAL else reason
    return None


def object_named(text: str) -> str | None:
    """`s3://bucket/key` (or `s3://bucket`) as pyarrow's error names it, or None."""
    if found := _NAMED_OBJECT.search(text):
        return redact(f"s3://{found[2]}/{found[1]}")
    if found := _NAMED_BUCKET.search(text):
        return redact(f"s3://{found[1]}")
    return None


LIBRARY_FULL_DISK = re.compile(r"No space left on device|os error 28\b|kind: StorageFull")
"""How a full disk reads in the errors of libraries that do not raise OSError for it: safetensors
(Rust's `IoError(Os { code: 28, kind: StorageFull, .. })`) and pyarrow and torch, which say the
system's `strerror`."""


class PermanentStorageError(RuntimeError):
    """A worker's write that no retry mends (a full disk, a forbidden folder), its temporary files
    removed; `str(error)` is the one line (`permanent_line`'s wording) naming the location it was
    writing. Raised from the OSError (or library error) it stands for."""

    def __init__(self, line: str):
        super().__init__(line)
        # Ray raises a task's error in the driver as an instance of a class derived from both
        # RayTaskError and the error's class, whose text is the whole traceback: it has no `line`.
        self.line = line


def wrapped(error: BaseException) -> list[BaseException]:
    """The errors `error` stands for: Python's chain, Ray's `cause` (a task's error, raised in
    the driver), Ray Train's `controller_failure` and `worker_failures` (by rank)."""
    inner = [error.__cause__, error.__context__, getattr(error, "cause", None),
             getattr(error, "controller_failure", None)]
    failures = getattr(error, "worker_failures", None)
    inner += list(failures.values()) if isinstance(failures, dict) else []
    return [e for e in inner if isinstance(e, BaseException) and e is not error]


SAID = re.compile(rf"^\S*{PermanentStorageError.__name__}: (.+)$", flags=re.MULTILINE)
"""A PermanentStorageError's line in a traceback's text."""


def cause_line(error: BaseException, seen: set[int] | None = None) -> str | None:
    """The one line of the permanent storage error that `error` stands for (the driver's view of
    a run or trial that failed in a worker), or None: a PermanentStorageError's line, else the
    innermost permanent OSError along `wrapped`, else a PermanentStorageError's line in the text
    of a traceback Ray passed on as text alone (Ray Train's worker group hands its
    workers' errors back inside an exception that prints their tracebacks)."""
    seen = set() if seen is None else seen
    if id(error) in seen:
        return None
    seen.add(id(error))
    if isinstance(error, PermanentStorageError) and hasattr(error, "line"):  # the worker's own line
        return error.line
    for inner in wrapped(error):
        if (line := cause_line(inner, seen)) is not None:
            return line
    if isinstance(error, OSError) and error.errno is not None:
        return permanent_line(error)
    said = SAID.findall(str(error))
    return said[-1] if said else None


def location_line(error: BaseException, where: str) -> str | None:
    """One line naming `where` (the folder a worker was writing: a checkpoint, a cache entry) and
    why no retry mends its write, for `error` or one it wraps: an OSError of `LOCATION_ERRNOS`,
    or a library's full-disk error (`LIBRARY_FULL_DISK`); None for any other error."""
    found, seen = [error], set()
    while found:
        error = found.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, PermanentStorageError) and hasattr(error, "line"):  # said by the write that failed
            return error.line
        if isinstance(error, OSError) and error.errno in LOCATION_ERRNOS:
            return f"{display(where)}: {LOCATION_ERRNOS[error.errno]} (errno {errno.errorcode[error.errno]})"
        if LIBRARY_FULL_DISK.search(str(error)):
            return f"{display(where)}: {LOCATION_ERRNOS[errno.ENOSPC]} (errno ENOSPC)"
        found += [e for e in (error.__cause__, error.__context__) if e is not None]
    return None
