"""A full disk (issue #57): ENOSPC from a real size-limited filesystem, a 1 MiB tmpfs mounted for
the test (it needs the right to mount: root, or CAP_SYS_ADMIN; skipped where the machine refuses).
A write that runs out of space fails with ENOSPC, leaves what was recorded before as it was and
no half-written file behind, and the same write succeeds once space is freed."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import uuid
from datetime import datetime, UTC
from pathlib import Path

import pytest

from sweeper.store import storage
from sweeper.store.permanent_errors import permanent_line
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_trials, write_rows


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


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 1 MiB tmpfs at tmp_path/disk."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        yield disk


def fill(disk: Path) -> Path:
    """Fill the disk to its last byte with one file; returns it (deleting it frees the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:  # unbuffered: nothing left to flush at close
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


def leftovers(disk: Path) -> list[str]:
    return sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if ".tmp" in p.name)


def row(key: str) -> dict:
    return {"study": "s", "trial_key": key, "checkpoint_id": "c", "task": "sst2", "learning_rate": 1e-3, "seed": 0,
            "status": "ok", "test_score": 50.0, "finished_at": datetime(2026, 1, 1, tzinfo=UTC)}


def test_a_file_rewritten_on_a_full_disk_keeps_its_old_content_and_leaves_no_half_file(small_disk):
    marker = str(small_disk / "run" / "marker.json")
    storage.write_json(marker, {"step": 1})
    filler = fill(small_disk)
    with pytest.raises(OSError) as raised:
        storage.write_json(marker, {"step": 2, "pad": "x" * 64_000})
    assert raised.value.errno == errno.ENOSPC
    assert permanent_line(raised.value) == f"{marker}: no space left on the device (errno ENOSPC)"
    assert storage.read_json(marker) == {"step": 1} and leftovers(small_disk) == []
    filler.unlink()
    storage.write_json(marker, {"step": 2, "pad": "x" * 64_000})
    assert storage.read_json(marker)["step"] == 2


def test_a_results_part_on_a_full_disk_loses_no_recorded_row_and_the_next_write_records(small_disk):
    study = StudyLayout(str(small_disk / "study"))
    write_rows(study, TRIALS, [row("a"), row("b")])
    filler = fill(small_disk)
    many = [row(uuid.uuid4().hex * 8) for _ in range(2000)]  # a part far larger than the space left
    with pytest.raises(OSError) as raised:
        write_rows(study, TRIALS, many)
    assert raised.value.errno == errno.ENOSPC
    assert sorted(read_trials(study).column("trial_key").to_pylist()) == ["a", "b"]
    assert leftovers(small_disk) == [], "no half part beside the recorded ones"
    os.unlink(filler)
    write_rows(study, TRIALS, many)
    assert read_trials(study).num_rows == 2 + len(many)


def test_a_command_that_fills_the_disk_says_so_in_one_line(tmp_path):
    """`sweeper report` of a study on a full disk: one `storage error:` line naming the file it
    could not write (or, where the error names none, the study), exit 1, no traceback (cli.main:
    sweeper.store.filesystems.permanent_line)."""
    from test_damage import record_study, sweeper_cli

    with tmpfs(tmp_path / "disk", "8m") as disk:  # the smoke study's rows and markers need ~1 MiB
        study, _ = record_study(disk / "study")
        fill(disk)
        result = sweeper_cli("report", str(study))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = next(line for line in result.stderr.splitlines() if line.startswith("storage error: "))
    assert str(study) in line and line.endswith("no space left on the device (errno ENOSPC)"), line
