"""`sweeper status STUDY_DIR`: done / running / pending / diverged / failed, per stage, and the
trials a trial scheduler stopped early (optuna and random modes).

Ray-free: the plan comes from the study's own copy of its spec, progress from the run folders,
the results store, and the driver's `live.json` heartbeat. It writes nothing, except that reading
the store sets a damaged part aside (sweeper.store.results); damaged parts and markers are named.
"""
from __future__ import annotations

import os
import time
from collections import Counter

from sweeper.plan.load import load_spec
from sweeper.plan.study_plan import plan_study
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import quarantined, read_trials

STALE_AFTER_S = 600  # a heartbeat older than this means nobody is running the study


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def relative(layout: StudyLayout, location: str) -> str:
    """`location` as a path inside the study (credentials and query left out)."""
    root, text = storage.display(layout.root).rstrip("/"), storage.display(location)
    return text[len(root) + 1:] if text.startswith(root + "/") else text


def read_marker(location: str, fields: tuple[str, ...], damaged: dict[str, str]) -> dict | None:
    """The JSON marker at `location` if it has `fields`, else None; a damaged one (empty, not
    JSON, fields missing) is noted in `damaged` and read as absent."""
    marker = storage.read_json(location, damaged=damaged.__setitem__)
    if marker is not None and not (isinstance(marker, dict) and all(f in marker for f in fields)):
        damaged[location] = f"fields {', '.join(fields)} missing"
        return None
    return marker


def study_status(layout: StudyLayout) -> dict:
    spec = load_spec(layout.spec)
    plan = plan_study(spec)
    runs: dict[str, list[str]] = {"done": [], "running": [], "pending": [], "failed": []}
    damaged: dict[str, str] = {}  # location -> why: markers read as absent
    now = time.time()
    for run in plan.runs:
        run_layout = layout.run(run.name)
        if run_layout.is_done(run.run_key, damaged=damaged.__setitem__):
            runs["done"].append(run.name)
            continue
        if run_layout.has_failed(run.run_key, damaged=damaged.__setitem__):
            runs["failed"].append(run.name)
            continue
        progress = read_marker(run_layout.progress, ("updated_at", "step", "total_steps"), damaged)
        if progress is not None and now - progress["updated_at"] < STALE_AFTER_S:
            runs["running"].append(f"{run.name} (step {progress['step']}/{progress['total_steps']})")
        else:
            runs["pending"].append(run.name)
    planned = {t.trial_key for t in plan.trials}
    trials = read_trials(layout).to_pandas()  # sets damaged parts aside first
    recorded = trials[trials["trial_key"].isin(planned)] if not trials.empty else None
    counts = Counter(recorded["status"]) if recorded is not None else Counter()
    running = 0
    state = read_marker(layout.live, ("updated_at", "host", "pid", "running_trials"), damaged)
    if state is not None:
        fresh = now - state["updated_at"] < STALE_AFTER_S
        if fresh and (state["host"] != os.uname().nodename or pid_alive(state["pid"])):
            running = state["running_trials"]
    pending = len(planned) - sum(counts.values()) - running
    return {"study": spec.study, "runs": runs, "trials": {"planned": len(planned), "ok": counts["ok"],
            "stopped": counts["stopped"], "diverged": counts["diverged"], "failed": counts["failed"],
            "running": running, "pending": pending},
            "early_stopping": spec.finetuning.scheduler.kind != "none",
            "failed_trials": [] if recorded is None else
            recorded.loc[recorded["status"] == "failed", ["checkpoint_id", "task", "learning_rate", "seed",
                                                          "error"]].to_dict("records"),
            "quarantined": quarantined(layout),
            "damaged_markers": {relative(layout, location): why for location, why in sorted(damaged.items())}}


def print_status(layout: StudyLayout) -> None:
    status = study_status(layout)
    runs, trials = status["runs"], status["trials"]
    total_runs = sum(len(v) for v in runs.values())
    print(f"study {status['study']} ({storage.display(layout.root)})")
    print(f"  pretraining: {total_runs} runs: " + ", ".join(f"{len(v)} {k}" for k, v in runs.items()))
    for state in ("running", "failed", "pending"):
        for name in runs[state]:
            print(f"    {state:8s} {name}")
    # `stopped` (early, by the trial scheduler) is shown where a scheduler ran or left rows.
    shown = ("ok", "stopped") if status["early_stopping"] or trials["stopped"] else ("ok",)
    print(f"  fine-tuning: {trials['planned']} trials: " +
          ", ".join(f"{trials[k]} {k}" for k in (*shown, "running", "pending", "diverged", "failed")))
    for row in status["failed_trials"][:10]:
        last_line = (row["error"] or "").strip().splitlines()[-1:] or [""]
        print(f"    failed   {row['checkpoint_id']} / {row['task']} / lr {row['learning_rate']:g} / "
              f"seed {row['seed']}: {last_line[0][:160]}")
    for line in damage_lines(status):
        print(line)


def damage_lines(status: dict) -> list[str]:
    """What `sweeper status` says about damaged files: each one set aside, each marker read as absent."""
    lines = []
    if status["quarantined"]:
        lines.append(f"  damaged store files: {len(status['quarantined'])} set aside in quarantine/ (their rows are "
                     "absent: `sweeper run` reruns their trials; delete them once inspected)")
        lines += [f"    {note['file']} (at {note['quarantined_at']}): {note['reason'][:160]}"
                  for note in status["quarantined"]]
    if status["damaged_markers"]:
        lines.append(f"  damaged markers: {len(status['damaged_markers'])} read as absent (rewritten by `sweeper run`)")
        lines += [f"    {location}: {why[:160]}" for location, why in status["damaged_markers"].items()]
    return lines
