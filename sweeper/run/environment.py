"""Probe and record the environment a study runs in (sweeper.store.environments): one Ray task with a
fine-tuning trial's resources, so it lands where trials run and sees their CPU path, threads and GPU."""
from __future__ import annotations

import ray

from sweeper.contract.heavy_imports import imports_frozen
from sweeper.spec.study import StudySpec
from sweeper.store import environments
from sweeper.store.layout import StudyLayout

PROBE_TIMEOUT_S = 120.0
"""How long the probe may wait for a worker (a cluster still scaling up): past it the study starts
without a record, and says so."""


def describe_environment() -> dict:
    """Body of the probe's Ray task. Imports the worker side here, in the worker: importing it
    in the driver (trainables -> transformers) costs every study ~3 s of CPU at its start."""
    with imports_frozen():
        from trainables.environment import describe
    return describe()


def probe_environment(spec: StudySpec) -> dict:
    res = spec.resources
    probe = ray.remote(describe_environment).options(
        num_cpus=res.cpus_per_trial, num_gpus=res.gpus_per_trial, resources=dict(res.custom_resources_per_trial) or None
    )
    return ray.get(probe.remote(), timeout=PROBE_TIMEOUT_S)


def record_environment(spec: StudySpec, layout: StudyLayout, spec_entry: str | None) -> None:
    """Record where this run computes (printed once); a probe that times out is named, not fatal."""
    try:
        environment = probe_environment(spec)
    except ray.exceptions.GetTimeoutError:
        print(f"[study] environment not recorded: no worker for a trial within {PROBE_TIMEOUT_S:.0f} s", flush=True)
        return
    environments.record(layout, environment, spec_entry)
    print(f"[study] environment: {environments.describe(environment)}", flush=True)
