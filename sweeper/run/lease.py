"""One driver per study: the single-writer lease `<study>/lease.json` (Ray- and torch-free).

`sweeper run` takes the lease before it writes anything to the study and holds it until it
ends; a second `sweeper run` on the same study while the holder lives is refused (exit status
4, the message names the holder). `sweeper status` and `sweeper report` read the study without
it. The file holds the holder's host, pid, start time, last heartbeat and a random token:

    {"token": "9f2c...", "host": "node-1", "pid": 4242, "since": 1767225600.0, "heartbeat_at": ...}

- **Heartbeat.** A daemon thread renews `heartbeat_at` every `HEARTBEAT_S` (15 s). Before each
  renewal it reads the file back: if the token there is not ours (another driver took the lease
  over, judging ours dead) or the file is gone, this driver stops at once (exit status 4) and
  writes nothing more, so the two never write side by side for more than one heartbeat.
- **Take-over.** A lease whose holder is dead is taken over, and the new driver says so: the
  holder is dead when it ran on this host and its pid is gone, or when its heartbeat is older
  than `STALE_AFTER_S` (120 s: eight missed heartbeats; another host's pid cannot be checked).
- **A lease that is not one.** A file that parses but is not of a lease's shape (`"pid":
  "not-a-pid"`, a field missing), or a folder or FIFO where the lease goes, is no driver's: it
  is stale at once and taken over, the new driver saying what it found (a folder is set aside in
  `quarantine/`, never written through). An empty or cut-short file waits out `STALE_AFTER_S`
  from its modification time (a create caught mid-write looks the same for an instant).
- **Release.** On exit (normal, exception: `atexit` and the command's `finally`) the holder
  removes the file, only if the token in it is still its own. A killed driver leaves its file,
  which the next `sweeper run` takes over (at once on the same host, after 120 s elsewhere).

Atomicity. On a local disk (or a mount every node sees) a new lease is created with
`os.open(O_CREAT | O_EXCL)`: of two drivers exactly one creates it. A take-over writes a
temporary file and `os.replace`s it over the stale one, then reads it back to confirm the token;
every change of the file (take, renew, release) also holds an exclusive `flock` on the study
folder, so two take-overs of one stale lease are serialised (where the filesystem refuses
`flock`, e.g. some NFS setups, the read-back is the only check).

On an object store (S3, GCS) pyarrow's filesystem exposes no conditional write (S3's
`If-None-Match: *`, GCS's `ifGenerationMatch=0`), so taking the lease is a best effort: read,
write, wait `OBJECT_STORE_SETTLE_S` (1 s), read back and compare the token; the later writer
wins and the earlier one is refused. The limit: two drivers started on one study within about
the same second can both read back their own lease (each check-then-write inside the other's
settle window). The loser then finds the other's token at its first renewal (15 s at most) and
stops; in that window both may have started work. Do not start two drivers on one study at once.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

from sweeper.store import quarantine, storage
from sweeper.store.layout import StudyLayout

try:
    import fcntl
except ImportError:  # not POSIX: the O_EXCL create and the read-back remain
    fcntl = None

HEARTBEAT_S = 15.0
"""Seconds between two renewals of the holder's heartbeat."""
STALE_AFTER_S = 120.0
"""A heartbeat older than this means the holder is dead (eight missed renewals)."""
OBJECT_STORE_SETTLE_S = 1.0
"""Object stores: seconds between writing the lease and reading it back (see the module docstring)."""
UNREADABLE_PATIENCE_S = 2.0
"""A lease file that is not JSON is read again for this long (a local create caught mid-write)."""
EXIT_LEASE = 4
"""Exit status of a driver refused the lease, or that lost it while running."""


