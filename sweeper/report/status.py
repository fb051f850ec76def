"""`sweeper status STUDY_DIR`: done / running / pending / diverged / failed, per stage, and the
trials a trial scheduler stopped early (optuna and random modes).

Ray-free: the plan comes from the study's own copy of its spec, progress from the run folders,
the results store, and the driver's `live.json` heartbeat. It writes, moves and deletes nothing:
a damaged part, a link in the store, a marker that is not a file or not of its shape is named and
left where it is (`sweeper run` sets them aside; docs/security.md). Every planned trial is
counted once: by its recorded status, as unclassified (a status this version does not know,
named), running or pending.
"""
from __future__ import annotations

import os
import time
from collections import Counter

from sweeper.plan.branches import shared_prefixes
from sweeper.plan.load import LoadedStudy
from sweeper.plan.study_plan import trained_trials
from sweeper.report import data_problems
from sweeper.report.analysis import STATUSES
from sweeper.report.sequential import study_looks
from sweeper.report.statistics import verdict_config
from sweeper.report.tables import format_duration
from sweeper.store import environments, storage
from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout
from sweeper.store.quarantine import quarantined, relative
from sweeper.store.results import read_trials
from sweeper.store.spec_history import entries

STALE_AFTER_S = 600  # a heartbeat older than this means nobody is running the study


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_marker(location: str, fields: dict[str, type | tuple[type, ...]], damaged: dict[str, str]) -> dict | None:
    """The JSON marker at `location` if it has `fields` of their types (name -> type), else None;
    a damaged one (empty, not JSON, not a file, fields missing or of another type) is noted in
    `damaged` and read as absent."""
    marker = storage.read_json(location, damaged=damaged.__setitem__, kind=dict)
    if marker is None:
        return None
    wrong = [f"{name} {'missing' if name not in marker else f'is {marker[name]!r:.40}'}"
             for name, kinds in fields.items()
             if name not in marker or not isinstance(marker[name], kinds) or isinstance(marker[name], bool)]
    if wrong:
        damaged[location] = "fields of the wrong shape: " + ", ".join(wrong)
        return None
    return marker


NUMBER = (int, float)
PROGRESS_FIELDS = {"updated_at": NUMBER, "step": int, "total_steps": int}
LIVE_FIELDS = {"updated_at": NUMBER, "host": str, "pid": int, "running_trials": int}
UNCLASSIFIED_LISTED = 10
"""Unclassified trials named one by one (then a count)."""


