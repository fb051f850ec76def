"""Shared fixtures: one real local Ray head for the end-to-end tests, the smoke study it ran,
and a real S3 endpoint on the loopback (moto's server) for studies kept in an object store."""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest
from local_s3 import free_ports

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent
TESTS = Path(__file__).parent
# tests/support (the modules tests and benchmarks import by name: tiny_checkpoints, local_s3,
# verdict_simulation) and the folders whose tests share fixtures are on sys.path through
# pyproject.toml's `pythonpath`.
# Plugins: the quick tier's guard (its hooks), and (FIXTURE_MODULES, `pytest_configure`) the
# modules whose fixtures tests elsewhere use.
pytest_plugins = ["quick_tier"]
FIXTURE_MODULES = ["test_hostile_checkpoints", "test_external_checkpoints", "test_damage", "test_study_history"]
"""A hub-cache BERT folder and a file outside the study; tiny checkpoints of each architecture; a
recorded smoke study; a study recorded under two specs."""


def pytest_configure(config):
    """Register FIXTURE_MODULES, except in pytest-xdist's controller: it runs no test, and their
    imports (pandas, pyarrow, scipy, matplotlib: ~5 CPU-s) held up the start of both workers."""
    distributing = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    if distributing and not hasattr(config, "workerinput") and not config.getoption("collectonly"):
        return
    for name in FIXTURE_MODULES:
        config.pluginmanager.import_plugin(name)


SMOKE_SPEC = (ROOT / "search_spaces" / "smoke.yaml").read_text()


def edited_spec(tmp_path: Path, *changes: tuple[str, str], name: str = "spec.yaml", text: str = SMOKE_SPEC) -> Path:
    """smoke.yaml (or `text`) with each (old, new) replaced once, written into tmp_path."""
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return path


def nano_study(name: str, runs: str, finetuning: str) -> str:
    """The spec of a small e2e study: `runs` (YAML list lines) pretrained for 12 steps as nano
    models on 400 WordNet documents, then the `finetuning` section's lines."""
    return (f"study: {name}\nmodel: {{preset: nano}}\ndata: {{vocab_size: 1024, seq_len: 64, max_documents: 400}}\n"
            "pretraining:\n  steps: 12\n  global_batch_size: 4\n  warmup_steps: 2\n  decay_steps: 4\n  log_every: 6\n"
            f"  runs:\n{runs}finetuning:\n{finetuning}")

# Token auth is on by default for new local clusters since Ray 2.59; the tests run a private
# loopback cluster and turn it off (cluster configs keep it on).
os.environ["RAY_AUTH_MODE"] = "disabled"
# Ray runs its workers at niceness 15 (its `worker_niceness`), so beside a busy process at 0 a
# study's workers get a few per cent of a core and a test's timeout (not its code) decides
# (measured: nano runs 25-60x slower beside 2 busy processes). Every Ray a test starts
# inherits this; a study a user starts keeps Ray's default.
os.environ["RAY_worker_niceness"] = "0"
# The suite runs on two pytest workers, one core each (scripts/test.sh): torch's OpenMP pool,
# sized to the machine's cores by default, oversubscribes them in every test process and in what
# it starts (measured: tests/unit/trainables on 2 workers, 10-15 % less CPU with one thread).
# Trials and runs set their own thread counts (TrialConfig.runtime.threads, PretrainConfig.threads).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Credentials never leave the driver: workers get s3:// locations without `key:secret@` and use
# their provider chain, here the environment `ray start` passes on to the test cluster's
# processes (moto's server takes any key). No instance-metadata lookups on a developer's box.
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
os.environ.pop("AWS_SESSION_TOKEN", None)



def worker_pythonpath(test_file: str) -> str:
    """PYTHONPATH for Ray workers that import a test module by name (to find a trainable defined
    there): the module's folder, tests/ (its `from conftest import`), and every test folder pytest
    put on sys.path (pyproject.toml's `pythonpath`: tests/support and the folders whose tests
    others import, as the module may)."""
    listed = [entry for entry in sys.path if Path(entry).resolve().is_relative_to(TESTS.resolve())]
    return os.pathsep.join(dict.fromkeys([str(Path(test_file).resolve().parent), str(TESTS), *listed]))


