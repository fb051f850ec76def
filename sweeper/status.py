"""`sweeper status STUDY_DIR`: done / running / pending / diverged / failed, per stage.

Read-only and Ray-free: the plan comes from the study's own copy of its spec, progress from
the run folders, the results store, and the driver's `live.json` heartbeat.
"""
from __future__ import annotations

import os
import time
from collections import Counter

from sweeper import storage
from sweeper.layout import StudyLayout
from sweeper.plan import plan_study
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


def study_status(study_dir: str) -> dict:
    layout = StudyLayout(study_dir)
    spec = load_spec(layout.spec)
    plan = plan_study(spec)
    runs: dict[str, list[str]] = {"done": [], "running": [], "pending": [], "failed": []}
    now = time.time()
    for run in plan.runs:
        run_layout = layout.run(run.name)
        if run_layout.is_done(run.run_key):
            runs["done"].append(run.name)
            continue
        if run_layout.has_failed(run.run_key):
            runs["failed"].append(run.name)
            continue
        progress = storage.read_json(run_layout.progress)
        if progress is not None and now - progress["updated_at"] < STALE_AFTER_S:
            runs["running"].append(f"{run.name} (step {progress['step']}/{progress['total_steps']})")
        else:
            runs["pending"].append(run.name)
    planned = {t.trial_key for t in plan.trials}
    trials = read_trials(study_dir).to_pandas()
    recorded = trials[trials["trial_key"].isin(planned)] if not trials.empty else None
    counts = Counter(recorded["status"]) if recorded is not None else Counter()
    running = 0
    state = storage.read_json(layout.live)
    if state is not None:
        fresh = now - state["updated_at"] < STALE_AFTER_S
        if fresh and (state["host"] != os.uname().nodename or pid_alive(state["pid"])):
            running = state["running_trials"]
    pending = len(planned) - sum(counts.values()) - running
    return {"study": spec.study, "runs": runs, "trials": {"planned": len(planned), "ok": counts["ok"],
            "diverged": counts["diverged"], "failed": counts["failed"], "running": running, "pending": pending},
            "failed_trials": [] if recorded is None else
            recorded.loc[recorded["status"] == "failed", ["checkpoint_id", "task", "learning_rate", "seed",
                                                          "error"]].to_dict("records")}


def print_status(study_dir: str) -> None:
    status = study_status(study_dir)
    runs, trials = status["runs"], status["trials"]
    total_runs = sum(len(v) for v in runs.values())
    print(f"study {status['study']} ({storage.display(study_dir)})")
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
