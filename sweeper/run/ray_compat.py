"""Every use of Ray's or Tune's private API by the project, in one module (the uses only tests
make are tests/support/ray_private.py's, behind the same check): what each does, why no public API
does it, and the Ray versions it was tested with.

A Ray upgrade may rename or remove any of these without notice; the unit tests fake them, so
only the end-to-end tests (`-m e2e`) would notice. So each function here first checks the
installed Ray against TESTED_RAY_VERSIONS and refuses an untested one with a RuntimeError
naming it: moving to a new Ray means running the e2e tests on it, then adding its version
here. The one exception is the workers' setup hook, `quiet_stopped_workers`: it must not fail,
and under another Ray it only falls back to Python's own report. Only the code that uses these
functions checks (`sweeper plan`, `status` and `report` never import Ray).
`tests/unit/run/test_ray_compat.py` fails on a private Ray or Tune name anywhere else.
"""
from __future__ import annotations

import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from functools import lru_cache

TESTED_RAY_VERSIONS = ("2.60.",)
"""Ray releases (prefixes of `ray.__version__`) the private uses below were tested with."""


@lru_cache(maxsize=1)
def require_tested_ray() -> None:
    """Raise a RuntimeError naming the installed Ray unless it is one of TESTED_RAY_VERSIONS."""
    import ray

    if not ray.__version__.startswith(TESTED_RAY_VERSIONS):
        raise RuntimeError(
            f"Ray {ray.__version__} is installed; sweeper supports Ray "
            f"{', '.join(v + 'x' for v in TESTED_RAY_VERSIONS)} (sweeper.run.ray_compat uses Ray's private API "
            "as those releases have it; pyproject.toml pins ray==2.60.0): install a supported version "
            "(pip install -c constraints.txt 'ray[default,train,tune]'), or run the e2e tests on this one and "
            "add it to TESTED_RAY_VERSIONS")


TRIAL_SIGTERM = "The process receives a SIGTERM."
"""What Ray's own SIGTERM handler of a worker (ray._private.worker.Worker.main_loop) gives as its
exit reason: the actor death cause of a Tune trial whose worker was told to stop."""
TRIAL_NODE_DIED = "The actor died because its node has died."
"""The GCS's actor death cause (C++, no Python name) when an actor's node is gone: raylet and
workers killed together, or a node reclaimed without a drain that Ray could see. Also a node
drained for preemption whose raylet was killed before it could leave and before the drain's
deadline: the GCS then records an unexpected termination, not a preemption (its node manager
infers a preemption only past the deadline), so the sweeper reports a lost node, as Ray does."""
TRIAL_NODE_SIGTERM = "the actor's node was terminated expectedly: received SIGTERM"
"""The GCS's actor death cause when the node's raylet took SIGTERM (the GCS server's text, then the
raylet's reason): a reclaimed spot node (seen after `ray drain-node --reason
DRAIN_NODE_REASON_PREEMPTION`: Ray then records the death as this, not as a preemption) or a
`ray stop`. A notice, not a lost node."""
TRIAL_NODE_PREEMPTED = "the actor's node was preempted"
"""The GCS's actor death cause when Ray records the node's death as a preemption (death reason
AUTOSCALER_DRAIN_PREEMPTED: a node drained for preemption that then died without a SIGTERM Ray
saw). Ray marks the error `preempted`, which Tune would requeue by itself, uncapped, unless told
to count it (`count_preempted_trials`). A notice, not a lost node."""
TRIAL_UNREACHABLE = re.compile(r"The actor \w+ is unavailable: ")
"""ray.exceptions.ActorUnavailableError's message: the driver lost the connection to the trial's
actor before the GCS declared its node dead (seen when a test node's raylet and workers were
SIGKILLed together mid-trial: "RpcError: Socket closed"). Tune ends the trial on it as on a death."""

TRIAL_DIED_UNEXPLAINED = re.compile(
    r"The actor died unexpectedly before finishing this task\.(?:\n\t(?:class_name|actor_id|pid|name|namespace|ip): "
    r"[^\n]*)*\s*\Z")
