"""What an edited spec changes in a study that already holds results.

Adding cells (seeds, tasks, learning rates, grid values, samples, checkpoint steps) only adds
keys, so a rerun runs just those; but seeds added to an Optuna study change the search every
cell ran, and recompute them all (`OPTUNA_SEEDS` says why, once). Changing a setting that existing cells depend on gives
those cells new keys while their old results stay on disk; this module finds them, says why, and
`sweeper run` refuses to go on without `--recompute-changed` (it never silently mixes two
versions of a cell).

A cell is a trial's place in the study whatever its settings (`trial_cell`): checkpoint, task,
point and seed, where the point is the learning rate and swept values in grid mode and the
sample number in optuna and random modes (an Optuna plan has no values yet; a random sample's
values follow the search settings, which are themselves compared, under `search`).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field

from sweeper.plan.study_plan import StudyPlan, finetune_protocol, task_overrides
from sweeper.spec import space
from sweeper.contract.registry import get_task
from sweeper.contract.configs import params_text
from sweeper.spec.reading import SpecError
from sweeper.spec.study import StudySpec
from sweeper.store import folders, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table


@dataclass
class Changes:
    runs: list[tuple[str, str, list[str]]] = field(default_factory=list)
    """(run name, recorded run_key, what differs) for runs whose configuration changed."""
    trials: list[tuple[str, list[str]]] = field(default_factory=list)
    """(cell, what differs) for recorded trials the new plan would compute differently."""
    notes: list[str] = field(default_factory=list)
    """Why a kind of change recomputes rather than extends, said once (`OPTUNA_SEEDS`)."""

    def __bool__(self) -> bool:
        return bool(self.runs or self.trials)

    def describe(self, limit: int = 15) -> str:
        lines = []
        if self.runs:
            lines.append(f"{len(self.runs)} pretraining run(s) changed:")
            lines += [f"  {name}: {'; '.join(why)}" for name, _, why in self.runs[:limit]]
        if self.trials:
            lines.append(f"{len(self.trials)} recorded fine-tuning cell(s) would be recomputed:")
            lines += [f"  {cell}: {'; '.join(why)}" for cell, why in self.trials[:limit]]
            if len(self.trials) > limit:
                lines.append(f"  ... and {len(self.trials) - limit} more")
        lines += [f"why: {note}" for note in self.notes]
        return "\n".join(lines)


OPTUNA_SEEDS = ("an Optuna search is told each sample's score averaged over the seeds, and TPE proposes every "
                "sample after its start-up ones from those averages: with other seeds the search tries other "
                "points, so its recorded samples are not this search's and every cell is recomputed (its trial "
                "keys hold the seed list). Seeds added to `search: random` or `grid` only add trials (their "
                "points do not depend on the scores).")
"""Why adding seeds to an Optuna study recomputes its cells instead of running the new seeds at
their points (issue #54)."""


def flatten(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def differences(old: dict, new: dict) -> list[str]:
    old_flat, new_flat = flatten(old), flatten(new)
    return [f"{key}: {old_flat.get(key)!r} -> {new_flat.get(key)!r}"
            for key in sorted(set(old_flat) | set(new_flat)) if old_flat.get(key) != new_flat.get(key)]


def search_settings(spec: StudySpec) -> dict:
    """What a sampling search's cells depend on (nothing in grid mode, whose points are cells):
    its mode, settings but the sample count, the space of its distributions, and (optuna, where
    the search averages them) the seeds."""
    ft = spec.finetuning
    if ft.search == "grid":
        return {}
    section = ft.optuna if ft.search == "optuna" else ft.random
    settings = {key: value for key, value in asdict(section).items()
                if key not in ("samples", "learning_rates_per_cell")}
    return {"mode": ft.search, ft.search: settings, "space": space.identity(ft.searched()),
            **({"seeds": ft.seeds} if ft.search == "optuna" else {})}


def resolved_settings(spec: StudySpec, plan: StudyPlan) -> dict:
    """What trial keys depend on besides the run: the protocol, each task's definition and
    (optuna, random) the search. Swept and searched fields are left out of the protocol: their
    values are part of each cell (its params), or of the search's space."""
    tasks, varied = spec.finetuning.tasks, {**spec.finetuning.swept(), **spec.finetuning.searched()}

    def fixed(fields: dict) -> dict:
        return {key: value for key, value in fields.items() if key not in varied}

    settings = {"protocol": fixed(finetune_protocol(spec).key_fields()),
                "tasks": {t: get_task(t).identity() for t in tasks},
                "task_protocol": {t: fixed(task_overrides(spec, t)) for t in tasks}}
    if search := search_settings(spec):
        settings["search"] = search
    externals = {c.external.name: {"source": c.external.source, **c.external.identity}
                 for c in plan.checkpoints if c.external is not None}
    if externals:
        settings["checkpoints"] = externals
    return json.loads(json.dumps(settings, default=str))  # as it reads back from disk (tuples -> lists)


def trial_cell(
    checkpoint_id: str, task: str, learning_rate, params: str, seed: int, sample: int | None = None
) -> tuple:
    """A trial's place in the study, whatever its settings: checkpoint, task, point and seed; the
    point is the learning rate and the swept values (`params` JSON, '{}' for none) in grid mode,
    the sample number in optuna and random modes."""
    if sample is not None:
        return checkpoint_id, task, ("sample", int(sample)), seed
    return checkpoint_id, task, (learning_rate, params), seed


def cell_id(cell: tuple) -> str:
    """A short stable name of a `trial_cell` (plan.json lists the planned trials' so a report can
    tell a superseded row, whose cell the current spec plans under other settings, from a kept one)."""
    checkpoint, task, point, seed = cell
    point = ["sample", int(point[1])] if point[0] == "sample" else [float(point[0]), point[1]]
    return hashlib.sha256(json.dumps([checkpoint, task, point, int(seed)]).encode()).hexdigest()[:16]


def cell_text(cell: tuple) -> str:
    checkpoint, task, point, seed = cell
    if point[0] == "sample":
        return f"{checkpoint} / {task} / sample {point[1]} / seed {seed}"
    lr, params = point
    swept = "".join(f" / {key} {value}" for key, value in json.loads(params).items())
    return f"{checkpoint} / {task} / lr {lr:g}{swept} / seed {seed}"


def find_changes(spec: StudySpec, plan: StudyPlan, layout: StudyLayout) -> Changes:
    changes = Changes()
    changed_runs = set()
    for run in plan.runs:
        old = storage.read_json(layout.run(run.name).started, kind=dict)
        if old is None or not isinstance(old.get("run_key"), str):  # damaged: named on stderr, read as absent
            continue
        if old["run_key"] != run.run_key:
            changed_runs.add(run.name)
            identity = old.get("identity") if isinstance(old.get("identity"), dict) else {}
            changes.runs.append((run.name, old["run_key"], differences(identity, run.identity)
                                 or ["configuration changed"]))
    table = read_table(layout, TRIALS)
    if table.num_rows == 0:
        return changes
    planned = {t.trial_key for t in plan.trials}
    recorded_cells = {}
    for row in table.select(["trial_key", "checkpoint_id", "task", "learning_rate", "params", "seed",
                             "sample"]).to_pylist():
        if row["trial_key"] not in planned:  # a row written before the params column: none swept
            cell = trial_cell(row["checkpoint_id"], row["task"], row["learning_rate"], row["params"] or "{}",
                              row["seed"], row["sample"])
            recorded_cells[cell] = row
    if not recorded_cells:
        return changes
    old_settings = storage.read_json(layout.resolved, default={}, kind=dict)
    setting_diff = differences(old_settings, resolved_settings(spec, plan)) if old_settings else []
    for trial in plan.trials:
        cell = trial_cell(trial.checkpoint.checkpoint_id, trial.task, trial.learning_rate, params_text(trial.params),
                          trial.seed, trial.sample)
        if cell in recorded_cells:
            external = trial.checkpoint.external
            why = (["its pretraining run changed"] if trial.checkpoint.run and trial.checkpoint.run.name in changed_runs
                   else [d for d in setting_diff if d.startswith(f"checkpoints.{external.name}.")]
                   if external and any(d.startswith(f"checkpoints.{external.name}.") for d in setting_diff)
                   else [d for d in setting_diff if d.startswith(("protocol.", f"tasks.{trial.task}.",
                                                                  f"task_protocol.{trial.task}.", "search."))]
                   or ["trial configuration changed"])
            changes.trials.append((cell_text(cell), why))
            if any(reason.startswith("search.seeds") for reason in why) and OPTUNA_SEEDS not in changes.notes:
                changes.notes.append(OPTUNA_SEEDS)
    return changes


def apply_recompute(changes: Changes, layout: StudyLayout) -> None:
    """Move changed runs aside (kept, never deleted) so they retrain from scratch."""
    for name, old_key, _ in changes.runs:
        folders.move_tree(layout.run(name).root, layout.superseded_run(name, old_key, int(time.time())))


def refuse_unwritten_checkpoints(spec: StudySpec, plan: StudyPlan, layout: StudyLayout, spec_file: str) -> None:
    """A checkpoint step added to a run that already finished was never saved, and a finished
    run cannot go back to write it (the states before its end are gone or stripped of their
    optimizer state: checkpoint retention). Refuse with the run and the step (SpecError: exit 2)
    before anything starts, instead of failing every trial of that checkpoint later."""
    for run in plan.runs:
        if not run.checkpoint_steps or not layout.run(run.name).is_done(run.run_key):
            continue
        saved = layout.run(run.name).saved_checkpoints()
        missing = [step for step in run.checkpoint_steps if step not in saved]
        if not missing:
            continue
        entry = next((i for i, grid in enumerate(spec.pretraining.runs) if missing[0] in grid.checkpoint_steps), None)
        key = "pretraining.runs" + (f"[{entry}]" if entry is not None else "") + ".checkpoint_steps"
        raise SpecError(spec_file, key, (
            f"run {run.name} has already finished without a checkpoint at step {missing[0]}"
            + (f" (nor at {', '.join(map(str, missing[1:]))})" if missing[1:] else "")
            + f"; it saved steps {', '.join(map(str, sorted(saved))) or 'none'}. A finished run cannot be taken "
            "back to an earlier step: remove the step, or pretrain a new run (for instance another seed or budget) "
            "that lists it. Nothing was started."))


def record_settings(spec: StudySpec, plan: StudyPlan, layout: StudyLayout) -> None:
    storage.write_json(layout.resolved, resolved_settings(spec, plan))
