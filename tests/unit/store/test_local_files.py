"""A full disk (issue #57): ENOSPC from a real size-limited filesystem, a 1 MiB tmpfs mounted for
the test (tests/support/small_disks.py: skipped where the machine refuses to mount one).
A write that runs out of space fails with ENOSPC, leaves what was recorded before as it was and
no half-written file behind, and the same write succeeds once space is freed."""
from __future__ import annotations

import errno
import os
import uuid
from datetime import datetime, UTC
from pathlib import Path

import pytest
from small_disks import fill, leftovers, tmpfs

from sweeper.store import storage
from sweeper.store.permanent_errors import permanent_line
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_trials, write_rows


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 1 MiB tmpfs at tmp_path/disk."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        yield disk


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