"""ray.exceptions.ActorDiedError's message with no cause after its header (`BASE_ERROR_MSG`, then
class name and actor id, nothing more), at the end of the error: the driver's core worker gave up
waiting for the GCS to say why the actor died. Seen 1.5 s after a node's raylet and workers were
SIGKILLed together, some 13 s before the GCS declared the node dead (its health checks); a
worker's own crash (SIGKILL, SIGABRT, the OOM killer) comes with its cause at once ("its worker
process has died"), which the raylet reports, and is a failure of the trial."""


RECORDED_DEATH_WAIT_S = 5.0
"""How long the driver asks the GCS for the recorded death of a trial's actor whose error did not
say why it died (TRIAL_UNREACHABLE, TRIAL_DIED_UNEXPLAINED). A node whose raylet is alive reports
a worker's death at once (SIGTERM to the worker, or to the node: the raylet tells the GCS as it
leaves); a node gone without a word is declared dead only after Ray's health checks (13 s and
more), and is a lost node whatever the GCS says later."""

ACTOR_ID = re.compile(r"actor_id: ([0-9a-f]{32})|The actor ([0-9a-f]{32}) is unavailable")
"""Where the two uncertain errors name their actor (ActorDiedError's header, ActorUnavailableError's message)."""


def recorded_death(error_text: str, wait_s: float = RECORDED_DEATH_WAIT_S) -> str:
    """What the GCS recorded of the death of the actor `error_text` names (its death cause's error
    message), once it is recorded and within `wait_s`; "" if none is, or outside a Ray driver.

    Private: `ray._private.state.state.actor_table(actor_id)`, the GCS's actor table as `ray list
    actors --detail` shows it (its `DeathCause`, an ActorDeathCause proto). Public alternatives: the
    state API (`ray.util.state.get_actor`), which needs the dashboard a study's head may not run."""
    import ray

    match = ACTOR_ID.search(error_text)
    if match is None or not ray.is_initialized():
        return ""
    from ray._private.state import state

    deadline = time.monotonic() + wait_s
    while True:
        info = state.actor_table(match[1] or match[2])
        cause = info.get("DeathCause") if info.get("State") == "DEAD" else None
        if cause is not None and (context := cause.WhichOneof("context")) is not None:
            detail = getattr(cause, context)  # every context but a failed creation task's has an error_message
            return detail.error_message if hasattr(detail, "error_message") else str(cause)
        if time.monotonic() >= deadline:
            return ""
        time.sleep(0.2)


def named_interruption(text: str) -> str | None:
    """The interruption Ray's message in `text` names for certain, if any."""
    if TRIAL_SIGTERM in text or TRIAL_NODE_SIGTERM in text or TRIAL_NODE_PREEMPTED in text:
        return "preemption"
    if TRIAL_NODE_DIED in text:
        return "node lost"
    return None


def trial_interruption(error_text: str, recorded: Callable[[str], str] = recorded_death) -> str | None:
    """"preemption" (SIGTERM to the trial's worker or to its node, or a node Ray records as
    preempted: a notice), "node lost" (its node died without one, became unreachable, or went
    before the GCS could say why), or None (an error of the trial's own) for the error Tune wrote
    of a trial. Ray hands the driver no type for these (all are ActorDiedError or
    ActorUnavailableError, only the preempted one flagged, and Tune writes the text), only its
    messages above. An error that does not say why the actor went (unreachable, or a death the
    driver heard of first) is told by what the GCS `recorded` of it (`recorded_death`): the driver
    may lose a worker of a node that is leaving after a notice before the GCS tells it so; a death
    the GCS explains otherwise (the worker crashed) is the trial's own, and one it does not explain
    within the wait is a lost node."""
    require_tested_ray()
    if (kind := named_interruption(error_text)) is not None:
        return kind
    if TRIAL_UNREACHABLE.search(error_text):
        return named_interruption(recorded(error_text)) or "node lost"
    if TRIAL_DIED_UNEXPLAINED.search(error_text):
        # Recorded later, a crash of the worker itself is the trial's (nothing recorded: the node's).
        cause = recorded(error_text)
        return named_interruption(cause) or (None if cause else "node lost")
    return None


