"""Resource layouts no cluster runs as written (sweeper.spec.resources, #28): each is refused by
`StudySpec.check` naming its `resources.` key; the layouts that run (shipped specs, packed trial
GPUs, DDP and FSDP on whole GPUs, a fractional GPU in local mode) are not. Through the CLI:
tests/unit/spec/test_hostile_specs.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.plan.load import load_study
from sweeper.spec.resources import layout_problems
from sweeper.spec.study import ResourcesSpec

ROOT = Path(__file__).resolve().parents[3]

IMPOSSIBLE = [
    # (resources, key, reason)
    ({"pretraining_workers": 2, "gpus_per_worker": 0.5}, "gpus_per_worker", "Duplicate GPU detected"),
    ({"pretraining_workers": 8, "gpus_per_worker": 0.25, "sharding": "fsdp"}, "gpus_per_worker", "Duplicate GPU"),
    ({"pretraining_workers": 0, "gpus_per_worker": 2}, "gpus_per_worker", "pretraining_workers: 2 with "
                                                                          "gpus_per_worker: 1"),
    ({"pretraining_workers": 4, "gpus_per_worker": 1.5}, "gpus_per_worker", "pretraining_workers: 6 with "
                                                                            "gpus_per_worker: 1"),
    ({"gpus_per_trial": 2}, "gpus_per_trial", "a trial trains on one"),
    ({"gpus_per_trial": 1.25}, "gpus_per_trial", "a trial trains on one"),
    ({"cpus_per_worker": 0}, "cpus_per_worker", "needs some CPU or GPU"),
    ({"cpus_per_worker": 0.00005}, "cpus_per_worker", "below the smallest amount Ray schedules"),
    ({"gpus_per_worker": 0.00001}, "gpus_per_worker", "below the smallest amount Ray schedules"),
    ({"cpus_per_trial": 0.00009, "gpus_per_trial": 1}, "cpus_per_trial", "below the smallest amount"),
    ({"gpus_per_trial": 0.00001}, "gpus_per_trial", "below the smallest amount"),
    ({"gpu_memory_gb": 40}, "gpu_memory_gb", "no worker or trial uses a GPU"),
]

RUNNABLE = [
    {},  # the defaults: local mode on CPUs
    {"pretraining_workers": 8, "gpus_per_worker": 1, "gpus_per_trial": 1, "gpu_memory_gb": 80},  # paper.yaml
    {"pretraining_workers": 2, "sharding": "fsdp"},  # FSDP on CPUs (tests/specs/fsdp.yaml)
    {"pretraining_workers": 0, "sharding": "fsdp"},  # a cluster spec tried locally: trains unsharded
    {"pretraining_workers": 1, "gpus_per_worker": 1, "sharding": "fsdp"},
    {"pretraining_workers": 4, "gpus_per_worker": 1, "sharding": "fsdp", "gpu_memory_gb": 141},
    {"pretraining_workers": 0, "gpus_per_worker": 0.5},  # one process: a GPU share is fine
    {"pretraining_workers": 1, "gpus_per_worker": 0.5},  # one worker: no NCCL peer on the GPU
    {"gpus_per_trial": 0.25, "cpus_per_trial": 0.25},  # four trials per GPU
    {"gpus_per_trial": 0.3},  # wasteful (10 % idle), not impossible
    {"cpus_per_worker": 0, "gpus_per_worker": 1},  # a GPU worker without a CPU of its own
    {"cpus_per_trial": 0, "gpus_per_trial": 0.5},
]


@pytest.mark.parametrize("given,key,reason", IMPOSSIBLE, ids=[str(case[0]) for case in IMPOSSIBLE])
def test_an_impossible_layout_is_refused_naming_its_key(given, key, reason):
    problems = list(layout_problems(ResourcesSpec(**given)))
    assert problems and problems[0][0] == key and reason in problems[0][1], problems


@pytest.mark.parametrize("given", RUNNABLE, ids=[str(case) for case in RUNNABLE])
def test_a_layout_that_runs_is_not_refused(given):
    assert list(layout_problems(ResourcesSpec(**given))) == []


def test_the_shipped_specs_layouts_run():
    """Every shipped and test spec loads: none of them holds a refused layout."""
    for path in [*(ROOT / "search_spaces").glob("*.yaml"), *(ROOT / "tests" / "specs").glob("*.yaml")]:
        spec = load_study(path).spec
        assert list(layout_problems(spec.resources)) == [], path.name
