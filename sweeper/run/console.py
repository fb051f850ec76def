"""What `sweeper run` prints, and where Ray's and Tune's notices go instead.

The console shows the study's own lines (`[study]`, `[corpus]`, `[pretrain ...]`, `[finetune]`,
`[report]`), everything else the workers print (tracebacks, warnings), and Ray's and Tune's
warnings and errors. What Ray and Tune print that asks nothing of a researcher goes to the
study's debug log, `<study>/logs/ray-debug.log` (`StudyLayout.ray_debug_log`; for a study in an
object store, a node-local copy uploaded when the run ends), beside every Ray log record of
level INFO and up:
- the NOTICES below, in Ray's log records on the driver and in the workers' output that Ray
  forwards to it (`log_to_driver`; each batch of lines passes through `Console.route`:
  sweeper.run.ray_compat.route_worker_output);
- the workers' blank lines (dropped: Hugging Face's tokenizer trainer writes some);
- Ray's INFO records on the driver (the dashboard's address, ...): the console shows WARNING and up;
- Tune's console output (its configuration table, result folder and trial tables), which the
  store replaces: Tune's legacy reporter (`RAY_AIR_NEW_OUTPUT=0`) prints nothing at `verbose=0`,
  its newer one prints the table at every verbosity.
Searchers save nothing, so Tune's "save not implemented for Searcher" never comes
(sweeper.run.search.StoreRecordSearcher).

Colour: none unless stdout is a terminal and NO_COLOR is unset or empty (https://no-color.org).
Ray's `(task pid=...)` prefixes follow that rule (`RAY_COLOR_PREFIX=0`); the debug log has none.
"""
from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from sweeper.run.ray_compat import STOPPED_WORKER_NOTICE
from sweeper.store import folders, storage
from sweeper.store.layout import StudyLayout

NOTICES: tuple[tuple[str, str], ...] = (
    ("Token authentication is enabled for this Ray cluster",
     "Ray 2.59+ at every local start; docs/security.md and docs/cluster.md say how the token is kept"),
    ("Running in local mode. The training function will run in the same process",
     "Ray Train at every `pretraining_workers: 0` run: local mode is the spec's choice"),
    ("Reported metrics: {",
     "Ray Train's local mode at every checkpoint, with its internal `retention_priority`"),
    # A worker group (`pretraining_workers` >= 1): Ray Train's INFO records, at every run.
    ("Requesting resources: {", "Ray Train: a worker group's placement"),
    ("Attempting to start training worker group of size", "Ray Train: a worker group starting"),
    ("Started training worker group of size", "Ray Train: a worker group started"),
    (") world_rank=", "Ray Train: a worker's ranks, after the line above"),
    ("Setting up process group for:", "Ray Train: torch.distributed starting"),
    ("Checkpoint successfully created at: Checkpoint(", "Ray Train: every checkpoint (the run's own line says it)"),
    ("Reporting training result ", "Ray Train: every checkpoint, with its internal `retention_priority`"),
    ("Actor with class name: 'PreemptionWatcher'",
     "Ray Train's own actor: its arguments are in the object store (ray-project/ray#53727), at every run"),
    ("Failed to stop PlacementGroupCleaner gracefully",
     "Ray Train's controller at a run's end (with its traceback): its cleaner's thread sleeps past the "
     "stop's timeout; the group is removed all the same"),
    ("Monitor thread did not exit within", "Ray Train's placement-group cleaner: the same, from its side"),
    (STOPPED_WORKER_NOTICE, "a worker Ray stopped as the job ended, inside an interpreter callback "
     "(sweeper.run.ray_compat.quiet_stopped_workers)"),
)
"""(text, why it is no news): Ray's and Tune's notices kept off the console, as Ray 2.60 words them.
A notice's traceback (the lines after it in the same batch) goes with it."""

TRACEBACK_LINE = re.compile(r"^(Traceback \(most recent call last\):|\s|[\w.]+(Error|Exception)\b)")
"""A line of a Python traceback: its head, a frame or source line (indented), the exception."""

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
"""An ANSI escape sequence (colours, styles)."""


def colour_allowed(stream=None) -> bool:
    """Whether output may carry ANSI colour: `stream` (default stdout) is a terminal and
    NO_COLOR is unset or empty."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def plain(text: str) -> str:
    return ANSI.sub("", text)


def is_notice(text: str) -> bool:
    return any(notice in text for notice, _ in NOTICES)


class PlainFormatter(logging.Formatter):
    """Formats a record without ANSI escapes (Ray colours its dashboard address)."""

    def format(self, record: logging.LogRecord) -> str:
        return plain(super().format(record))


class ConsoleFormatter(logging.Formatter):
    """Ray's records as `[ray] WARNING message`, other libraries' as Python's last-resort
    handler prints them (the message alone); plain unless colour is allowed."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage() if not record.exc_info else super().format(record)
        if record.name == "ray" or record.name.startswith("ray."):
            text = f"[ray] {record.levelname} {text}"
        return text if colour_allowed(sys.stderr) else plain(text)


