"""Store errors that no retry mends (a full disk, a forbidden folder, refused credentials, a
missing bucket), said in one line naming where and why; which object-store errors are refusals,
and which are transient, is sweeper.store.filesystems'."""
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
