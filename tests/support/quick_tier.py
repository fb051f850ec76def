"""The quick tier's guard: a test without the `e2e` mark may start no Ray and no server.

Every test under tests/e2e/ carries the mark (added at collection); a test under tests/unit/
carrying it is a collection error (it belongs in tests/e2e/). Every test without it runs, from
its fixtures' setup to their teardown, under an audit hook (PEP 578, rules in start_rules.py)
that refuses:

- a process of a Ray cluster: `ray start`, `ray job submit`, or a gcs_server / raylet (what
  `ray.init()` without an address starts);
- a server: `moto_server`, or a socket bound to a fixed TCP port (a free-port probe binds port 0).

The hook sees every `subprocess.Popen` and `socket.bind` of the test process, whatever made the
call (Ray's own process launcher included), and its child Python processes get the same hook
through child_guard/sitecustomize.py (PYTHONPATH), so a `sweeper run` that should have refused
a spec but went on to start Ray is caught too. The refused call raises QuickTierViolation and
the test fails naming what started, even where the test caught the exception.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from start_rules import guard_process

SUPPORT = Path(__file__).resolve().parent
E2E_FOLDER = SUPPORT.parent / "e2e"
UNIT_FOLDER = SUPPORT.parent / "unit"
CHILD_GUARD = SUPPORT / "child_guard"

_state: dict = {"log": None}
guard_process()  # inert until pytest_runtest_protocol sets SWEEPER_QUICK_TIER_LOG for a quick-tier test


def is_e2e(item: pytest.Item) -> bool:
    return item.get_closest_marker("e2e") is not None


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.path)).resolve()
        if E2E_FOLDER in path.parents:
            item.add_marker(pytest.mark.e2e)
        elif UNIT_FOLDER in path.parents and is_e2e(item):
            raise pytest.UsageError(f"{item.nodeid} is marked e2e but lies in tests/unit/: move it to tests/e2e/")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Guard each quick-tier test, its child processes included, from setup to teardown."""
    if is_e2e(item):
        yield
        return
    handle, log = tempfile.mkstemp(prefix="quick-tier-", suffix=".log")
    os.close(handle)
    saved = {name: os.environ.get(name) for name in ("SWEEPER_QUICK_TIER_LOG", "PYTHONPATH")}
    os.environ["SWEEPER_QUICK_TIER_LOG"] = log
    os.environ["PYTHONPATH"] = os.pathsep.join([str(CHILD_GUARD), *filter(None, [saved["PYTHONPATH"]])])
    _state["log"] = log
    try:
        yield
    finally:
        _state["log"] = None
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.unlink(log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    log = _state["log"]
    if log and os.path.getsize(log):
        with open(log) as text:
            started = sorted({line.split("\t", 1)[1].strip() for line in text if "\t" in line})
        open(log, "w").close()
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} is a quick-tier test (no e2e mark) and started: " + "; ".join(started)
                           + " (mark it e2e and put it in tests/e2e/)")
