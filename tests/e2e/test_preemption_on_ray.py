"""Preemption notices on a real local Ray cluster: a local-mode run told by SIGTERM or by a drain of
its node saves a resume state at the next step boundary, stops, and is relaunched from that step,
counted apart from failures (trainables.preemption, sweeper.run.train_grid)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sweeper.store import storage
from sweeper.store.layout import RunLayout

from conftest import AGENT_PORTS, BIN, ROOT, ray_cli, run_sweeper, stop_process_group
from in_process_run import trained_in_process
from test_resume import finished_output, start_sweeper, wait_for

pytestmark = pytest.mark.e2e
SPECS = ROOT / "tests" / "specs"
RUN = "tiny-clm-30-mlm40-60"
PREEMPTIONS = 5


def test_five_preemptions_with_one_failure_allowed_finish_as_the_undisturbed_run(ray_head, tmp_path):
    """SIGTERM to the training process five times (each once it has trained a step past where it
    last started) with `max_failures: 1`: every notice is a resume state at the step it was seen
    (between the periodic ones, `save_every: 10`), the run finishes, and its weights and loss log
    are those of the same run trained without a stop."""
    study_dir = tmp_path / "study"
    spec = tmp_path / "preemption.yaml"
    spec.write_text((SPECS / "worker_kill.yaml").read_text()
                    + "resources: {pretraining_workers: 0, max_failures: 1}\n")
    run_dir = str(study_dir / "pretraining" / RUN)
    driver = start_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
    started_from, stops = 0, []
    try:
        for _ in range(PREEMPTIONS):
            def training(since=started_from):
                progress = storage.read_json(storage.join(run_dir, "progress.json"))
                return progress if progress and progress["started_from"] == since \
                    and progress["step"] > since and progress["step"] < 55 else None
            progress = wait_for(training, timeout=300, what=f"training on from step {started_from}",
                                process=driver, poll_s=0.05)
            os.kill(progress["pid"], signal.SIGTERM)
            seen = len(stops)
            notices = wait_for(lambda: RunLayout(run_dir).interruptions()[seen:], timeout=120,
                               what="the notice's resume state", process=driver, poll_s=0.05)
            started_from = notices[0]["step"]
            stops.append(started_from)
    finally:
        output = finished_output(driver, 900, ray_head[0], run_dir)
    assert driver.returncode == 0, output[-5000:]
    events = RunLayout(run_dir).interruptions()
    assert [e["kind"] for e in events] == ["preemption"] * PREEMPTIONS, events
    assert [e["step"] for e in events] == stops and stops == sorted(stops), events
    assert any(step % 10 for step in stops), f"every notice fell on a periodic checkpoint: {stops}"
    assert f"preemption {PREEMPTIONS} of 20: resources.max_preemptions" in output, output[-5000:]
    final = storage.read_json(storage.join(run_dir, "progress.json"))
    assert final["step"] == 60 and final["started_from"] == stops[-1], final

    status = run_sweeper("status", str(study_dir), address=ray_head[0], timeout=300)
    assert f"interrupted {RUN}: {PREEMPTIONS} preemptions, 0 failures" in status.stdout, status.stdout

    reference = tmp_path / "reference"
    trained_in_process(spec, str(study_dir), str(reference), ray_head[0])
    ours = load_file(Path(run_dir) / "step-60" / "model.safetensors")
    theirs = load_file(reference / "pretraining" / RUN / "step-60" / "model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours), "weights differ from the undisturbed run's"
    log = [(r["step"], r["loss"]) for r in storage.read_json(storage.join(run_dir, "step-60", "train_log.json"))]
    assert log == [(r["step"], r["loss"]) for r in storage.read_json(
        str(reference / "pretraining" / RUN / "step-60" / "train_log.json"))]


def start_node(address: str, folder: Path, attempts: int = 3) -> subprocess.Popen:
    """A worker node with `pretrain_node: 1` joined to the head at `address`: a spot node, in its
    own process group (stopped as a reclaimed node is: all its processes at once). Started again,
    in a new folder, if `ray start` gives up (a raylet slow to register on a loaded machine)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    for attempt in range(attempts):
        where = folder / str(attempt)
        where.mkdir(parents=True)
        with open(where / "ray-start.log", "w") as log:
            node = subprocess.Popen(
                [str(BIN / "ray"), "start", "--block", f"--address={address}", "--node-ip-address=127.0.0.1",
                 *AGENT_PORTS, f"--temp-dir={where / 'ray'}", "--num-cpus=1", "--num-gpus=0",
                 '--resources={"pretrain_node": 1}', "--disable-usage-stats"],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 240
        while node.poll() is None and time.time() < deadline:
            status = ray_cli("status", f"--address={address}", env=env, timeout=60)
            if "pretrain_node" in status.stdout and "1.0/1.0 pretrain_node" not in status.stdout:
                return node  # joined (and not only the drained node's, whose task holds its unit)
            time.sleep(2)
        stop_process_group(node.pid)
        node.wait()
    raise AssertionError(f"`ray start` of a spot node failed {attempts} times: "
                         + (where / "ray-start.log").read_text()[-3000:])


def stop_all(driver: subprocess.Popen | None, spot: list[subprocess.Popen], folder: Path) -> None:
    """A test's end: its driver killed if still there, its spot nodes stopped, their folder gone."""
    if driver is not None and driver.poll() is None:
        driver.kill()
    for node in spot:
        stop_process_group(node.pid)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_drained_node_is_a_notice_and_the_run_goes_on_elsewhere_from_that_step(ray_head, tmp_path):
    """`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION` of the node a local-mode run trains
    on: the run saves a resume state at the step it sees the notice (its drain poll), stops, and,
    once the node is gone and another has joined, trains on from that step there, with
    `max_failures: 0` (the reclaim is no failure)."""
    study_dir = tmp_path / "study"
    spec = tmp_path / "drain.yaml"
    spec.write_text((SPECS / "worker_kill.yaml").read_text() + "resources: {pretraining_workers: 0, max_failures: 0, "
                    "custom_resources_per_worker: {pretrain_node: 1}}\n")
    run_dir = str(study_dir / "pretraining" / RUN)
    nodes = Path(tempfile.mkdtemp(prefix="sp", dir="/tmp"))  # Ray's socket paths are short
    spot = [start_node(ray_head[0], nodes / "a")]
    driver = None
    try:
        driver = start_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
        progress = wait_for(lambda: (p := storage.read_json(storage.join(run_dir, "progress.json"))) and p["step"] < 45
                            and p, timeout=600, what="the run training on the spot node", process=driver, poll_s=0.05)
        drained = ray_cli("drain-node", f"--address={ray_head[0]}", f"--node-id={progress['node_id']}",
                          "--reason=DRAIN_NODE_REASON_PREEMPTION", "--reason-message=spot reclaim (test)",
                          "--deadline-remaining-seconds=120")
        assert drained.returncode == 0, drained.stdout + drained.stderr
        (notice,) = wait_for(lambda: RunLayout(run_dir).interruptions(), timeout=60,
                             what="the drain notice's resume state", process=driver)
        assert notice["kind"] == "preemption" and f"node {progress['node_id'][:8]} draining" in notice["reason"]
        time.sleep(10)  # the loop returns right after its record; then the node is reclaimed
        stop_process_group(spot[0].pid)
        spot.append(start_node(ray_head[0], nodes / "b"))
        output = finished_output(driver, 900, ray_head[0], run_dir)
    finally:
        stop_all(driver, spot, nodes)
    assert driver.returncode == 0, output[-5000:]
    assert [e["kind"] for e in RunLayout(run_dir).interruptions()] == ["preemption"]
    final = storage.read_json(storage.join(run_dir, "progress.json"))
    assert final["step"] == 60 and final["started_from"] == notice["step"], final
    assert final["node_id"] != progress["node_id"], "it trained on after the reclaim elsewhere"


def spot_node_ids(address: str) -> list[str]:
    """The live nodes with a `pretrain_node` unit (a driver of its own: the test head has no
    dashboard for `ray list nodes`)."""
    code = (f"import ray; ray.init(address={address!r}, logging_level='ERROR'); print(' '.join(n['NodeID'] for n in "
            "ray.nodes() if n['Alive'] and 'pretrain_node' in n['Resources']))")
    found = subprocess.run([str(BIN / "python"), "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env={**os.environ, "RAY_AUTH_MODE": "disabled"}, check=True)
    return found.stdout.split()


def test_finetuning_trials_on_a_lost_then_a_drained_node_are_run_again_and_recorded_once(ray_head, tmp_path):
    """Fine-tuning trials placed on spot nodes (`custom_resources_per_trial`): the node of a running
    trial is lost (its raylet and workers SIGKILLed together), then the next one's is drained for
    preemption and reclaimed. One `sweeper run` finishes, exit 0: every planned trial recorded
    once and ok, none failed; the stopped trials are counted apart (trial_interruptions.json,
    `sweeper status`)."""
    from sweeper.plan.load import load_study
    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import read_trials

    study_dir = tmp_path / "study"
    spec = tmp_path / "spot_trials.yaml"
    # Trials long enough (1,500 steps) to be stopped mid-way; only spot nodes have `pretrain_node`.
    spec.write_text((SPECS / "worker_kill.yaml").read_text().replace("max_steps: 2", "max_steps: 1500\n  epochs: 1000")
                    + "resources: {pretraining_workers: 0, custom_resources_per_trial: {pretrain_node: 1}}\n")
    layout = StudyLayout(str(study_dir))
    nodes = Path(tempfile.mkdtemp(prefix="sp", dir="/tmp"))  # Ray's socket paths are short
    spot = [start_node(ray_head[0], nodes / "a")]
    driver = None

    def trial_running():
        live = storage.read_json(layout.live)
        return live if live and live.get("stage") == "finetune" and live["running_trials"] > 0 else None

    def interruptions(n):
        entries = storage.read_json(layout.trial_interruptions) or []
        return entries if len(entries) >= n else None

    try:
        driver = start_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
        wait_for(trial_running, timeout=900, what="a trial on the spot node", process=driver, poll_s=0.5)
        os.killpg(spot[0].pid, signal.SIGKILL)  # node loss: raylet and workers at once, no notice
        spot.append(start_node(ray_head[0], nodes / "b"))
        wait_for(lambda: interruptions(1), timeout=300, what="the lost node's trial set aside", process=driver)
        wait_for(trial_running, timeout=600, what="a trial on the second node", process=driver, poll_s=0.5)
        (node,) = spot_node_ids(ray_head[0])
        drained = ray_cli("drain-node", f"--address={ray_head[0]}", f"--node-id={node}",
                          "--reason=DRAIN_NODE_REASON_PREEMPTION", "--reason-message=spot reclaim (test)",
                          "--deadline-remaining-seconds=60")
        assert drained.returncode == 0, drained.stdout + drained.stderr
        time.sleep(5)
        stop_process_group(spot[1].pid)  # reclaimed
        spot.append(start_node(ray_head[0], nodes / "c"))
        output = finished_output(driver, 1200, ray_head[0])
    finally:
        stop_all(driver, spot, nodes)
    assert driver.returncode == 0, output[-5000:]
    planned = {t.trial_key for t in load_study(str(spec)).plan.trials}
    rows = read_trials(layout).to_pylist()
    assert sorted(r["trial_key"] for r in rows) == sorted(planned), "each planned trial recorded once"
    assert {r["status"] for r in rows} == {"ok"}, [(r["status"], r["error"]) for r in rows]
    kinds = [e["kind"] for e in storage.read_json(layout.trial_interruptions)]
    # The drained node's SIGTERM is a notice; a trial placed on a node on its way out is stopped again.
    assert kinds[0] == "node lost" and "preemption" in kinds and set(kinds) <= {"node lost", "preemption"}, kinds
    print(f"trial interruptions: {kinds}")
    status = run_sweeper("status", str(study_dir), address=ray_head[0], timeout=300)
    assert "requeued trials:" in status.stdout and " 0 failed" in status.stdout, status.stdout
