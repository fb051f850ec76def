"""A finished study damaged in several ways at once, then `sweeper status`, `report` and `run` on it
(`run` on the session's Ray head): split from tests/unit/store/test_damaged_studies.py."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sweeper.plan.checkpoint_checks import STUDY_AUTO_MAP

from conftest import run_sweeper

from test_damage import CLS, SMOKE, record_study, sweeper_cli
from test_damaged_studies import JOURNAL_GARBAGE, output


LINKED_PART = "part-linked.parquet"
"""A part of the study's results that is a link to a part outside the study."""
HOSTILE_RUN, HOSTILE_STEP = "nano-clm-20-mlm40-40", 40
"""The study's checkpoint whose config.json is edited before `run`: a final one no other damage touches."""
OUTSIDE_PART = b"PAR1 not the study's: a file some other project keeps\n" * 20


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


def drop_rows(study: Path, checkpoint: str) -> int:
    """Remove `checkpoint`'s rows from every trials part (its trials are then to run); returns how many."""
    dropped = 0
    for part in sorted((study / "results" / "trials").glob("task=*/part-*.parquet")):
        if part.is_symlink() or part.parent.is_symlink():  # the links the fixture made: not the study's parts
            continue
        table = pq.read_table(part)
        kept = table.filter(pc.not_equal(table.column("checkpoint_id"), checkpoint))
        dropped += table.num_rows - kept.num_rows
        pq.write_table(kept, part)
    return dropped


HOSTILE_CONFIG = {"model_type": "llama_encoder", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                  "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1024,
                  "auto_map": {**STUDY_AUTO_MAP, "AutoModel": "evil.EvilModel"}}
"""A study checkpoint's config.json given, after its run, an `auto_map` naming code the study did not write."""
EVIL_CODE = "import pathlib\npathlib.Path(__file__).with_name('evil-ran').write_text('ran')\n"


WRONG_SHAPES = {"resolved.json": "[1]", "pretraining/nano-mlm40-40/sweeper_run.json": '["x"]',
                "specs/001-abc.plan.json": '"a string"',
                "pretraining/nano-clm-40/step-40/sweeper_checkpoint.json": '{"files": 7}'}


@pytest.fixture(scope="module")
def damaged_study(tmp_path_factory, ray_head):
    """A finished study with: infinite and NaN scores in its parts; a lease with `pid:
    "not-a-pid"`; a garbage Optuna journal; a folder where plan.json goes; a partition folder
    that is a link to a folder outside the study, and a part that is a link to a part outside it; state files of the
    wrong JSON shape. Before `run` only (the read-only commands see the rest): one checkpoint's config.json given
    an `auto_map` naming code of the folder's own, and its rows removed, so its trials are to run. Returns the study,
    what lies outside, the tree before, and the three commands' results (status, report, run), in that order."""
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
    shutil.copy(parts[0], outside.parent / "part-elsewhere.parquet")  # rows the study would count, if it followed
    (study / "results" / "trials" / CLS / LINKED_PART).symlink_to(outside.parent / "part-elsewhere.parquet")
    for name, text in WRONG_SHAPES.items():
        (study / name).parent.mkdir(parents=True, exist_ok=True)
        (study / name).write_text(text)
    before = tree(study)
    results = {"status": sweeper_cli("status", str(study)), "report": sweeper_cli("report", str(study))}
    results["after read-only"] = tree(study, skip=("report.md", "figures"))
    results["outside after read-only"] = (outside / "part-0.parquet").read_bytes()
    hostile = study / "pretraining" / HOSTILE_RUN / f"step-{HOSTILE_STEP}"
    (hostile / "config.json").write_text(json.dumps(HOSTILE_CONFIG))
    (hostile / "evil.py").write_text(EVIL_CODE)
    assert drop_rows(study, HOSTILE_RUN) == 10  # 4 trained tasks and one evaluated alongside, 2 seeds
    results["run"] = run_sweeper("run", str(SMOKE), "--storage", str(study), address=ray_head[0])
    return study, outside, before, results


@pytest.mark.parametrize("command", ["status", "report", "run"])
def test_no_command_ends_in_a_traceback(damaged_study, command):
    _, _, _, results = damaged_study
    result = results[command]
    # `run` records the refused checkpoint's trials failed: exit 1, as for any failed trial.
    assert result.returncode == (1 if command == "run" else 0), output(result)
    assert "Traceback" not in output(result) and "RayTaskError" not in output(result)


def test_an_own_checkpoint_given_code_after_its_run_is_refused_in_one_line(damaged_study):
    study, _, _, results = damaged_study
    out = output(results["run"])
    where = f"pretraining/{HOSTILE_RUN}/step-{HOSTILE_STEP}/config.json"
    why = (f"{where}: auto_map names code the study did not write (AutoModel -> evil.EvilModel); the study never "
           "runs a folder's code")
    assert [line for line in out.splitlines() if where in line] == [
        f"[finetune] checkpoint {HOSTILE_RUN}: {why}: its trials are recorded failed, nothing from its folder ran"]
    assert "[finetune] 32 trials: 24 already recorded, 0 blocked by failed runs, 8 to run" in out
    assert "[study] incomplete: 0 pretraining run(s) and 8 trial(s) failed" in out
    rows = ds.dataset(study / "results" / "trials", format="parquet", partitioning="hive").to_table().to_pandas()
    refused = rows[rows["checkpoint_id"] == HOSTILE_RUN]
    assert len(refused) == 10 and set(refused["status"]) == {"failed"}
    assert set(refused["error"]) == {f"checkpoint {HOSTILE_RUN} refused: {why}; nothing from its folder ran"}
    others = rows[rows["checkpoint_id"] != HOSTILE_RUN]
    assert len(others) == 30 and set(others["status"]) == {"ok"}, "the rest of the study as it was"
    assert not (study / "pretraining" / HOSTILE_RUN / f"step-{HOSTILE_STEP}" / "evil-ran").exists()


def test_a_part_linked_from_outside_is_named_by_run_in_one_line(damaged_study):
    study, outside, _, results = damaged_study
    name = f"results/trials/{CLS}/{LINKED_PART}"
    lines = [line for line in results["run"].stdout.splitlines() if line.startswith(f"[store] damaged {name}")]
    assert lines == [f"[store] damaged {name}: a link (to {outside.parent / 'part-elsewhere.parquet'}), not a file "
                     f"the study wrote; set aside in quarantine/ (quarantine/trials/{CLS}/{LINKED_PART}); its rows are "
                     "not used (its trials run again unless another part records them)"], results["run"].stdout
    assert (study / "quarantine" / "trials" / CLS / LINKED_PART).is_symlink()
    assert pq.read_table(outside.parent / "part-elsewhere.parquet").num_rows == 4, "its target untouched"


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
    assert f"[store] damaged results/trials/task=x: a link (to {outside}), not a file the study wrote; set aside in " \
           "quarantine/ (quarantine/trials/task=x)" in results["run"].stdout


def test_non_finite_scores_are_named_and_kept_out_of_means_and_figures(damaged_study):
    study, _, _, results = damaged_study
    assert "data problem: 2 recorded trial(s) have scores that are not finite" in results["status"].stdout
    text = (study / "report.md").read_text()
    # report.md as `run` rewrote it: the refused checkpoint's 10 rows are recorded failed.
    assert "40 result rows recorded (10 failed, 30 ok); 2 of them with scores that are not finite, left out" in text
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
    # The checkpoint counts as written: its trials, recorded, do not run again (only the refused one's are to run).
    assert "[finetune] 32 trials: 24 already recorded" in out
