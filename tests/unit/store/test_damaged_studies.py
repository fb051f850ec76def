"""Damaged and hostile studies (issue #29), through the real CLI in a child process: no command
ends in a traceback, each names what it could not read, the read-only commands (`status`,
`report`) move and delete nothing, and nothing outside the study is touched by any command.

One finished smoke study (recorded without Ray, `test_damage.record_study`), damaged in every
way at once, is read by `status` and `report`, then run by `sweeper run` (which has nothing to
train: one Ray start); the tests below each check one kind of damage on those three outputs.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_damage import CLS, sweeper_cli
from sweeper.run.lease import read_lease, stale_reason, take_lease
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table, table_dir
from sweeper.store.state_files import set_aside_misplaced

JOURNAL_GARBAGE = bytes(range(256)) * 8 + b"\n"


"""State files that parse as JSON of another shape than the one the study writes."""


def output(result) -> str:
    return result.stdout + result.stderr


# Status and report only: the damage would make `sweeper run` pretrain or fine-tune again.

def test_status_names_what_it_cannot_read_and_accounts_for_every_planned_trial(recorded_study):
    study, plan = recorded_study
    parts = sorted((study / "results" / "trials" / CLS).glob("part-*.parquet"))
    no_status = pq.read_table(parts[0]).drop_columns(["status"])
    pq.write_table(no_status, parts[0])
    table = pq.read_table(parts[1])
    index = table.schema.get_field_index("status")
    pq.write_table(table.set_column(index, "status", pa.array(["weird"] * table.num_rows)), parts[1])
    done = study / "pretraining" / "nano-clm-40" / "sweeper_done.json"
    done.unlink()
    done.mkdir()
    (study / "live.json").write_text('{"updated_at": "soon", "host": 5, "pid": "x", "running_trials": []}')
    progress = study / "pretraining" / "nano-clm-40" / "progress.json"
    progress.write_text('["not", "an", "object"]')
    spec_plan = study / "specs" / "001-abc.plan.json"
    spec_plan.parent.mkdir()
    spec_plan.write_text('{"trial_keys": "abc", "resolved": [1]}')

    status = sweeper_cli("status", str(study))
    assert status.returncode == 0 and "Traceback" not in output(status), output(status)
    out = status.stdout
    assert "40 result rows (32 trials): 32 ok, 0 running, 4 pending, 0 diverged, 0 failed, 4 unclassified" in out
    assert f"results/trials/{CLS}/{parts[0].name}: rows without status" in out
    assert out.count("unclassified nano-") == 4 and "status 'weird'" in out
    assert "pretraining/nano-clm-40/sweeper_done.json: a folder, not a file" in out
    assert "pending  nano-clm-40" in out
    assert "live.json: fields of the wrong shape: updated_at is 'soon', host is 5, pid is 'x'" in out
    assert "pretraining/nano-clm-40/progress.json: a JSON array, not a JSON object" in out

    report = sweeper_cli("report", str(study))
    assert report.returncode == 0 and "Traceback" not in output(report), output(report)
    assert f"`results/trials/{CLS}/{parts[0].name}`: rows without status" in (study / "report.md").read_text()
    assert parts[0].exists() and not (study / "quarantine").exists()


def test_run_sets_aside_what_is_not_a_file_where_the_study_writes_one(recorded_study):
    """`sweeper run`'s first step, in process (a real run would pretrain the run again)."""
    study, _ = recorded_study
    layout = StudyLayout(str(study))
    done = study / "pretraining" / "nano-clm-40" / "sweeper_done.json"
    done.unlink()
    (done / "inside").mkdir(parents=True)
    os.mkfifo(study / "resolved.json")
    assert set_aside_misplaced(layout) == ["resolved.json", "pretraining/nano-clm-40/sweeper_done.json"]
    assert (study / "quarantine" / "pretraining" / "nano-clm-40" / "sweeper_done.json" / "inside").is_dir()
    assert not done.exists() and not (study / "resolved.json").exists()
    assert "a FIFO, not a file" in (study / "quarantine" / "resolved.json.why.txt").read_text()


