"""The quick tier's guard (tests/support/quick_tier.py) fails a test without the e2e mark that
starts Ray, a server or a Ray cluster process, in its own process or a child, even when the test
catches the refusal; it lets through what starts nothing and every e2e test."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import BIN, ROOT, TESTS

INNER = '''
import os
import socket
import subprocess
import sys

import pytest

from local_s3 import free_port, local_s3


def test_ray_start_caught_by_the_test():
    try:
        subprocess.run([{ray!r}, "start", "--head", "--port=0"], capture_output=True)
    except Exception:
        pass


def test_ray_init_without_an_address():
    import ray

    try:
        ray.init(num_cpus=1, include_dashboard=False)
    except Exception:
        pass
    finally:
        ray.shutdown()


def test_a_moto_server():
    with local_s3("b"):
        pass


def test_a_child_binds_a_fixed_port():
    code = f"import socket; s = socket.socket(); s.bind(('127.0.0.1', {{free_port()}}))"
    subprocess.run([sys.executable, "-c", code], capture_output=True)


def test_a_sweeper_run_forked_by_the_cli_server_starts_a_local_ray(tmp_path):
    from cli_process import sweeper_cli

    env = {{key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}}
    sweeper_cli("run", {smoke!r}, "--storage", str(tmp_path / "study"), env=env, timeout=120)


def test_a_probe_and_a_child_that_start_nothing():
    free_port()
    assert subprocess.run([sys.executable, "-c", "print('fine')"], capture_output=True, text=True).stdout == "fine\\n"


@pytest.mark.e2e
def test_an_e2e_test_may_listen():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
'''


@pytest.mark.slow  # an inner pytest that starts Ray, moto and fresh interpreters: 7-13 s, 11 CPU-s
def test_the_guard_fails_each_quick_test_that_starts_ray_or_a_server(tmp_path):
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(INNER.format(ray=str(BIN / "ray"), smoke=str(ROOT / "search_spaces" / "smoke.yaml")))
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    e2e: end-to-end\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SWEEPER_QUICK_TIER_LOG", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS / "support"), str(ROOT)])
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "quick_tier", "-p", "no:cacheprovider", "-rA",
                           "test_inner.py"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    out = done.stdout + done.stderr
    outcomes = {name: word for word, name in re.findall(r"^(PASSED|FAILED) test_inner.py::(\w+)", out, re.M)}
    assert outcomes == {
        "test_ray_start_caught_by_the_test": "FAILED",
        "test_ray_init_without_an_address": "FAILED",
        "test_a_moto_server": "FAILED",
        "test_a_child_binds_a_fixed_port": "FAILED",
        "test_a_sweeper_run_forked_by_the_cli_server_starts_a_local_ray": "FAILED",
        "test_a_probe_and_a_child_that_start_nothing": "PASSED",
        "test_an_e2e_test_may_listen": "PASSED",
    }, out[-6000:]
    assert "started: a Ray cluster: ray start --head" in out, out[-6000:]
    assert "started: a Ray cluster process: gcs_server" in out, out[-6000:]
    assert re.search(r"test_a_moto_server is a quick-tier test .* started: a server: \S+ -m moto.server", out), out[
        -6000:
    ]
    assert re.search(r"test_a_sweeper_run_forked_by_the_cli_server_starts_a_local_ray is a quick-tier test .* started: "
                     r"a Ray cluster process: gcs_server", out), out[-6000:]
    assert re.search(
        r"test_a_child_binds_a_fixed_port is a quick-tier test .* started: a server: a socket bound to port \d+", out
    ), out[-6000:]