def study_status(layout: StudyLayout, study: LoadedStudy) -> dict:
    """What `sweeper status` prints of `study` (its spec copy, loaded by sweeper.plan.load.load_study)."""
    runs: dict[str, list[str]] = {"done": [], "running": [], "pending": [], "failed": []}
    damaged: dict[str, str] = {}  # location -> why: markers read as absent
    unreadable: dict[str, str] = {}  # location -> why: store parts left out, left in place
    trials = read_trials(layout, noted=unreadable).to_pandas()  # a read-only command: damaged parts stay
    study = at_latest_look(study, trials)
    spec, plan = study.spec, study.plan
    now = time.time()
    branches = shared_prefixes(spec, plan.runs)  # a branch waits for its trunk (sweeper.run.train_grid)
    interrupted: dict[str, Counter] = {}  # run name -> {"preemption": n, "failure": m, "node lost": k}
    for run in plan.runs:
        run_layout = layout.run(run.name)
        if kinds := Counter(event.get("kind") for event in run_layout.interruptions(damaged.__setitem__)
                            if isinstance(event, dict)):
            interrupted[run.name] = kinds
        if run_layout.is_done(run.run_key, damaged=damaged.__setitem__):
            runs["done"].append(run.name)
            continue
        if run_layout.has_failed(run.run_key, damaged=damaged.__setitem__):
            runs["failed"].append(run.name)
            continue
        progress = read_marker(run_layout.progress, PROGRESS_FIELDS, damaged)
        if progress is not None and now - progress["updated_at"] < STALE_AFTER_S:
            runs["running"].append(f"{run.name} (step {progress['step']}/{progress['total_steps']})")
        elif (branch := branches.get(run.name)) and not storage.exists(
                storage.join(layout.checkpoint(branch.trunk, branch.step), CHECKPOINT_MARKER)):
            runs["pending"].append(f"{run.name} (waits for {branch.trunk} to reach step {branch.step:,})")
        else:
            runs["pending"].append(run.name)
    planned = {t.trial_key for t in plan.trials}
    recorded = trials[trials["trial_key"].isin(planned)]
    known = recorded["status"].isin(STATUSES)
    counts = Counter(recorded.loc[known, "status"])
    unclassified = recorded[~known]
    running, eta = 0, None
    state = read_marker(layout.live, LIVE_FIELDS, damaged)
    if state is not None:
        fresh = now - state["updated_at"] < STALE_AFTER_S
        if fresh and (state["host"] != os.uname().nodename or pid_alive(state["pid"])):
            running = max(0, state["running_trials"])
            eta = live_eta(state, now)
    # Every planned trial is counted once: a recorded row by its status (or as unclassified), the
    # rest as running (the heartbeat's count, at most what is unrecorded) or pending.
    unrecorded = len(planned) - len(recorded)
    # Trials run again after a preemption or a lost node (sweeper.run.recording): not failures.
    requeued = Counter(e.get("kind") for e in storage.read_json(layout.trial_interruptions,
                                                                damaged=damaged.__setitem__, kind=list) or []
                       if isinstance(e, dict))
    running = min(running, unrecorded)
    return {"study": spec.study, "runs": runs, "interrupted": interrupted, "trial_interruptions": requeued,
            "trained": trained_trials(plan)[0], "trials": {"planned": len(planned), "ok": counts["ok"],
            "stopped": counts["stopped"], "diverged": counts["diverged"], "failed": counts["failed"],
            "unclassified": len(unclassified), "running": running, "pending": unrecorded - running},
            "early_stopping": spec.finetuning.scheduler.kind != "none", "eta": eta,
            "failed_trials": recorded.loc[recorded["status"] == "failed", ["checkpoint_id", "task", "learning_rate",
                                                                           "seed", "error"]].to_dict("records"),
            "unclassified_trials": [f"{r['checkpoint_id']} / {r['task']} / seed {r['seed']} (trial {r['trial_key']}): "
                                    f"status {r['status']!r}" for r in unclassified.to_dict("records")],
            "non_finite": data_problems.non_finite_text(recorded),
            "environment": environments.summary(layout, damaged.__setitem__),
            "quarantined": quarantined(layout),
            "overrides": latest_overrides(layout, damaged),
            "unreadable": {relative(layout, location): why for location, why in sorted(unreadable.items())},
            "damaged_markers": {relative(layout, location): why for location, why in sorted(damaged.items())}}


def live_eta(state: dict, now: float) -> dict | None:
    """The running driver's fine-tuning ETA from its heartbeat (`eta_s`, written with each beat by
    sweeper.run.recording), less the time since that beat; None when it has none yet (no trial
    done) or wrote a damaged one."""
    eta = state.get("eta_s")
    if not isinstance(eta, NUMBER) or isinstance(eta, bool) or eta != eta:
        return None
    age = max(0.0, now - state["updated_at"])
    return {"seconds_left": max(0.0, eta - age), "age_s": age}


def eta_line(status: dict) -> str | None:
    """`sweeper status`'s ETA line: the driver's estimate while one runs; what is missing otherwise."""
    trials = status["trials"]
    if not (trials["running"] or trials["pending"]):
        return None
    if status["eta"] is not None:
        return (f"  ETA: ~{format_duration(status['eta']['seconds_left'])} of fine-tuning left (the running driver's "
                f"estimate, {format_duration(status['eta']['age_s'])} ago)")
    if trials["running"]:
        return "  ETA: not yet (the running driver estimates it once its first trial is done)"
    if status["runs"]["running"]:
        return "  ETA: once pretraining is done (the runs' steps above), from the fine-tuning driver's first trials"
    return ("  ETA: none (no fine-tuning driver is beating: none runs, or it is still preparing; "
            "`sweeper run SPEC` continues the study)")


def at_latest_look(study: LoadedStudy, trials) -> LoadedStudy:
    """A sequential plan's study with the replicates its looks so far asked for (the pending look's
    while it trains: sweeper.report.sequential); any other study as planned."""
    design = study.spec.pretraining.sequential
    outcome = (study_looks(trials, design, study.spec.report.stability_lr_range, verdict_config(study.spec.report))
               if design is not None else None)
    if outcome is None or not outcome.counts:
        return study
    return study.with_replicates(outcome.pending or outcome.counts[-1])


