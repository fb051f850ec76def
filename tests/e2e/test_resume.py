"""Faults with real processes and signals on a real local Ray cluster: nothing lost, nothing run twice."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.store import storage
from sweeper.store.layout import RunLayout, StudyLayout
from sweeper.store.results import TRIALS, read_table, table_dir

from conftest import ROOT, ray_cli, run_sweeper

pytestmark = pytest.mark.e2e
SPECS = ROOT / "tests" / "specs"


def start_sweeper(*args: str, address: str) -> subprocess.Popen:
    env = {**os.environ, "RAY_ADDRESS": address, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "sweeper", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(condition, timeout: float, what: str, process: subprocess.Popen | None = None,
             poll_s: float = 0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            pytest.fail(f"process ended before {what}:\n{process.stdout.read()[-4000:]}")
        time.sleep(poll_s)
    pytest.fail(f"timed out waiting for {what}")


def finished_output(driver: subprocess.Popen, timeout: float, address: str, run_dir: str | None = None) -> str:
    """The driver's whole output once it exits; past `timeout` it is killed and the test fails
    with what it printed, the head's resources and the run's progress (what a hang leaves to read)."""
    try:
        return driver.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        driver.kill()
        output = driver.communicate()[0]
        head = ray_cli("status", f"--address={address}", timeout=120)
        progress = storage.read_json(storage.join(run_dir, "progress.json"), default=None) if run_dir else None
        pytest.fail(f"the driver ran past {timeout:.0f} s; its output:\n{output[-8000:]}\n"
                    f"ray status:\n{head.stdout[-3000:]}{head.stderr[-1000:]}\nprogress: {progress}")


def raw_trials(study_dir: Path):
    return read_table(StudyLayout(str(study_dir)), TRIALS).to_pandas()


def test_driver_killed_mid_grid_then_rerun_loses_and_duplicates_nothing(ray_head, tmp_path):
    """Also the single-writer lease: a second driver on the running study is refused, naming the
    first; after the first is SIGKILLed, the next driver takes its stale lease over."""
    study_dir, spec = tmp_path / "study", SPECS / "resume.yaml"
    plan = plan_study(load_study(spec).spec)
    lease_file, table = study_dir / "lease.json", Path(table_dir(StudyLayout(str(study_dir)), TRIALS))
    driver = start_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
    try:
        wait_for(lambda: list(table.rglob("part-*.parquet")) if table.exists() else None,
                 timeout=300, what="the first batch of trial rows", process=driver)
        holder = json.loads(lease_file.read_text())
        assert holder["pid"] == driver.pid
        second = run_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0], timeout=300)
        assert second.returncode == 4, second.stdout[-3000:] + second.stderr[-3000:]
        assert f"is being run by another driver: host {socket.gethostname()}, pid {driver.pid}, since " \
            in second.stderr and "last heartbeat" in second.stderr
        assert json.loads(lease_file.read_text())["token"] == holder["token"], "driver 2 left the lease alone"
        assert driver.poll() is None, "driver 1 runs on"
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    before = raw_trials(study_dir)
    assert 0 < len(before) < len(plan.trials), "the driver must die in the middle of the grid"

    rerun = run_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-3000:]
    assert f"[study] took over the lease of {socket.gethostname()}/{driver.pid}, stale since " in rerun.stdout
    assert not lease_file.exists(), "the rerun released the lease at its end"
    assert f"{len(before)} already recorded" in rerun.stdout
    after = raw_trials(study_dir)
    assert sorted(after["trial_key"]) == sorted(t.trial_key for t in plan.trials), "0 lost, 0 duplicated"
    kept = after.set_index("trial_key").loc[before["trial_key"], "finished_at"]
    assert kept.tolist() == before["finished_at"].tolist(), "finished trials were not run again"

    # The diverging learning rate is recorded as such; every other trial finished.
    statuses = after.groupby(after["learning_rate"] > 1)["status"].agg(set).to_dict()
    assert statuses == {False: {"ok"}, True: {"diverged"}}
    diverged = after[after["status"] == "diverged"]
    assert diverged["validation_score"].isna().all() and (diverged["train_steps"] < 30).all()

    # Adding one seed to the finished study runs exactly the new trials.
    more = tmp_path / "more_seeds.yaml"
    more.write_text(spec.read_text().replace("seeds: [0, 1, 2, 3]", "seeds: [0, 1, 2, 3, 4]"))
    extended = run_sweeper("run", str(more), "--storage", str(study_dir), address=ray_head[0])
    assert extended.returncode == 0, extended.stdout[-4000:] + extended.stderr[-3000:]
    new_trials = len(plan_study(load_study(more).spec).trials) - len(plan.trials)
    assert new_trials == 6
    assert f"{len(plan.trials)} already recorded, 0 blocked by failed runs, {new_trials} to run" in extended.stdout
    final = raw_trials(study_dir)
    assert len(final) == len(plan.trials) + new_trials and final["trial_key"].is_unique
    assert set(final.loc[~final["trial_key"].isin(after["trial_key"]), "seed"]) == {4}

    status = run_sweeper("status", str(study_dir), address=ray_head[0])
    assert status.returncode == 0, status.stderr
    assert "1 runs: 1 done" in status.stdout
    assert "30 trials: 20 ok, 0 running, 0 pending, 10 diverged, 0 failed" in status.stdout


def process_ids(title: str, gcs_address: str) -> list[int]:
    """Processes whose command line (a Ray worker's is its process title) contains `title`, of
    the head at `gcs_address` (an ancestor, the raylet or a worker's setup process, names its
    port; the host there may be the machine's address rather than the loopback the test uses):
    another Ray on the machine (the suite's other worker, a study beside it) has workers of the
    same title."""
    port = gcs_address.rsplit(":", 1)[1]
    names_head = re.compile(rf"gcs.address=\S+:{port}(\s|$)")

    def command(pid: str) -> str:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ")

    def parent(pid: str) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]

    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not (entry.name.isdigit() and title in command(entry.name)):
                continue
            ancestor = parent(entry.name)
            for _ in range(4):
                if ancestor in ("0", "1"):
                    break
                if names_head.search(command(ancestor)):
                    found.append(int(entry.name))
                    break
                ancestor = parent(ancestor)
        except OSError:
            continue
    return found


def ray_registered_steps(run_dir: str) -> list[int]:
    """Steps of the checkpoints Ray Train's controller has registered (its snapshot, rewritten at
    each registration)."""
    snapshot = storage.read_json(storage.join(run_dir, "checkpoint_manager_snapshot.json"), default={})
    return sorted(int(Path(result["checkpoint_dir_name"]).name.removeprefix("step-"))
                  for result in (snapshot or {}).get("checkpoint_results", []))


@pytest.mark.parametrize("workers,where", [(0, "s3"), (1, "disk")], ids=["local-mode-in-s3", "train-worker-group"])
def test_pretraining_process_killed_mid_run_resumes_to_the_planned_result(ray_head, tmp_path, object_store,
                                                                          workers, where):
    """Local mode: the driver relaunches the task, and the loop finds its last checkpoint in the study (here
    an S3 bucket: listed, downloaded with its optimizer state), killed after step 20's checkpoint.

    Worker group: the kill is forced into the race between a worker's report and Train's
    controller registering it. The controller takes one report per poll of the workers (every
    2 s) from a queue of one, so with the controller paused (SIGSTOP) the worker reports one more
    checkpoint and then waits, its next checkpoint uploaded and unknown to Ray. The worker is
    killed there and the controller resumed: Ray hands the restarted worker back its last
    registered checkpoint, the loop resumes from the newer one on disk and must register every
    checkpoint Ray missed, or Ray's retention leaves a resume-only checkpoint behind (CI saw
    `[10, 20, 40, 60]`) or counts an evaluated one short."""
    study_dir = object_store(f"kill-{workers}/study") if where == "s3" else str(tmp_path / "study")
    spec = tmp_path / "worker_kill.yaml"
    spec.write_text((SPECS / "worker_kill.yaml").read_text() + f"resources: {{pretraining_workers: {workers}}}\n")
    run_dir = storage.join(study_dir, "pretraining", "tiny-clm-30-mlm40-60")
    driver = start_sweeper("run", str(spec), "--storage", study_dir, address=ray_head[0])

    def saved_at_least(step: int):
        def saved():
            progress = storage.read_json(storage.join(run_dir, "progress.json"))
            newest = RunLayout(run_dir).latest_resumable()
            return progress if progress and newest and newest[0] >= step else None
        return saved

    paused = []
    try:
        if workers:
            # The first progress line (step 5) comes before the first checkpoint (step 10).
            wait_for(lambda: storage.read_json(storage.join(run_dir, "progress.json")), timeout=300,
                     what="the first progress line", process=driver, poll_s=0.05)
            paused = process_ids("TrainController", ray_head[0])
            assert len(paused) == 1, paused
            os.kill(paused[0], signal.SIGSTOP)
            known = ray_registered_steps(run_dir)
            # Ray's newest + 10 is queued, + 20 uploaded and waiting: neither is known to Ray.
            kill_at = (known[-1] if known else 0) + 20
        else:
            kill_at = 20
        progress = wait_for(saved_at_least(kill_at), timeout=300, what=f"step {kill_at}'s checkpoint",
                            process=driver, poll_s=0.1)
        os.kill(progress["pid"], signal.SIGKILL)  # the process running the training loop
        if workers:
            assert ray_registered_steps(run_dir) == known, "the controller stayed paused"
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
    output = finished_output(driver, 600, ray_head[0], run_dir)
    assert driver.returncode == 0, output[-5000:]
    # The process that finished the run started from the newest complete checkpoint, not from
    # scratch or Ray's older one (its stdout, "resumed from step N", may not reach the driver
    # from a restarted Ray worker).
    final = storage.read_json(storage.join(run_dir, "progress.json"))
    assert final["step"] == 60 and final["pid"] != progress["pid"], final
    assert final["started_from"] == kill_at if workers else final["started_from"] in (20, 30), (final, output[-5000:])

    steps = sorted(storage.read_json(m)["step"] for m in storage.find_files(run_dir, "step-*/sweeper_checkpoint.json"))
    # Local mode deletes superseded resume-only checkpoints (save_every: 10) itself, Ray Train
    # (checkpoint_config) those of a worker group; evaluated ones drop their optimizer state.
    assert steps == [20, 40, 60], "every planned checkpoint, resume-only ones cleaned up"
    if workers:
        assert ray_registered_steps(run_dir) == [20, 40, 60], "Ray's record is the folder's"
    assert [storage.exists(storage.join(run_dir, f"step-{step}", "training_state.pt")) for step in steps] \
        == [False, False, True]
    final = storage.read_json(storage.join(run_dir, "step-60", "sweeper_checkpoint.json"))
    assert final["step"] == 60 and final["switch_step"] == 30 and final["phase"] == "mlm"
    log = storage.read_json(storage.join(run_dir, "step-60", "train_log.json"))
    assert [row["step"] for row in log] == list(range(5, 61, 5)), "each logged step once, none lost"
    assert [row["phase"] for row in log] == ["clm"] * 6 + ["mlm"] * 6, "switch exactly at step 30"


WRITER = """
import sys, time
from datetime import datetime, timezone
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, write_rows
rows = [{"study": "s", "trial_key": f"k{i}", "task": "t", "status": "ok", "error": "x" * 2000,
         "finished_at": datetime.now(timezone.utc)} for i in range(5000)]
print("ready", flush=True)
while True:
    write_rows(StudyLayout(sys.argv[1]), TRIALS, rows)
"""


@pytest.mark.parametrize("delay", [0.3, 0.55, 0.8, 1.1])
def test_killing_a_writer_never_leaves_an_unreadable_file(tmp_path, delay):
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "ready"
    study = StudyLayout(str(tmp_path))
    wait_for(lambda: list(Path(table_dir(study, TRIALS)).rglob("part-*.parquet")), 60, "a first batch", writer)
    time.sleep(delay)  # then die somewhere inside a later write
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    files = list(Path(table_dir(study, TRIALS)).rglob("part-*.parquet"))
    for path in files:
        assert pq.read_metadata(path).num_rows == 5000
    assert ds.dataset(Path(table_dir(study, TRIALS)), format="parquet").to_table().num_rows == 5000 * len(files)
    assert read_table(study, TRIALS).num_rows == 5000 * len(files)
