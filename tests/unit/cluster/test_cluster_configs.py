"""The shipped cluster configs are safe as shipped and an operator can apply them (docs/cluster.md).

Safe: Ray token auth on for every Ray process and for the submitting client, the dashboard never
public (docs/security.md). `ray start` leaves token auth off unless RAY_AUTH_MODE=token (or a
token file exists), so each Ray start command must set it; KubeRay pods get it, and the token,
from a Kubernetes Secret.

Applicable: `cluster/ray-cluster.yaml` goes through Ray's own schema and its offline `ray up`
preparation, AWS bootstrap included (against moto's EC2 and IAM); its GPUs have the memory the paper
spec plans for; each node installs what it can build; rsync leaves local state behind. The RayJob
passes the checks KubeRay runs, asks for less than its nodes' allocatable, and names nothing the
repository or docs/cluster.md does not create."""
from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import ROOT
from ray_private import bootstrap_cluster_config, prepare_cluster_config, rsync_filter_args

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


# ---------------------------------------------------------------------------------------------
# `ray up`: what Ray itself does with the file before it launches anything, offline.

SG_PLACEHOLDER = "sg-REPLACE_WITH_SWEEPER_SG"
PROFILES = {"head": "sweeper-ray-head", "gpu_8x": "sweeper-ray-worker"}
ADMIN_CIDR = "203.0.113.0/24"    # a documentation range (RFC 5737) standing in for the operator's
DOCS = ROOT / "docs" / "cluster.md"


def test_ray_up_config_passes_rays_schema_and_config_checks():
    """Ray's own schema (ray-schema.json inside the ray wheel) and the preparation `ray up` does
    before it reaches the cloud: defaults filled in, setup commands merged, then validated."""
    import jsonschema
    import ray.autoscaler

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(ray_cluster(), schema)
    prepared = prepare_cluster_config(ray_cluster())
    assert set(prepared["available_node_types"]) == set(PROFILES)


@pytest.fixture
def aws(tmp_path, monkeypatch):
    """moto's EC2 and IAM, after the operator's steps of docs/cluster.md: the two roles and
    instance profiles (policies from cluster/aws/), and the security group (the nodes' own
    traffic, SSH from the admin CIDR). HOME is a temporary folder: Ray writes its SSH key there."""
    import boto3
    from moto import mock_aws

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # AWS's managed policies loaded: a config without its own profiles gets Ray's default role (and
    # fails the test on it) instead of failing here on the policy Ray attaches.
    with mock_aws(config={"iam": {"load_aws_managed_policies": True}}):
        ec2, iam = boto3.client("ec2", region_name="us-east-1"), boto3.client("iam")
        trust = (CLUSTER / "aws" / "ec2-trust-policy.json").read_text()
        for role in PROFILES.values():
            policy = (CLUSTER / "aws" / f"{role.removeprefix('sweeper-ray-')}-policy.json").read_text()
            iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust)
            iam.put_role_policy(RoleName=role, PolicyName="sweeper-study-bucket",
                                PolicyDocument=policy.replace("BUCKET", "sweeper-test-bucket"))
            iam.create_instance_profile(InstanceProfileName=role)
            iam.add_role_to_instance_profile(InstanceProfileName=role, RoleName=role)
        vpc = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
        group = ec2.create_security_group(GroupName="sweeper-ray", Description="sweeper Ray cluster",
                                          VpcId=vpc)["GroupId"]
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]},
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": ADMIN_CIDR}]}])
        yield SimpleNamespace(ec2=ec2, iam=iam, group=group)


def bootstrapped(aws) -> dict:
    """What `ray up` resolves before launching the head: ray.autoscaler._private.commands.
    _bootstrap_config (prepare_config, the AWS resource detection from DescribeInstanceTypes,
    validate_config, then the AWS provider's bootstrap: IAM, key pair, subnets, security groups),
    here against moto, with the operator's security group id in place of the placeholder."""
    text = (CLUSTER / "ray-cluster.yaml").read_text()
    return bootstrap_cluster_config(yaml.safe_load(text.replace(SG_PLACEHOLDER, aws.group)))


