"""Optional Weights & Biases tracking, the same way for the driver and the workers (torch-free).

The Parquet store stays the record; W&B is a view. One W&B run per pretraining run (rank 0 only:
Ray's `setup_wandb` reads the rank through Train V1 internals and misfires under V2) and one for
the whole fine-tuning grid, logged by the driver (Ray's WandbLoggerCallback starts an actor per
trial, too heavy for 18,000 of them). Offline files go to a node-local scratch folder.

Nothing sent to W&B holds a credential: the run's config goes through `storage.redact`, and the
command line W&B records with the run (`python -m sweeper run ... --storage s3://KEY:SECRET@...`)
is redacted while the run starts.
"""
from __future__ import annotations

import contextlib
import sys

from sweeper.contract.configs import TrackingConfig
from sweeper.store import folders, storage


def start_wandb(tracking: TrackingConfig, *, name: str, run_id: str, location: str, config: dict):
    """A W&B run, or None when tracking is off or wandb is not installed. `location`: the study
    location the run belongs to (its offline files go to that location's scratch folder)."""
    if not tracking.wandb:
        return None
    try:
        import wandb
    except ImportError:
        print("[tracking] wandb is not installed (pip install 'sweeper[tracking]'); not logging", flush=True)
        return None
    with redacted_argv():
        return wandb.init(project=tracking.project, entity=tracking.entity, name=name, id=run_id, resume="allow",
                          mode=tracking.mode,
                          dir=str(folders.scratch_dir(location, "")), reinit="create_new", config=redacted(config))


def redacted(value):
    """`value` (a run's config: dicts, lists, strings, numbers) with every URI's credentials removed."""
    if isinstance(value, str):
        return storage.redact(value)
    if isinstance(value, dict):
        return {key: redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    return value


@contextlib.contextmanager
def redacted_argv():
    """`sys.argv` without credentials while W&B reads it (it records the command line with the run)."""
    saved = sys.argv[:]
    sys.argv[:] = [storage.redact(arg) for arg in saved]
    try:
        yield
    finally:
        sys.argv[:] = saved