class ConsoleFilter(logging.Filter):
    """Records for the console: WARNING and up, less the NOTICES."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and not is_notice(record.getMessage())


WORKER_OUTPUT = "sweeper.worker_output"
"""The logger of the workers' lines kept off the console (`Console.route`)."""


class ForDebugLog(logging.Filter):
    """Ray's records and the workers' lines kept off the console: what the debug log holds."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name in ("ray", WORKER_OUTPUT) or record.name.startswith("ray.")


class ConsoleHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record comes (Ray and pytest replace it)."""

    def __init__(self):
        super().__init__()
        self.addFilter(ConsoleFilter())
        self.setFormatter(ConsoleFormatter())

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class Console:
    """The console and debug log of one `sweeper run` (see the module docstring): `start()`
    before Ray starts, `route` handed to Ray once it has (sweeper.run.runner), `close()` at the end."""

    def __init__(self, layout: StudyLayout):
        self.location = layout.ray_debug_log
        remote = storage.is_remote(self.location)
        self.local = folders.in_cache("scratch", self.location) if remote else Path(self.location)
        self.local.parent.mkdir(parents=True, exist_ok=True)
        if remote and not self.local.exists() and storage.exists(self.location):  # a resume appends
            self.local.write_bytes(storage.read_bytes(self.location))
        self.file = logging.FileHandler(self.local, encoding="utf-8")
        self.file.setFormatter(PlainFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.file.setLevel(logging.INFO)
        self.workers = logging.getLogger(WORKER_OUTPUT)
        self.closed = False

    @property
    def where(self) -> str:
        return storage.display(self.location)

    def start(self) -> None:
        """Set Ray's console knobs (colour, Tune's reporter) and route log records: the console
        gets WARNING and up less the NOTICES, the debug log Ray's INFO and up.

        The records go through the root logger: `ray.init(configure_logging=False)` empties the
        `ray` logger's handlers (and the token notice comes from inside it), so that logger
        propagates, and the root logger holds one console handler (for every library: what
        Python's last-resort handler printed before) and the debug log (Ray's records only)."""
        if not colour_allowed():
            os.environ["RAY_COLOR_PREFIX"] = "0"
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        importlib.import_module("ray")  # its own logging setup first: it adds its handler once, at import

        ray_logger = logging.getLogger("ray")
        for handler in list(ray_logger.handlers):
            ray_logger.removeHandler(handler)
        ray_logger.setLevel(logging.INFO)
        ray_logger.propagate = True
        root = logging.getLogger()
        for handler in [
            h for h in root.handlers if isinstance(h, ConsoleHandler)
        ]:  # a study run before in this process
            root.removeHandler(handler)
        root.addHandler(ConsoleHandler())
        self.file.addFilter(ForDebugLog())
        root.addHandler(self.file)
        self.workers.addHandler(self.file)
        self.workers.setLevel(logging.INFO)
        self.workers.propagate = False

    def route(self, batch: dict, show: Callable[[dict], None]) -> None:
        """One batch of a worker's output forwarded to the driver: NOTICES (and a traceback
        right after one) to the debug log, blank lines dropped, the rest to `show` (Ray's printer)."""
        try:
            who = f"({batch.get('actor_name') or batch.get('task_name') or 'worker'} pid={batch.get('pid')})"
            lines = batch.get("lines", [])
            shown, after_notice = [], False
            for line in lines:
                after_notice = is_notice(line) or (after_notice and bool(TRACEBACK_LINE.match(plain(line))))
                if after_notice:
                    if not self.closed:
                        self.workers.info("%s %s", who, line)
                elif plain(line).strip():
                    shown.append(line)
        except Exception:  # never lose output to a bug here
            show(batch)
            return
        if shown:
            show({**batch, "lines": shown})

    def close(self) -> None:
        """Close the debug log (uploaded for a remote study). The console stays as `start` set it
        until the process ends; notices that come later are dropped."""
        self.closed = True
        logging.getLogger().removeHandler(self.file)
        self.workers.removeHandler(self.file)
        self.file.close()
        if storage.is_remote(self.location) and self.local.exists():
            storage.write_bytes(self.location, self.local.read_bytes())
