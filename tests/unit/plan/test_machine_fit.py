"""Requests no node can meet are refused, naming the request and what the largest node offers:
against this machine at `sweeper plan` (a study that would run here), against Ray's nodes at `run`."""
from __future__ import annotations

import os

from cli_process import sweeper_cli
from conftest import ROOT
from sweeper.plan.load import load_study
from sweeper.plan.machine_fit import fit_problems, local_machine

MICRO = str(ROOT / "search_spaces" / "micro.yaml")


def micro(*overrides: str):
    return load_study(MICRO, overrides).spec


def test_a_trial_larger_than_every_node_is_named_with_the_largest_node():
    nodes = [{"CPU": 2.0, "GPU": 0.0}, {"CPU": 16.0, "GPU": 1.0, "trial_node": 1.0}]
    assert fit_problems(micro(), nodes, "the largest node", "the cluster") == []
    (problem,) = fit_problems(micro("resources.cpus_per_trial=64"), nodes, "the largest node", "the cluster")
    assert problem == ("cpus_per_trial", "a fine-tuning trial asks for 64 CPUs, and the largest node offers "
                                         "16 CPUs, 1 GPUs: it could never start")


def test_each_resource_must_be_on_one_node_and_the_short_one_is_named():
    nodes = [{"CPU": 8.0}, {"CPU": 1.0, "GPU": 1.0}]
    spec = micro("resources.cpus_per_trial=4", "resources.gpus_per_trial=1")
    assert fit_problems(spec, nodes, "the largest node", "the cluster") == [
        ("gpus_per_trial", "a fine-tuning trial asks for 4 CPUs, 1 GPUs, and the largest node offers 8 CPUs, "
                           "0 GPUs: it could never start")]
    custom = micro("resources.custom_resources_per_trial={trial_node: 1}")
    assert [key for key, _ in fit_problems(custom, nodes, "n", "c")] == ["custom_resources_per_trial.trial_node"]


def test_a_worker_group_must_fit_the_cluster_as_a_whole():
    spec = micro("resources.pretraining_workers=4", "resources.cpus_per_worker=2")
    assert fit_problems(spec, [{"CPU": 4.0}, {"CPU": 4.0}], "n", "the cluster") == []
    (problem,) = fit_problems(spec, [{"CPU": 4.0}, {"CPU": 2.0}], "n", "the cluster")
    assert problem == ("cpus_per_worker", "a pretraining run's 4 workers ask for 8 CPUs in all, and the cluster "
                                          "has 6: the run could never start")
    assert fit_problems(spec, [{"CPU": 1.0}], "n", "c", pretrains=False) == [], "no run to train: not asked"


def test_plan_refuses_a_request_this_machine_cannot_meet(tmp_path):
    spec = tmp_path / "big.yaml"
    spec.write_text((ROOT / "search_spaces" / "micro.yaml").read_text().replace(
        "  cpus_per_trial: 1 ", "  cpus_per_trial: 64"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    plan = sweeper_cli("plan", str(spec), env=env)
    cpus = local_machine()["CPU"]
    assert cpus < 64
    assert plan.returncode == 2, plan.stderr
    line = next(line for line in plan.stderr.splitlines() if "cpus_per_trial" in line)
    assert line.startswith(f"spec error: {spec}:") and "a fine-tuning trial asks for 64 CPUs" in line
    assert (
        f"this machine (where `sweeper run` starts Ray unless RAY_ADDRESS names a cluster) offers {cpus:g} CPUs" in line
    )

    # A study for a cluster is not checked against this machine: the run checks Ray's nodes.
    joined = sweeper_cli("plan", str(spec), env={**env, "RAY_ADDRESS": "127.0.0.1:1"})
    assert joined.returncode == 0, joined.stderr
