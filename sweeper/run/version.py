"""The code version recorded with every result row: package version + git commit when known."""
from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path

from sweeper import __version__


@lru_cache(maxsize=1)
def code_version() -> str:
    """`0.1.0+g1a2b3c4` (`-dirty` with uncommitted changes), or the bare version outside git."""
    root = Path(__file__).resolve().parents[2]  # the repository (sweeper/run/version.py)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{commit}{'-dirty' if dirty else ''}"
