"""No shared disk needed (issue #28): a study kept in an object store runs on a cluster whose nodes
share no folder. Three `ray start` nodes on this machine, each with its own HOME, TMPDIR,
SWEEPER_CACHE and Ray temp folder (tests/conftest.py `node_cluster`); the study lives on moto's
S3 server; pretraining is placed on one node and the trials on another (custom resources). Every
Python process of a node logs its accesses below any node's folder and the checkout's studies/
(tests/node_audit): no node may touch another's, so every cache a worker read came from the
storage or was made on its node."""
from __future__ import annotations

import subprocess
import sys

import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.spec.reading import SpecError
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import PRETRAINING, TRIALS, read_table

from conftest import ROOT, edited_spec, node_env, run_sweeper

PLACEMENT = ("  cpus_per_trial: 1               # CPUs per fine-tuning trial\n",
             "  cpus_per_trial: 1\n  custom_resources_per_worker: {pretrain_node: 1}\n"
             "  custom_resources_per_trial: {trial_node: 1}\n")

ONE_SEED = ("seeds: [0, 1]", "seeds: [0]")
"""Half the smoke study's trials: every checkpoint, task and family still, in less time."""
CONTINUED = ("      clm_fraction: [0.5]         # share of steps trained with CLM before switching to MLM\n",
             "      clm_fraction: [0.5]\n    - {objective: mlm, init_from: [nano-clm-40], steps: [10], "
             "mask_ratio: [0.4],"
             " warmup_steps: 1, decay_steps: 2}\n")
"""And a continued-pretraining run, which reads its source's checkpoint on the pretraining node."""


def cached(node, pattern: str) -> list[str]:
    """Files in the node's cache folder whose path (relative to it) matches `pattern`."""
    return sorted(str(p.relative_to(node.cache)) for p in node.cache.glob(pattern) if p.is_file())


@pytest.mark.e2e
def test_smoke_study_on_nodes_that_share_no_folder(node_cluster, object_store, tmp_path):
    spec = edited_spec(tmp_path, PLACEMENT, ONE_SEED, CONTINUED)
    study = object_store("multinode/study")
    head, pretrain, trial = (node_cluster.nodes[name] for name in ("head", "pretrain", "trial"))
    result = run_sweeper("run", str(spec), "--storage", study, address=node_cluster.address, env={
        key: head.env[key] for key in ("HOME", "TMPDIR", "SWEEPER_CACHE", "PYTHONPATH", "SWEEPER_NODE_NAME",
                                       "SWEEPER_NODE_AUDIT_LOG", "SWEEPER_NODE_AUDIT_ROOTS")})
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]

    layout = StudyLayout(storage.normalize(study))
    plan = plan_study(load_study(spec).spec)
    rows = read_table(layout, TRIALS).to_pandas()
    assert sorted(rows["trial_key"]) == sorted(t.trial_key for t in plan.trials), "one row per planned trial"
    assert (rows["status"] == "ok").all(), rows[rows["status"] != "ok"][["trial_key", "status"]]
    assert set(read_table(layout, PRETRAINING).to_pandas()["run_name"]) == {run.name for run in plan.runs}

    # No node touched another node's folders; the hook ran in each node's processes, and the
    # workers' hooks saw them read their own caches.
    for node in node_cluster.nodes.values():
        log = node.audit()
        foreign = [line for line in log if line[1] != "start" and not line[3].startswith(f"{node.folder}/")]
        assert not foreign, f"{node.name} touched other nodes' folders: {foreign[:10]}"
        assert any(line[1] == "start" for line in log), f"no process of {node.name} loaded the audit hook"
    for node in (pretrain, trial):
        assert any(line[3].startswith(f"{node.cache}/copies/") for line in node.audit()), node.name

    # Placement: the pretraining node copied the corpus's token shards and the continued run's
    # source checkpoint, no other; the trial node copied every run's checkpoints and the task
    # data, and no shard.
    def runs_copied(node) -> set[str]:
        return {path.split("/pretraining/")[1].split("/")[0]
                for path in cached(node, "copies/s3/**/pretraining/**/model.safetensors")}

    assert cached(pretrain, "copies/s3/**/cache/corpus-*/*-shards/**/shard-*.npy"), cached(pretrain, "**/*")[:40]
    assert runs_copied(pretrain) == {"nano-clm-40"}, "only the continued run's source, read from the storage (no trial)"
    assert runs_copied(trial) == {run.name for run in plan.runs}, "trials read every checkpoint from the storage"
    assert cached(trial, "copies/s3/**/cache/tasks/*/*/train.npz"), cached(trial, "**/*")[:40]
    assert not cached(trial, "copies/s3/**/*-shards/**/*")

    # Nothing of the study came to a local folder of the driver, and no row names a node's folder.
    assert not (head.folder / "cache" / "copies").exists() or not cached(head, "copies/s3/**/pretraining/**/*")
    nodes_folder = str(head.folder.parent)
    assert not [value for column in rows.columns for value in rows[column].map(str) if nodes_folder in value]


def test_placement_resources_are_read_and_checked(tmp_path):
    resources = load_study(edited_spec(tmp_path, PLACEMENT)).spec.resources
    assert resources.custom_resources_per_worker == {"pretrain_node": 1.0}
    assert resources.custom_resources_per_trial == {"trial_node": 1.0}
    for wrong, key, reason in (("{CPU: 1}", "custom_resources_per_trial.CPU", "not a custom resource"),
                               ("{trial_node: -1}", "custom_resources_per_trial.trial_node", "must not be negative"),
                               ("{trial_node: lots}", "custom_resources_per_trial.trial_node", "number"),
                               ("{trial_node: 0.00001}", "custom_resources_per_trial.trial_node", "smallest amount"),
                               ("[trial_node]", "custom_resources_per_trial", "expected a mapping")):
        spec = edited_spec(tmp_path, (PLACEMENT[0], PLACEMENT[1].replace("{trial_node: 1}", wrong)))
        line = 1 + next(
            i for i, text in enumerate(spec.read_text().splitlines()) if "custom_resources_per_trial" in text
        )
        with pytest.raises(SpecError) as error:
            _ = load_study(spec).spec
        assert f"{spec}:{line}: resources.{key}: " in str(error.value) and reason in str(error.value), str(error.value)


def test_the_node_audit_logs_a_touch_of_another_nodes_folder(tmp_path):
    """The multi-node test's evidence can fail: a process of one node that opens, lists or copies
    a file of another node's folder is in its node's audit log."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    env = node_env("mine", mine, [mine, other])
    (other / "cache").mkdir(parents=True)
    (other / "cache" / "shard.npy").write_bytes(b"x")
    script = ("import os, shutil; open(os.environ['SWEEPER_CACHE'] + '/own', 'w').close(); "
              f"open({str(other / 'cache' / 'shard.npy')!r}, 'rb').read(); os.listdir({str(other / 'cache')!r}); "
              f"shutil.copytree({str(other / 'cache')!r}, {str(mine / 'tmp' / 'copy')!r})")
    subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)
    log = [line.split("\t") for line in (mine / "audit.log").read_text().splitlines()]
    assert [event for _, event, _, path in log if path == f"{mine}/cache/own"] == ["open"]
    foreign = {(event, path) for _, event, _, path in log if path.startswith(f"{other}/")}
    assert {("open", f"{other}/cache/shard.npy"), ("os.listdir", f"{other}/cache"),
            ("shutil.copytree", f"{other}/cache")} <= foreign