def count_preempted_trials() -> None:
    """Make Tune count a trial whose actor Ray flags `preempted` as an error of the trial (as it
    counts every other actor death), not requeue it by itself: Tune's own requeue of such a trial
    has no cap (no failure is counted, so `FailureConfig` never stops it). Counted, the trial comes
    to `on_trial_error` (sweeper.run.recording), where `trial_interruption` tells a preemption
    apart, and the fine-tuning loop runs it again at most `resources.max_preemptions` times.

    Not private, but undocumented: the environment variable that Tune's `Trial` reads each time an
    actor dies (`ray.train.constants.RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE`, read in the driver,
    where Tune's controller runs; nothing else of Ray 2.60 reads it). Set for this process."""
    require_tested_ray()
    from ray.train.constants import RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE

    os.environ[RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE] = "1"


def release_idle_actors(tune_controller) -> None:
    """Stop the trial workers Tune keeps idle for reuse (`reuse_actors`), and, while no trial is
    pending, running or paused, let Tune finish stopping them and the workers it stopped before,
    so that their placement groups are free. Tune 2.60 keeps one idle worker while its searcher
    may still make trials, however long the searcher waits (its actor cache's `may_keep_one`);
    and while no trial is in flight its step only waits for the searcher's next trial
    (`_update_trial_queue(blocking=True)`, up to 10 minutes), handling no event: a stopped worker
    keeps its resources until that wait ends.

    Private: `TuneController._cleanup_cached_actors(force_all=True)`, what Tune calls itself as
    an experiment ends, and `TuneController._actor_manager.next(timeout=0)`, one pass of the event
    loop its step runs (actor stops: no trial's results can arrive while none is in flight);
    reached through `_tune_controller` as in `resume_held_trial`. No public API: `reuse_actors`
    is one setting for a whole Tuner run, and schedulers get no hold of Tune's events."""
    require_tested_ray()
    from ray.tune.experiment import Trial

    controller = getattr(tune_controller, "_tune_controller", tune_controller)
    controller._cleanup_cached_actors(force_all=True)
    if not any(trial.status in (Trial.PENDING, Trial.RUNNING, Trial.PAUSED) for trial in controller.get_trials()):
        controller._actor_manager.next(timeout=0)


SINGLE_MACHINE_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def use_loopback_node() -> None:
    """Make the local Ray instance about to start a loopback-only node. Ray 2.60 binds its GCS,
    raylet, agents and workers to every interface unless the node's address is the loopback,
    and on Linux turns a node address of 127.0.0.1 into the host's routable one, except in its
    single-machine mode (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, its default on laptops). That
    mode is set for the processes Ray starts and, as Ray reads it once when imported, for this
    one; a value the user set is left as it is.

    Private: `ray._private.ray_constants.ENABLE_RAY_CLUSTER`, the flag
    `services.get_node_ip_address` reads (and so `ray.init`'s choice of the node's address).
    No public API: `ray.init` takes no node address (only the hidden `_node_ip_address`, which
    it resolves through that same function, so the loopback comes back routable), and
    `dashboard_host` covers the dashboard alone."""
    if os.environ.get(SINGLE_MACHINE_VARIABLE) is not None:
        return
    require_tested_ray()
    os.environ[SINGLE_MACHINE_VARIABLE] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def resume_held_trial(tune_controller, trial) -> None:
    """Start the next `train` call of a trial a scheduler held with NOOP (its worker waits
    inside `tune.report`): what Tune does for a CONTINUE decision.

    Private: `TuneController._schedule_trial_train`, reached through `_tune_controller`, the
    controller behind the `_TuneControllerWrapper` Tune hands schedulers (a fake controller, as
    in the unit tests, is used as it is). No public API: a scheduler's decisions are returned
    for the result being processed, and NOOP's only way back (`_schedule_trial_train`) is not
    on the wrapper's list of attributes; `TuneController.pause_trial`/`resume` would restart a
    function trainable from scratch (it has no checkpoint)."""
    require_tested_ray()
    getattr(tune_controller, "_tune_controller", tune_controller)._schedule_trial_train(trial)


STOPPED_WORKER_NOTICE = "Ray stopped this worker (SIGTERM) inside an interpreter callback; its report is left out"
"""The one line a worker prints instead of the report quiet_stopped_workers keeps back."""

