"""Whole folders on a full disk (issue #57, sweeper.store.folders): ENOSPC from a real tmpfs
(tests/support/small_disks.py) while a folder is built. Nothing of it is left to be trusted or to
take the space, the error is one line naming the folder, and the same build succeeds once space
is freed."""
from __future__ import annotations

from pathlib import Path

import pytest
from small_disks import fill, leftovers, tmpfs

from sweeper.store import folders, storage
from sweeper.store.permanent_errors import PermanentStorageError


def build(folder: Path) -> None:
    (folder / "tokens.bin").write_bytes(b"\1" * 256 * 1024)
    (folder / "meta.json").write_text("{}")  # the marker, last


def test_a_cache_entry_that_fills_the_disk_leaves_nothing_and_is_built_once_space_is_freed(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        entry = str(disk / "study" / "cache" / "tasks" / "sst2-len128-abc")
        Path(entry).parent.mkdir(parents=True)
        filler = fill(disk, leave=64 * 1024)
        with pytest.raises(PermanentStorageError) as raised:
            folders.build_once(entry, "meta.json", build)
        assert str(raised.value) == f"{entry}: no space left on the device (errno ENOSPC)"
        assert leftovers(disk) == [] and not Path(entry).exists(), "no part of the entry, under any name"
        filler.unlink()
        folders.build_once(entry, "meta.json", build)
        assert storage.exists(storage.join(entry, "meta.json")) and leftovers(disk) == []
        assert (Path(entry) / "tokens.bin").stat().st_size == 256 * 1024


def test_a_build_that_fails_otherwise_raises_its_own_error_and_leaves_nothing(tmp_path):
    def broken(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"\0" * 1024)
        raise ValueError("the tokenizer is missing")

    entry = str(tmp_path / "cache" / "entry")
    with pytest.raises(ValueError, match="the tokenizer is missing"):
        folders.build_once(entry, "meta.json", broken)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cache"], "a bug is no storage error; nothing left"
