"""A local file replaced whole: written under a temporary name, fsynced, renamed into place, its
folder fsynced (sweeper.store.storage's guarantee for a disk); a write that fails (a full disk)
takes its temporary file with it."""
from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path


def sync_path(path: str | Path) -> None:
    """fsync a local file or folder (a folder: the names in it, so a rename in it survives a
    power loss). A filesystem that cannot sync a folder (EINVAL) is left as it is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def replace_file(target: Path, data: bytes) -> None:
    """Replace the file `target` whole: a reader sees the old content or the new, never a part,
    and a power loss keeps one of the two (the file, then its folder, fsynced)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    with removed_on_error(tmp, target):
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes on disk before the name: never an empty file after a power loss
        os.replace(tmp, target)
    sync_path(target.parent)  # the rename itself


@contextlib.contextmanager
def removed_on_error(tmp: str | Path, target: str | Path):
    """Remove the local temporary file `tmp` when the block fails (a full disk: ENOSPC at a write
    or at fsync), so no half-written file stays to take the space a rerun needs; the error goes on,
    naming `target` when it named no file (a write's ENOSPC names none)."""
    try:
        yield
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(error, OSError) and error.filename is None:
            error.filename = str(target)
        raise
