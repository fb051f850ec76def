"""Preemption notices a pretraining run acts on: its node is going away, save now and stop.

A spot or preemptible node is told before it dies: Ray marks it draining (`ray drain-node
--reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N`, which KubeRay and the
cloud integrations issue) and its processes get SIGTERM. The loop (trainables.pretrain_loop)
asks `Notice.pending()` after every step; once it answers, the loop saves a resume state at that
step boundary (not the last periodic checkpoint) and records the notice in the run folder's
`interruptions.json`.

Where a notice comes from depends on where the loop runs:
- Local mode (`pretraining_workers: 0`): the loop is the Ray task's main thread, so it takes
  SIGTERM itself (Ray's own handler would end the process at once), and a thread polls Ray's
  draining nodes for its own (`draining_node_ids`). After the save the loop returns; the driver
  (sweeper.run.train_grid) relaunches the run, counted as a preemption.
- A worker group: the loop runs in a thread of each worker (Ray Train's `ThreadRunner`), which
  cannot take signals, so SIGTERM to a worker stays Ray's (the worker dies, a failure). Ray Train
  watches the group's nodes for drains itself and hands every rank the same answer
  (`ray.train.get_preemption_info()`, a collective); the loop saves and trains on until Train
  stops the group at the deadline and restarts it from that checkpoint, counted against
  `FailureConfig.max_preemption_failures`, not `max_failures`.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from trainables.ray_private import draining_node_ids

DRAIN_POLL_S = 2.0
"""How often a local-mode run asks Ray whether its node is draining (one GCS request)."""


class Notice:
    """Whether this run has been told to stop: a context manager around the training loop.
    `distributed`: the loop runs in a Ray Train worker group (ask Ray Train, collectively);
    otherwise in local mode (take SIGTERM, poll the drain state of this node)."""

    def __init__(self, distributed: bool, poll_s: float = DRAIN_POLL_S):
        self.distributed, self.poll_s = distributed, poll_s
        self.reason: str | None = None
        self.deadline_s: float | None = None
        self.previous_handler = None
        self.stopping = threading.Event()
        self.watcher: threading.Thread | None = None

    def __enter__(self) -> Notice:
        import ray

        if not self.distributed and threading.current_thread() is threading.main_thread():
            self.previous_handler = signal.signal(signal.SIGTERM, self.on_sigterm)
            if ray.is_initialized():  # in a Ray task: its node can be drained
                self.watcher = threading.Thread(target=self.watch_drain, name="sweeper-drain-watch", daemon=True)
                self.watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        if self.previous_handler is not None:
            signal.signal(signal.SIGTERM, self.previous_handler)

    def on_sigterm(self, signum, frame) -> None:
        self.reason = self.reason or f"SIGTERM to pid {os.getpid()}"

    def watch_drain(self) -> None:
        import ray

        node = ray.get_runtime_context().get_node_id()
        while not self.stopping.wait(self.poll_s) and self.reason is None:
            try:
                deadline_ms = draining_node_ids().get(node)
            except Exception as error:  # a GCS hiccup: SIGTERM still reaches the run
                print(f"[pretrain] drain state of node {node[:8]} unreadable ({error}); asking again", flush=True)
                continue
            if deadline_ms is not None:
                self.deadline_s = deadline_ms / 1000 if deadline_ms else None
                self.reason = f"node {node[:8]} draining" + (
                    f", {self.deadline_s - time.time():.0f} s left" if self.deadline_s else "")

    def pending(self) -> str | None:
        """The notice, if one came (every rank of a group gets the same answer: call on all)."""
        if self.distributed:
            import ray.train

            info = ray.train.get_preemption_info()
            if info is not None and self.reason is None:
                self.deadline_s = info.deadline_ms / 1000 if info.deadline_ms else None
                self.reason = f"nodes {', '.join(n[:8] for n in info.preempted_node_ids)} draining " \
                              f"(ranks {info.preempted_ranks})"
        return self.reason
