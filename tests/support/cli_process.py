"""`python -m sweeper ARGS` in a child process, for tests that check what a command prints and
exits with (`sweeper plan` refusing a spec, `sweeper status` of a damaged study, ...).

The child is forked from a server process that imported `sweeper.cli` and what `sweeper plan`,
`status` and `report` import after reading their input (READERS) once (one server per test
process, started at its first call: `python cli_process.py cli`), not a new interpreter: a
`sweeper plan` then costs its own work, not ~3 CPU-seconds of interpreter start and imports each
time (over 130 such calls in the quick tier). The server also counts the shipped WordNet tasks'
rows and lengths once (warm_caches: what every plan of them counts alike from the repository's own
files, ~0.5 CPU-s a child otherwise). A test of what a command imports runs it in an
interpreter of its own (tests/unit/spec/test_hostile_specs.py: Ray never imported for a bad spec).
The child is still a process of its own: its exit status is the command's (`sys.exit(main())`;
1 and a traceback on stderr for an uncaught exception, as Python's; minus the signal's number when
a signal ends it, as subprocess's), its environment, working folder and resource limits are the
call's, and its stdout and stderr are read back whole. What the server imported read the
environment of the test process that started it; the commands under test read theirs when they
run. Neither server imports the Hugging Face libraries, which read HF_HOME and the other HF_
variables at import, so a call may set them (tests/unit/plan/test_external_checkpoints.py); should
a server import one (READ_AT_IMPORT), a call whose HF_ variables differ from the server's exits 1
saying so, never runs with the server's values.

A quick-tier test's child gets the tier's guard (tests/support/start_rules.py) as a new
interpreter would through child_guard/sitecustomize.py.

`sweeper_cli(..., stage="run")` forks from a second server that has also imported what
`sweeper run` imports once its spec is good (sweeper.run.runner: Ray, Ray Tune, pandas,
matplotlib; about 2 CPU-s a driver, benchmarks/heavy_imports.py), as the command itself does,
collector paused and frozen: the end-to-end tests' `run_sweeper` calls run this way
(tests/conftest.py). The child joins its Ray cluster, or starts one, itself; it
runs the interpreter's exit handlers (Ray's shutdown among them) before it ends, as `python -m
sweeper` does at exit. A folder the call's PYTHONPATH adds (a plugin's) is put on the child's
module path, as a new interpreter would.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent
READERS = ["sweeper.cli", "sweeper.plan.plan_text", "sweeper.design.decidable", "sweeper.report.status",
           "sweeper.report.writer"]
"""The command line and what `sweeper plan`, `status` and `report` import once their input is read
(pandas, scipy.stats, matplotlib: 2-3 CPU-s a child on the project's 2-core machine, paid again
by each of the quick tier's ~130 commands when only the command line was imported first; measured:
tests/unit/store/test_damage.py in 29.5 CPU-s against 41.0)."""
STAGES = {"cli": READERS, "run": [*READERS, "sweeper.run.runner"]}
"""What each server imports before it forks: the reading commands' modules, or those and the run stage."""
READ_AT_IMPORT = {"huggingface_hub": "HF_", "transformers": "HF_", "datasets": "HF_"}
"""Modules that read the environment variables of a prefix when imported (huggingface_hub's HF_HOME,
HF_HUB_OFFLINE, ...): were one imported by the server, the child would keep the server's values."""
_servers: dict[str, subprocess.Popen] = {}


# --- the server (this file run as a script) -------------------------------------------------------

