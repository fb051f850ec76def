"""Optional Weights & Biases tracking, the same way for the driver and the workers (torch-free).

The Parquet store stays the record; W&B is a view. One W&B run per pretraining run (rank 0 only:
Ray's `setup_wandb` reads the rank through Train V1 internals and misfires under V2) and one for
the whole fine-tuning grid, logged by the driver (Ray's WandbLoggerCallback starts an actor per
trial, too heavy for 18,000 of them). Offline files go to a node-local scratch folder.
"""
from __future__ import annotations

from sweeper import storage
from sweeper.configs import TrackingConfig


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
    return wandb.init(project=tracking.project, name=name, id=run_id, resume="allow", mode=tracking.mode,
                      dir=str(storage.scratch_dir(location, "")), reinit="create_new", config=config)
