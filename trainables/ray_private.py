"""The worker side's one use of Ray's private API, as sweeper/run/ray_compat.py is the driver's
(the worker side cannot import the driver's run stage). The driver refuses a Ray release other
than those tested (`ray_compat.TESTED_RAY_VERSIONS`) before a study trains anything, so a worker
only ever meets a Ray this was tested with."""
from __future__ import annotations


def draining_node_ids() -> dict[str, int]:
    """{node id (hex): deadline in ms since the epoch, 0 = none} of the nodes Ray is draining.

    Ray has no public call for this outside Ray Train's worker groups; Ray Train's own watcher
    (ray.train.v2._internal.execution.preemption, Ray 2.60) reads this same GCS accessor."""
    import ray._private.state

    return ray._private.state.state.get_draining_nodes()
