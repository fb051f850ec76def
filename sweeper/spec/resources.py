"""Resource layouts no cluster can run as written: `resources` checked against how the trainables
use what Ray gives them, before anything starts (`StudySpec.check`, exit 2 naming the key).

How the resources are used (sweeper.run.train_grid, sweeper.run.tune_grid, trainables):
- a pretraining run is one Ray task (`pretraining_workers: 0`, local mode) or a Ray Train worker
  group of `pretraining_workers` workers, each taking `cpus_per_worker` CPUs and
  `gpus_per_worker` GPUs and training on ONE device (cuda:0 of what Ray makes visible), its
  torch threads `int(cpus_per_worker)`; workers talk over NCCL (GPU) or gloo (CPU);
- a fine-tuning trial is one Tune function trainable holding `cpus_per_trial` CPUs and
  `gpus_per_trial` GPUs, training on one device; a fraction packs trials on one GPU.

Refused (impossible, or certain to fail hours in):
- fractional `gpus_per_worker` with two or more workers: Ray may place two workers of one group
  on one GPU, and NCCL stops with "Duplicate GPU detected";
- more than one GPU per pretraining worker or per trial: the loop trains on one device, the other
  GPUs stay idle while reserved (use more workers with one GPU each);
- a pretraining worker with neither CPU nor GPU (as a trial without both already is): Ray would
  start every run at once on one node;
- a CPU or GPU amount below Ray's granularity (0 < x < 0.0001): Ray refuses the request when the
  task is submitted ("cannot go beyond 0.0001");
- `gpu_memory_gb` set while no worker or trial uses a GPU: the memory check it drives never runs.

Merely wasteful, and allowed: `sharding: fsdp` with fewer than two workers (nothing to shard
over: the run trains unsharded, so a cluster spec runs as it is with `pretraining_workers: 0` on
a laptop, as tests/e2e/test_fsdp_study.py's FSDP test does); a GPU fraction that does not divide 1 (0.3:
three trials share a GPU and 10 % of it idles), CPUs that are not whole (threads are `int(cpus)`). The spec states no
cluster size: a request larger than the machine or cluster it runs on is refused against what
is there, at `plan` and `run` (sweeper.plan.machine_fit).
"""
from __future__ import annotations

import math
import re
from dataclasses import fields

RAY_RESERVED = ("cpu", "gpu", "memory", "object_store_memory", "bundle", "tpu", "npu", "hpu", "neuron_cores",
                "furiosa", "mblt", "rbln", "ttnpu")
"""Resource names Ray gives meaning to, compared case-folded: CPU/GPU (`num_cpus`/`num_gpus`),
memory, the object store, placement-group bundles, and the accelerators Ray 2.x detects itself
(`ray._private.accelerators.get_all_accelerator_resource_names`: TPU, NPU, HPU, neuron_cores,
...). tests/unit/plan/test_hostile_checkpoints.py checks the list against the installed Ray."""
RAY_RESERVED_PREFIXES = ("node:", "accelerator_type:")
"""Prefixes of resources Ray makes per node (`node:<ip>`, `node:__internal_head__`) and per
accelerator model (`accelerator_type:A100`)."""
PLACEMENT_GROUP_RESOURCE = re.compile(r"_group_(\d+_)?[0-9a-f]{16,}$")
"""What Ray names a placement group's share of a resource (`CPU_group_<id>`, `bundle_group_0_<id>`)."""
RAY_GRANULARITY = 0.0001
"""The smallest nonzero resource amount Ray accepts (ray_constants.MIN_RESOURCE_GRANULARITY)."""
AMOUNTS = ("cpus_per_worker", "gpus_per_worker", "cpus_per_trial", "gpus_per_trial")
"""The Ray resource amounts of `resources`."""


def layout_problems(resources):
    """(key under `resources`, reason) for each layout of `resources` (a ResourcesSpec) that
    cannot run as written."""
    workers, worker_gpus, trial_gpus = (
        resources.pretraining_workers,
        resources.gpus_per_worker,
        resources.gpus_per_trial,
    )
    for key in AMOUNTS:
        if 0 < (amount := getattr(resources, key)) < RAY_GRANULARITY:
            yield key, (f"{amount:g} is below the smallest amount Ray schedules ({RAY_GRANULARITY:g}): "
                        "give 0 or at least 0.0001")
    if workers >= 2 and 0 < worker_gpus < 1:
        yield "gpus_per_worker", (f"{worker_gpus:g} GPU per worker with pretraining_workers {workers}: Ray may put two "
                                  "workers of one run on one GPU, and NCCL refuses that (\"Duplicate GPU detected\"); "
                                  "give each worker a whole GPU (gpus_per_worker: 1)")
    if worker_gpus > 1:
        yield "gpus_per_worker", (f"{worker_gpus:g} GPUs per worker, and a pretraining worker trains on "
                                  "one: the others "
                                  f"would idle; to train a run on {max(1, workers) * worker_gpus:g} GPUs give "
                                  f"pretraining_workers: {math.ceil(max(1, workers) * worker_gpus)} with "
                                  "gpus_per_worker: 1")
    if trial_gpus > 1:
        yield "gpus_per_trial", (f"{trial_gpus:g} GPUs per trial, and a trial trains on one: the others would idle; "
                                 "give 1, or a fraction to pack several trials on a GPU")
    if resources.cpus_per_worker == 0 and worker_gpus == 0:
        yield "cpus_per_worker", "a pretraining worker needs some CPU or GPU"
    default = next(f.default for f in fields(resources) if f.name == "gpu_memory_gb")
    if resources.gpu_memory_gb != default and worker_gpus == 0 and trial_gpus == 0:
        yield "gpu_memory_gb", (f"{resources.gpu_memory_gb:g} GB per GPU, and no worker or trial uses a GPU "
                                "(gpus_per_worker and gpus_per_trial are 0): give GPUs, or leave gpu_memory_gb out")


def custom_resource_problem(name: str) -> str | None:
    """Why `name` cannot be a custom resource of the spec (Ray reserves it), or None."""
    folded = name.casefold()
    if folded in ("cpu", "gpu"):
        return f"{name} is not a custom resource: use the cpus_/gpus_ fields"
    if folded in RAY_RESERVED or folded.startswith(RAY_RESERVED_PREFIXES) \
            or PLACEMENT_GROUP_RESOURCE.search(folded):
        return (f"{name} is a resource Ray reserves (its own CPU, GPU, memory, accelerators such as TPU, "
                "node: and accelerator_type: names, placement-group bundles): name your own, e.g. trial_node")
    return None
