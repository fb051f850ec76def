"""Spot nodes on a real local Ray cluster: a local-mode run told by SIGTERM or by a drain of its
node saves a resume state at the next step boundary, stops, and is relaunched from that step; a
run or a trial whose node is lost (no notice) runs again elsewhere; each counted apart from
failures (trainables.preemption, sweeper.run.train_grid, sweeper.run.recording)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
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
from ray_private import any_alive
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
    assert f"(preemption; {PREEMPTIONS} of 20: resources.max_preemptions)" in output, output[-5000:]
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


RECLAIM_GRACE_S = 30.0
"""How long a reclaimed node's raylet may take to leave after SIGTERM before SIGKILL: a cloud's grace
(GCP's preemption and Kubernetes' default termination grace are 30 s). The raylet tells the GCS
as it leaves, and Ray records the node's death as expected ("received SIGTERM": a preemption to
the sweeper). A raylet SIGKILLed before it could (a 1 s grace on a loaded machine did it once in
CI) dies unexplained: Ray records an unexpected termination, even on a node drained for
preemption whose deadline is still ahead (the GCS's node manager), and the sweeper reports a lost
node, as Ray does."""


NODE_DEATH_S = 120
"""How long a node the test stopped may stay alive to the GCS: a SIGKILLed raylet is found dead by
the GCS's health check, 5 failed checks 3 s apart, each given up to 10 s (Ray's defaults)."""


def command_name(pid: int) -> str | None:
    """The name of process `pid`'s executable (/proc's `comm`), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie left for its parent to reap counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class SpotNodes:
    """Worker nodes with `pretrain_node: 1` joined to the head at `address`: spot nodes, each a
    `ray start --block` in its own process group (reclaimed as a cloud does: all its processes at
    once) below one short folder (Ray's socket paths live below it)."""

    def __init__(self, address: str):
        self.address, self.nodes = address, {}  # process -> its folder
        self.folder = Path(tempfile.mkdtemp(prefix="sp", dir="/tmp"))

    def start(self, attempts: int = 3) -> subprocess.Popen:
        """One more node, started again in a new folder if `ray start` gives up (a raylet slow to
        register on a loaded machine). Joined once `ray start` says so: it says so only after its
        raylet registered with the GCS (cheaper than asking `ray status` in a loop)."""
        env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
        for _ in range(attempts):
            where = self.folder / str(len(self.nodes))
            where.mkdir(parents=True)
            log = where / "ray-start.log"
            with open(log, "w") as out:
                node = subprocess.Popen(
                    [str(BIN / "ray"), "start", "--block", f"--address={self.address}", "--node-ip-address=127.0.0.1",
                     *AGENT_PORTS, f"--temp-dir={where / 'ray'}", "--num-cpus=1", "--num-gpus=0",
                     '--resources={"pretrain_node": 1}', "--disable-usage-stats"],
                    env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            self.nodes[node] = where
            deadline = time.time() + 240
            while node.poll() is None and time.time() < deadline:
                if "Ray runtime started" in log.read_text():
                    return node
                time.sleep(0.5)
            stop_process_group(node.pid)
            node.wait()
        raise AssertionError(f"`ray start` of a spot node failed {attempts} times: " + log.read_text()[-3000:])

    def node_id(self, node: subprocess.Popen) -> str:
        """Its Ray node id (its raylet logs it as it starts)."""
        return re.search(r"Setting node ID node_id=([0-9a-f]+)", self.raylet_log(node).read_text())[1]

    def raylet_log(self, node: subprocess.Popen) -> Path:
        return self.nodes[node] / "ray" / "session_latest" / "logs" / "raylet.out"

    def joined(self, node: subprocess.Popen) -> bool:
        """Whether `node`'s raylet got as far as its node id (a start given up on may not have)."""
        log = self.raylet_log(node)
        return log.exists() and "Setting node ID node_id=" in log.read_text()

    @staticmethod
    def processes(node: subprocess.Popen) -> list[int]:
        """The processes of `node`: its `ray start`'s process group (raylet, agents) and the Ray
        workers its raylet started, which Ray puts in process groups of their own."""
        group, children = set(), {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid, pgid = map(int, (entry / "stat").read_text().rsplit(")", 1)[1].split()[1:3])
            except OSError:
                continue
            if pgid == node.pid:
                group.add(int(entry.name))
            children.setdefault(ppid, []).append(int(entry.name))
        return sorted(group | {child for pid in group for child in children.get(pid, [])})

    def running(self, node: subprocess.Popen, title: str) -> int | None:
        """The process of `node` that runs `title` now, if one does: a Ray worker's command line is
        its process title, `ray::ImplicitFunc.train` while a trial trains (fresh, where the driver's
        live.json may be seconds old)."""
        for pid in self.processes(node):
            try:
                if title in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    return pid
            except OSError:
                continue
        return None

    def signal_all(self, node: subprocess.Popen, sig: int) -> None:
        for pid in self.processes(node):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue

    def lose(self, node: subprocess.Popen) -> None:
        """`node` lost: its raylet and workers SIGKILLed together, no notice."""
        self.signal_all(node, signal.SIGKILL)
        node.wait()

    def reclaim(self, node: subprocess.Popen) -> None:
        """`node` stopped as a cloud stops a reclaimed one: SIGTERM to all its processes, a grace
        for its raylet to leave (RECLAIM_GRACE_S), then SIGKILL to what is left."""
        raylet = next((pid for pid in self.processes(node) if command_name(pid) == "raylet"), None)
        self.signal_all(node, signal.SIGTERM)
        deadline = time.time() + RECLAIM_GRACE_S
        while raylet is not None and not gone(raylet) and time.time() < deadline:
            time.sleep(0.1)
        stop_process_group(node.pid)
        self.signal_all(node, signal.SIGKILL)
        node.wait()

    def stop_all(self) -> None:
        """Stop every node and return once the GCS counts each dead. A node SIGKILLed while it had
        a free `pretrain_node` stays alive to the GCS until its health check gives up (15-60 s),
        and the GCS places work there meanwhile: the next test's actors went to an idle node the
        test before had SIGKILLed, and died "never ran" with it (CI at 22b6455; reproduced once
        in 3 here). A running node is stopped as `reclaim` does, so its raylet tells the GCS."""
        ids = [self.node_id(node) for node in self.nodes if self.joined(node)]
        for node in self.nodes:
            if node.poll() is None:
                self.reclaim(node)
            self.signal_all(node, signal.SIGKILL)
            stop_process_group(node.pid)
        if ids:
            wait_for(lambda: not any_alive(self.address, ids), timeout=NODE_DEATH_S,
                     what=f"the GCS to count nodes {[i[:8] for i in ids]} dead", poll_s=1)
        shutil.rmtree(self.folder, ignore_errors=True)

    def log_tails(self, lines: int = 30) -> str:
        """Each node's `ray start` output and its raylet's log, their last `lines` lines: why a
        node went, which its folder (removed by `stop_all`) would otherwise take with it."""
        tails = []
        for number, (node, where) in enumerate(self.nodes.items()):
            for log in (where / "ray-start.log", self.raylet_log(node)):
                text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else ["(none)"]
                tails.append(f"--- node {number}: {log.name} ---\n" + "\n".join(text))
        return "\n".join(tails)

    def __enter__(self) -> SpotNodes:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        """Stop every node; a failure carries their logs' tails (a note pytest prints with it)."""
        if error is not None:
            error.add_note(self.log_tails())
        self.stop_all()


TRIAL_TITLE = "ray::ImplicitFunc.train"
"""A Ray worker's process title while a Tune trial (a function trainable) trains."""

TRIAL_MAX_STEPS = 300
"""Steps of each trial: 21 CPU-seconds a trial here (measured in one process: 0.4 CPU-s to load its
task data and backbone, then about 0.065 CPU-s a step)."""

TRAINED_CPU_S = 4.0
"""CPU-seconds a trial's process spends in its trial before the test stops its node: about step 55
of 300, past loading, well into its optimizer steps and far from its end. CPU time, unlike wall
time, does not stretch with the machine's load, so the stop lands mid-trial under any load."""


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user and system) the process `pid` has used, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def training_a_trial(spot: SpotNodes, node: subprocess.Popen):
    """A condition for `wait_for`: true (the CPU-seconds) once a process of `node` has spent
    TRAINED_CPU_S CPU-seconds in its trial since the test first saw it there, an observable sign
    that the trial is under way (a trial without a scheduler reports nothing before its end)."""
    first_seen: dict[int, float] = {}

    def condition():
        pid = spot.running(node, TRIAL_TITLE)
        used = cpu_seconds(pid) if pid is not None else None
        if used is None:
            return None
        trained = used - first_seen.setdefault(pid, used)
        return trained if trained >= TRAINED_CPU_S else None
    return condition


def drain(address: str, node_id: str, deadline_s: int) -> None:
    """`ray drain-node` for preemption, as KubeRay and the cloud integrations issue it."""
    drained = ray_cli("drain-node", f"--address={address}", f"--node-id={node_id}",
                      "--reason=DRAIN_NODE_REASON_PREEMPTION", "--reason-message=spot reclaim (test)",
                      f"--deadline-remaining-seconds={deadline_s}")
    assert drained.returncode == 0, drained.stdout + drained.stderr


def test_spot_nodes_drained_or_lost_cost_only_their_own_work(ray_head, tmp_path):
    """One study on spot nodes (`pretrain_node`, one at a time), its run and its trials placed
    there, `max_failures: 0`: the pretraining run's node is drained for preemption (the run saves
    a resume state at the step it sees the drain, stops, and trains on from that step on the next
    node), then the next node is lost mid-run (raylet and workers SIGKILLed together: the run
    trains on from its last saved state on the next one), then a node is lost mid-trial and the
    next drained mid-trial and reclaimed. One `sweeper run` finishes, exit 0: the run done, every
    planned trial recorded once and ok, none failed; every stop counted apart from failures
    (interruptions.json, trial_interruptions.json, `sweeper status`)."""
    from sweeper.plan.load import load_study
    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import read_trials

    began = time.time()
    study_dir = tmp_path / "study"
    spec = tmp_path / "spot.yaml"
    # Trials long enough (TRIAL_MAX_STEPS) to be stopped mid-way; only spot nodes have `pretrain_node`.
    spec.write_text((SPECS / "worker_kill.yaml").read_text().replace("max_steps: 2",
                                                                       f"max_steps: {TRIAL_MAX_STEPS}\n  epochs: 1000")
                    + "resources: {pretraining_workers: 0, max_failures: 0, custom_resources_per_worker: "
                      "{pretrain_node: 1}, custom_resources_per_trial: {pretrain_node: 1}}\n")
    layout = StudyLayout(str(study_dir))
    run_dir = str(study_dir / "pretraining" / RUN)
    log = tmp_path / "driver.log"
    driver = None

    def progress():
        return storage.read_json(storage.join(run_dir, "progress.json"))

    def trial_interruptions(n):
        entries = storage.read_json(layout.trial_interruptions) or []
        return entries if len(entries) >= n else None

    def said(text):
        return text in log.read_text()

    def at(what):
        print(f"[test +{time.time() - began:.0f} s] {what}", flush=True)

    with SpotNodes(ray_head[0]) as spot:
        try:
            node = spot.start()
            at("node A up")
            with open(log, "w") as out:
                driver = subprocess.Popen(
                    [sys.executable, "-m", "sweeper", "run", str(spec), "--storage", str(study_dir)],
                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                    env={**os.environ, "RAY_ADDRESS": ray_head[0], "PYTHONUNBUFFERED": "1"})
            # 1. The run's node drained: a notice. The next node joins meanwhile (a drained node takes
            # nothing new).
            first = wait_for(lambda: (p := progress()) and p["step"] < 20 and p, timeout=600,
                             what="the run training on node A", process=driver, poll_s=0.05)
            drain(ray_head[0], first["node_id"], 120)
            drained, node = node, spot.start()
            at("node A drained, node B up")
            (notice,) = wait_for(lambda: RunLayout(run_dir).interruptions(), timeout=60,
                                 what="the drain notice's resume state", process=driver)
            assert notice["kind"] == "preemption" and f"node {first['node_id'][:8]} draining" in notice["reason"]
            wait_for(lambda: said("was preempted"), timeout=60, what="the run's task back", process=driver)
            spot.reclaim(drained)
            at(f"notice at step {notice['step']}; node A reclaimed")
            # 2. The next node lost mid-run: no notice, the run trains on from its last saved state.
            wait_for(lambda: (p := progress()) and p["node_id"] != first["node_id"]
                     and p["step"] > notice["step"] + 5 and p["step"] < 55 and p,
                     timeout=600, what="the run training on node B", process=driver, poll_s=0.05)
            spot.lose(node)
            saved = max(RunLayout(run_dir).saved_checkpoints())  # at least this far; a save under way may land
            at(f"node B lost, saved at step {saved} or later")
            node = spot.start()
            at("node C up")
            # 3. A node lost mid-trial, 4. the next drained mid-trial and reclaimed: each once its trial
            # has trained for TRAINED_CPU_S CPU-seconds.
            trained = wait_for(training_a_trial(spot, node), timeout=900, what="a trial training on node C",
                               process=driver, poll_s=0.1)
            spot.lose(node)
            at(f"node C lost, its trial {trained:.1f} CPU-s in")
            node = spot.start()
            at("node D up")
            wait_for(lambda: trial_interruptions(1), timeout=300, what="the lost node's trial set aside",
                     process=driver)
            trained = wait_for(training_a_trial(spot, node), timeout=600, what="a trial training on node D",
                               process=driver, poll_s=0.1)
            drain(ray_head[0], spot.node_id(node), 60)
            spot.reclaim(node)
            at(f"node D drained and reclaimed, its trial {trained:.1f} CPU-s in at the drain")
            spot.start()
            at("node E up")
            try:
                driver.wait(timeout=1200)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the driver ran past 1200 s; its output:\n{log.read_text()[-8000:]}")
            at("driver done")
        finally:
            if driver is not None and driver.poll() is None:
                driver.kill()
    output = log.read_text()
    assert driver.returncode == 0, output[-5000:]
    # The run: finished, its two stops counted apart from failures (`max_failures: 0`).
    events = RunLayout(run_dir).interruptions()
    assert [e["kind"] for e in events] == ["preemption", "node lost"], events
    resumed = events[1]["step"]  # the driver's, once Ray told it of the lost node
    final = progress()
    assert final["step"] == 60 and final["started_from"] == resumed >= saved, (final, saved, events)
    assert f"lost its node (its last saved state is step {resumed}); training on from its newest checkpoint " \
           "(node lost; 2 of 20: resources.max_preemptions)" in output, output[-5000:]
    # The trials: each planned one recorded once, ok; the stopped ones counted apart.
    planned = {t.trial_key for t in load_study(str(spec)).plan.trials}
    rows = read_trials(layout).to_pylist()
    assert sorted(r["trial_key"] for r in rows) == sorted(planned), "each planned trial recorded once"
    assert {r["status"] for r in rows} == {"ok"}, [(r["status"], r["error"]) for r in rows]
    entries = storage.read_json(layout.trial_interruptions)
    kinds = [e["kind"] for e in entries]
    # A trial placed on a node on its way out is stopped again.
    assert kinds[0] == "node lost" and "preemption" in kinds and set(kinds) <= {"node lost", "preemption"}, entries
    print(f"trial interruptions: {kinds}; trials' wall times (s): {[round(r['wall_time_s']) for r in rows]}")
    status = run_sweeper("status", str(study_dir), address=ray_head[0], timeout=300)
    assert f"interrupted {RUN}: 1 preemptions, 0 failures, 1 lost nodes" in status.stdout, status.stdout
    assert "requeued trials:" in status.stdout and " 0 failed" in status.stdout, status.stdout
    at("checked")


def test_a_lost_nodes_actor_is_told_from_a_worker_that_crashed(ray_head):
    """The errors the driver gets from a real cluster: an actor whose worker crashed (it SIGKILLs
    itself) is a failure of its own; an actor whose node is lost (raylet and workers SIGKILLed
    together) is a lost node, whichever error Ray gives first (the bare "died unexpectedly" once
    the driver's wait for the GCS's notice runs out, the node's death, or an unreachable actor),
    and the GCS has recorded nothing else of it within `recorded_death`'s wait."""
    import ray

    from sweeper.run.ray_compat import recorded_death, trial_interruption

    @ray.remote(num_cpus=0, resources={"pretrain_node": 0.5})  # two on the spot node
    class Busy:
        def crash(self):
            os.kill(os.getpid(), signal.SIGKILL)

        def work(self):
            time.sleep(300)

        def started(self):
            return os.getpid()

    def error_of(ref) -> str:
        with pytest.raises(ray.exceptions.RayActorError) as raised:
            ray.get(ref, timeout=120)
        return f"ray.exceptions.{type(raised.value).__name__}: {raised.value}"

    ray.init(address=ray_head[0], log_to_driver=False)
    with SpotNodes(ray_head[0]) as spot:
        try:
            node = spot.start()
            crashing, working = Busy.remote(), Busy.remote()
            ray.get([crashing.started.remote(), working.started.remote()], timeout=120)
            crashed = error_of(crashing.crash.remote())
            assert "its worker process has died" in crashed and trial_interruption(crashed) is None, crashed
            assert "its worker process has died" in recorded_death(crashed), "the GCS's record, read back"
            work = working.work.remote()
            time.sleep(1)
            spot.lose(node)
            lost = error_of(work)
            assert trial_interruption(lost) == "node lost", lost
            print(f"a lost node's actor: {lost.splitlines()[0]}")
        finally:
            ray.shutdown()