def ray_cli(*args: str, env=None, timeout: float = 600, new_session: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ray"), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT, start_new_session=new_session)


def stop_process_group(pgid: int, grace_s: float = 1.0) -> None:
    """Stop one `ray start`'s processes (they share its process group) and nothing else:
    `ray stop --force` would also stop every other Ray on the machine (another test session's,
    a study running beside the tests)."""
    stop_process_groups([pgid], grace_s)


def stop_process_groups(pgids: list[int], grace_s: float = 1.0) -> None:
    """SIGTERM to every group at once, then SIGKILL to those still there after `grace_s` (a test
    head holds nothing to flush; its dashboard agents can take 15 s or more to leave on SIGTERM)."""
    import signal
    import time

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        alive = list(pgids)
        for pgid in list(alive):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                alive.remove(pgid)
        deadline = time.time() + wait
        while alive and time.time() < deadline:
            for pgid in list(alive):
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    alive.remove(pgid)
            time.sleep(0.2)
        pgids = alive
        if not alive:
            return


@pytest.fixture(autouse=True)
def torch_threads_restored():
    """Each test starts with the process's torch thread count (one: OMP_NUM_THREADS above): a
    trial or run a test trains in-process sets its own (`torch.set_num_threads(runtime.threads)`,
    2 by default), and it stayed for every later test of that worker, whose tiny models then spent
    most of their CPU with two threads waiting on each other beside the other worker (measured: 40
    AdamW steps of a 2-layer, 32-wide model, 5.3-5.5 CPU-s at 2 threads, 1.1-1.2 at one; results
    differ only in the order of float sums, which every tolerance allows for)."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    yield
    if threads is not None:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def sweeper_cache(tmp_path_factory) -> Path:
    """Node-local copies of object-store folders go to a test folder, not ~/.cache/sweeper: Ray's
    processes inherit this from `ray start`, the tests' own process reads the same (one folder
    for every head of the session)."""
    folder = tmp_path_factory.mktemp("sweeper-cache")
    os.environ["SWEEPER_CACHE"] = str(folder)
    return folder


class SessionHead(Sequence):
    """(GCS address, dashboard URL or None) of a head of the session, started when first read and
    stopped by `stop`; read again after that, it starts a new one."""

    def __init__(self, cpus: int, dashboard: bool):
        self.cpus, self.dashboard, self._head, self._value = cpus, dashboard, None, None

    def __getitem__(self, index):
        if self._head is None:
            self._head = running_head(cpus=self.cpus, dashboard=self.dashboard)
            self._value = next(self._head)
        return self._value[index]

    def __len__(self) -> int:
        return 2

    def stop(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            head.close()  # running_head's `finally`: its process group stopped, its folder removed


_session_head = SessionHead(cpus=1, dashboard=False)
_jobs_head = SessionHead(cpus=1, dashboard=True)


@pytest.fixture(scope="session")
def ray_head(sweeper_cache):
    """`ray start --head` on 127.0.0.1 with 1 CPU and no dashboard: (GCS address, None). A driver
    joins it by GCS address; `ray job submit` needs `ray_jobs_head`.

    One CPU: a study on it runs one task or trial at a time, so it starts half the worker
    processes a 2-CPU head would (each ~5 CPU-seconds of Python and imports before any work),
    while the suite's other worker keeps the second core busy. A test that needs two things at
    once (a 2-worker group, a trial beside its run) takes `ray_head_two_cpus`. No dashboard: it
    costs a head 1.2 CPU-s at its start and 0.022-0.025 CPU-s a second idle (a 1-CPU head over
    40 s idle: 2.35 CPU-s with it, 1.47 without), and this head lives through a worker's e2e files.

    Stopped before this process's first test without the e2e mark (`pytest_runtest_setup`): no
    such test may use Ray (tests/support/quick_tier.py), and scripts/test.sh hands each worker its
    tests/e2e/ files first, so the head would only idle through the rest of the session. A test
    that reads it later starts it again."""
    yield _session_head
    _session_head.stop()


@pytest.fixture(scope="session")
def ray_jobs_head(sweeper_cache):
    """As `ray_head`, with the dashboard and its job API: (GCS address, dashboard URL) for `ray job
    submit`. Stopped before the first test that does not use it (a session fixture built on it,
    the smoke study, is kept), so it does not idle through the worker's later files; while the
    tests that use it run, a session head that earlier files started idles beside it."""
    yield _jobs_head
    _jobs_head.stop()


def pytest_collection_modifyitems(config, items):
    """The order in which pytest-xdist hands files out (scripts/test.sh: a file at a time, in this
    order): tests/e2e/ first as collected (few tests, long), then the unit files with a `long` test,
    then the others by their number of tests, most first, so that short files fill the end of both
    workers' runs (by count alone, a file of one long test went out last and ran alone)."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)

    def order(entry):
        position, (path, tests) = entry
        if path.startswith("tests/e2e/"):
            return (0, position)
        return (1, not any(test.get_closest_marker("long") for test in tests), -len(tests), position)

    items[:] = [test for _, (_, tests) in sorted(enumerate(files.items()), key=order) for test in tests]