def latest_overrides(layout: StudyLayout, damaged: dict[str, str]) -> list[str]:
    """The command-line overrides the latest run of the study applied (its spec history)."""
    kept = entries(layout, damaged=damaged.__setitem__)
    overrides = kept[-1].plan.get("overrides") if kept else None
    return [o for o in overrides if isinstance(o, str)] if isinstance(overrides, list) else []


def print_status(layout: StudyLayout, study: LoadedStudy) -> None:
    status = study_status(layout, study)
    runs, trials = status["runs"], status["trials"]
    total_runs = sum(len(v) for v in runs.values())
    print(f"study {status['study']} ({storage.display(layout.root)})")
    if status["overrides"]:
        print(f"  last run with overrides: {' '.join(status['overrides'])}")
    print(f"  pretraining: {total_runs} runs: " + ", ".join(f"{len(v)} {k}" for k, v in runs.items()))
    for state in ("running", "failed", "pending"):
        for name in runs[state]:
            print(f"    {state:8s} {name}")
    # Preemptions and lost nodes (resources.max_preemptions) and failures (max_failures) have
    # separate budgets (sweeper.run.train_grid.INTERRUPTION_BUDGETS).
    for name, kinds in status["interrupted"].items():
        print(f"    interrupted {name}: {kinds['preemption']} preemptions, {kinds['failure']} failures, "
              f"{kinds['node lost']} lost nodes")
    # `stopped` (early, by the trial scheduler) is shown where a scheduler ran or left rows.
    shown = ("ok", "stopped") if status["early_stopping"] or trials["stopped"] else ("ok",)
    shown += ("running", "pending", "diverged", "failed") + (("unclassified",) if trials["unclassified"] else ())
    counted = (f"{trials['planned']} result rows ({status['trained']} trials)" if status["trained"] != trials["planned"]
               else f"{trials['planned']} trials")  # an evaluation-only set's rows ride along with a trial
    print(f"  fine-tuning: {counted}: " + ", ".join(f"{trials[k]} {k}" for k in shown))
    if kinds := status["trial_interruptions"]:  # run again, not failed: not among the counts above
        print(f"    requeued trials: {kinds['preemption']} after preemptions, {kinds['node lost']} after lost nodes")
    if line := eta_line(status):
        print(line)
    for row in status["failed_trials"][:10]:
        last_line = (row["error"] or "").strip().splitlines()[-1:] or [""]
        print(f"    failed   {row['checkpoint_id']} / {row['task']} / lr {row['learning_rate']:g} / "
              f"seed {row['seed']}: {last_line[0][:160]}")
    listed = status["unclassified_trials"]
    for line in listed[:UNCLASSIFIED_LISTED]:
        print(f"    unclassified {line[:200]} (not a status this version knows)")
    if len(listed) > UNCLASSIFIED_LISTED:
        print(f"    ... and {len(listed) - UNCLASSIFIED_LISTED} more unclassified trials")
    if status["non_finite"]:
        print(f"  data problem: {status['non_finite']}")
    for line in status["environment"]:
        print(f"  {line}")
    for line in damage_lines(status):
        print(line)


def damage_lines(status: dict) -> list[str]:
    """What `sweeper status` says about damaged files: each one set aside, each marker read as absent."""
    lines = []
    if status["quarantined"]:
        lines.append(f"  damaged files: {len(status['quarantined'])} set aside in quarantine/ (a store part's rows are "
                     "absent: `sweeper run` reruns its trials; delete them once inspected)")
        lines += [f"    {note['file']} (at {note['quarantined_at']}): {note['reason'][:160]}"
                  for note in status["quarantined"]]
    if status["unreadable"]:
        lines.append(f"  damaged store files: {len(status['unreadable'])} not read, left in place (their rows are "
                     "absent; `sweeper run` sets them aside in quarantine/ and reruns their trials)")
        lines += [f"    {location}: {why[:160]}" for location, why in status["unreadable"].items()]
    if status["damaged_markers"]:
        lines.append(f"  damaged markers: {len(status['damaged_markers'])} read as absent (rewritten by `sweeper run`)")
        lines += [f"    {location}: {why[:160]}" for location, why in status["damaged_markers"].items()]
    return lines
