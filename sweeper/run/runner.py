"""`sweeper run`: the whole study, stage by stage, on whatever Ray cluster is reachable.

corpus -> pretraining grid and fine-tuning grid side by side (the pipeline loop, sweeper.run.pipeline,
drives pretraining and publishes the written checkpoints; Tune runs the grid) -> report. Each
stage skips what the study directory already holds, so running the same command again resumes
the study.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import ray

from sweeper.plan.changes import cell_id, resolved_settings, trial_cell
from sweeper.plan.load import LoadedStudy
from sweeper.plan.machine_fit import fit_problems
from sweeper.plan.study_plan import StudyPlan, trials_and_rows
from sweeper.report.sequential import saved_text, study_looks
from sweeper.report.statistics import verdict_config
from sweeper.report.writer import write_report
from sweeper.run.console import Console
from sweeper.run.corpora import check_corpus_source, prepare_corpora
from sweeper.run.environment import record_environment
from sweeper.run.interrupts import rearm
from sweeper.run.tune_grid import run_finetuning
from sweeper.run.pipeline import Pipeline
from sweeper.run.train_grid import PretrainingGrid
from sweeper.run.progress import format_duration
from sweeper.run.ray_compat import WORKER_SETUP_HOOK, autoscaler_node_types, route_worker_output, use_loopback_node
from sweeper.contract import registry
from sweeper.contract.configs import params_text
from sweeper.spec.reading import SpecError, raise_all
from sweeper.spec.study import StudySpec
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials
from sweeper.store.spec_history import keep_spec


def job_runtime_env() -> dict:
    """Every worker of the job runs sweeper.run.ray_compat.quiet_stopped_workers as it starts.
    With plugins (SWEEPER_PLUGINS), the workers get the same variable and the driver's
    PYTHONPATH, so they import the plugins' implementations as the driver did. (On a cluster the
    plugin modules must also be on the nodes: `ray job submit --working-dir`, or py_modules.)"""
    runtime_env: dict = {"worker_process_setup_hook": WORKER_SETUP_HOOK}
    plugins = os.environ.get(registry.PLUGINS_VARIABLE)
    if plugins:
        runtime_env["env_vars"] = {registry.PLUGINS_VARIABLE: plugins}
        if os.environ.get("PYTHONPATH"):
            runtime_env["env_vars"]["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return runtime_env


def tighten_auth_token() -> None:
    """Ray (2.59+) writes its token file (`~/.ray/auth_token`) readable by every user: make it
    readable by its owner only."""
    token = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        if token.stat().st_mode & 0o077:
            token.chmod(0o600)
    except OSError:  # no token (auth off), or not ours
        pass


def connect_ray() -> None:
    """Join the cluster of RAY_ADDRESS (set by `ray job submit`; `RAY_ADDRESS=auto` joins one
    started with `ray start`), else start a local Ray instance that listens on 127.0.0.1 only,
    dashboard included, with Ray's token authentication (on by default for a new local
    instance; RAY_AUTH_MODE=disabled turns it off, as the tests do)."""
    if ray.is_initialized():
        return
    options = dict(log_to_driver=True, configure_logging=False, runtime_env=job_runtime_env())
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], **options)
    else:
        use_loopback_node()  # the node's address: the loopback (ray.init takes none)
        ray.init(address="local", dashboard_host="127.0.0.1", **options)
    rearm()
    tighten_auth_token()


def refuse_unplaceable(study: LoadedStudy) -> None:
    """A trial or pretraining worker no node can host would wait forever (sweeper.plan.machine_fit):
    a SpecError naming the request and the largest node, within seconds of the start. The nodes
    are those Ray reports alive and the node types its autoscaler reports it may launch. A joined
    cluster whose autoscaler reports none may still grow (`ray up`'s autoscaler): there it is a
    warning, and the study goes on."""
    alive = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    launchable = autoscaler_node_types()
    joined = bool(os.environ.get("RAY_ADDRESS"))
    where = "the largest node Ray reports" + (" or may launch" if launchable else "")
    problems = fit_problems(study.spec, alive + (launchable or []), where, "the cluster Ray reports",
                            pretrains=bool(study.plan.runs))
    if joined and launchable is None:
        for key, reason in problems:
            print(f"warning: {study.file}: resources.{key}: {reason} unless the cluster adds a larger node "
                  "(an autoscaler): else stop the study (Ctrl-C)", file=sys.stderr, flush=True)
        return
    raise_all([SpecError(study.file, f"resources.{key}", reason) for key, reason in problems])


def plan_record(plan: StudyPlan) -> dict:
    """`plan.json`: the planned trial keys, so reports and `sweeper status` know what is missing,
    and each one's cell (`changes.cell_id`), so a report tells a superseded row from a kept one."""
    return {"trials": len(plan.trials), "trial_keys": [t.trial_key for t in plan.trials],
            "trial_cells": [cell_id(trial_cell(t.checkpoint.checkpoint_id, t.task, t.learning_rate,
                                               params_text(t.params), t.seed, t.sample)) for t in plan.trials],
            "runs": {run.name: run.run_key for run in plan.runs}}


def record_spec(study: LoadedStudy, layout: StudyLayout) -> str:
    """`spec.yaml` (the latest effective spec: the file with its command-line overrides applied),
    `plan.json`, and the spec kept with its plan, overrides and settings in the study's spec
    history (`specs/`, sweeper.store.spec_history). No copy holds credentials (a spec's
    `storage: s3://KEY:SECRET@...`: sweeper.store.storage). Returns the kept spec's name."""
    text, record = storage.redact(study.text), plan_record(study.plan)
    storage.write_text(layout.spec, text)
    storage.write_json(layout.plan, record, indent=None)
    overrides = {"overrides": [storage.redact(o) for o in study.overrides]} if study.overrides else {}
    return keep_spec(layout, text, {**record, **overrides, "resolved": resolved_settings(study.spec, study.plan)})


def run_stages(spec: StudySpec, plan: StudyPlan, layout: StudyLayout, retry_failed: bool) -> tuple[dict, list[str]]:
    """Corpus, then pretraining and fine-tuning side by side; returns the trials' tally and the
    failed runs."""
    corpora = prepare_corpora(spec, plan, layout)
    # Pretraining and fine-tuning run side by side: a checkpoint's trials start once it is written.
    # One loop owns the study's progress (pretraining, and which checkpoints are written) on a
    # thread of its own; the fine-tuning grid runs on Tune here and reads what it publishes.
    pipeline = Pipeline(PretrainingGrid(spec, list(plan.runs), layout, corpora, retry_failed), plan.checkpoints)
    pipeline.start()
    tally = run_finetuning(spec, plan, layout, corpora, pipeline=pipeline, retry_failed=retry_failed)
    return tally, pipeline.wait()


def run_looks(study: LoadedStudy, layout: StudyLayout, retry_failed: bool, tally: dict,
              failed_runs: list[str]) -> tuple[dict, list[str]]:
    """A sequential plan (`pretraining.sequential`): look at the recorded replicates, train the next
    look's, and again, until every comparison is decided or futile or at the maximum. The looks are
    replayed from the store each time (sweeper.report.sequential), so a driver killed at any point
    resumes exactly: no run or look is lost or repeated."""
    spec, plan, design = study.spec, study.plan, study.spec.pretraining.sequential
    while not failed_runs and not tally.get("failed"):
        outcome = study_looks(read_trials(layout).to_pandas(), design, spec.report.stability_lr_range,
                              verdict_config(spec.report))
        counts = {run.name: 0 for run in plan.runs if run.replicate == 0}
        for run in plan.runs:
            counts[run.arm] = max(counts.get(run.arm, 0), run.replicate + 1)
        if outcome is None or outcome.finished or outcome.pending == counts:
            if outcome is not None and outcome.finished:
                print(f"[study] sequential: {len(outcome.counts)} look(s); {saved_text(outcome)}", flush=True)
            break
        added = {run: n - counts.get(run, 0) for run, n in outcome.pending.items() if n > counts.get(run, 0)}
        print(f"[study] look {len(outcome.counts)}: comparisons still open; adding "
              + ", ".join(f"{n} x {run}" for run, n in added.items()), flush=True)
        study = study.with_replicates(outcome.pending)
        plan = study.plan
        record_spec(study, layout)
        tally, failed_runs = run_stages(spec, plan, layout, retry_failed)
    return tally, failed_runs


def run_study(study: LoadedStudy, layout: StudyLayout, *, retry_failed: bool = False) -> int:
    """Run or resume the loaded study (sweeper.plan.load) at `layout` (its root a path or an
    object-store URI); returns the exit status (1 if any run or trial failed)."""
    started = time.time()
    spec, plan = study.spec, study.plan
    if plan.runs:  # an evaluation-only study reads no corpus
        check_corpus_source(spec, Path(study.file))  # before anything is written or started: exit 2
    storage.make_dirs(layout.root)
    spec_entry = record_spec(study, layout)
    console = Console(layout)  # Ray's and Tune's notices to the debug log, no colour in a file
    console.start()
    print(f"[study] {spec.study}: {len(plan.runs)} pretraining runs, {len(plan.checkpoints)} checkpoints, "
          f"{trials_and_rows(plan)} -> {storage.display(layout.root)}\n"
          f"[study] Ray's and Tune's notices: {console.where}", flush=True)
    try:
        connect_ray()
        refuse_unplaceable(study)
        route_worker_output(console.route)
        record_environment(spec, layout, spec_entry)
        tally, failed_runs = run_stages(spec, plan, layout, retry_failed)
        if spec.pretraining.sequential is not None:
            tally, failed_runs = run_looks(study, layout, retry_failed, tally, failed_runs)
        report = write_report(layout)
        print(f"[study] finished in {format_duration(time.time() - started)}; report: {storage.display(report)}",
              flush=True)
    finally:
        console.close()
    if failed_runs or tally.get("failed"):
        print(f"[study] incomplete: {len(failed_runs)} pretraining run(s) and {tally.get('failed', 0)} trial(s) "
              f"failed; `sweeper status {storage.display(layout.root)}` lists them, `--retry-failed` reruns them",
              flush=True)
        return 1
    return 0
