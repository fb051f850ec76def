"""A study nothing can break: a damaged Parquet part is set aside (named, kept, never silently
dropped) and its trials run again; a damaged JSON marker reads as absent; every write is fsynced."""
from __future__ import annotations

import os
import re
import time
from datetime import datetime, UTC
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.recording import trial_row
from sweeper.store import folders, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import (
    TRIALS, compact, finished_trial_keys, quarantined, read_table, read_trials, table_dir, write_rows,
)

from cli_process import sweeper_cli
from conftest import ROOT

SMOKE = ROOT / "search_spaces" / "smoke.yaml"
CLS = "task=wordnet-supersense-cls"


def damage(path: Path, kind: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"zero-length": b"", "truncated": data[:len(data) // 2],
                      "garbage": b"not parquet at all\n" * 40}[kind])


def rows_for(trials, study: str) -> list[dict]:
    now = datetime.now(UTC)
    return [{**trial_row(study, t, {"validation_score": 50.0 + t.seed, "test_score": 49.0 + t.seed + len(t.task) % 3,
                                    "train_loss": 0.5, "train_steps": 8, "wall_time_s": 1.0}, "ok", None),
             "finished_at": now} for t in trials]


@pytest.fixture
def recorded_study(tmp_path):
    """The smoke study as `sweeper run` leaves it, without Ray: its spec, plan, done markers,
    heartbeat, and every trial row, written in two batches (seed 0, then seed 1) so each task
    partition holds two parts. Returns (study folder, plan)."""
    return record_study(tmp_path / "study")


def record_study(study: Path, checkpoints: bool = False):
    """`recorded_study`'s study at `study`; with `checkpoints`, an (empty) complete folder for each
    planned checkpoint too, so `sweeper run` finds nothing to do (one Ray start, ~30 s)."""
    layout = StudyLayout(str(study))
    spec = load_study(SMOKE).spec
    plan = plan_study(spec)
    storage.write_text(layout.spec, SMOKE.read_text())
    storage.write_json(layout.plan, {"trials": len(plan.trials), "trial_keys": [t.trial_key for t in plan.trials]})
    for run in plan.runs:
        storage.write_json(layout.run(run.name).done, {"run_key": run.run_key})
    storage.write_json(layout.live, {"pid": os.getpid(), "host": "elsewhere", "running_trials": 0,
                                     "updated_at": time.time()})
    for seed in (0, 1):
        write_rows(layout, TRIALS, rows_for([t for t in plan.trials if t.seed == seed], spec.study))
    if checkpoints:
        for checkpoint in plan.checkpoints:
            storage.write_json(storage.join(layout.checkpoint(checkpoint.run.name, checkpoint.step),
                                            "sweeper_checkpoint.json"), {})
    return study, plan


KINDS = {"zero-length": "task=wordnet-supersense-cls", "truncated": "task=wordnet-supersense-tag",
         "garbage": "task=wordnet-supersense-qa"}
"""Each kind of damage, on a part of its own task: one study holds all three, so its status, report
and rerun's read are paid once for the module (a report draws every figure, ~5 CPU-s) while each
part is still named, kept and set aside on its own."""


@pytest.fixture(scope="module")
def damaged_study(tmp_path_factory):
    """The recorded smoke study with one part of each kind of damage (`KINDS`), an empty live.json
    and a done marker cut short, as `sweeper status`, `sweeper report`, the rerun's read of the
    store and `sweeper status` again see it, in that order. Returns what each step saw."""
    study, plan = record_study(tmp_path_factory.mktemp("damaged") / "study")
    layout = StudyLayout(str(study))
    parts, lost = {}, {}
    for kind, task in KINDS.items():
        part = sorted((Path(table_dir(layout, TRIALS)) / task).glob("part-*.parquet"))[1]
        lost[kind] = set(pq.read_table(part).column("trial_key").to_pylist())
        damage(part, kind)
        parts[kind] = part
    (study / "live.json").write_text("")
    (study / "pretraining" / "nano-clm-40" / "sweeper_done.json").write_text('{"run_key": "fbfb')  # cut short

    status = sweeper_cli("status", str(study))
    in_place_after_status = all(part.exists() for part in parts.values())
    report = sweeper_cli("report", str(study))
    text = (study / "report.md").read_text() if report.returncode == 0 else ""
    in_place_after_report = all(part.exists() for part in parts.values())
    quarantine_after_report = (study / "quarantine").exists()
    # `sweeper run` runs planned minus recorded; its read of the store sets the parts aside.
    missing = {t.trial_key for t in plan.trials} - finished_trial_keys(layout)
    return SimpleNamespace(study=study, layout=layout, parts=parts, lost=lost, status=status, report=report,
                           text=text, in_place_after_status=in_place_after_status,
                           in_place_after_report=in_place_after_report,
                           quarantine_after_report=quarantine_after_report, missing=missing,
                           rows_after=read_table(layout, TRIALS).num_rows,
                           status_after=sweeper_cli("status", str(study)).stdout)


