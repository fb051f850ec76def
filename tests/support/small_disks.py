"""A full disk for tests (issue #57): a real size-limited filesystem, a tmpfs mounted for the test
(it needs the right to mount: root, or CAP_SYS_ADMIN; the test is skipped where the machine
refuses), and a filler that takes its last byte, so the next write fails with ENOSPC."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(disk: Path, size: str):
    """A tmpfs of `size` mounted at the new folder `disk` (the test is skipped where mounting is
    refused), unmounted at the end."""
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()[:200]}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill the disk with one file, but for `leave` bytes (room for a few small files, not a
    large one); returns the file (deleting it frees the space). The space is taken in one call
    (fallocate), so a process writing small files beside meanwhile never meets a full disk."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb", buffering=0) as handle:  # unbuffered: nothing left to flush at close
        if free > leave:
            os.posix_fallocate(handle.fileno(), 0, free - leave)
        if leave == 0:
            handle.seek(0, os.SEEK_END)
            try:  # whatever the filesystem's accounting left over, to the last byte
                while True:
                    handle.write(b"\0" * 4096)
            except OSError as error:
                assert error.errno == errno.ENOSPC
    return filler


def leftovers(disk: Path) -> list[str]:
    """Temporary files and folders below `disk` (`.name.tmp-<pid>`, `name.tmp-...`, the
    checkpoint folders `sweeper-ckpt-...` built before publishing)."""
    return sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if ".tmp" in p.name or "sweeper-ckpt-" in p.name)
