"""SIGINT and SIGTERM inside `interruptible()`: an `Interrupted` with the shell's exit status, the
signals ignored afterwards (the cleanup runs to its end), Tune's own handler turned off, and the
SIGTERM handler that `ray.init` installs replaced again by `rearm()`."""
from __future__ import annotations

import os
import signal
import sys

import pytest

from sweeper.run.interrupts import TUNE_SIGINT_VARIABLE, Interrupted, interruptible, interrupted_line, rearm


@pytest.fixture
def handlers():
    """The test process's handlers as they were, put back after the test."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield saved
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_raises_interrupted_and_later_ones_are_ignored(handlers, sig, status):
    with pytest.raises(Interrupted):
        with interruptible() as interruption:
            assert os.environ[TUNE_SIGINT_VARIABLE] == "1"
            os.kill(os.getpid(), sig)
            signal.sigtimedwait([], 0)  # a point where the handler has run
            pytest.fail("the signal did not interrupt")
    assert interruption.signum == sig and interruption.exit_status == status
    os.kill(os.getpid(), signal.SIGINT)  # ignored: it would end the test otherwise
    os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_leaving_without_a_signal_restores_the_handlers_and_tunes_variable(handlers, monkeypatch):
    monkeypatch.delenv(TUNE_SIGINT_VARIABLE, raising=False)
    with interruptible():
        pass
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    assert TUNE_SIGINT_VARIABLE not in os.environ


def test_rearm_puts_back_the_handler_ray_init_replaces(handlers):
    with pytest.raises(Interrupted):
        with interruptible() as interruption:
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init installs
            rearm()
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)
            pytest.fail("the signal did not interrupt")
    assert interruption.exit_status == 143


def test_the_line_says_how_far_and_how_to_go_on():
    assert interrupted_line(3, 8, "my.yaml") == "interrupted: 3 of 8 trials recorded; `sweeper run my.yaml` resumes"
    assert interrupted_line(None, None, "my.yaml") == "interrupted: no trials recorded; `sweeper run my.yaml` resumes"
