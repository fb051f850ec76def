"""Ray's and Tune's private API is used in one module, sweeper/run/ray_compat.py, behind a version
check (and on the worker side in trainables/ray_private.py, which cannot import it): the source is
searched (stdlib `ast`) for private Ray names anywhere else, and the check refuses a Ray it was not
tested with."""
from __future__ import annotations

import ast
import os
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SEARCHED = ("sweeper", "trainables", "benchmarks", "tests")
COMPAT = ROOT / "sweeper" / "run" / "ray_compat.py"
WORKER = ROOT / "trainables" / "ray_private.py"
"""The worker side's one private use (the drain state of a node), behind the driver's check."""
TEST_ONLY = ROOT / "tests" / "support" / "ray_private.py"
"""The private uses only tests make (cluster-config checks by `ray up`'s code), version-checked the same."""


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_ray_uses(path: Path) -> list[str]:
    """`line: what` for each private Ray or Tune name in the file: an import of a private Ray
    module (`ray._private`, `ray.tune.execution._x`), and, in a module that imports Ray, any
    `._name` attribute, `getattr(x, "_name")`, `_name=` keyword argument or `_name` class
    attribute (Tune reads a scheduler subclass's `_metric`: overriding it is private use too)."""
    tree = ast.parse(path.read_text())
    found, imports_ray = [], False
    for node in ast.walk(tree):
        modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        for module in modules:
            if module.split(".")[0] == "ray":
                imports_ray = True
                if any(private(part) for part in module.split(".")):
                    found.append(f"{node.lineno}: import of {module}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
            found += [f"{node.lineno}: import of {node.module}.{a.name}" for a in node.names if private(a.name)]
    if not imports_ray:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr",
                                                                                                  "hasattr"):
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and private(str(node.args[1].value)):
                found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        if isinstance(node, ast.Call):
            found += [f"{node.lineno}: keyword {k.arg}=" for k in node.keywords if k.arg and private(k.arg)]
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                targets = item.targets if isinstance(item, ast.Assign) else [item.target] if isinstance(
                    item, ast.AnnAssign) else []
                found += [f"{item.lineno}: class attribute {t.id}" for t in targets
                          if isinstance(t, ast.Name) and private(t.id)]
    return found


def test_no_private_ray_or_tune_name_outside_the_compat_module():
    found = [f"{path.relative_to(ROOT)}:{use}"
             for package in SEARCHED for path in sorted((ROOT / package).rglob("*.py"))
             if path not in (COMPAT, WORKER, TEST_ONLY) for use in private_ray_uses(path)]
    assert not found, "private Ray/Tune API outside sweeper/run/ray_compat.py:\n" + "\n".join(found)


def test_the_search_finds_each_kind_of_private_use(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import ray\nfrom ray._private import ray_constants\nfrom ray.tune import _x\n"
                   "ray.init(_node_ip_address='127.0.0.1')\n"
                   "class S:\n    _supports_buffered_results = False\n"
                   "def f(c, t):\n    c._tune_controller._schedule_trial_train(t)\n"
                   "    getattr(c, '_tune_controller', c)\n")
    assert sorted(private_ray_uses(bad)) == [
        "2: import of ray._private", "3: import of ray.tune._x", "4: keyword _node_ip_address=",
        "6: class attribute _supports_buffered_results", "8: ._schedule_trial_train", "8: ._tune_controller",
        "9: getattr(..., '_tune_controller')"]
    bad.write_text(bad.read_text().replace("import ray\n", "").replace("from ray.", "from raylike."))
    assert private_ray_uses(bad) == [], "private names of other libraries (torch._foreach_mul_) are theirs"
    assert private_ray_uses(COMPAT), "the compat module itself is where they are"


def test_an_untested_ray_is_refused_by_name(monkeypatch):
    import ray

    from sweeper.run import ray_compat

    ray_compat.require_tested_ray.cache_clear()
    monkeypatch.setattr(ray, "__version__", "2.99.1")
    try:
        with pytest.raises(RuntimeError, match=r"Ray 2\.99\.1 is installed.*2\.60\.x"):
            ray_compat.require_tested_ray()
        with pytest.raises(RuntimeError, match=r"Ray 2\.99\.1"):
            ray_compat.resume_held_trial(object(), object())
    finally:
        ray_compat.require_tested_ray.cache_clear()
    monkeypatch.undo()
    assert ray.__version__.startswith(ray_compat.TESTED_RAY_VERSIONS), "the pinned Ray is a tested one"
    ray_compat.require_tested_ray()


STOPPED_INSIDE_A_CALLBACK = r"""
import os, signal, sys, time, weakref
from sweeper.run.ray_compat import quiet_stopped_workers

def sigterm_handler(signum, frame):  # Ray's worker handler, by name and by what it raises
    raise SystemExit(1)

def on_collect(ref):  # the signal lands inside an interpreter callback
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)

def failing(ref):
    raise OSError("a callback's own error")

signal.signal(signal.SIGTERM, sigterm_handler)
quiet_stopped_workers()
quiet_stopped_workers()  # a second call (a reused worker) wraps nothing twice
class Held: pass
held = Held(); ref = weakref.ref(held, on_collect); del held
other = Held(); ref2 = weakref.ref(other, failing); del other
print("RAN ON", flush=True)
"""


