"""SIGINT and SIGTERM to `sweeper run`: stop at any stage, keep what finished, say so, exit 128 + signal.

Within `interruptible()` either signal raises `Interrupted` (a KeyboardInterrupt) in the driver's main
thread, wherever it is (task preparation, pretraining, Tune's loop), so the stages' own `finally` blocks run: the
results recorder writes the rows it holds (sweeper.run.tune_grid.run_shards), the console and the lease are
released. Tune's own SIGINT handler is turned off (`TUNE_DISABLE_SIGINT_HANDLER`): it would end the
grid as if it were done and print Tune's `Tuner.restore(...)` hint, the wrong advice here, where a
rerun of `sweeper run` resumes (the results store is the record). A second signal while the first
one's cleanup runs is ignored, so it cannot cut that cleanup short with a traceback; SIGKILL still stops
the driver at once, losing at most the rows not yet written (they run again at the next run).
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)
TUNE_SIGINT_VARIABLE = "TUNE_DISABLE_SIGINT_HANDLER"
"""Ray Tune (ray.tune.tune._setup_signal_catching, Ray 2.x) installs its own SIGINT handler unless this is 1."""


class Interrupted(KeyboardInterrupt):
    """The driver was sent SIGINT or SIGTERM. A KeyboardInterrupt, so that code which lets
    Ctrl-C through (Ray's waits, `except Exception` blocks) lets this through too. Ray's own
    waits raise a plain KeyboardInterrupt in its place (ray._raylet.check_status): which signal
    came is `Interruption.signum`."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interruption:
    """What `interruptible()` yields: the signal that came, if one did."""

    def __init__(self):
        self.signum: int | None = None

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by a signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + (self.signum or signal.SIGINT)

    def handler(self, signum: int, frame) -> None:
        self.signum = signum
        for sig in SIGNALS:  # the cleanup that follows runs to its end
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)


@contextmanager
def interruptible() -> Iterator[Interruption]:
    """SIGINT and SIGTERM raise `Interrupted` while inside; the previous handlers are restored on
    the way out unless a signal came (then both stay ignored until the process exits), and Tune's
    variable in any case. Main thread only (as Python's signal handlers are)."""
    interruption = Interruption()
    previous = {sig: signal.signal(sig, interruption.handler) for sig in SIGNALS}
    tune_setting = os.environ.get(TUNE_SIGINT_VARIABLE)
    os.environ[TUNE_SIGINT_VARIABLE] = "1"
    try:
        yield interruption
    finally:
        # Interrupted: both stay ignored, so what follows (the line, Ray's shutdown at exit) runs to its end.
        if interruption.signum is None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if tune_setting is None:
            os.environ.pop(TUNE_SIGINT_VARIABLE, None)
        else:
            os.environ[TUNE_SIGINT_VARIABLE] = tune_setting


def rearm() -> None:
    """`ray.init` replaces the driver's SIGTERM handler with its own (`sys.exit(15)`: no line, no
    rows written): call after it to put ours back, when inside `interruptible()`."""
    handler = signal.getsignal(signal.SIGINT)
    if isinstance(getattr(handler, "__self__", None), Interruption):
        signal.signal(signal.SIGTERM, handler)


def interrupted_line(recorded: int | None, planned: int | None, spec_file: str) -> str:
    """The one line an interrupted run prints: how far the study got and how to go on."""
    counts = f"{recorded} of {planned} trials recorded" if planned is not None else "no trials recorded"
    return f"interrupted: {counts}; `sweeper run {spec_file}` resumes"
