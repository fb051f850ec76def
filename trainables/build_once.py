"""Build a cache directory once, atomically, even when several processes race for it."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def build_directory_once(out: Path, marker: str, build: Callable[[Path], None]) -> None:
    """Run `build(tmp)` into a private folder and rename it to `out` unless `out/marker` exists.

    The rename is atomic, so readers see a whole directory or none; a process that loses the
    race drops its own copy (both were built from the same inputs).
    """
    if (out / marker).exists():
        return
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    try:
        tmp.rename(out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