def test_rays_stop_inside_a_callback_is_one_line_and_other_ignored_errors_are_reported_whole():
    import subprocess
    import sys

    from sweeper.run.ray_compat import STOPPED_WORKER_NOTICE

    done = subprocess.run([sys.executable, "-c", STOPPED_INSIDE_A_CALLBACK], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "RAN ON" in done.stdout, done.stderr
    errors = done.stderr.splitlines()
    assert errors.count(STOPPED_WORKER_NOTICE) == 1, done.stderr
    assert "SystemExit" not in done.stderr and "sigterm_handler" not in done.stderr, done.stderr
    assert "Exception ignored" in done.stderr and "OSError: a callback's own error" in done.stderr, done.stderr


def test_trial_interruptions_are_told_apart_by_the_messages_ray_260_writes():
    """The three texts `trial_interruption` looks for are the ones the installed Ray writes (its
    Python worker, its compiled GCS server, its exception class), and a trial's own error is none."""
    import importlib.util

    from ray.exceptions import ActorUnavailableError

    from sweeper.run.ray_compat import TRIAL_NODE_DIED, TRIAL_NODE_PREEMPTED, TRIAL_SIGTERM, trial_interruption

    ray_dir = Path(importlib.util.find_spec("ray").origin).parent
    assert TRIAL_SIGTERM in (ray_dir / "_private" / "worker.py").read_text()
    gcs_server = (ray_dir / "core" / "src" / "ray" / "gcs" / "gcs_server").read_bytes()
    assert TRIAL_NODE_DIED.encode() in gcs_server and TRIAL_NODE_PREEMPTED.encode() in gcs_server
    unreachable = ActorUnavailableError("The actor is temporarily unavailable: RpcError: Socket closed", bytes(16))
    assert trial_interruption(f"Failure # 1\nray.exceptions.ActorUnavailableError: {unreachable}") == "node lost"
    assert trial_interruption(f"ray.exceptions.ActorDiedError: {TRIAL_NODE_DIED} Node Id: ab12") == "node lost"
    assert trial_interruption(f"SystemExit: 1\n{TRIAL_SIGTERM}") == "preemption"
    reclaimed = f"{TRIAL_NODE_DIED} Node Id: ab12\n\tthe actor's node was terminated expectedly: received SIGTERM"
    assert trial_interruption(reclaimed) == "preemption"
    preempted = f"{TRIAL_NODE_DIED} Node Id: ab12\n\t{TRIAL_NODE_PREEMPTED}: spot reclaim (test)"
    assert trial_interruption(preempted) == "preemption"
    assert trial_interruption("ray.exceptions.RayTaskError(ValueError): the task has no labels") is None


def test_an_actor_death_ray_could_not_explain_is_a_lost_node_and_a_worker_crash_a_failure():
    """The installed Ray's ActorDiedError, built as its core worker builds it: with the actor id
    alone when its wait for the GCS's death notice ran out (a node gone without a word), or with
    the cause the raylet reported (the trial's worker crashed: the trial's own failure)."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext
    from ray.exceptions import ActorDiedError

    from sweeper.run.ray_compat import ACTOR_ID, TRIAL_NODE_DIED, recorded_death, trial_interruption

    actor_id = bytes.fromhex("3726" * 8)
    unexplained = ActorDiedError(ActorDiedErrorContext(actor_id=actor_id))
    tune_wrote = f"Failure # 1 (occurred at 2026-11-29)\nray.exceptions.ActorDiedError: {unexplained}\n"
    assert recorded_death(tune_wrote) == "", "outside a Ray driver the GCS is not asked"
    assert trial_interruption(tune_wrote) == "node lost", tune_wrote
    # What the GCS recorded meanwhile decides (TRIAL_NODE_SIGTERM, a worker's crash, nothing yet).
    asked = []

    def recorded(text: str, cause: str) -> str:
        asked.append(ACTOR_ID.search(text)[1] or ACTOR_ID.search(text)[2])
        return cause

    reclaimed = f"{TRIAL_NODE_DIED} Node Id: ab12\n\tthe actor's node was terminated expectedly: received SIGTERM"
    assert trial_interruption(tune_wrote, partial(recorded, cause=reclaimed)) == "preemption"
    assert trial_interruption(tune_wrote, partial(recorded, cause="its worker process has died. SIGSEGV")) is None
    unreachable = f"ray.exceptions.ActorUnavailableError: The actor {actor_id.hex()} is unavailable: Socket closed"
    assert trial_interruption(unreachable, partial(recorded, cause=reclaimed)) == "preemption"
    assert trial_interruption(unreachable, partial(recorded, cause="killed by ray.kill")) == "node lost"
    assert asked == [actor_id.hex()] * 4
    crashed = ActorDiedError(ActorDiedErrorContext(
        actor_id=actor_id, class_name="ImplicitFunc", pid=10715, ray_namespace="ns", node_ip_address="10.0.0.2",
        error_message="The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR"))
    assert trial_interruption(f"ray.exceptions.ActorDiedError: {crashed}") is None, str(crashed)
    assert trial_interruption(f"ray.exceptions.ActorDiedError: {ActorDiedError()}\nmore") is None, "a cause follows"


def test_tune_is_told_to_count_a_preempted_trial_so_that_its_reruns_are_capped(monkeypatch):
    """`count_preempted_trials` sets the variable the installed Tune reads where an actor dies
    (without it Tune requeues a trial Ray flags preempted by itself, counting nothing: no cap), in
    this process only."""
    import importlib.util

    from ray.train.constants import RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE

    from sweeper.run.ray_compat import count_preempted_trials

    trial_py = Path(importlib.util.find_spec("ray.tune.experiment.trial").origin).read_text()
    reads = trial_py[trial_py.index("def _handle_ray_actor_error"):trial_py.index("def _handle_ray_task_error")]
    assert "RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE" in reads and "exc.preempted" in reads, reads
    monkeypatch.setenv(RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE, "0")  # restored after the test
    count_preempted_trials()
    assert os.environ[RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE] == "1"
