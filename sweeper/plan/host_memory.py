"""`sweeper plan`'s host-memory check: the fine-tuning actors of one node against its memory.

Fine-tuning trials run in reused Ray actors (sweeper.run.tune_grid: `reuse_actors=True`), and
each actor keeps the backbones it loaded in host memory (`trainables.backbones.cached_backbone`,
an LRU of CACHED_BACKBONES states, fp32 whatever dtype was saved, without the LM head) so that
the next trial of a checkpoint skips the load. A starting trial deep-copies its cached backbone
on the host before moving the copy to its GPU, so an actor holds up to CACHED_BACKBONES + 1 fp32
backbones at once: 3 x 4.75 GB at 1b. Fractional GPUs pack several actors on a GPU, so at
`gpus_per_trial: 0.25` an 8-GPU node runs 32 actors: ~300 GB of cached states at 1b, ~450 GB
while they start, which no GPU check sees.

The check counts those backbones of the largest backbone the grid fine-tunes for every actor a
node runs (gpus_per_node / gpus_per_trial, at most max_concurrent_trials) against HOST_FIT_SHARE
of `resources.node_memory_gb`. Left out: the process itself (Python, torch, CUDA's host side),
the prepared task data each actor caches (a few MB to a few hundred MB a task), the driver. Trials
on CPUs (gpus_per_trial 0) are not checked: how many a node runs depends on its CPUs, which the
spec does not state, and their training state is on the host too (see the trial estimate).
"""
from __future__ import annotations

import math

from sweeper.plan.memory import GB, ModelSizes

CACHED_BACKBONES = 2
"""Backbone states an actor keeps (`trainables.backbones.cached_backbone`: lru_cache(maxsize=2))."""
HOST_FIT_SHARE = 0.6
"""Share of a node's memory its actors' backbones may take: Ray's object store takes 30 % of a
node's memory by default, and the OS, the raylet, the actors' processes and their task data need
the rest."""


def backbone_bytes(config: dict) -> float:
    """An fp32 backbone without its LM head (what `cached_backbone` keeps), in bytes."""
    return 4 * (ModelSizes.of(config).total - config["vocab_size"] * config["hidden_size"])


def actors_per_node(resources) -> int | None:
    """Fine-tuning actors one node runs at once (None: trials on CPUs, not known from the spec)."""
    if resources.gpus_per_trial <= 0:
        return None
    # Ray packs floor(GPUs / share) fractional trials on a node (the 1e-9 absorbs 8 / (8/3)).
    actors = math.floor(resources.gpus_per_node / resources.gpus_per_trial + 1e-9)
    return min(actors, resources.max_concurrent_trials or actors)


def largest_backbone(checked) -> tuple[str, float] | None:
    """(label, bytes) of the largest backbone among the grid's (model, task) pairs (TrialMemory)."""
    sizes = {memory.preset: backbone_bytes(memory.config) for memory in checked}
    return max(sizes.items(), key=lambda item: item[1]) if sizes else None


def host_need(spec, checked) -> tuple[int, str, float, float] | None:
    """(actors per node, backbone label, bytes per actor, bytes per node), or None when not known."""
    actors, largest = actors_per_node(spec.resources), largest_backbone(checked)
    if actors is None or largest is None:
        return None
    label, backbone = largest
    per_actor = (CACHED_BACKBONES + 1) * backbone
    return actors, label, per_actor, actors * per_actor


def host_line(spec, checked) -> list[str]:
    """`sweeper plan`'s host-memory line for the fine-tuning actors of one node."""
    need = host_need(spec, checked)
    if need is None:
        return []
    actors, label, per_actor, per_node = need
    res = spec.resources
    against = ("not checked: set resources.node_memory_gb" if res.node_memory_gb is None else
               f"{'fits' if per_node <= host_room(res) else 'DOES NOT FIT'} in {HOST_FIT_SHARE:.0%} of "
               f"node_memory_gb {res.node_memory_gb:g} = {host_room(res) / GB:,.0f} GB")
    return [f"  host memory of a node's fine-tuning actors: {actors} actors x {per_actor / GB:.1f} GB "
            f"({CACHED_BACKBONES} cached fp32 {label} backbones + a starting trial's copy) = "
            f"{per_node / GB:,.1f} GB; {against}"]


def host_room(resources) -> float:
    return resources.node_memory_gb * GB * HOST_FIT_SHARE


def host_refusal(spec, checked) -> str | None:
    """Why a node's fine-tuning actors would not fit its host memory, with what would (None: they
    fit, or nothing to check)."""
    res, need = spec.resources, host_need(spec, checked)
    if need is None or res.node_memory_gb is None or need[3] <= host_room(res):
        return None
    actors, label, per_actor, per_node = need
    fitting = int(host_room(res) // per_actor)
    lines = [f"fine-tuning actors would not fit in a node's host memory: {actors} trials at once per node "
             f"(resources.gpus_per_node {res.gpus_per_node} / gpus_per_trial {res.gpus_per_trial:g}"
             f"{', max_concurrent_trials ' + str(res.max_concurrent_trials) if res.max_concurrent_trials else ''}), "
             f"each holding up to {CACHED_BACKBONES + 1} fp32 {label} backbones ({CACHED_BACKBONES} cached by its "
             f"reused actor + the copy a starting trial makes, {per_actor / GB:.1f} GB): {per_node / GB:,.1f} GB, "
             f"above {HOST_FIT_SHARE:.0%} of resources.node_memory_gb {res.node_memory_gb:g} "
             f"({host_room(res) / GB:,.1f} GB; Ray's object store takes 30 %)."]
    if fitting == 0:
        lines.append("Not one trial's backbones fit: a node with more memory (resources.node_memory_gb).")
    else:
        lines.append(f"{fitting} trial(s) per node fit: resources.gpus_per_trial: "
                     f"{math.ceil(res.gpus_per_node / fitting * 1000) / 1000:g} (or more), or a node with "
                     f"at least {per_node / HOST_FIT_SHARE / GB:,.0f} GB (resources.node_memory_gb).")
    return "\n".join(lines)