def quiet_stopped_workers() -> None:
    """Ray stops a job's workers with SIGTERM as the job ends, after the study's results are
    written, and its handler raises SystemExit; where the signal lands inside an interpreter
    callback (a weakref's, a `__del__`), Python reports that exit as "Exception ignored in ...",
    traceback and all, and Ray forwards it to the driver, sometimes split over two batches of
    output. This worker hook turns such a report into STOPPED_WORKER_NOTICE, one line the
    console keeps off the screen (sweeper.run.console.NOTICES); every other unraisable
    exception is reported as before.

    Private: the name of Ray's handler, `ray._private.worker.sigterm_handler`, looked for among
    the traceback's frames. No public API tells Ray's stop from another SystemExit. Under a Ray
    that renames it the report shows again; nothing fails (a worker's setup hook must not)."""
    previous = sys.unraisablehook
    if getattr(previous, "__name__", "") == "report_unless_stopped":
        return

    def report_unless_stopped(report) -> None:
        frames = traceback.walk_tb(report.exc_traceback)
        if report.exc_type is not None and issubclass(report.exc_type, SystemExit) and any(
                frame.f_code.co_name == "sigterm_handler" for frame, _ in frames):
            print(STOPPED_WORKER_NOTICE, file=sys.stderr, flush=True)
            return
        previous(report)

    sys.unraisablehook = report_unless_stopped


WORKER_SETUP_HOOK = f"{__name__}.{quiet_stopped_workers.__name__}"
"""Every worker process of a study's job runs it as it starts (runtime_env's
`worker_process_setup_hook`, sweeper.run.runner.connect_ray)."""


PRINT_HANDLER = "ray_print_logs"
"""The name `ray.init` gives the driver's printer of worker output (and `ray.shutdown` removes)."""


def route_worker_output(route: Callable[[dict, Callable[[dict], None]], None]) -> None:
    """Hand each batch of worker output that Ray forwards to the driver (`log_to_driver`) to
    `route(batch, show)`, which passes on to `show` what the console should print (`show` prints
    as Ray does: a `(task pid=...)` prefix, coloured unless RAY_COLOR_PREFIX=0), for as long as
    this driver is connected. Nothing happens when the driver prints no worker output.

    Ray's log deduplication is left out: it folded alike lines of several runs into "[repeated
    Nx across cluster]" (every run's progress lines but one), and its switch (RAY_DEDUP_LOGS) is
    read once, when Ray is imported.

    Private: `ray._private.worker.global_worker_stdstream_dispatcher` (its handler list, swapped
    under its lock so no batch is lost), `print_worker_logs` and
    `_should_ignore_worker_log_prefix`. No public API: `log_to_driver` is all or nothing, and
    RAY_DEDUP_LOGS_SKIP_REGEX (read at import, and only with deduplication on) drops lines
    rather than handing them over."""
    require_tested_ray()
    from ray._private import worker

    ignore_prefix = worker._should_ignore_worker_log_prefix(worker.global_worker)

    def show(batch: dict) -> None:
        worker.print_worker_logs(batch, sys.stderr if batch["is_err"] else sys.stdout, ignore_prefix)

    def handler(batch: dict) -> None:
        route(batch, show)

    dispatcher = worker.global_worker_stdstream_dispatcher
    with dispatcher._lock:
        dispatcher.handlers = [(name, handler if name == PRINT_HANDLER else old) for name, old in dispatcher.handlers]


def autoscaler_node_types() -> list[dict[str, float]] | None:
    """The resources of each node type the cluster's autoscaler may still launch, from the cluster
    config Ray keeps in its GCS (`ray._private.state.state.get_cluster_config()`, which Ray Train's
    own worker-group check reads too; no public API gives it); None when Ray holds none (a fixed
    cluster, or an autoscaler that does not report its config)."""
    require_tested_ray()
    from ray._private.state import state

    config = state.get_cluster_config()
    if config is None:
        return None
    return [{name: float(amount) for name, amount in group.resources.items()}
            for group in config.node_group_configs if group.max_count != 0]
