"""The study's progress in one loop: pretraining runs started, finished runs recorded, continued
runs launched, and the checkpoints whose trials can run published for the fine-tuning side.

`sweeper run` starts the loop on a thread of the driver (`Pipeline.start`) and runs the
fine-tuning grid on Tune in the main thread. Tune's searchers read `ready(checkpoint)` only: an
immutable snapshot that the loop replaces after each pass (every `poll_every_s`, and as soon as
a run ends). They never advance pretraining, and the loop alone touches the pretraining grid's
state, so nothing is shared between the two threads but that snapshot. `wait()` joins the loop
once the grid is done, and raises what stopped it, if anything did; `ready()` raises it too, so
a grid waiting for checkpoints that will never come stops at once.

Without a pretraining grid (benchmarks, or a study whose runs are all done before the grid
starts) every checkpoint is ready. Tests drive the loop by hand with `step()`.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from sweeper.run.train_grid import PretrainingGrid


@dataclass(frozen=True, slots=True)
class Readiness:
    """What the fine-tuning side may run, as of the loop's last pass."""

    checkpoints: frozenset[str] = field(default_factory=frozenset)
    """Ids of the planned checkpoints that are written (`Checkpoint.checkpoint_id`)."""
    blocked_runs: frozenset[str] = field(default_factory=frozenset)
    """Runs that failed or whose source failed: their unwritten checkpoints never will be."""


class Pipeline:
    """The loop that owns the study's progress (see the module docstring)."""

    def __init__(self, pretraining: PretrainingGrid | None = None, checkpoints: Iterable = (),
                 poll_every_s: float = 2.0):
        """`checkpoints`: the planned checkpoints (`plan.checkpoints`) whose readiness is published."""
        self.pretraining, self.poll_every_s = pretraining, poll_every_s
        self.checkpoints = list(checkpoints)
        self.readiness = Readiness()
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def __getstate__(self) -> dict:
        # Tune pickles each Tuner's searcher, which holds this (its experiment state): a copy
        # never resumes anything (the results store is the record), and a thread does not pickle.
        return {**self.__dict__, "thread": None}

    def ready(self, checkpoint) -> bool | None:
        """True: its trials can run; False: not yet; None: never (its run failed unwritten)."""
        if self.error is not None:
            raise RuntimeError("the pipeline loop stopped (its error follows)") from self.error
        if self.pretraining is None or checkpoint.external is not None:  # imported before the grid starts
            return True
        readiness = self.readiness  # one snapshot for both questions
        if checkpoint.checkpoint_id in readiness.checkpoints:
            return True
        return None if checkpoint.run.name in readiness.blocked_runs else False

    @property
    def training(self) -> bool:
        """Whether pretraining is still under way: its loop is running."""
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        """Launch the runs that can start, publish what is ready, and go on in a thread."""
        if self.pretraining is None:
            return
        self.pretraining.start()
        self.publish()
        self.thread = threading.Thread(target=self.loop, name="sweeper-pipeline", daemon=True)
        self.thread.start()

    def loop(self) -> None:
        try:
            while self.step(self.poll_every_s):
                pass
        except BaseException as error:  # told to the grid through ready(), and raised by wait()
            self.error = error

    def step(self, timeout: float) -> bool:
        """One pass: wait up to `timeout` s for a run to end, record what ended, launch what it
        unblocks, publish. Returns whether pretraining has work left."""
        if self.pretraining is None:
            return False
        self.pretraining.poll(timeout=timeout)
        self.publish()
        return not self.pretraining.finished

    def publish(self) -> None:
        grid, written = self.pretraining, set(self.readiness.checkpoints)
        for checkpoint in self.checkpoints:
            if (
                checkpoint.run is not None
                and checkpoint.checkpoint_id not in written
                and grid.checkpoint_ready(checkpoint.run, checkpoint.step)
            ):
                written.add(checkpoint.checkpoint_id)
        self.readiness = Readiness(frozenset(written), frozenset(grid.failed))

    def wait(self) -> list[str]:
        """Block until pretraining is finished; returns the failed runs' names."""
        if self.pretraining is None:
            return []
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return sorted(self.pretraining.failed)
