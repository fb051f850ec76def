"""The local Ray instance `sweeper run` starts without RAY_ADDRESS listens on the loopback only,
with token authentication on and its token file readable by its owner only; its workers report
Ray's stop inside a callback in one line."""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import ROOT
from sweeper.run.ray_compat import STOPPED_WORKER_NOTICE

pytestmark = pytest.mark.e2e  # starts a Ray instance of its own (~15 s)

DRIVER = r"""
import json, os, socket
from pathlib import Path

import ray
from sweeper.run.runner import connect_ray


def listening() -> dict[str, str]:
    # socket inode -> "address port" of every listening TCP socket (state 0A) of this host.
    found = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)  # 32-bit words in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found[fields[9]] = f"{socket.inet_ntop(family, raw)} {int(port, 16)}"
    return found


def descendants(root: int) -> list[int]:
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


@ray.remote
def stopped_inside_a_callback() -> str:
    # Ray's own SIGTERM handler (a worker's) firing inside a weakref callback, as when Ray stops
    # a job's workers; returns what the worker wrote to stderr meanwhile.
    import io, signal, sys, time, weakref

    captured, sys.stderr = sys.stderr, io.StringIO()
    class Held: pass
    held = Held()
    ref = weakref.ref(held, lambda _: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(5)))
    del held
    text, sys.stderr = sys.stderr.getvalue(), captured
    return text


connect_ray()
stopped_report = ray.get(stopped_inside_a_callback.remote())  # a worker process too
sockets = listening()
listeners = []
for pid in descendants(os.getpid()):
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        continue
    listeners += [[name, *sockets[link[8:-1]].split()] for link in links
                  if link.startswith("socket:[") and link[8:-1] in sockets]
token = Path.home() / ".ray" / "auth_token"
print("RESULT " + json.dumps({"listeners": listeners, "auth_mode": os.environ.get("RAY_AUTH_MODE"),
                              "token_mode": oct(token.stat().st_mode & 0o777) if token.exists() else None,
                              "stopped_report": stopped_report}))
ray.shutdown()
"""


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc")
def test_the_local_default_listens_on_loopback_only_with_token_auth(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short: Ray's socket paths live below it
    env = {key: value for key, value in os.environ.items()
           if key not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    # A fresh HOME: Ray writes a new ~/.ray/auth_token there; RAY_TMPDIR: its own session files.
    env.update(HOME=str(tmp_path), RAY_TMPDIR=ray_tmp, PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    names = {name for name, _, _ in result["listeners"]}
    assert {"gcs_server", "raylet"} <= names, result["listeners"]
    exposed = [entry for entry in result["listeners"] if not is_loopback(entry[1])]
    assert not exposed, f"listening beyond the loopback: {exposed}"
    assert result["auth_mode"] == "token", "token authentication is on by default"
    assert result["token_mode"] == "0o600", "the token file is its owner's only"
    # The job's workers run sweeper.run.ray_compat.quiet_stopped_workers: Ray's stop inside a
    # callback is its one line, not a traceback ending in SystemExit.
    assert result["stopped_report"] == STOPPED_WORKER_NOTICE + "\n", result["stopped_report"]


def test_a_job_submitted_to_the_test_head_is_given_that_heads_address(ray_jobs_head):
    """Whatever Ray started last on this machine: Ray gives a job's driver the address `ray start`
    wrote into its temp folder, and the test head has one of its own (conftest.running_head). In the
    shared /tmp/ray, a study or another suite started beside the tests sent the head's jobs to
    their own cluster, where they hung."""
    from conftest import submit_job

    submitted = submit_job(ray_jobs_head[1], "python", "-c", "import os; print('ADDRESS', os.environ['RAY_ADDRESS'])")
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    # The head's GCS port (Ray names the host by its routable address, though it listens on all).
    given = re.search(r"^ADDRESS \S+:(\d+)$", submitted.stdout, re.MULTILINE)
    assert given and given.group(1) == ray_jobs_head[0].rsplit(":", 1)[1], submitted.stdout[-3000:]
