"""Damaged and hostile studies (issue #29), through the real CLI in a child process: no command
ends in a traceback, each names what it could not read, the read-only commands (`status`,
`report`) move and delete nothing, and nothing outside the study is touched by any command.

One finished smoke study (recorded without Ray, `test_damage.record_study`), damaged in every
way at once, is read by `status` and `report`, then run by `sweeper run` (which has nothing to
train: one Ray start); the tests below each check one kind of damage on those three outputs.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_damage import CLS, SMOKE, record_study, recorded_study, sweeper_cli  # noqa: F401 - a fixture
from sweeper.run.lease import read_lease, stale_reason, take_lease
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table, table_dir
from sweeper.store.state_files import set_aside_misplaced

OUTSIDE_PART = b"PAR1 not the study's: a file some other project keeps\n" * 20
JOURNAL_GARBAGE = bytes(range(256)) * 8 + b"\n"


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Relative path -> what is there (a file's sha256, a link's target, 'folder')."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if name.startswith(skip):
            continue
        found[name] = (f"link -> {os.readlink(path)}" if path.is_symlink() else "folder" if path.is_dir()
                       else hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def set_scores(part: Path, checkpoint: str, value: float) -> int:
    """Give the test score `value` to `checkpoint`'s rows of a part; returns how many."""
    table = pq.read_table(part)
    rows = [c == checkpoint for c in table.column("checkpoint_id").to_pylist()]
    scores = [value if hit else score for hit, score in zip(rows, table.column("test_score").to_pylist())]
    index = table.schema.get_field_index("test_score")
    pq.write_table(table.set_column(index, "test_score", pa.array(scores, pa.float64())), part)
    return sum(rows)


WRONG_SHAPES = {"resolved.json": "[1]", "pretraining/nano-mlm40-40/sweeper_run.json": '["x"]',
                "specs/001-abc.plan.json": '"a string"',
                "pretraining/nano-clm-40/step-40/sweeper_checkpoint.json": '{"files": 7}'}
"""State files that parse as JSON of another shape than the one the study writes."""


@pytest.fixture(scope="module")
def damaged_study(tmp_path_factory):
    """A finished study with: infinite and NaN scores in its parts; a lease with `pid:
    "not-a-pid"`; a garbage Optuna journal; a folder where plan.json goes; a partition folder
    that is a link to a folder outside the study; state files of the wrong JSON shape. Returns the study, what lies outside, the
    tree before, and the three commands' results (status, report, run), in that order."""
    root = tmp_path_factory.mktemp("damaged")
    study, _ = record_study(root / "study", checkpoints=True)
    parts = sorted((study / "results" / "trials" / CLS).glob("part-*.parquet"))
    assert set_scores(parts[0], "nano-clm-40", float("inf")) == 1
    assert set_scores(parts[1], "nano-clm-40", float("nan")) == 1
    lease = {"token": "f00d", "host": socket.gethostname(), "pid": "not-a-pid", "since": time.time(),
             "heartbeat_at": time.time()}
    (study / "lease.json").write_text(json.dumps(lease))
    (study / "optuna").mkdir()
    (study / "optuna" / "journal.log").write_bytes(JOURNAL_GARBAGE)
    (study / "plan.json").unlink()
    (study / "plan.json").mkdir()
    outside = root / "elsewhere" / "task=x"
    outside.mkdir(parents=True)
    (outside / "part-0.parquet").write_bytes(OUTSIDE_PART)
    (study / "results" / "trials" / "task=x").symlink_to(outside, target_is_directory=True)
    for name, text in WRONG_SHAPES.items():
        (study / name).parent.mkdir(parents=True, exist_ok=True)
        (study / name).write_text(text)
    before = tree(study)
    results = {"status": sweeper_cli("status", str(study)), "report": sweeper_cli("report", str(study))}
    results["after read-only"] = tree(study, skip=("report.md", "figures"))
    results["outside after read-only"] = (outside / "part-0.parquet").read_bytes()
    results["run"] = sweeper_cli("run", str(SMOKE), "--storage", str(study))
    return study, outside, before, results


def output(result) -> str:
    return result.stdout + result.stderr


@pytest.mark.parametrize("command", ["status", "report", "run"])
def test_no_command_ends_in_a_traceback(damaged_study, command):
    _, _, _, results = damaged_study
    result = results[command]
    assert result.returncode == 0, output(result)
    assert "Traceback" not in output(result)