def pytest_runtest_setup(item):
    from quick_tier import is_e2e  # a plugin (pytest_plugins): imported once pytest has registered it

    if not is_e2e(item):
        _session_head.stop()
    if "ray_jobs_head" not in item.fixturenames:
        _jobs_head.stop()


@pytest.fixture(scope="module")
def ray_head_two_cpus(sweeper_cache):
    """As `ray_head`, with 2 CPUs, for one test file."""
    yield from running_head(cpus=2, dashboard=False)


def running_head(cpus: int, dashboard: bool):
    """Start a head, yield (GCS address, dashboard URL or None), stop it.

    A start that fails is tried once more, on new ports in a new folder, and the failure is
    reported as a warning with the tails of Ray's own logs (it is seen in the session's summary,
    not hidden): on a loaded machine `ray start` can give up waiting 30 s for its raylet to
    register with the GCS ("The current node timed out during startup": once in CI, beside the
    other pytest worker's tests; never in 80 starts here beside e2e tests of Ray Data, DDP and
    Tune run in a loop, each start 3-11 s). A head is what a test runs on, not what it checks;
    a second failure fails the test, with both failures' logs."""
    failures = []
    while True:
        port, dashboard_port = free_ports(2)
        # A temp folder of its own (short: Ray's socket paths live below it). A job's driver is given
        # the address in `<temp folder>/ray_current_cluster`, which `ray start` writes: in the shared
        # /tmp/ray that is whichever Ray started last on the machine (a study or another suite beside
        # this one), and a job of this head was sent there and hung.
        ray_tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")
        started, process_group = start_head(port, dashboard_port, ray_tmp, cpus, dashboard)
        if started.returncode == 0:
            break
        failures.append(started.stdout + started.stderr + ray_log_tails(ray_tmp))
        stop_process_group(process_group)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        assert len(failures) < 2, "\n\n".join(failures)
        warnings.warn(f"`ray start --head` failed; starting it again on new ports:\n{failures[0]}", stacklevel=2)
    try:
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard_port}" if dashboard else None
    finally:
        stop_process_group(process_group)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def start_head(port: int, dashboard_port: int, ray_tmp: str, cpus: int,
               dashboard: bool) -> tuple[subprocess.CompletedProcess, int]:
    """`ray start --head` in a session of its own: (its result, the process group that every
    process it started is in, whether or not it succeeded)."""
    # As from an activated venv: the job's `python` entrypoint is this environment's python.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    # No fixed port: Ray's defaults collide with any other Ray on the machine (a study running
    # beside the tests). The agents choose their own (AGENT_PORTS).
    command = [str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
               *AGENT_PORTS, f"--temp-dir={ray_tmp}",
               "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
               f"--include-dashboard={str(dashboard).lower()}",
               f"--num-cpus={cpus}", "--num-gpus=0", "--disable-usage-stats"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        stderr += "\n`ray start` did not end within 180 s"
    # The session leader's pid is the group's id, and Ray's processes stay in the group.
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), process.pid


def ray_log_tails(ray_tmp: str, lines: int = 20) -> str:
    """The last lines of a head's GCS and raylet logs: what a failed start left to read."""
    logs = Path(ray_tmp) / "session_latest" / "logs"
    tails = []
    for name in ("gcs_server.out", "gcs_server.err", "raylet.out", "raylet.err"):
        path = logs / name
        if path.exists():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {path}\n" + "\n".join(text))
    return "\n".join(["", *tails]) if tails else f"\n(no Ray logs in {logs})"