def run_command(request: dict) -> int:
    """In the forked child: the call's environment, folder, limits and output files, then the
    command as `python -m sweeper` runs it; its exit status."""
    import resource

    server_environment = dict(os.environ)
    os.environ.clear()
    os.environ.update(request["env"])
    added = [
        entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in sys.path
    ]
    sys.path[1:1] = added
    os.chdir(request["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        handle = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
    if stale := read_at_import(request["env"], server_environment):
        print(f"cli_process: the server imported a module that read {', '.join(stale)} at import with other values "
              "than this call's: run this call in an interpreter of its own", file=sys.stderr)
        return 1
    if request["env"].get("SWEEPER_QUICK_TIER_LOG"):
        from start_rules import guard_process

        guard_process()
    for which, value in request["limits"]:
        resource.setrlimit(which, (value, value))
    sys.argv = [str(ROOT / "sweeper" / "__main__.py"), *request["args"]]
    try:
        from sweeper.cli import main

        code = main()
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # as the interpreter reports an uncaught exception
        traceback.print_exc()
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    return code or 0


def read_at_import(env: dict, server_environment: dict) -> list[str]:
    """The variables `env` sets otherwise than the server's environment that a module the server
    imported read when it was imported (READ_AT_IMPORT)."""
    prefixes = tuple({prefix for module, prefix in READ_AT_IMPORT.items() if module in sys.modules})
    return sorted(name for name in set(env) | set(server_environment)
                  if prefixes and name.startswith(prefixes) and env.get(name) != server_environment.get(name))


def warm_caches() -> None:
    """Fill the per-process cache a plan, a cost or a memory line of the default studies fills
    first, identically for every command: the shipped WordNet tasks' row counts and mean lengths
    (sweeper.contract.catalog.wordnet_statistics), read from the repository's files, which no
    test edits (its test: tests/unit/plan/test_cost.py)."""
    from sweeper.contract.catalog import WORDNET_FILES, wordnet_statistics

    for task in WORDNET_FILES:
        wordnet_statistics(task)


def serve(stage: str) -> None:
    """Import the stage's modules and warm their caches, then fork a child per request line on
    stdin (JSON); answer `{"pid"}` when it starts and `{"status"}` when it ends, one request at a time."""
    import importlib

    from sweeper.contract.heavy_imports import imports_frozen

    answers = os.fdopen(os.dup(1), "w")
    with imports_frozen():  # the point: imported once, before the forks, as the command imports them
        for module in STAGES[stage]:
            importlib.import_module(module)
        warm_caches()  # frozen with the imports: no child's collector walks what they keep

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_command(request)
            finally:
                atexit._run_exitfuncs()
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:
                        pass
                os._exit(code & 0xFF)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


# --- the client (the test process) ----------------------------------------------------------------

def server(stage: str) -> subprocess.Popen:
    if stage not in _servers or _servers[stage].poll() is not None:
        _servers[stage] = subprocess.Popen(
            [sys.executable, __file__, stage], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SUPPORT),
                                                               *filter(None, [os.environ.get("PYTHONPATH")])])})
    return _servers[stage]


def answer(process: subprocess.Popen, timeout: float | None) -> dict | None:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        return None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"the sweeper CLI server (tests/support/cli_process.py) ended: {process.wait()}")
    return json.loads(line)


def sweeper_cli(*args: str, env: dict | None = None, cwd: Path | str = ROOT, timeout: float = 300,
                limits: dict[int, int] | None = None, stage: str = "cli") -> subprocess.CompletedProcess:
    """Run `python -m sweeper *args` (environment `env`, default this process's; `limits`: the
    child's resource limits, `resource.RLIMIT_*` -> value, as a `preexec_fn` would set them;
    `stage`: what the server imported before forking, STAGES); return it as
    `subprocess.run(..., capture_output=True, text=True)` would. A child past `timeout` seconds
    is killed and TimeoutExpired raised."""
    process = server(stage)
    with tempfile.TemporaryDirectory(prefix="cli-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (out, err):
            open(path, "w").close()
        request = {"args": list(args), "env": dict(os.environ if env is None else env), "cwd": str(cwd),
                   "stdout": out, "stderr": err, "limits": sorted((limits or {}).items())}
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        pid = answer(process, 60)["pid"]
        ended = answer(process, timeout)
        if ended is None:
            os.kill(pid, signal.SIGKILL)
            answer(process, 60)
            raise subprocess.TimeoutExpired(["sweeper", *args], timeout)
        return subprocess.CompletedProcess(["sweeper", *args], ended["status"],
                                           Path(out).read_text(errors="replace"), Path(err).read_text(errors="replace"))


if __name__ == "__main__":
    serve(sys.argv[1])