@pytest.mark.slow  # moto with AWS's managed policies, then Ray's bootstrap of the config: 13 s alone
def test_ray_up_bootstrap_opens_nothing_to_the_internet_and_gives_every_node_a_profile(aws):
    config = bootstrapped(aws)
    for node_type, profile in PROFILES.items():
        node_config = config["available_node_types"][node_type]["node_config"]
        assert node_config.get("IamInstanceProfile") == {"Name": profile}, f"{node_type}: no bucket credentials"
        assert node_config["SecurityGroupIds"] == [aws.group], f"{node_type}: Ray's default group opens SSH to all"
    # Ray made no role of its own (its default one is the head's only) and no security group.
    assert "IamInstanceProfile" not in config["head_node"]
    assert {r["RoleName"] for r in aws.iam.list_roles()["Roles"]} == set(PROFILES.values())
    groups = aws.ec2.describe_security_groups()["SecurityGroups"]
    assert {g["GroupName"] for g in groups} == {"default", "sweeper-ray"}
    for group in groups:
        for rule in group["IpPermissions"]:
            assert all(r["CidrIp"] != "0.0.0.0/0" for r in rule.get("IpRanges", [])), group["GroupName"]
            assert all(r["CidrIpv6"] != "::/0" for r in rule.get("Ipv6Ranges", [])), group["GroupName"]
    # Resources detected from the instance type, as the autoscaler will plan with them.
    assert config["available_node_types"]["gpu_8x"]["resources"]["GPU"] == 8


def test_instance_profiles_reach_the_study_bucket_and_little_else():
    def statements(who: str) -> list[dict]:
        return json.loads((CLUSTER / "aws" / f"{who}-policy.json").read_text())["Statement"]

    def actions(statement: dict) -> list[str]:
        return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]

    worker = statements("worker")
    assert all(a.startswith("s3:") for s in worker for a in actions(s))
    assert {r for s in worker for r in [s["Resource"]]} == {"arn:aws:s3:::BUCKET", "arn:aws:s3:::BUCKET/*"}
    head = statements("head")
    assert all(s in head for s in worker), "the driver on the head writes the study too"
    (pass_role,) = [s for s in head if "iam:PassRole" in actions(s)]
    assert pass_role["Resource"].endswith(":role/sweeper-ray-worker"), "the head hands out the worker role only"
    assert not any(a in ("*", "iam:*", "s3:*") for s in head for a in actions(s))


def test_the_shipped_config_waits_for_the_operators_security_group():
    for node_type in PROFILES:
        assert ray_cluster()["available_node_types"][node_type]["node_config"]["SecurityGroupIds"] == [SG_PLACEHOLDER]
    assert f's/{SG_PLACEHOLDER}/' in DOCS.read_text(), "docs/cluster.md says how to fill it in"


@functools.cache
@functools.cache
def instance_type(name: str) -> dict:
    """AWS's DescribeInstanceTypes record of an instance type (moto carries AWS's published data).
    Read once per name and module (~0.9 CPU-s a mocked call; published data, no test writes it);
    callers only read the record."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        return boto3.client("ec2", region_name="us-east-1").describe_instance_types(InstanceTypes=[name])[
            "InstanceTypes"
        ][0]


def paper_gpu_memory_gb() -> float:
    return yaml.safe_load((ROOT / "search_spaces" / "paper.yaml").read_text())["resources"]["gpu_memory_gb"]


def gpu_memory_gb(name: str) -> float:
    """One GPU's memory as AWS and NVIDIA name it (80 GB = 81,920 MiB)."""
    (gpu,) = instance_type(name)["GpuInfo"]["Gpus"]
    return gpu["MemoryInfo"]["SizeInMiB"] / 1024


