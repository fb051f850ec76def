"""Ray's private API that only the tests use, version-checked as sweeper/run/ray_compat.py's:
`ray up`'s own handling of a cluster config, offline (tests/unit/cluster/test_cluster_configs.py),
Ray's accelerator resource names (tests/unit/plan/test_hostile_checkpoints.py), a worker's
error as Ray Train wraps it, and whether the GCS still counts a test's nodes alive
(tests/e2e/test_preemption_on_ray.py).

Ray has no public API that checks a cluster config the way `ray up` reads it: the schema alone
misses the merges and defaults `ray up` applies before it reaches the cloud. These let the shipped
cluster/ray-cluster.yaml be checked by Ray's own code on a machine without a cloud account. The
two modules are the only ones tests/unit/run/test_ray_compat.py lets use private Ray names.
"""
from __future__ import annotations

from sweeper.run.ray_compat import require_tested_ray


def prepare_cluster_config(config: dict) -> dict:
    """`ray up`'s preparation (defaults filled in, setup commands merged per node type), then its
    validation: ray.autoscaler._private.util.prepare_config and validate_config."""
    require_tested_ray()
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(config)
    validate_config(prepared)
    return prepared


def bootstrap_cluster_config(config: dict) -> dict:
    """All `ray up` resolves before launching the head (preparation, resource detection from the
    cloud's instance types, validation, the provider's bootstrap: IAM, key pair, subnets, security
    groups): ray.autoscaler._private.commands._bootstrap_config, without its cache."""
    require_tested_ray()
    from ray.autoscaler._private.commands import _bootstrap_config

    return _bootstrap_config(config, no_config_cache=True)


def rsync_filter_args(config: dict) -> list[str]:
    """The rsync arguments `ray up` passes for file_mounts from a config's rsync_exclude and
    rsync_filter (SSHCommandRunner._create_rsync_filter_args reads only its options: no SSH)."""
    require_tested_ray()
    from ray.autoscaler._private.command_runner import SSHCommandRunner

    return SSHCommandRunner._create_rsync_filter_args(None, {"rsync_exclude": config.get("rsync_exclude"),
                                                             "rsync_filter": config.get("rsync_filter")})


def accelerator_resource_names() -> list[str]:
    """The resource names Ray gives its accelerators (`GPU`, `TPU`, `NPU`, ...), which a custom
    resource may not take (sweeper.spec.resources keeps its own list; a test holds it to this).
    Private: `ray._private.accelerators.get_all_accelerator_resource_names`."""
    require_tested_ray()
    import ray._private.accelerators as accelerators

    return list(accelerators.get_all_accelerator_resource_names())


def worker_exception(error: BaseException, traceback_text: str) -> BaseException:
    """A worker's error as Ray Train's worker group hands it to the driver inside a
    `WorkerGroupError` (tests/unit/store/test_permanent_errors_from_workers.py). Private:
    `ray.train.v2._internal.exceptions.UserExceptionWithTraceback`."""
    require_tested_ray()
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback

    return UserExceptionWithTraceback(error, traceback_text)


def any_alive(address: str, node_ids: list[str]) -> bool:
    """Whether the GCS at `address` counts any of the nodes `node_ids` (hex) alive, asked without
    `ray.init`. Private: `ray._raylet.GcsClient.check_alive`."""
    require_tested_ray()
    from ray._raylet import GcsClient, NodeID

    return any(GcsClient(address=address).check_alive([NodeID.from_hex(i) for i in node_ids], timeout=30))