def test_run_never_writes_nor_deletes_through_a_linked_work_folder(recorded_study, tmp_path):
    """Tune's state folder a link out of the study: `sweeper run` removes a shard's Tune state
    after the shard, which would delete the outside folder's contents; the link is set aside."""
    study, _ = recorded_study
    elsewhere = tmp_path / "elsewhere" / "finetune-shard-0000"
    elsewhere.mkdir(parents=True)
    (elsewhere / "keep.txt").write_text("someone else's")
    (study / "tune").symlink_to(elsewhere.parent, target_is_directory=True)
    assert set_aside_misplaced(StudyLayout(str(study))) == ["tune"]
    assert (study / "quarantine" / "tune").is_symlink() and not os.path.lexists(study / "tune")
    assert (elsewhere / "keep.txt").read_text() == "someone else's"


def test_a_quarantine_that_is_a_link_is_never_used(recorded_study, tmp_path):
    study, _ = recorded_study
    layout = StudyLayout(str(study))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (study / "quarantine").symlink_to(elsewhere, target_is_directory=True)
    part = sorted((Path(table_dir(layout, TRIALS)) / CLS).glob("part-*.parquet"))[0]
    part.write_bytes(b"")
    assert read_table(layout, TRIALS).num_rows == 36, "left out of the read"
    assert part.exists() and list(elsewhere.iterdir()) == [], "nothing moved, nothing written outside"


def test_a_lease_file_of_the_wrong_shape_or_a_folder_is_taken_over_at_once(tmp_path):
    location = tmp_path / "lease.json"
    location.write_text(json.dumps({"token": "t", "host": socket.gethostname(), "pid": "not-a-pid",
                                    "since": time.time(), "heartbeat_at": time.time()}))
    holder = read_lease(str(location))
    assert stale_reason(holder) == "its lease file is not a lease (pid is 'not-a-pid')"
    lease = take_lease(str(location))
    assert lease.took_over_because.startswith("its lease file is not a lease")
    lease.release()
    location.mkdir()
    with pytest.raises(OSError, match="a folder"):  # nowhere to set it aside: named, not written through
        take_lease(str(location))
    lease = take_lease(str(location), study=StudyLayout(str(tmp_path)))
    assert "a folder" in lease.took_over_because and location.is_file()
    assert (tmp_path / "quarantine" / "lease.json").is_dir(), "set aside, not removed"
    lease.release()


def test_a_garbage_journal_is_rebuilt_from_the_store_when_a_search_starts(tmp_path):
    """The Optuna journal Optuna cannot read (a UnicodeDecodeError at main): set aside, and the
    cell's study rebuilt from the recorded samples."""
    import optuna
    import test_optuna_search as search_tests

    from sweeper.plan.load import load_study
    from sweeper.plan.study_plan import plan_study
    from sweeper.run.recording import trial_row
    from sweeper.store.results import write_rows

    text = search_tests.re.sub(r"  tasks: .*?\]\n", "  tasks: [wordnet-supersense-cls]\n",
                               search_tests.SMOKE.replace(*search_tests.OPTUNA, 1), count=1, flags=search_tests.re.S)
    (tmp_path / "spec.yaml").write_text(text)
    spec = load_study(tmp_path / "spec.yaml").spec
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path / "study"))
    shard, searcher = search_tests.start_search(spec, plan, layout)
    first = search_tests.run_sample(shard, searcher, ["a", "b"], lambda c: 60.0 + c["seed_index"])
    rows = [trial_row("s", shard.trial(c), {"validation_score": 60.0 + c["seed_index"], "test_score": 1.0}, "ok",
                      None) for c in first]
    write_rows(layout, TRIALS, rows)
    journal = tmp_path / "study" / "optuna" / "journal.log"
    journal.write_bytes(JOURNAL_GARBAGE)

    shard, searcher = search_tests.start_search(spec, plan, layout, {r["trial_key"] for r in rows})
    assert searcher.suggest("c")["sample"] == 1
    study = optuna.load_study(study_name=searcher.cells[0].study_name, storage=search_tests.journal(tmp_path / "study"))
    recorded, asked = study.trials
    assert recorded.user_attrs == {"sample": 0, "from_store": True} and recorded.value == pytest.approx(60.5)
    assert (tmp_path / "study" / "quarantine" / "optuna" / "journal.log").read_bytes() == JOURNAL_GARBAGE
    assert storage.exists(str(journal))
