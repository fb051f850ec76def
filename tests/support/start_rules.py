"""What a quick-tier test may not start, as audit events (PEP 578): the rules that
tests/support/quick_tier.py (the test process) and child_guard/sitecustomize.py (its child
processes) both apply. Imports nothing beyond the standard library."""
from __future__ import annotations

import os
import socket


class QuickTierViolation(RuntimeError):
    """Something a quick-tier test may not start."""


def _words(args) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        args = [args]
    return [os.path.basename(os.fsdecode(a)) if i == 0 else os.fsdecode(a) for i, a in enumerate(args or [])]


def refusal(event: str, args: tuple) -> str | None:
    """What a quick-tier test may not do in this audit event, or None."""
    if event == "subprocess.Popen":
        executable, argv = args[0], args[1]
        words = _words(argv) if argv else _words([executable])
        if len(words) >= 3 and words[1] == "-c" and words[0] in ("sh", "bash", "dash"):
            words = words[2].split()  # a shell command line: its words
        command = " ".join(words)
        name = words[0] if words else ""
        if name in ("gcs_server", "raylet") or any(w.endswith(("/gcs_server", "/raylet")) for w in words):
            return f"a Ray cluster process: {command[:200]}"
        if name == "ray" and any(w in ("start", "submit") for w in words[1:3]):
            return f"a Ray cluster: {command[:200]}"
        if name == "moto_server" or "moto.server" in words or "moto_server" in command:
            return f"a server: {command[:200]}"
    elif event == "socket.bind":
        sock, address = args
        if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) \
                and len(address) >= 2 and address[1] not in (0, None):
            return f"a server: a socket bound to port {address[1]}"
    return None


_guarded = False
_EVENTS = frozenset(("subprocess.Popen", "socket.bind"))


def guard_process() -> None:
    """From now on, while SWEEPER_QUICK_TIER_LOG names a file in this process's environment,
    refuse what `refusal` names: append "<pid>\t<what>" to that file and raise QuickTierViolation.
    (Audit hooks cannot be removed: outside a quick-tier test the variable is unset and the hook
    does nothing.)"""
    import sys

    global _guarded
    if _guarded:  # once per process (a forked child of a guarded process has it already)
        return
    _guarded = True

    def hook(event: str, args: tuple) -> None:
        # The event first: the hook sees every audit event of the process (importing torch,
        # transformers, pandas and the CLI raises ~97,000, 59,000 of them `builtins.id`), and a
        # set lookup is ~15x cheaper than reading the environment (measured 2026-11-29).
        if event not in _EVENTS:
            return
        log = os.environ.get("SWEEPER_QUICK_TIER_LOG")
        if not log:
            return
        reason = refusal(event, args)
        if reason:
            with open(log, "a") as out:
                out.write(f"{os.getpid()}\t{reason}\n")
            raise QuickTierViolation(f"a quick-tier test started {reason} (mark it e2e and put it in tests/e2e/)")

    sys.addaudithook(hook)
