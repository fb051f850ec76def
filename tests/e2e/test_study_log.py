"""The smoke study as a user runs it on a laptop (a local Ray of its own, an override on the
command line): its log in a file is plain and counts trials alike, and the override is recorded
(in the study's spec history, its spec.yaml and `sweeper status`)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import ROOT, SMOKE_SPEC, run_sweeper
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials
from sweeper.store.spec_history import entries

ONE_SEED = "finetuning.seeds=[0]"
"""The smoke study with one fine-tuning seed of its two: half its trials."""


def left_seconds(line: str) -> float:
    found = re.search(r"~(?:(\d+)h(\d+)m|(\d+)m(\d+)s) left", line)
    hours, minutes, mins, secs = (int(g) if g else 0 for g in found.groups())
    return hours * 3600 + minutes * 60 + mins * 60 + secs


def elapsed_seconds(line: str) -> float:
    found = re.search(r"\| (?:(\d+)h(\d+)m|(\d+)m(\d+)s) elapsed", line)
    hours, minutes, mins, secs = (int(g) if g else 0 for g in found.groups())
    return hours * 3600 + minutes * 60 + mins * 60 + secs


@pytest.mark.e2e
def test_the_smoke_studys_log_in_a_file_is_plain_and_counts_trials_alike_and_its_override_is_recorded(tmp_path):
    """As a user runs it: no RAY_ADDRESS (a local Ray of its own, token auth on, in a fresh
    HOME), one override, stdout and stderr to a file."""
    ray_tmp = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short: Ray's socket paths live below it
    env = {key: value for key, value in os.environ.items() if key not in (
        "RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "NO_COLOR", "RAY_COLOR_PREFIX",
        "RAY_AIR_NEW_OUTPUT", "RAY_DEDUP_LOGS")}
    env.update(HOME=str(tmp_path / "home"), RAY_TMPDIR=ray_tmp, PYTHONUNBUFFERED="1")
    spec, study, log = tmp_path / "smoke.yaml", tmp_path / "study", tmp_path / "run.log"
    spec.write_text(SMOKE_SPEC)
    try:
        with log.open("w") as out:
            done = subprocess.run([sys.executable, "-m", "sweeper", "run", str(spec), ONE_SEED,
                                   "--storage", str(study)],
                                  stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env, timeout=600)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    text = log.read_text()
    assert done.returncode == 0, text[-4000:]
    assert "\x1b[" not in text, "no ANSI escapes in a file"
    for noise in ("local mode", "Searcher", "retention_priority", "Token authentication is enabled",
                  "Configuration for experiment", "View detailed results", "repeated"):
        assert noise not in text, noise
    assert not re.search(r"^\([^)]*pid=\d+[^)]*\)\s*$", text, re.MULTILINE), "an empty worker line"
    plan_line = re.search(r"^\[study\] smoke: .* ([\d,]+) fine-tuning trials, 20 result rows \(each "
                          r"wordnet-usage-retrieval trial is also scored on wordnet-definition-retrieval\)", text,
                          re.MULTILINE)
    assert plan_line, text[:2000]
    planned = int(plan_line.group(1).replace(",", ""))
    progress = re.findall(r"^\[finetune\] \d+/\d+ trials .*$", text, re.MULTILINE)
    assert re.match(rf"\[finetune\] {planned}/{planned} trials", progress[-1]), progress[-1]
    assert f"[finetune] {planned} trials: 0 already recorded, 0 blocked by failed runs, {planned} to run" in text
    # Every run's progress lines (Ray's deduplication folded alike lines of the three runs).
    for run in ("nano-mlm40-40", "nano-clm-40", "nano-clm-20-mlm40-40"):
        assert f"[pretrain {run}] step 40/40" in text, run
    # The first ETA is of the order of the time the grid then took (it said ~4m for ~10 s).
    if len(progress) > 1:
        actual = elapsed_seconds(progress[-1]) - elapsed_seconds(progress[0])
        assert left_seconds(progress[0]) <= 4 * actual + 30, (progress[0], progress[-1])
    debug = (study / "logs" / "ray-debug.log").read_text()
    assert "Token authentication is enabled" in debug and "(fit_run pid=" in debug and "Running in local mode" in debug
    assert "\x1b[" not in debug

    # The override, recorded.
    rows = read_trials(StudyLayout(str(study))).to_pandas()
    assert set(rows["seed"]) == {0} and len(rows) == 20 and (rows["status"] == "ok").all()
    (entry,) = entries(StudyLayout(str(study)))
    assert entry.plan["overrides"] == [ONE_SEED]
    assert f"#   {ONE_SEED}" in (study / "spec.yaml").read_text()
    status = run_sweeper("status", str(study), address="")
    assert f"last run with overrides: {ONE_SEED}" in status.stdout and "20 ok" in status.stdout, status.stdout