@pytest.mark.long  # the damaged study's status, report and rerun: ~5 s
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_damaged_part_and_markers_are_named_set_aside_and_the_rest_is_reported(damaged_study, kind):
    seen, task = damaged_study, KINDS[kind]
    part, lost = seen.parts[kind], seen.lost[kind]
    assert len(lost) == 4  # the trials of one seed of the four checkpoints on this task

    assert seen.status.returncode == 0, seen.status.stdout + seen.status.stderr
    out = seen.status.stdout
    assert re.search(rf"results/trials/{task}/{part.name}\b.*ArrowInvalid", out), out
    assert "live.json: empty file" in out
    assert "pretraining/nano-clm-40/sweeper_done.json: not JSON" in out
    assert "2 done" in out and "pending  nano-clm-40" in out  # a damaged done marker: not done
    assert "40 result rows (32 trials): 28 ok, 0 running, 12 pending" in out  # 4 lost to each damaged part

    assert "left in place" in out and seen.in_place_after_status, "a read-only command moves nothing"

    assert seen.report.returncode == 0, seen.report.stdout + seen.report.stderr
    assert f"results/trials/{task}/{part.name}" in seen.report.stdout
    text = seen.text
    assert "12 of 40 planned result rows are missing" in text and f"`results/trials/{task}/{part.name}`" in text
    assert "| nano-mlm40-40 |" in text, "the other parts are reported"
    assert seen.in_place_after_report and not seen.quarantine_after_report

    # `sweeper run` runs planned minus recorded: exactly the lost trials, each once.
    assert seen.missing == set().union(*seen.lost.values()) and lost <= seen.missing
    aside = seen.study / "quarantine" / "trials" / task / part.name
    assert aside.exists() and not part.exists(), "moved, not deleted"
    note = (aside.parent / f"{part.name}.why.txt").read_text()
    assert f"file: results/trials/{task}/{part.name}" in note and "reason: ArrowInvalid" in note
    assert f"quarantined_at: {datetime.now(UTC):%Y-%m-%d}" in note
    assert seen.rows_after == 40 - 3 * 4
    assert "damaged files: 3 set aside in quarantine/" in seen.status_after


def test_compaction_sets_a_damaged_part_aside_and_merges_the_rest(tmp_path):
    study = StudyLayout(str(tmp_path))
    plan = plan_study(load_study(SMOKE).spec)
    trials = [t for t in plan.trials if t.task == "wordnet-supersense-cls"]
    for trial in trials:  # one part per trial
        write_rows(study, TRIALS, rows_for([trial], "smoke"))
    parts = sorted((Path(table_dir(study, TRIALS)) / CLS).glob("part-*.parquet"))
    damage(parts[3], "truncated")
    assert compact(study, TRIALS) == len(parts) - 1
    assert [n["file"] for n in quarantined(study)] == [f"results/trials/{CLS}/{parts[3].name}"]
    assert len(list((Path(table_dir(study, TRIALS)) / CLS).glob("part-*.parquet"))) == 1
    assert read_trials(study).num_rows == len(trials) - 1


def test_a_damaged_marker_reads_as_absent_at_once(tmp_path):
    marker = tmp_path / "plan.json"
    marker.write_bytes(b"")
    seen = {}
    started = time.monotonic()
    assert storage.read_json(str(marker), default={}, damaged=seen.__setitem__) == {}
    assert time.monotonic() - started < 1.0, "a local file is not read again"
    assert seen == {str(marker): "empty file"}
    marker.write_bytes(b"\xff\xfe{")
    assert storage.read_json(str(marker)) is None  # no callback: a warning on stderr


# fsync: the file before its name, the folder after the rename.

@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """Paths passed to os.fsync, in order (the fd's path when it was synced)."""
    paths: list[str] = []
    monkeypatch.setattr(os, "fsync", lambda fd: paths.append(os.readlink(f"/proc/self/fd/{fd}")))
    return paths


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to name a file descriptor")
def test_write_json_fsyncs_the_file_then_its_folder(tmp_path, synced):
    storage.write_json(str(tmp_path / "m" / "live.json"), {"x": 1})
    assert len(synced) == 2
    assert Path(synced[0]).parent == tmp_path / "m" and Path(synced[0]).name.startswith(".live.json.tmp")
    assert synced[1] == str(tmp_path / "m")


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to name a file descriptor")
def test_write_rows_fsyncs_each_part_then_its_folder(tmp_path, synced):
    plan = plan_study(load_study(SMOKE).spec)
    files = write_rows(StudyLayout(str(tmp_path)), TRIALS, rows_for(plan.trials[:2], "smoke"))
    assert len(files) == 1 and len(synced) == 2
    folder = str(Path(files[0]).parent)
    assert synced == [f"{folder}/.{Path(files[0]).name}.tmp", folder]


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to name a file descriptor")
def test_publish_tree_fsyncs_every_file_and_folder_then_the_parent(tmp_path, synced):
    run = tmp_path / "run"
    build = run / "tmp-ckpt"
    (build / "sub").mkdir(parents=True)
    for name in ("model.safetensors", "sub/tokenizer.json", "sweeper_checkpoint.json"):
        (build / name).write_text("{}")
    folders.publish_tree(build, str(run / "step-10"), "sweeper_checkpoint.json")
    assert (run / "step-10" / "sweeper_checkpoint.json").exists()
    files = {str(build / n) for n in ("model.safetensors", "sub/tokenizer.json", "sweeper_checkpoint.json")}
    assert set(synced[:3]) == files
    assert synced[3:] == [str(build / "sub"), str(build), str(run)], "folders after their files, the parent last"


# The e2e case (`sweeper run` after a truncated part and empty markers reruns exactly the lost
# trials) runs on the smoke study in tests/e2e/test_smoke_study.py, which is recorded there anyway.
