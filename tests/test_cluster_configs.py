"""The shipped cluster configs are safe as shipped: Ray token auth on for every Ray process and
for the submitting client, the dashboard never public (docs/security.md).

`ray start` leaves token auth off unless RAY_AUTH_MODE=token (or a token file exists), so each
Ray start command must set it; KubeRay pods get it, and the token, from a Kubernetes Secret."""
from __future__ import annotations

import re

import yaml

from conftest import ROOT

CLUSTER = ROOT / "cluster"


def ray_cluster() -> dict:
    return yaml.safe_load((CLUSTER / "ray-cluster.yaml").read_text())


def rayjob() -> dict:
    documents = list(yaml.safe_load_all((CLUSTER / "rayjob.yaml").read_text()))
    assert len(documents) == 1 and documents[0]["kind"] == "RayJob", "one RayJob, no Service or Ingress beside it"
    return documents[0]


def ray_starts(commands: list[str]) -> list[str]:
    return [c for c in commands if re.search(r"\bray start\b", c)]


def test_ray_up_cluster_starts_every_node_with_token_auth():
    config = ray_cluster()
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = ray_starts(config[key])
        assert starts, key
        for command in starts:
            assert re.search(r"(export )?RAY_AUTH_MODE=token\b", command.split("ray start")[0]), (key, command)
    # The token: copied to every node at Ray's default path, readable by its owner only.
    target = next(t for t in config["file_mounts"] if t.endswith("/.ray/auth_token"))
    assert config["file_mounts"][target].startswith("~/"), "the token comes from the user's machine, not the repo"
    assert any("chmod 600 ~/.ray/auth_token" in c for c in config["setup_commands"])


def test_ray_up_cluster_keeps_the_dashboard_on_the_loopback():
    config = ray_cluster()
    (head,) = ray_starts(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head
    text = (CLUSTER / "ray-cluster.yaml").read_text()
    assert "0.0.0.0" not in text and "8265" not in yaml.safe_dump(config["provider"])
    assert "IpPermissions" not in text, "no security-group rule opens a port"


def container_env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def assert_token_auth(container: dict, where: str) -> None:
    env = container_env(container)
    assert env.get("RAY_AUTH_MODE") == "token", where
    secret = env.get("RAY_AUTH_TOKEN")
    assert isinstance(secret, dict) and secret["secretKeyRef"] == {"name": "sweeper-ray-token", "key": "auth_token"}, \
        f"{where}: the token comes from the Secret, never written in the file"


def test_rayjob_head_workers_and_submitter_use_the_token_from_a_secret():
    spec = rayjob()["spec"]
    cluster = spec["rayClusterSpec"]
    assert "authOptions" not in cluster, "KubeRay's own token handling or these variables, not both"
    for container in cluster["headGroupSpec"]["template"]["spec"]["containers"]:
        assert_token_auth(container, "head")
    for group in cluster["workerGroupSpecs"]:
        for container in group["template"]["spec"]["containers"]:
            assert_token_auth(container, f"worker group {group['groupName']}")
    assert spec.get("submissionMode", "K8sJobMode") == "K8sJobMode"
    submitter = spec["submitterPodTemplate"]["spec"]["containers"][0]
    assert_token_auth(submitter, "submitter")
    assert "command" not in submitter, "KubeRay supplies `ray job submit` from `entrypoint`"


def test_rayjob_dashboard_is_reachable_in_the_cluster_only():
    head = rayjob()["spec"]["rayClusterSpec"]["headGroupSpec"]
    # The submitter pod reaches the dashboard through the head's Service: bound to the pod's
    # interfaces, behind a ClusterIP Service, with no Ingress.
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    assert head.get("serviceType", "ClusterIP") == "ClusterIP" and not head.get("enableIngress", False)
    text = (CLUSTER / "rayjob.yaml").read_text()
    assert not re.search(r"^\s*[^#\n]*\b(LoadBalancer|NodePort|hostPort|hostNetwork)\b", text, re.M)
    assert "headService" not in head, "no Service override"


def test_rayjob_runs_the_pinned_ray_version():
    pinned = re.search(r"^ray==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert rayjob()["spec"]["rayClusterSpec"]["rayVersion"] == pinned