def test_read_only_commands_move_delete_and_write_nothing_but_the_report(damaged_study):
    study, _, before, results = damaged_study
    assert results["after read-only"] == {k: v for k, v in before.items()
                                          if not k.startswith(("report.md", "figures"))}


def test_a_link_out_of_the_study_is_never_followed_nor_its_target_moved(damaged_study):
    study, outside, _, results = damaged_study
    assert results["outside after read-only"] == OUTSIDE_PART
    assert "results/trials/task=x: a link (to " in results["status"].stdout
    assert "`results/trials/task=x`: a link (to " in results["report"].stdout
    # `sweeper run` sets the link itself aside; the folder it pointed to is as it was.
    assert (outside / "part-0.parquet").read_bytes() == OUTSIDE_PART
    assert sorted(p.name for p in outside.iterdir()) == ["part-0.parquet"]
    aside = study / "quarantine" / "trials" / "task=x"
    assert aside.is_symlink() and os.readlink(aside) == str(outside)
    assert not (study / "results" / "trials" / "task=x").exists()
    assert "link (to" in (study / "quarantine" / "trials" / "task=x.why.txt").read_text()


def test_non_finite_scores_are_named_and_kept_out_of_means_and_figures(damaged_study):
    study, _, _, results = damaged_study
    assert "data problem: 2 recorded trial(s) have scores that are not finite" in results["status"].stdout
    text = (study / "report.md").read_text()
    assert "40 trials recorded (40 ok); 2 of them with scores that are not finite, left out" in text
    assert "nano-clm-40 / wordnet-supersense-cls / seed 0" in text and "test inf" in text and "test nan" in text
    tables = [line for line in text.splitlines() if line.startswith("|")]
    assert not [line for line in tables if re.search(r"\b(inf|nan)\b", line)], "no mean is infinite or NaN"
    assert (study / "figures" / "category_scores.png").exists()


def test_a_lease_of_the_wrong_shape_is_stale_and_taken_over_saying_so(damaged_study):
    study, _, _, results = damaged_study
    assert "took over the lease" in results["run"].stdout and "pid is 'not-a-pid'" in results["run"].stdout
    assert not (study / "lease.json").exists(), "released at the end of the run"


def test_a_journal_that_does_not_parse_is_set_aside_and_rebuilt_from_the_store(damaged_study):
    study, _, _, results = damaged_study
    out = results["run"].stdout
    assert "the Optuna journal optuna/journal.log does not parse (line 1 is not JSON" in out
    assert "rebuilt from the results store" in out
    assert (study / "quarantine" / "optuna" / "journal.log").read_bytes() == JOURNAL_GARBAGE, "kept, not deleted"


def test_a_folder_where_plan_json_goes_is_named_then_set_aside_by_run(damaged_study):
    study, _, _, results = damaged_study
    assert "`plan.json`: a folder, not a file; read as absent" in (results["report"].stdout)
    assert "plan.json was not what the study writes there: set aside in quarantine/" in results["run"].stdout
    assert (study / "quarantine" / "plan.json").is_dir()
    assert len(json.loads((study / "plan.json").read_text())["trial_keys"]) == 40, "the run wrote its own"


def test_state_files_of_the_wrong_json_shape_read_as_absent_and_are_named(damaged_study):
    _, _, _, results = damaged_study
    out = output(results["run"])
    assert "pretraining/nano-mlm40-40/sweeper_run.json: a JSON array, not a JSON object" in out
    assert "specs/001-abc.plan.json: a JSON string, not a JSON object" in out
    assert "[finetune] 32 trials: 32 already recorded" in out, "the checkpoint counts as written: nothing reruns"


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
    assert f"40 trials: 32 ok, 0 running, 4 pending, 0 diverged, 0 failed, 4 unclassified" in out
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

    from sweeper.plan.load import load_spec
    from sweeper.plan.study_plan import plan_study
    from sweeper.run.recording import trial_row
    from sweeper.store.results import write_rows

    text = search_tests.re.sub(r"  tasks: .*?\]\n", "  tasks: [wordnet-supersense-cls]\n",
                               search_tests.SMOKE.replace(*search_tests.OPTUNA, 1), count=1, flags=search_tests.re.S)
    (tmp_path / "spec.yaml").write_text(text)
    spec = load_spec(tmp_path / "spec.yaml")
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