def run_sweeper(*args: str, address: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m sweeper ...` as a user would run it, as a driver of the given cluster (`env`:
    extra environment variables), in a process forked from one that imported the run stage
    once (tests/support/cli_process.py: the imports a driver makes, not its work, are shared)."""
    from cli_process import sweeper_cli

    env = {**os.environ, "RAY_ADDRESS": address, "PYTHONUNBUFFERED": "1", **(env or {})}
    return sweeper_cli(*args, env=env, cwd=ROOT, timeout=timeout, stage="run")


@pytest.fixture(scope="session")
def smoke_study(ray_jobs_head, tmp_path_factory):
    """The smoke study, submitted to a head with `ray job submit --working-dir .`."""
    _, dashboard = ray_jobs_head
    study_dir = tmp_path_factory.mktemp("smoke") / "study"
    submitted = submit_job(dashboard, "python", "-m", "sweeper", "run", "search_spaces/smoke.yaml",
                           "--storage", str(study_dir))
    assert submitted.returncode == 0, submitted.stdout[-5000:] + submitted.stderr[-3000:]
    return study_dir, submitted.stdout


def submit_job(dashboard: str, *entrypoint: str, agent_wait_s: float = 180.0) -> subprocess.CompletedProcess:
    """`ray job submit --working-dir .` as a user would. A head just started answers "No available
    agent to submit job, please try again later" until its job agent is up (seconds, or a minute
    on a loaded machine): such a refusal (no job was created) is retried, as the message asks."""
    import time

    deadline = time.time() + agent_wait_s
    while True:
        submitted = ray_cli(
            "job", "submit", "--address", dashboard, "--working-dir", ".",
            "--runtime-env-json", '{"excludes": [".venv", ".git", "studies", "*.egg-info", ".pytest_cache"]}',
            "--", *entrypoint, env={**os.environ, "RAY_AUTH_MODE": "disabled"}, timeout=900,
        )
        if submitted.returncode == 0 or "No available agent" not in submitted.stderr or time.time() > deadline:
            return submitted
        time.sleep(3)


@pytest.fixture(scope="session")
def wordpiece_dir(tmp_path_factory) -> str:
    """A small WordPiece tokenizer trained on the built-in corpus (for task-data tests)."""
    from sweeper.contract.configs import CorpusConfig
    from trainables.corpus_prep import prepare_corpus

    out = tmp_path_factory.mktemp("corpus") / "corpus"
    prepare_corpus(CorpusConfig(source="wordnet", text_column="text", tokenizer="train-wordpiece", vocab_size=512,
                                max_documents=300), str(out))
    return str(out / "tokenizer")


@pytest.fixture(scope="session")
def object_store():
    """moto's S3 server on 127.0.0.1 with one bucket; yields `uri(name)` -> a fresh
    `s3://testing:testing@...?endpoint_override=...` location in it. The driver uses the URI's
    credentials; workers get it without them and use the environment set above."""
    from local_s3 import local_s3

    prefix = uuid.uuid4().hex[:8]
    with local_s3("sweeper-tests") as s3:
        yield lambda name: s3.uri(f"{prefix}/{name}")


@dataclasses.dataclass(frozen=True)
class ClusterNode:
    """One node of `node_cluster`: its own folders, none shared with another node."""

    name: str
    folder: Path
    """Everything of this node below one folder: home/, tmp/ (TMPDIR), cache/ (SWEEPER_CACHE),
    ray/ (Ray's --temp-dir) and audit.log (tests/node_audit)."""
    env: dict
    """The environment its `ray start` had (a driver run "on" this node gets the same)."""

    @property
    def cache(self) -> Path:
        return self.folder / "cache"

    def audit(self) -> list[tuple[str, str, str, str]]:
        """(node, event, pid, path or command line) of each line of its audit log."""
        text = (self.folder / "audit.log").read_text() if (self.folder / "audit.log").exists() else ""
        return [tuple(line.split("\t", 3)) for line in text.splitlines()]


@dataclasses.dataclass(frozen=True)
class NodeCluster:
    address: str
    """The head's GCS address (RAY_ADDRESS for a driver)."""
    nodes: dict
    """Node name -> ClusterNode; "head" is the head's (the driver runs there)."""


def node_env(name: str, folder: Path, watched: list[Path]) -> dict:
    """A node's environment: HOME, TMPDIR and SWEEPER_CACHE in its own folder, and the audit hook
    (tests/node_audit) logging its processes' accesses below the `watched` folders."""
    for sub in ("home", "tmp", "cache", "ray"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(folder / "home"), "TMPDIR": str(folder / "tmp"), "SWEEPER_CACHE": str(folder / "cache"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "node_audit"),
                                           *filter(None, [os.environ.get("PYTHONPATH")])]),
            "SWEEPER_NODE_NAME": name, "SWEEPER_NODE_AUDIT_LOG": str(folder / "audit.log"),
            "SWEEPER_NODE_AUDIT_ROOTS": os.pathsep.join(map(str, watched))}


