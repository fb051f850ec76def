"""Requests no node can meet: a trial or pretraining worker asking more of one resource than the
largest node offers would wait forever (Ray's autoscaler repeats "No available node types can
fulfill resource request" without end), so it is refused before anything waits for it.

Checked twice, against what is known at the time:
- at `sweeper plan` and `run` (through `load_study(..., machine=True)`), against this machine,
  for a study that would run on it: no RAY_ADDRESS (`sweeper run` then starts Ray here) and no
  GPU or custom resource asked for (a spec that asks for them describes a cluster's nodes, and
  planning it on a laptop is how one prices it). A spec error naming the key, the request and
  the machine;
- at `sweeper run`, once Ray is joined, against the nodes Ray reports alive (`ray.nodes()`) and
  the node types its autoscaler reports it may launch: the request and what the largest node
  offers, within seconds of the start. A joined cluster (RAY_ADDRESS) whose autoscaler reports
  no node types (`ray start` heads, `ray up`'s autoscaler) may still grow: there it is a warning
  (sweeper.run.runner.refuse_unplaceable).
A request fits a node when every resource it asks for (CPU, GPU, custom) is there in that
amount; a pretraining worker group must also fit the whole cluster (its workers may spread).
"""
from __future__ import annotations

import os

from sweeper.spec.study import StudySpec


def requests(spec: StudySpec, pretrains: bool) -> list[tuple[str, str, dict[str, float]]]:
    """(`trial` or `worker`, what asks, {Ray resource: amount}) for one trial and, when the study
    pretrains, one pretraining worker (or a local-mode run's own task)."""
    res = spec.resources
    asked = [("trial", "a fine-tuning trial",
              {"CPU": res.cpus_per_trial, "GPU": res.gpus_per_trial, **res.custom_resources_per_trial})]
    if pretrains:
        asked.append(("worker", "a pretraining worker" if res.pretraining_workers else "a pretraining run",
                      {"CPU": res.cpus_per_worker, "GPU": res.gpus_per_worker, **res.custom_resources_per_worker}))
    return [(unit, who, {name: amount for name, amount in need.items() if amount > 0}) for unit, who, need in asked]


def amount_text(amount: float, name: str) -> str:
    return f"{amount:g} {'CPUs' if name == 'CPU' else 'GPUs' if name == 'GPU' else name}"


def resource_key(unit: str, name: str) -> str:
    """The key under `resources` that asks for `name` per `unit` (trial or worker)."""
    return {"CPU": f"cpus_per_{unit}", "GPU": f"gpus_per_{unit}"}.get(name, f"custom_resources_per_{unit}.{name}")


def fit_problems(spec: StudySpec, nodes: list[dict[str, float]], node: str, cluster: str,
                 pretrains: bool = True) -> list[tuple[str, str]]:
    """(key under `resources`, reason) for each request none of `nodes` (each {Ray resource:
    amount}) can meet. `node` names the largest node in the reason (`the largest node Ray
    reports`), `cluster` all of them (`the cluster Ray reports`)."""
    if not nodes:
        return []
    problems = []
    for unit, who, need in requests(spec, pretrains):
        if any(all(n.get(name, 0) >= amount for name, amount in need.items()) for n in nodes):
            continue
        # The node that comes closest: the most of each asked resource, in the order asked (CPU, GPU, custom).
        largest = max(nodes, key=lambda n: tuple(min(n.get(name, 0), amount) for name, amount in need.items()))
        short = next(name for name, amount in need.items() if largest.get(name, 0) < amount)
        names = ["CPU", "GPU", *(name for name in need if name not in ("CPU", "GPU"))]
        offered = ", ".join(amount_text(largest.get(name, 0), name) for name in names)
        problems.append((resource_key(unit, short), f"{who} asks for "
                         f"{', '.join(amount_text(a, name) for name, a in need.items())}, and {node} offers "
                         f"{offered}: it could never start"))
    res = spec.resources
    if pretrains and res.pretraining_workers >= 2:
        for name, per_worker in (("CPU", res.cpus_per_worker), ("GPU", res.gpus_per_worker)):
            key, total = resource_key("worker", name), res.pretraining_workers * per_worker
            have = sum(n.get(name, 0) for n in nodes)
            if total > have and not any(k == key for k, _ in problems):
                problems.append((key, f"a pretraining run's {res.pretraining_workers} workers ask for "
                                      f"{amount_text(total, name)} in all, and {cluster} has {have:g}: "
                                      "the run could never start"))
    return problems


def local_machine() -> dict[str, float]:
    """This machine as `sweeper run` without RAY_ADDRESS would start Ray on it: its usable CPUs."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return {"CPU": float(cpus)}


def local_fit_problems(spec: StudySpec, pretrains: bool) -> list[tuple[str, str]]:
    """`fit_problems` against this machine, for a study that would run on it (module docstring)."""
    res = spec.resources
    if os.environ.get("RAY_ADDRESS") or res.gpus_per_trial or res.gpus_per_worker \
            or res.custom_resources_per_trial or res.custom_resources_per_worker:
        return []
    where = "this machine (where `sweeper run` starts Ray unless RAY_ADDRESS names a cluster)"
    return fit_problems(spec, [local_machine()], where, where, pretrains)
