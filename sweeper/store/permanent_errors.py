"""Store errors that no retry mends (a full disk, a forbidden folder, refused credentials, a
missing bucket), said in one line naming where; transient ones are sweeper.store.filesystems'."""
from __future__ import annotations

import errno

from sweeper.store.storage import display, redact

LOCATION_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                   errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                   errno.EPERM: "operation not permitted"}
"""Errors of a local location that no retry mends: the disk or the folder's rights must change."""
PERMANENT_MARKS = ("ACCESS_DENIED", "AccessDenied", "NO_SUCH_BUCKET", "NoSuchBucket", "INVALID_ACCESS_KEY_ID",
                   "InvalidAccessKeyId", "SIGNATURE_DOES_NOT_MATCH", "SignatureDoesNotMatch", "EXPIRED_TOKEN")
"""What pyarrow's error says when an object store refuses the credentials or has no such bucket."""


def permanent_line(error: OSError, where: str | None = None) -> str | None:
    """One line naming the location and the reason, for an error that stops a study until a person
    acts (a full disk, a read-only or forbidden folder, refused credentials, a missing bucket); None
    for any other error (a bug's traceback stays a traceback). The line names the file the error
    names, else `where` (the command's study), and carries no credentials."""
    if error.errno in LOCATION_ERRNOS:
        where = error.filename or (f"a file in {display(where)}" if where else "the study's location")
        return f"{where}: {LOCATION_ERRNOS[error.errno]} (errno {errno.errorcode[error.errno]})"
    text = str(error)
    if any(mark in text for mark in PERMANENT_MARKS):
        return redact(" ".join(text.split())[:400])
    return None
