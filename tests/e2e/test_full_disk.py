"""A full disk inside the workers (issue #57): ENOSPC from a real tmpfs (tests/support/small_disks.py)
under a node's cache, and under a study's pretraining folder while a run trains. Each fails only
its own work with one line naming the location, leaves no part that a rerun would trust and the
earlier checkpoints whole, and a rerun after space is freed resumes from the last good state."""
from __future__ import annotations


import pytest
from small_disks import fill, leftovers, tmpfs

from sweeper.store import folders, storage
from sweeper.store.layout import CHECKPOINT_MARKER, RunLayout
from sweeper.store.permanent_errors import PermanentStorageError

from conftest import ROOT
from test_resume import finished_output, start_sweeper, wait_for

pytestmark = pytest.mark.e2e
RUN = "tiny-clm-30-mlm40-60"
ROOM = 64 * 1024
"""Bytes a filled disk keeps free: room for the run's small files (progress, markers), not for a
checkpoint (a tiny model's is about 16 MB)."""


def test_a_node_cache_entry_on_a_full_disk_is_never_half_there(object_store, tmp_path, monkeypatch):
    """A remote checkpoint copied into a node's cache (`$SWEEPER_CACHE`, folders.local_copy) on a
    full disk: one line naming the entry, nothing of it left; once space is freed the copy is made
    and is the checkpoint's content."""
    location = object_store("run/step-20")
    source = tmp_path / "source"
    source.mkdir()
    (source / "model.safetensors").write_bytes(bytes(range(256)) * 1024)
    (source / CHECKPOINT_MARKER).write_text('{"step": 20}')
    folders.publish_tree(source, location, CHECKPOINT_MARKER)
    with tmpfs(tmp_path / "cache", "1m") as cache:
        monkeypatch.setenv("SWEEPER_CACHE", str(cache))
        filler = fill(cache, leave=ROOM)
        with pytest.raises(PermanentStorageError) as raised:
            folders.local_copy(location, CHECKPOINT_MARKER)
        line = str(raised.value)
        assert line.startswith(str(cache)) and line.endswith(
            " (this node's cache: $SWEEPER_CACHE): no space left on the device (errno ENOSPC)"), line
        assert [p.name for p in cache.rglob("*") if p.is_file()] == ["filler"], "no part of the entry"
        filler.unlink()
        copy = folders.local_copy(location, CHECKPOINT_MARKER)
        assert (copy / "model.safetensors").read_bytes() == bytes(range(256)) * 1024 and leftovers(cache) == []


def test_a_run_that_fills_the_disk_fails_alone_and_resumes_once_space_is_freed(ray_head, tmp_path):
    """The study's pretraining folder on a tmpfs, filled once the run's step-10 checkpoint is
    written: its step-20 checkpoint fails, the run is recorded failed with one line (not relaunched:
    the disk is as full at every try), step 10 stays whole and nothing of step 20 is left. Once the
    space is freed, `sweeper run --retry-failed` resumes it from step 10 and finishes the study."""
    study_dir = tmp_path / "study"
    spec = tmp_path / "full_disk.yaml"
    spec.write_text((ROOT / "tests" / "specs" / "worker_kill.yaml").read_text()
                    + "resources: {pretraining_workers: 0}\n")
    run_dir = study_dir / "pretraining" / RUN
    layout = RunLayout(str(run_dir))
    study_dir.mkdir()
    with tmpfs(study_dir / "pretraining", "256m") as disk:
        driver = start_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
        try:
            wait_for(lambda: 10 in layout.saved_checkpoints(), timeout=600, what="the step-10 checkpoint",
                     process=driver, poll_s=0.05)
            filler = fill(disk, leave=ROOM)
            kept = storage.file_sizes(layout.checkpoint(10))
        finally:
            output = finished_output(driver, 900, ray_head[0], str(run_dir))
        assert driver.returncode == 1, output[-5000:]
        assert "Traceback" not in output, output[-5000:]
        line = f"{run_dir}/step-20: no space left on the device (errno ENOSPC)"
        assert f"[pretrain] {RUN} FAILED: {line}; not relaunched" in output, output[-5000:]
        assert "training on from its newest checkpoint" not in output, "a full disk is not relaunched"
        assert storage.read_json(layout.failed)["error"].startswith(line)
        assert sorted(layout.saved_checkpoints()) == [10] and storage.file_sizes(layout.checkpoint(10)) == kept
        assert leftovers(disk) == [], "no half checkpoint beside the whole one"

        filler.unlink()
        rerun = start_sweeper("run", str(spec), "--storage", str(study_dir), "--retry-failed", address=ray_head[0])
        output = finished_output(rerun, 900, ray_head[0], str(run_dir))
        assert rerun.returncode == 0, output[-5000:]
        assert f"[pretrain {RUN}] resumed from step 10" in output, output[-5000:]
        assert layout.is_done(storage.read_json(layout.started)["run_key"]) and 60 in layout.saved_checkpoints()
        assert leftovers(disk) == []