AGENT_PORTS = ("--dashboard-agent-listen-port=0",)
"""A node's agents bind ports of the kernel's choosing and publish them (the session folder, the
GCS, where the job API finds its agent); Ray 2.60 does so by default for all but the job agent's
HTTP port (52365, which collides between nodes on one machine). A port chosen for an agent
beforehand can be taken before the agent binds it, late in `ray start`: a job agent whose port is
taken stays up without its HTTP server, `ray start` succeeds, and the head answers every `ray
job submit` "No available agent to submit job" (seen in CI on d4035f1: every reader of the
session's smoke study failed after the 180 s wait; fixed in ce74509). A GCS or
dashboard port that is taken fails `ray start` itself, which `running_head` tries again."""


@pytest.fixture(scope="module")
def node_cluster():
    """A Ray cluster of three nodes on this machine, each a `ray start --block` process group
    with its own folders (`ClusterNode`): "head" (1 CPU), "pretrain" (1 CPU, resource
    pretrain_node: 1) and "trial" (2 CPUs, resource trial_node: 2). Folders are short paths in
    /tmp (Ray's socket paths live below its temp folder)."""
    import contextlib
    import json
    import signal
    import time

    base = Path(tempfile.mkdtemp(prefix="mn", dir="/tmp"))
    folders = {name: base / name for name in ("head", "pretrain", "trial")}
    # Also watched: the checkout's studies/ folder, where a study without --storage lands; no
    # process of the cluster has anything to do there when the study is in an object store.
    watched = [*folders.values(), ROOT / "studies"]
    nodes = {name: ClusterNode(name, folder, node_env(name, folder, watched)) for name, folder in folders.items()}
    port, dashboard_port = free_ports(2)
    address = f"127.0.0.1:{port}"
    starts = {}

    def start(name: str, cpus: int, resources: dict, role: list[str]) -> None:
        with open(folders[name] / "ray-start.log", "w") as log:
            starts[name] = subprocess.Popen(
                [str(BIN / "ray"), "start", "--block", *role, "--node-ip-address=127.0.0.1",
                 *AGENT_PORTS,
                 f"--temp-dir={folders[name] / 'ray'}", f"--num-cpus={cpus}", "--num-gpus=0",
                 f"--resources={json.dumps(resources)}", "--disable-usage-stats"],
                env=nodes[name].env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def joined(name: str, word: str | None) -> bool:
        """Whether node `name` is up (`ray status` answers and names `word`, its custom resource);
        False when its `ray start` gave up (on a loaded machine a raylet may take longer than the
        30 s Ray 2.60 waits for it to register)."""
        deadline = time.time() + 240
        while True:
            if starts[name].poll() is not None:
                return False
            status = ray_cli("status", f"--address={address}", env=nodes["head"].env, timeout=60)
            if status.returncode == 0 and (word is None or word in status.stdout):
                return True
            assert time.time() < deadline, status.stdout + status.stderr[-2000:]
            time.sleep(2)

    def join(name: str, cpus: int, resources: dict, role: list[str], attempts: int = 3) -> None:
        """Start node `name`, one node at a time, again (its leftovers stopped) if it gave up."""
        for _ in range(attempts):
            start(name, cpus, resources, role)
            if joined(name, next(iter(resources), None)):
                return
            stop_process_groups([starts[name].pid], grace_s=5)
            starts[name].wait()
        raise AssertionError(f"`ray start` of {name} failed {attempts} times: "
                             + (folders[name] / "ray-start.log").read_text()[-3000:])

    try:
        join(
            "head",
            1,
            {},
            ["--head", f"--port={port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"],
        )
        join("pretrain", 1, {"pretrain_node": 1}, [f"--address={address}"])
        join("trial", 2, {"trial_node": 2}, [f"--address={address}"])
        yield NodeCluster(address, nodes)
    finally:
        for process in starts.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.time() + 3  # the nodes hold nothing to flush: then SIGKILL
        for process in starts.values():  # reaped: a zombie `ray start` would keep its group "alive"
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.time()))
        for process in starts.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)
