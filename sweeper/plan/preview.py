"""`sweeper plan SPEC --storage STUDY`: what running the spec would do to a study that holds
results, without running anything. Each planned trial is kept (its key is recorded), added
(new), or recomputed (its cell is recorded under another key: sweeper.plan.changes, which
`sweeper run` uses to refuse the same edits without --recompute-changed); each pretraining run
is kept (done under its key), added, or recomputed; and an edit `sweeper run` refuses outright
(a checkpoint step added to a finished run) is named as refused."""
from __future__ import annotations

from sweeper.plan.changes import cell_text, find_changes, refuse_unwritten_checkpoints, trial_cell
from sweeper.plan.load import LoadedStudy
from sweeper.contract.configs import params_text
from sweeper.spec.reading import SpecError
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table

LISTED = 50
"""Added or recomputed items named one by one (then a count)."""


def listed(items: list[str], limit: int = LISTED) -> list[str]:
    return [f"    {item}" for item in items[:limit]] + ([f"    ... and {len(items) - limit} more"]
                                                         if len(items) > limit else [])


def preview_lines(study: LoadedStudy, layout: StudyLayout) -> list[str]:
    """The lines `sweeper plan --storage` prints: add, keep, recompute, refuse."""
    spec, plan = study.spec, study.plan
    table = read_table(layout, TRIALS)
    recorded = set(table.column("trial_key").to_pylist()) if table.num_rows else set()
    changes = find_changes(spec, plan, layout)
    changed_cells = {cell for cell, _ in changes.trials}
    changed_runs = {name for name, _, _ in changes.runs}
    try:
        refuse_unwritten_checkpoints(spec, plan, layout, study.file)
        refused = []
    except SpecError as error:
        refused = [str(error)]
    added, kept = [], 0
    for trial in plan.trials:
        if trial.trial_key in recorded:
            kept += 1
            continue
        cell = cell_text(trial_cell(trial.checkpoint.checkpoint_id, trial.task, trial.learning_rate,
                                    params_text(trial.params), trial.seed, trial.sample))
        if cell not in changed_cells:
            added.append(cell)
    runs_kept = [r.name for r in plan.runs if r.name not in changed_runs and layout.run(r.name).is_done(r.run_key)]
    runs_added = [r.name for r in plan.runs if r.name not in changed_runs and r.name not in runs_kept]
    dropped = len(recorded - {t.trial_key for t in plan.trials}) - len(changes.trials)
    lines = [f"against the study at {storage.display(layout.root)} ({len(recorded)} recorded trials):",
             f"  add:       {len(added)} trials, {len(runs_added)} pretraining runs", *listed(runs_added + added),
             f"  keep:      {kept} trials, {len(runs_kept)} pretraining runs",
             f"  recompute: {len(changes.trials)} trials, {len(changes.runs)} pretraining runs"
             + (" (`sweeper run` refuses these without --recompute-changed)" if changes else "")]
    lines += [f"    {line.strip()}" for line in changes.describe(limit=LISTED).splitlines()] if changes else []
    lines.append(f"  refuse:    {len(refused)}")
    lines += listed(refused)
    if dropped > 0:
        lines.append(f"  ({dropped} recorded trials are not in this plan; they stay on disk)")
    return lines