def gpu_instance_types() -> dict[str, str]:
    ray_up = {f"ray up {k}": v["node_config"]["InstanceType"]
              for k, v in ray_cluster()["available_node_types"].items() if k != ray_cluster()["head_node_type"]}
    kuberay = {f"RayJob {g['groupName']}": g["template"]["spec"]["nodeSelector"][INSTANCE_LABEL]
               for g in rayjob()["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    return {**ray_up, **kuberay}


# Dense bf16 peak TFLOP/s the cost model may assume per GPU model (sweeper/spec/study.py, CostSpec).
PEAK_TFLOPS = {"H100": 989.0}


@pytest.mark.long  # moto's instance data: ~5 s
def test_gpu_instances_have_the_memory_and_peak_the_paper_spec_plans_for():
    spec_gb = paper_gpu_memory_gb()
    peak = yaml.safe_load((ROOT / "search_spaces" / "paper.yaml").read_text())["cost"]["gpu_peak_tflops"]
    for where, name in gpu_instance_types().items():
        (gpu,) = instance_type(name)["GpuInfo"]["Gpus"]
        assert PEAK_TFLOPS.get(gpu["Name"]) == peak, (
            f"{where}: the cost model assumes {peak} TFLOP/s, {name} has {gpu['Name']}"
        )
        assert gpu_memory_gb(name) == spec_gb, (
            f"{where}: {name} has {gpu_memory_gb(name):g} GB GPUs, paper.yaml plans {spec_gb:g}"
        )
        # The spec's GB are decimal (sweeper/plan/memory.py): 80e9 bytes is below the GPU's 80 GiB.
        assert spec_gb * 1e9 <= gpu_memory_gb(name) * 2**30


def test_sweeper_plan_fits_the_paper_study_on_the_cluster_gpus(tmp_path, capsys):
    from sweeper.cli import main

    paper = (ROOT / "search_spaces" / "paper.yaml").read_text()
    line = re.search(r"^  gpu_memory_gb: \S+", paper, re.M).group(0)
    for name in sorted(set(gpu_instance_types().values())):
        spec = tmp_path / f"paper-on-{name}.yaml"
        spec.write_text(paper.replace(line, f"  gpu_memory_gb: {gpu_memory_gb(name):g}"))
        assert main(["plan", str(spec)]) == 0, f"{name}: {capsys.readouterr().err}"


# ---------------------------------------------------------------------------------------------
# What each node installs: torch, then the project, then flash-attn outside build isolation.

PIP_INSTALL = re.compile(r"pip install ([^&|;)#\n]+)")


def pip_installs(commands: list[str]) -> list[str]:
    """The `pip install` arguments of shell commands, in order, as an operator would type them on
    a host: quiet flags and the constraints file's folder left out."""
    found = []
    for command in commands:
        for match in PIP_INSTALL.finditer(command):
            args = [a for a in match.group(1).split() if a != "-q"]
            found.append(" ".join(a.replace("~/sweeper/constraints.txt", "constraints.txt") for a in args))
    return found


def test_setup_installs_torch_then_the_project_then_flash_attn_on_gpu_nodes_only():
    config = prepare_cluster_config(ray_cluster())   # Ray's merge: setup_commands, then the head's or workers'
    head, workers = pip_installs(config["head_setup_commands"]), pip_installs(config["worker_setup_commands"])
    for where, installs, extras in (("head", head, "tracking"), ("workers", workers, "gpu,tracking")):
        assert installs[0].startswith('"torch==2.13.0"'), where
        assert installs[1] == f'-c constraints.txt -e ".[{extras}]"', where
    gpu_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert not any("flash" in requirement for requirement in gpu_extra), "an extra would build flash-attn in isolation"
    assert "--index-url https://download.pytorch.org/whl/cpu" in head[0], "the head has no GPU: the CPU wheel"
    assert "--index-url" not in workers[0], "GPU nodes: PyPI's CUDA build"
    assert "boto3" in head[-1], "the autoscaler's boto3 in the venv that runs `ray start`"
    assert not any("flash-attn" in i for i in head)
    assert workers[-1] == '--no-build-isolation "flash-attn>=2.7"'
    all_commands = config["head_setup_commands"] + config["worker_setup_commands"]
    assert all("--no-build-isolation" in c for c in all_commands if "flash-attn" in c)
    venv = next(c for c in config["setup_commands"] if "-m venv ~/venv" in c)
    assert "python3.11 -m venv" in venv, "the pinned numpy needs Python 3.11 (the AMI's python3 is 3.10)"


def dockerfile_commands() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.removeprefix("RUN ") for line in text.splitlines() if line.startswith("RUN ")]


def cluster_page_section() -> str:
    text = (ROOT / "docs" / "cluster.md").read_text()
    return text.split("\n## Run on a cluster\n")[1].split("\n## ")[0]


def test_the_image_and_the_gpu_nodes_install_as_the_cluster_page_documents():
    block = re.search(r"```bash\n# on a CUDA host.*?\n```", cluster_page_section(), re.S).group(0)
    documented = pip_installs([line.split("#")[0] for line in block.splitlines()[1:]])
    assert documented == pip_installs(dockerfile_commands())
    config = ray_cluster()
    assert documented == pip_installs(config["worker_setup_commands"])
    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f"docker build -t $REGISTRY/sweeper:{version} ." in cluster_page_section()


def test_rsync_leaves_the_local_environment_and_studies_behind(tmp_path):
    """Ray's own rsync arguments (SSHCommandRunner, the ones `ray up` passes for file_mounts) on a
    real rsync, from a checkout-like tree; Ray adds the trailing slash to a folder's path."""
    config = ray_cluster()
    for pattern in (".venv", "studies", ".git", "__pycache__", "build"):
        assert any(p.strip("/") == pattern for p in config.get("rsync_exclude", [])), pattern
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (`ray up` needs it too)")
    source, target = tmp_path / "checkout", tmp_path / "node"
    kept = ["sweeper/cli.py", "search_spaces/paper.yaml", "constraints.txt", "sweeper/store/studies/x.py"]
    left = [".venv/bin/python", "studies/paper/spec.yaml", ".git/HEAD", "sweeper/__pycache__/cli.pyc",
            "build/lib/x.py", "sweeper.egg-info/PKG-INFO"]
    for path in kept + left:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text("x")
    shutil.copy(ROOT / ".gitignore", source / ".gitignore")
    args = rsync_filter_args(config)
    subprocess.run(["rsync", "-a", *args, f"{source}/", str(target)], check=True, timeout=60)
    assert [p for p in kept if not (target / p).exists()] == []
    assert [p for p in left if (target / p).exists()] == []
    assert not (target / ".venv").exists() and not (target / "studies").exists()


# ---------------------------------------------------------------------------------------------
# KubeRay: the RayJob's fields the operator checks, its requests against its nodes, its references.

INSTANCE_LABEL = "node.kubernetes.io/instance-type"


def kuberay_errors(job: dict) -> list[str]:
    """What KubeRay v1.7.0 would refuse in this RayJob. The CRD cannot be fetched offline, so its
    checks that apply here are restated, from ray-project/kuberay at v1.7.0:
    - ray-operator/config/crd/bases/ray.io_rayjobs.yaml (the CRD's OpenAPI schema, `required`):
      spec.rayClusterSpec needs headGroupSpec; headGroupSpec needs template; a pod spec needs
      containers, a container a name; workerGroupSpecs[] need groupName, minReplicas, maxReplicas,
      template;
    - ray-operator/controllers/ray/utils/validation.go (what the webhook and the controller run):
      ValidateRayJobMetadata: the name a DNS-1035 label of at most MaxRayJobNameLength = 53 - 6 = 47
      characters (utils/constant.go); ValidateRayJobSpec: rayClusterSpec (or clusterSelector) set,
      ttlSecondsAfterFinished >= 0 and only with shutdownAfterJobFinishes, no submitterPodTemplate in
      SidecarMode; ValidateRayClusterSpec: at least one container per group, minReplicas and
      maxReplicas set when autoscaling is off, 0 <= minReplicas <= maxReplicas, resources in
      rayStartParams or in the group's `resources`, not both, no rayStartParams['labels']."""
    errors = []
    name = job.get("metadata", {}).get("name", "")
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 47:
        errors.append(f"metadata.name {name!r}: a DNS-1035 label of at most 47 characters")
    spec = job.get("spec", {})
    cluster = spec.get("rayClusterSpec")
    if cluster is None and not spec.get("clusterSelector"):
        return errors + ["spec: one of rayClusterSpec or clusterSelector must be set"]
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    if ttl < 0 or (ttl > 0 and not spec.get("shutdownAfterJobFinishes", False)):
        errors.append("spec.ttlSecondsAfterFinished: >= 0, and only with shutdownAfterJobFinishes")
    if spec.get("submissionMode") == "SidecarMode" and "submitterPodTemplate" in spec:
        errors.append("spec.submitterPodTemplate: not with SidecarMode")
    groups = [("headGroupSpec", cluster.get("headGroupSpec"))]
    groups += [(f"workerGroupSpecs[{i}]", g) for i, g in enumerate(cluster.get("workerGroupSpecs", []))]
    autoscaling = cluster.get("enableInTreeAutoscaling", False)
    for where, group in groups:
        if not group or "template" not in group:
            errors.append(f"{where}.template: required")
            continue
        containers = group["template"].get("spec", {}).get("containers") or []
        if not containers or not all(c.get("name") for c in containers):
            errors.append(f"{where}: at least one container, each with a name")
        params = group.get("rayStartParams", {})
        if group.get("resources") and any(k in params for k in ("num-cpus", "num-gpus", "memory", "resources")):
            errors.append(f"{where}: resources in rayStartParams and in resources")
        if "labels" in params:
            errors.append(f"{where}: rayStartParams['labels'] is not supported")
        if where.startswith("worker"):
            if not group.get("groupName"):
                errors.append(f"{where}.groupName: required")
            low, high = group.get("minReplicas"), group.get("maxReplicas")
            if low is None or high is None:
                if not autoscaling:
                    errors.append(f"{where}: minReplicas and maxReplicas required without autoscaling")
            elif not 0 <= low <= group.get("replicas", low) <= high:
                errors.append(f"{where}: 0 <= minReplicas <= replicas <= maxReplicas")
    return errors


def test_rayjob_passes_kuberays_checks():
    assert kuberay_errors(rayjob()) == []


@pytest.mark.parametrize("breakage", ["no_max_replicas", "no_container_name", "long_name", "ttl_without_shutdown"])
def test_kuberays_checks_catch_what_kuberay_refuses(breakage):
    job = rayjob()
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    if breakage == "no_max_replicas":
        del group["maxReplicas"]
    elif breakage == "no_container_name":
        del group["template"]["spec"]["containers"][0]["name"]
    elif breakage == "long_name":
        job["metadata"]["name"] = "sweeper-" + "x" * 40
    else:
        job["spec"]["shutdownAfterJobFinishes"] = False
    assert len(kuberay_errors(job)) == 1


def quantity(value: str | int) -> float:
    """A Kubernetes quantity as a number: CPUs, or bytes for memory."""
    text = str(value)
    for suffix, factor in (("m", 1e-3), ("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def eks_allocatable(name: str) -> dict[str, float]:
    """A node's allocatable CPUs and memory bytes on EKS's AL2023 nodes, as nodeadm configures the
    kubelet (awslabs/amazon-eks-ami, nodeadm/internal/kubelet/config.go): kubeReserved cpu = 6 % of
    the first core, 1 % of the second, 0.5 % of the third and fourth, 0.25 % of the rest; kubeReserved
    memory = 11 MiB x maxPods + 255 MiB, maxPods = ENIs x (IPv4 addresses per ENI - 1) + 2
    (eni_max_pods.go, from the default network card's ENIs); evictionHard memory.available 100 MiB.
    Capacities from AWS's DescribeInstanceTypes."""
    info = instance_type(name)
    cores = info["VCpuInfo"]["DefaultVCpus"]
    reserved_cpu = (0.06 * min(cores, 1) + 0.01 * min(max(cores - 1, 0), 1) + 0.005 * min(max(cores - 2, 0), 2)
                    + 0.0025 * max(cores - 4, 0))
    network = info["NetworkInfo"]
    enis = network["NetworkCards"][network.get("DefaultNetworkCardIndex", 0)]["MaximumNetworkInterfaces"]
    max_pods = enis * (network["Ipv4AddressesPerInterface"] - 1) + 2
    reserved_mib = 11 * max_pods + 255 + 100
    gpus = sum(g["Count"] for g in info.get("GpuInfo", {}).get("Gpus", []))
    return {"cpu": cores - reserved_cpu, "memory": (info["MemoryInfo"]["SizeInMiB"] - reserved_mib) * 2**20,
            "nvidia.com/gpu": gpus}


# Daemonsets (CNI, kube-proxy, the device plugin) and the kernel's share of memory (the kubelet's
# capacity is MemTotal, below the instance's nominal memory) take some of each node: pods may ask
# for 95 % of the computed allocatable.
NODE_HEADROOM = 0.95


def test_rayjob_requests_fit_below_the_named_node_types_allocatable():
    spec = rayjob()["spec"]
    pods = [("head", spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]),
            ("submitter", spec["submitterPodTemplate"]["spec"])]
    pods += [(g["groupName"], g["template"]["spec"]) for g in spec["rayClusterSpec"]["workerGroupSpecs"]]
    per_node: dict[str, dict[str, float]] = {}
    for _, pod in pods:
        node = pod["nodeSelector"][INSTANCE_LABEL]
        for container in pod["containers"]:
            requests = container["resources"]["requests"]
            for resource, value in requests.items():
                per_node.setdefault(node, {}).setdefault(resource, 0.0)
                per_node[node][resource] += quantity(value)
    # One worker pod per GPU node (it asks for all 8 GPUs); the head and the submitter may share a node.
    for node, asked in per_node.items():
        allocatable = eks_allocatable(node)
        for resource, amount in asked.items():
            limit = allocatable[resource] * (1 if resource == "nvidia.com/gpu" else NODE_HEADROOM)
            assert amount <= limit, f"{node}: {resource} {amount:g} > {limit:g}"


def test_every_reference_of_the_cluster_configs_exists_or_is_an_operator_step():
    docs = DOCS.read_text()
    job = rayjob()
    cluster = job["spec"]["rayClusterSpec"]
    pod_specs = [cluster["headGroupSpec"]["template"]["spec"], job["spec"]["submitterPodTemplate"]["spec"]]
    pod_specs += [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    manifests = {(d["kind"], d["metadata"]["name"]): d
                 for d in yaml.safe_load_all((CLUSTER / "studies-pvc.yaml").read_text())}
    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    for pod in pod_specs:
        for volume in pod.get("volumes", []):
            claim = manifests[("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])]
            assert "ReadWriteMany" in claim["spec"]["accessModes"]
            storage_class = manifests[("StorageClass", claim["spec"]["storageClassName"])]
            assert f"s/{storage_class['parameters']['fileSystemId']}/" in docs
        for container in pod["containers"]:
            assert container["image"] == f"REGISTRY/sweeper:{version}"
            for env in container.get("env", []):
                secret = env.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
                assert secret is None or f"kubectl create secret generic {secret}" in docs
    assert (ROOT / "Dockerfile").exists() and f"docker build -t $REGISTRY/sweeper:{version} ." in docs
    assert "kubectl apply -f cluster/studies-pvc.yaml" in docs
    for profile in PROFILES.values():
        assert f"--instance-profile-name {profile}" in docs
    assert '--cidr "$ADMIN_CIDR"' in docs and "--cidr 0.0.0.0/0" not in docs
