"""trainables.preemption: a local-mode run takes SIGTERM as a notice, and gives it back after."""
from __future__ import annotations

import os
import signal
import time

from trainables.preemption import Notice


def test_sigterm_inside_is_a_notice_and_the_previous_handler_returns_after():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with Notice(distributed=False) as notice:
            assert notice.pending() is None
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.time() + 5
            while notice.pending() is None and time.time() < deadline:
                time.sleep(0.01)
            assert notice.pending() == f"SIGTERM to pid {os.getpid()}"
            assert seen == [], "the process's own handler did not run: the notice is the loop's"
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.time() + 5
        while not seen and time.time() < deadline:
            time.sleep(0.01)
        assert seen == [signal.SIGTERM], "outside, SIGTERM is the process's again"
    finally:
        signal.signal(signal.SIGTERM, previous)
