"""What `sweeper run` prints (sweeper.run.console, sweeper.run.progress): Ray's and Tune's notices
kept off the console and in the study's debug log, no colour in a file or under NO_COLOR, one
count of trials from the plan line to the last progress line, and an ETA that is sane from the
first line."""
from __future__ import annotations

import io
import logging
import os
import sys

import pytest

from sweeper.run import console as console_module
from sweeper.run.console import Console, colour_allowed
from sweeper.run.ray_compat import STOPPED_WORKER_NOTICE
from sweeper.run.progress import ProgressLine
from sweeper.store.layout import StudyLayout


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- colour -------------------------------------------------------------------------------------

def test_colour_only_on_a_terminal_and_never_under_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colour_allowed(Terminal()) and not colour_allowed(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_allowed(Terminal())
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: set but empty does not count
    assert colour_allowed(Terminal())


@pytest.fixture
def study_console(tmp_path, monkeypatch):
    """A Console on a study in tmp_path, with the process's logging put back afterwards."""
    for name in ("RAY_COLOR_PREFIX", "RAY_AIR_NEW_OUTPUT", "NO_COLOR"):  # as they were afterwards, unset now
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    ray_logger, root = logging.getLogger("ray"), logging.getLogger()
    saved = (list(ray_logger.handlers), ray_logger.propagate, ray_logger.level, list(root.handlers))
    made = Console(StudyLayout(str(tmp_path / "study")))
    yield made
    made.close()
    ray_logger.handlers[:], root.handlers[:] = saved[0], saved[3]
    ray_logger.propagate, ray_logger.level = saved[1], saved[2]


def test_no_color_turns_off_rays_coloured_prefixes_even_on_a_terminal(study_console, monkeypatch):
    monkeypatch.setattr(sys, "stdout", Terminal())
    monkeypatch.setenv("NO_COLOR", "1")
    study_console.start()
    assert os.environ["RAY_COLOR_PREFIX"] == "0"


def test_rays_notices_go_to_the_debug_log_and_its_warnings_to_the_console(study_console, capsys):
    study_console.start()
    assert os.environ["RAY_COLOR_PREFIX"] == "0", "stdout is no terminal here"
    assert os.environ["RAY_AIR_NEW_OUTPUT"] == "0", "Tune's legacy reporter: silent at verbose=0"
    logging.getLogger("ray._private.authentication.x").warning(
        "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.")
    logging.getLogger("ray.tune.x").info("\x1b[32mView the dashboard\x1b[0m")
    logging.getLogger("ray.tune.x").warning("the object store is full")
    shown = []
    study_console.route({"pid": 7, "task_name": "fit_run", "is_err": True, "lines": [
        "Running in local mode. The training function will run in the same process. ...",
        "Reported metrics: {'step': 20, 'retention_priority': 1000000000020}", "", "  ",
        "[pretrain nano-clm-40] step 10/40 clm loss 6.761", "Traceback (most recent call last):"]}, shown.append)
    study_console.close()
    err = capsys.readouterr().err
    assert err == "[ray] WARNING the object store is full\n"
    assert [batch["lines"] for batch in shown] == [
        ["[pretrain nano-clm-40] step 10/40 clm loss 6.761", "Traceback (most recent call last):"]]
    debug = open(study_console.local).read()
    assert (
        "Token authentication" in debug
        and "View the dashboard" in debug
        and "(fit_run pid=7) Running in local" in debug
    )
    assert "retention_priority" in debug and "\x1b[" not in debug


def test_a_notices_traceback_goes_with_it_and_a_traceback_alone_shows(study_console):
    study_console.start()
    shown = []
    study_console.route({"pid": 9, "task_name": "TrainController", "is_err": True, "lines": [
        "Failed to stop PlacementGroupCleaner gracefully.", "Traceback (most recent call last):",
        '  File "placement_group_callback.py", line 126, in _stop_cleaner',
        "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.",
        "[pretrain nano-clm-40] step 40/40", "Traceback (most recent call last):", '  File "loop.py", line 3',
        "ValueError: a real one"]}, shown.append)
    assert shown[0]["lines"] == ["[pretrain nano-clm-40] step 40/40", "Traceback (most recent call last):",
                                 '  File "loop.py", line 3', "ValueError: a real one"]
    study_console.close()
    assert "GetTimeoutError" in open(study_console.local).read()


def test_ray_stopping_a_worker_inside_a_callback_goes_to_the_debug_log_and_other_ignored_errors_show(study_console):
    """The worker's one line for Ray's stop (sweeper.run.ray_compat.quiet_stopped_workers) is a
    notice; any other "Exception ignored" report shows whole."""
    study_console.start()
    shown = []
    own = ["Exception ignored in: <function Dataset.__del__ at 0x1>", "Traceback (most recent call last):",
           '  File "data.py", line 9, in __del__', "OSError: the shard could not be closed"]
    study_console.route({"pid": 5, "actor_name": "finetune_trainable", "is_err": True,
                         "lines": [STOPPED_WORKER_NOTICE, "[finetune] a line", *own]}, shown.append)
    assert shown[0]["lines"] == ["[finetune] a line", *own]
    study_console.close()
    assert f"(finetune_trainable pid=5) {STOPPED_WORKER_NOTICE}" in open(study_console.local).read()


def test_a_batch_of_notices_only_prints_nothing(study_console):
    study_console.start()
    shown = []
    study_console.route(
        {"pid": 3, "task_name": "prepare_corpus_task", "is_err": False, "lines": ["", ""]}, shown.append
    )
    assert shown == []


def test_every_notice_names_why_it_is_no_news():
    assert all(text and why for text, why in console_module.NOTICES)


# --- the ETA ------------------------------------------------------------------------------------

def test_the_first_eta_comes_from_the_plans_weights_not_from_the_wait_for_pretraining():
    """90 SC trials (work 1) and 90 QA trials (work 9), 2 at a time, the first starting after 300 s
    of pretraining: the first SC trial done after 1 s says ~(89 + 810) / 2 s are left. The old
    rule (elapsed per trial done x trials left) said 301 x 179 s: 15 hours."""
    progress = ProgressLine("finetune", 180, "trials", work={"sc": (90, 1.0), "qa": (90, 9.0)})
    start = progress.started + 300
    progress.begin("a", now=start)
    progress.begin("b", now=start)
    progress.end("a", "sc", seconds=1.0, now=start + 1)
    progress.done = 1
    left = progress.seconds_left(now=start + 1)
    assert 0.75 * 450 < left < 1.25 * 450, left
    assert "~7m" in progress.line(now=start + 1)


def test_measured_rates_take_over_group_by_group():
    """QA trials take twice what the plan says: once a few have run, the ETA follows them."""
    progress = ProgressLine("finetune", 180, "trials", work={"sc": (90, 1.0), "qa": (90, 9.0)})
    now = progress.started
    for number in range(90):
        progress.begin(f"sc{number}", now=now)
        now += 1.0
        progress.end(f"sc{number}", "sc", now=now)
    progress.done = 90
    assert abs(progress.seconds_left(now=now) - 810) < 1, "QA by the plan's weight until one is measured"
    for number in range(10):
        progress.begin(f"qa{number}", now=now)
        now += 18.0
        progress.end(f"qa{number}", "qa", now=now)
    progress.done = 100
    assert abs(progress.seconds_left(now=now) / (80 * 18.0) - 1) < 0.15


def test_the_eta_follows_a_grid_that_speeds_up():
    """Trials take 4 s while pretraining shares the CPUs, then 1 s: the ETA follows the recent speed."""
    progress = ProgressLine("finetune", 200, "trials", work={"sc": (200, 1.0)})
    now = progress.started
    for number in range(100):
        progress.begin(str(number), now=now)
        now += 4.0 if number < 50 else 1.0
        progress.end(str(number), "sc", now=now)
    progress.done = 100
    left = progress.seconds_left(now=now)
    assert 100 <= left < 180, "100 trials of ~1 s left: nearer that than the mean 2.5 s a trial (250 s)"


def test_without_weights_the_eta_counts_items_from_the_first_start():
    progress = ProgressLine("corpus", 10, "shards")
    assert progress.seconds_left() is None, "no ETA before anything is done"
    progress.begin("s0", now=progress.started + 100)
    progress.end("s0", None, now=progress.started + 102)
    progress.done = 1
    assert progress.seconds_left(now=progress.started + 102) == pytest.approx(18)


# --- the smoke study's log ----------------------------------------------------------------------