class LeaseHeld(RuntimeError):
    """Another live driver holds the study's lease."""

    def __init__(self, location: str, holder: dict | None):
        holder = holder or {}
        self.location, self.holder = location, holder
        super().__init__(
            f"{storage.display(storage.parent(location))} is being run by another driver: {describe(holder)}. "
            f"Nothing was written. Wait for it to end or stop it; the lease of a driver that died is "
            f"taken over by the next `sweeper run` (at once on the same host, after {STALE_AFTER_S:.0f} s "
            f"without a heartbeat from another host). Lease file: {storage.display(location)}")


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def describe(holder: dict, now: float | None = None) -> str:
    """`host node-1, pid 4242, since 2026-01-01 10:00:00, last heartbeat 2026-... (12 s ago)`."""
    now = time.time() if now is None else now
    if holder.get("malformed"):
        return f"a lease file that is not a lease ({holder['malformed']})"
    if holder.get("unreadable"):
        return (f"an unreadable lease file, last written {_when(holder['heartbeat_at'])} "
                f"({now - holder['heartbeat_at']:.0f} s ago)")
    return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, since {_when(holder.get('since', 0))}, "
            f"last heartbeat {_when(holder.get('heartbeat_at', 0))} ({now - holder.get('heartbeat_at', 0):.0f} s ago)")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def stale_reason(holder: dict, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> str | None:
    """Why the holder of this lease is dead, or None while it lives. A lease of the wrong shape
    (`malformed`: no driver writes one) is dead at once."""
    now = time.time() if now is None else now
    if holder.get("malformed"):
        return f"its lease file is not a lease ({holder['malformed']})"
    if holder.get("host") == socket.gethostname() and not pid_alive(holder.get("pid", 0)):
        return "its process is gone"
    if now - holder.get("heartbeat_at", 0) > stale_after_s:
        return f"no heartbeat for {now - holder.get('heartbeat_at', 0):.0f} s"
    return None


LEASE_FIELDS = {"token": (str,), "host": (str,), "pid": (int,), "since": (int, float), "heartbeat_at": (int, float)}
"""The fields a lease file holds, with their JSON types."""


def shape_problem(holder: dict) -> str | None:
    """What is wrong with a lease that parses (a field missing or of another type), or None."""
    wrong = [f"{name} {'missing' if name not in holder else f'is {holder[name]!r:.40}'}"
             for name, kinds in LEASE_FIELDS.items()
             if not isinstance(holder.get(name), kinds) or isinstance(holder.get(name), bool)]
    if not wrong and holder["pid"] <= 0:
        wrong = [f"pid is {holder['pid']}"]
    return ", ".join(wrong) or None


def read_lease(location: str) -> dict | None:
    """The lease at `location`, None when there is none. A file that stays unreadable (empty,
    cut short, not a lease) is returned as a holder without heartbeat (`{"unreadable": True,
    "heartbeat_at": <its modification time>, ...}`): stale once that is old enough. A lease that
    parses but has fields of the wrong shape (`"pid": "not-a-pid"`), or something that is not a
    file, is returned `malformed` (why), and is stale at once: no driver writes either."""
    deadline = time.monotonic() + UNREADABLE_PATIENCE_S
    while True:
        damaged: list[str] = []
        if why := storage.not_a_file(location):
            return {"malformed": why, "host": "?", "pid": 0, "since": 0.0, "heartbeat_at": _mtime(location)}
        holder = storage.read_json(location, patience_s=UNREADABLE_PATIENCE_S,
                                   damaged=lambda _, why: damaged.append(why))
        if holder is None and not damaged:
            return None
        if isinstance(holder, dict) and "token" in holder:
            if problem := shape_problem(holder):
                return {"malformed": problem, "host": "?", "pid": 0, "since": 0.0, "heartbeat_at": _mtime(location)}
            return holder
        if time.monotonic() > deadline:  # not a local create caught mid-write: damaged
            return {"unreadable": True, "host": "?", "pid": 0, "since": _mtime(location),
                    "heartbeat_at": _mtime(location)}
        time.sleep(0.1)


def _mtime(location: str) -> float:
    if not storage.is_remote(location):
        with contextlib.suppress(OSError):
            return os.path.getmtime(location)
        return 0.0
    fs, path = storage.filesystem(location)
    mtime = fs.get_file_info(path).mtime
    return mtime.timestamp() if mtime is not None else 0.0


@contextlib.contextmanager
def _serialised(location: str):
    """Local disk: an exclusive `flock` on the study folder while the lease file changes."""
    if storage.is_remote(location) or fcntl is None:
        yield
        return
    fd = os.open(storage.parent(location), os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # a filesystem without flock: the read-back still checks
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _encode(record: dict) -> bytes:
    return json.dumps(record, indent=1).encode()


def _create(location: str, record: dict) -> bool:
    """Write a new lease where there is none; False when one exists."""
    if storage.is_remote(location):
        if storage.exists(location):
            return False
        storage.write_bytes(location, _encode(record))
        return True
    try:
        fd = os.open(location, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as file:
        file.write(_encode(record))
        file.flush()
        os.fsync(file.fileno())
    return True


def _replace(location: str, record: dict) -> None:
    """Write the lease over the one there (a temporary file renamed into place on a disk)."""
    if storage.is_remote(location):
        storage.write_bytes(location, _encode(record))
        return
    tmp = f"{location}.tmp-{os.getpid()}-{record['token'][:8]}"
    with open(tmp, "wb") as file:
        file.write(_encode(record))
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, location)


def _ours(location: str, token: str) -> tuple[bool, dict | None]:
    """(whether the lease at `location` carries `token`, the lease read)."""
    if storage.is_remote(location):
        time.sleep(OBJECT_STORE_SETTLE_S)  # let a concurrent writer's upload land first
    holder = read_lease(location)
    return holder is not None and holder.get("token") == token, holder


@dataclass(slots=True)
class Lease:
    """A lease this process holds; `took_over` is the dead holder's lease it replaced, if any."""

    location: str
    token: str
    record: dict
    took_over: dict | None = None
    took_over_because: str | None = None
    released: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def renew(self) -> bool:
        """Write a fresh heartbeat; False (and nothing written) when the lease is no longer ours."""
        with _serialised(self.location):
            holder = read_lease(self.location)
            if holder is None or holder.get("token") != self.token:
                return False
            self.record = {**self.record, "heartbeat_at": time.time()}
            _replace(self.location, self.record)
            return True

    def release(self) -> None:
        """Stop the heartbeat and remove the lease file if it is still ours (idempotent)."""
        if self.released:
            return
        self.released = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)  # a renewal in progress lands before the file goes
        with contextlib.suppress(OSError), _serialised(self.location):
            holder = read_lease(self.location)
            if holder is not None and holder.get("token") == self.token:
                storage.remove(self.location)

    def start_heartbeat(self, interval_s: float = HEARTBEAT_S, on_lost=None) -> None:
        """Renew every `interval_s` in a daemon thread; when the lease was taken from us (or its
        file is gone), `on_lost(lease, holder now)` (default: say so on stderr and end this
        process at once, exit 4: no flush of pending results, which the new holder reruns)."""
        on_lost = on_lost or _stop_driver

        def beat():
            while not self._stop.wait(interval_s):
                try:
                    if self.renew():
                        continue
                except OSError as error:  # the store is unreachable for now: the next beat retries
                    print(f"[study] could not renew the lease {storage.display(self.location)}: {error}",
                          file=sys.stderr, flush=True)
                    continue
                if not self._stop.is_set():
                    self.released = True  # not ours to remove
                    on_lost(self, read_lease(self.location))
                return

        self._thread = threading.Thread(target=beat, name="sweeper-lease-heartbeat", daemon=True)
        self._thread.start()


def _stop_driver(lease: Lease, holder: dict | None) -> None:
    """Another driver holds the study now: stop writing to it at once (no flush, no cleanup)."""
    who = describe(holder) if holder else "nobody (the lease file is gone)"
    print(f"[study] this driver lost the lease of {storage.display(storage.parent(lease.location))} "
          f"to {who}: stopping now (exit {EXIT_LEASE}) so that one driver writes the study",
          file=sys.stderr, flush=True)
    os._exit(EXIT_LEASE)


def take_lease(location: str, *, stale_after_s: float = STALE_AFTER_S, study: StudyLayout | None = None) -> Lease:
    """Take the lease at `location` (creating its folder on a disk), taking over a dead
    holder's; raises LeaseHeld, naming the holder, while a live driver holds it."""
    storage.make_dirs(storage.parent(location))
    now = time.time()
    token = secrets.token_hex(16)
    record = {"token": token, "host": socket.gethostname(), "pid": os.getpid(), "since": now, "heartbeat_at": now}
    with _serialised(location):
        for _ in range(3):  # a holder that releases while we look: look again
            if _create(location, record):
                ours, holder = _ours(location, token)
                if ours:
                    return Lease(location, token, record)
                raise LeaseHeld(location, holder)
            holder = read_lease(location)
            if holder is None:
                continue
            reason = stale_reason(holder, stale_after_s=stale_after_s)
            if reason is None:
                raise LeaseHeld(location, holder)
            if storage.not_a_file(location):  # a folder or a FIFO where the lease goes: moved, not written through
                if study is None or not quarantine.set_aside(study, location, holder["malformed"]):
                    raise OSError(f"{storage.display(location)} is {holder['malformed']}, where the study's lease "
                                  "goes: move it away and run again")
            _replace(location, record)
            ours, now_there = _ours(location, token)
            if ours:
                return Lease(location, token, record, took_over=holder, took_over_because=reason)
            raise LeaseHeld(location, now_there)
    raise LeaseHeld(location, read_lease(location) or {})


def hold_lease(location: str, heartbeat_s: float = HEARTBEAT_S, study: StudyLayout | None = None) -> Lease:
    """`sweeper run`'s lease: taken (saying so when it replaces a dead driver's), renewed in
    the background, released at exit (also call `release()` in a `finally`)."""
    lease = take_lease(location, study=study)
    if lease.took_over is not None and lease.took_over.get("malformed"):
        print(f"[study] took over the lease: {storage.display(location)} was {describe(lease.took_over)}",
              flush=True)
    elif lease.took_over is not None:
        old = lease.took_over
        print(f"[study] took over the lease of {old.get('host')}/{old.get('pid')}, stale since "
              f"{_when(old.get('heartbeat_at', 0))} ({lease.took_over_because})", flush=True)
    lease.start_heartbeat(heartbeat_s)
    atexit.register(lease.release)
    return lease
