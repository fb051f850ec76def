"""A study of hostile and broken checkpoint folders on local Ray (issue #38): what passes the plan
fine-tunes, what fails at load is a recorded failed trial, and nothing outside a source enters
the study. The folders are built by tests/unit/plan/test_hostile_checkpoints.py's helpers."""
from __future__ import annotations

import shutil

from conftest import run_sweeper

from test_hostile_checkpoints import SECRET, assert_no_secret, edit_config, hub_cache_folder, plan, spec_of


def test_a_hub_cache_folder_is_fine_tuned_and_a_folder_failing_at_load_is_a_recorded_failure(
        ray_head, tmp_path, bert, outside):
    """One study: a hub-cache-shaped folder plans, imports and fine-tunes; a folder whose weights
    pass the plan but do not load (config.json's sizes are consistent, and not the weights'), and
    one whose tokenizer does not load (its task data cannot be prepared), are recorded as failed
    trials with one line of reason each; `sweeper run` exits 1 with no traceback and no prompt,
    and the study holds no byte from outside its sources. Run again with a result part that links
    out of the study, it names what it sets aside."""
    import pyarrow.dataset as ds

    snapshot = hub_cache_folder(tmp_path / "hub", bert, outside)
    broken = tmp_path / "broken"
    shutil.copytree(bert, broken)
    edit_config(broken, hidden_size=128, intermediate_size=256)  # consistent sizes the weights do not have
    untokenizable = tmp_path / "untokenizable"
    shutil.copytree(bert, untokenizable)
    (untokenizable / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "Nonsense"}}')
    spec = spec_of(tmp_path, ("hub-tiny", snapshot), ("broken-tiny", broken), ("untokenizable", untokenizable))
    planned = plan(spec)
    assert planned.returncode == 0, planned.stderr[-3000:]
    study = tmp_path / "study"
    result = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-4000:]
    assert "Traceback" not in output, output[-6000:]
    assert "[y/N]" not in output and "trust_remote_code" not in output
    rows = ds.dataset(study / "results" / "trials", format="parquet", partitioning="hive").to_table().to_pandas()
    status = dict(zip(rows["checkpoint_id"], rows["status"]))
    assert status == {"hub-tiny": "ok", "broken-tiny": "failed", "untokenizable": "failed"}, \
        rows[["checkpoint_id", "status", "error"]]
    errors = dict(zip(rows["checkpoint_id"], rows["error"]))
    assert "does not load: RuntimeError" in errors["broken-tiny"], errors
    assert errors["untokenizable"].startswith("task data of wordnet-supersense-cls not prepared: "), errors
    assert not any("\n" in errors[name] for name in ("broken-tiny", "untokenizable")), errors
    assert_no_secret(study)

    part = study / "results" / "trials" / "task=wordnet-supersense-cls" / "part-planted.parquet"
    part.symlink_to(outside)
    again = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    named = f"[store] damaged results/trials/task=wordnet-supersense-cls/part-planted.parquet: a link (to {outside})"
    assert named in again.stdout, again.stdout
    assert outside.read_text().startswith(SECRET) and not part.exists()
