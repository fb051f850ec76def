"""Credentials never leave the driver (docs/security.md): with `s3://KEY:SECRET@bucket/...`, the
driver reaches the bucket with them (through its environment), while what crosses to the
workers, goes to W&B, is written into the study or is printed holds the location without them."""
from __future__ import annotations

import os
import pickle
import sys

import pytest

from sweeper.contract import tracking
from sweeper.store import storage
from sweeper.store.layout import StudyLayout

from conftest import ROOT

KEY, SECRET = "AKIATEST", "supersecret123"
URI = f"s3://{KEY}:{SECRET}@bucket/studies/x?endpoint_override=127.0.0.1:9000&scheme=http"


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch):
    """`use_credentials` writes the AWS_* variables of this process: each test gets them back."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:  # recorded as absent: removed again afterwards
            monkeypatch.setenv(name, "")
            monkeypatch.delenv(name)


def test_strip_credentials_keeps_bucket_path_and_query():
    assert storage.strip_credentials(URI) == "s3://bucket/studies/x?endpoint_override=127.0.0.1:9000&scheme=http"
    assert storage.strip_credentials("gs://user:pw@bucket/x") == "gs://bucket/x"
    assert storage.strip_credentials("/a/b:c@d") == "/a/b:c@d" and storage.strip_credentials(None) is None
    assert storage.strip_credentials("s3://k:se/cret@bucket/x") == "s3://bucket/x", "an unescaped / in the secret"
    assert storage.display("s3://k:se/cret@bucket/x") == "s3://bucket/x"


def test_redact_removes_user_info_from_every_uri_in_a_text():
    text = (f"OSError: cannot open '{URI}/a.json'\n  at gs://u:p@other/y, s3://k:p@ss@b/z and "
            "s3://plain/x@y, mail user@host, path /x/a:b@c")
    redacted = storage.redact(text)
    assert SECRET not in redacted and KEY not in redacted and "u:p" not in redacted and "p@ss" not in redacted
    assert "'s3://bucket/studies/x?endpoint_override=127.0.0.1:9000&scheme=http/a.json'" in redacted
    assert "gs://other/y" in redacted and "s3://b/z" in redacted
    assert "s3://plain/x@y, mail user@host, path /x/a:b@c" in redacted, "only URIs' user info goes"


def test_the_driver_puts_the_credentials_in_its_environment(monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "of-other-credentials")
    assert storage.use_credentials(URI) == storage.strip_credentials(URI)
    assert os.environ["AWS_ACCESS_KEY_ID"] == KEY and os.environ["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert "AWS_SESSION_TOKEN" not in os.environ
    assert storage.normalize(URI) == storage.strip_credentials(URI), "no location the driver passes on holds them"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    storage.use_credentials("s3://k%2Fey:se%2Bcret@bucket/x")
    assert os.environ["AWS_ACCESS_KEY_ID"] == "k/ey" and os.environ["AWS_SECRET_ACCESS_KEY"] == "se+cret"


def test_the_filesystem_object_holds_no_credentials():
    """Ray pickles it (Tune's storage filesystem, into its state and the trainables' payloads);
    pyarrow pickles explicit keys with the object."""
    filesystem, path = storage.filesystem(storage.join(URI, "tune"))
    assert path == "bucket/studies/x/tune" and SECRET.encode() not in pickle.dumps(filesystem)


def planned_fsdp_study():
    from sweeper.plan.load import load_study
    from sweeper.plan.study_plan import plan_study

    spec = load_study(ROOT / "tests" / "specs" / "fsdp.yaml").spec
    return spec, plan_study(spec)


def test_worker_payloads_hold_no_credentials():
    import cloudpickle

    from sweeper.run.train_grid import pretrain_config
    from sweeper.run.shards import EvaluationSets, grid_shards, trial_runtime

    spec, plan = planned_fsdp_study()
    layout = StudyLayout(URI)
    runs = {run.name: run for run in plan.runs}
    for run in plan.runs:
        config = pretrain_config(run, spec, layout, layout.corpus(None), runs)
        assert SECRET.encode() not in pickle.dumps(config), run.name
        assert config.run_dir == storage.strip_credentials(layout.run(run.name).root)
    task_dirs = {(run.tokenizer, task): layout.task_cache(task) for run in plan.runs for task in spec.finetuning.tasks}
    (shard,) = grid_shards(list(plan.trials), layout, task_dirs, 100, EvaluationSets(plan, spec.finetuning.tasks),
                           trial_runtime(spec))
    assert SECRET.encode() not in cloudpickle.dumps(shard), "the shard is shipped to the workers whole"
    assert shard.layout == layout.without_credentials() == StudyLayout(storage.strip_credentials(URI))
    assert shard.layout.root.endswith("?endpoint_override=127.0.0.1:9000&scheme=http"), "the query stays"
    trial = shard.trial_config({"trial_index": 0})
    assert trial.checkpoint_path.startswith("s3://bucket/") and SECRET not in repr(trial)


def test_wandb_sees_neither_the_config_nor_the_command_line_credentials(monkeypatch):
    config = {"run_dir": URI, "init": {"location": URI, "kind": "study"}, "phases": [{"uri": URI}], "steps": 3}
    assert SECRET not in repr(tracking.redacted(config)) and tracking.redacted(config)["steps"] == 3
    monkeypatch.setattr(sys, "argv", ["sweeper", "run", "spec.yaml", "--storage", URI])
    with tracking.redacted_argv():
        assert SECRET not in " ".join(sys.argv)
    assert sys.argv[-1] == URI
