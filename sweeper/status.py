"""`sweeper status STUDY_DIR`: done / running / pending / diverged / failed, per stage.

Read-only and Ray-free: the plan comes from the study's own copy of its spec, progress from
the run folders, the results store, and the driver's `live.json` heartbeat.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from sweeper.finetuning import LIVE_FILE
from sweeper.plan import plan_study
from sweeper.pretraining import has_failed, is_done, run_dir
from sweeper.spec import load_spec
from sweeper.store import read_trials

STALE_AFTER_S = 600  # a heartbeat older than this means nobody is running the study


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def study_status(study_dir: Path) -> dict:
    spec = load_spec(study_dir / "spec.yaml")
    plan = plan_study(spec)
    runs: dict[str, list[str]] = {"done": [], "running": [], "pending": [], "failed": []}
    now = time.time()
    for run in plan.runs:
        progress_file = run_dir(study_dir, run) / "progress.json"
        if is_done(study_dir, run):
            runs["done"].append(run.name)
        elif has_failed(study_dir, run):
            runs["failed"].append(run.name)
        elif progress_file.exists() and now - json.loads(progress_file.read_text())["updated_at"] < STALE_AFTER_S:
            progress = json.loads(progress_file.read_text())
            runs["running"].append(f"{run.name} (step {progress['step']}/{progress['total_steps']})")
        else:
            runs["pending"].append(run.name)
    planned = {t.trial_key for t in plan.trials}
    trials = read_trials(study_dir).to_pandas() if (study_dir / "results").exists() else None
    recorded = trials[trials["trial_key"].isin(planned)] if trials is not None else None
    counts = Counter(recorded["status"]) if recorded is not None else Counter()
    running = 0
    live = study_dir / LIVE_FILE
    if live.exists():
        state = json.loads(live.read_text())
        fresh = now - state["updated_at"] < STALE_AFTER_S
        if fresh and (state["host"] != os.uname().nodename or pid_alive(state["pid"])):
            running = state["running_trials"]
    pending = len(planned) - sum(counts.values()) - running
    return {"study": spec.study, "runs": runs, "trials": {"planned": len(planned), "ok": counts["ok"],
            "diverged": counts["diverged"], "failed": counts["failed"], "running": running, "pending": pending},
            "failed_trials": [] if recorded is None else
            recorded.loc[recorded["status"] == "failed", ["checkpoint_id", "task", "learning_rate", "seed",
                                                          "error"]].to_dict("records")}


def print_status(study_dir: Path) -> None:
    status = study_status(study_dir)
    runs, trials = status["runs"], status["trials"]
    total_runs = sum(len(v) for v in runs.values())
    print(f"study {status['study']} ({study_dir})")
    print(f"  pretraining: {total_runs} runs: " + ", ".join(f"{len(v)} {k}" for k, v in runs.items()))
    for state in ("running", "failed", "pending"):
        for name in runs[state]:
            print(f"    {state:8s} {name}")
    print(f"  fine-tuning: {trials['planned']} trials: " +
          ", ".join(f"{trials[k]} {k}" for k in ("ok", "running", "pending", "diverged", "failed")))
    for row in status["failed_trials"][:10]:
        last_line = (row["error"] or "").strip().splitlines()[-1:] or [""]
        print(f"    failed   {row['checkpoint_id']} / {row['task']} / lr {row['learning_rate']:g} / "
              f"seed {row['seed']}: {last_line[0][:160]}")
