"""One way into a study: `load_study` reads a spec file, applies command-line overrides, checks
every value, plans the study and estimates its memory, each once. `sweeper plan`, `run`,
`status` and `report` all go through it (tests/unit/plan/test_load.py checks that they do); the
steps below are its own, private.

Every independent mistake is reported at once, as one SpecError (`SpecErrors` for several, in
line order, each `file:line: key.path: reason`). The rule for what is independent: the file
must read as YAML (else that one error); each override must be well formed (all malformed ones
together); then every key is read and checked as sweeper.spec.parsing says (a mistake skips
the checks of the sections that enclose it). The checks that need the planned runs (they are
the plan's, hence here) run only on a spec with no mistake: continued-pretraining sources must
be runs of the study, no two run entries may plan different runs under one name (one run
folder), and the checkpoints from elsewhere must be readable; they are resolved here, once, and
the plan uses what was resolved.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from sweeper.contract import registry
from sweeper.plan.checkpoint_sources import ExternalCheckpoint, SourceProblem, resolve_all
from sweeper.plan.hf_init import HfSourceProblem, resolve_hf_init
from sweeper.plan.input_paths import input_path_problems
from sweeper.plan.machine_fit import local_fit_problems
from sweeper.plan.memory import RunMemory, TrialMemory, check_runs, check_trials, refusal, trial_refusal
from sweeper.plan.runs import PretrainingRun, RunNameProblem, expand_base_runs, expand_runs
from sweeper.plan.study_plan import StudyPlan, plan_study
from sweeper.spec.overrides import apply_overrides, effective_text
from sweeper.spec.parsing import build_dataclass
from sweeper.spec.reading import Context, load_yaml, raise_all, shown, suggestion
from sweeper.spec.study import StudySpec


@dataclass(frozen=True, slots=True)
class LoadedStudy:
    """A spec read, checked and planned: what every command works from."""

    spec: StudySpec
    plan: StudyPlan
    file: str
    """Where the spec was read (a path, or the URI of a study's copy)."""
    text: str
    """The effective spec: the file's text, or with overrides the YAML they made (sweeper.spec.overrides)."""
    overrides: tuple[str, ...]
    """The command-line overrides applied, as given."""
    run_memory: list[RunMemory]
    """Each pretraining run's memory estimate (sweeper.plan.memory), in plan order."""
    trial_memory: list[TrialMemory]
    """The fine-tuning trials' memory estimates."""
    refusal: str | None
    """Why the study cannot run on its resources (a run or trial that cannot fit), else None:
    `plan` prints it, `run` refuses with it, before anything starts."""

    def with_replicates(self, counts: Mapping[str, int]) -> LoadedStudy:
        """The same study with a sequential plan's replicate counts (by run name), the checkpoints
        from elsewhere as resolved: the runs and trials of that look (sweeper.report.sequential)."""
        externals = [c.external for c in self.plan.checkpoints if c.external is not None]
        return replace(self, plan=plan_study(self.spec, counts, externals=externals))


def load_study(path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, machine: bool = False) -> LoadedStudy:
    """Read, check and plan the spec at `path` with `overrides` (`key.path=value`); raises a
    SpecError naming every independent mistake (module docstring). Plugin modules named in
    SWEEPER_PLUGINS are imported first (their families and objectives become valid names).
    `machine` (`plan`, `run`): a trial or worker asking more than this machine offers, for a
    study that would run here, is a mistake too (sweeper.plan.machine_fit), and so is an input
    path (the corpus, a tokenizer folder, a task's rows) absent here (sweeper.plan.input_paths)."""
    registry.load_plugins()
    data, context = load_yaml(path)
    data, context.overrides = apply_overrides(data, overrides)
    spec = build_dataclass(StudySpec, data, "", context)  # every mistake in it raised
    if machine:
        for key, reason in local_fit_problems(spec, pretrains=bool(spec.pretraining.runs)):
            context.note(f"resources.{key}", reason)
        for key, reason in input_path_problems(spec):
            context.note(key, reason)
    runs = _checked_runs(spec, context)
    externals = _resolved_externals(spec, runs, context)
    raise_all(context.errors)
    plan = plan_study(spec, runs=runs, externals=externals)
    run_memory, trial_memory = check_runs(spec, plan.runs), check_trials(spec, plan.checkpoints)
    return LoadedStudy(spec=spec, plan=plan, file=str(path), text=effective_text(context.text, data, tuple(overrides)),
                       overrides=tuple(overrides), run_memory=run_memory, trial_memory=trial_memory,
                       refusal=refusal(spec, run_memory, plan.runs) or trial_refusal(spec, trial_memory))


def _checked_runs(spec: StudySpec, context: Context) -> list[PretrainingRun] | None:
    """The planned runs, or None with the problems noted: CPT sources must be runs of this study
    (non-CPT ones, so the order is well defined), every run's name as planned must be a folder name
    (sweeper.spec.names), and no two entries may plan different runs under one name."""
    try:
        base_names = {run.name for run in expand_base_runs(spec)}
    except RunNameProblem as clash:
        context.note(clash.key, clash.reason)
        return None
    unknown = False
    for i, grid in enumerate(spec.pretraining.runs):
        for j, source in enumerate(grid.init_from or []):
            if not source.startswith("hf:") and source not in base_names:
                unknown = True
                context.note(f"pretraining.runs[{i}].init_from[{j}]",
                             f"no run named {shown(source)} in this study{suggestion(source, sorted(base_names))}"
                             " (a study run name, or hf:<path> for a Hugging Face causal LM)")
    if unknown:
        return None
    try:
        runs = expand_runs(spec)
    except RunNameProblem as clash:
        context.note(clash.key, clash.reason)
        return None
    hf_problems = [problem for i, grid in enumerate(spec.pretraining.runs)
                   for j, source in enumerate(grid.init_from or []) if source.startswith("hf:")
                   for problem in [_hf_problem(spec, grid, source, f"pretraining.runs[{i}]", j)] if problem]
    for key, reason in hf_problems:
        context.note(key, reason)
    return None if hf_problems else runs


def _hf_problem(spec: StudySpec, grid, source: str, entry: str, j: int) -> tuple[str, str] | None:
    """(key, reason) when the Hugging Face source `init_from[j]` of `entry` cannot be continued as
    the entry asks (sweeper.plan.hf_init), or None."""
    try:
        init = resolve_hf_init(source[3:], grid.hf_init)
    except HfSourceProblem as problem:
        at_fault = "hf_init" if grid.hf_init == "convert" and "converted" in str(problem) else f"init_from[{j}]"
        return f"{entry}.{at_fault}", str(problem)
    resources = spec.resources
    if init.mode == "native" and resources.sharding == "fsdp" and resources.pretraining_workers >= 2:
        return "resources.sharding", (f"{source} is continued as its own model (hf_init: native), which "
                                      "trains with DDP, not FSDP2: set sharding: ddp")
    return None


def _resolved_externals(spec: StudySpec, runs: list[PretrainingRun] | None,
                        context: Context) -> list[ExternalCheckpoint] | None:
    """The checkpoints from elsewhere, resolved once (sweeper.plan.checkpoint_sources), or None
    with the problem noted: one named like a checkpoint the study trains (checked when the runs
    planned), or a source that cannot be read."""
    own = {run.name for run in runs or []} | {
        f"{run.name}-{step}" for run in runs or [] for step in run.checkpoint_steps
    }
    for i, entry in enumerate(spec.finetuning.checkpoints):
        if entry.name in own:
            context.note(
                f"finetuning.checkpoints[{i}].name",
                f"{shown(entry.name)} names a checkpoint this study trains: give the external one another name",
            )
            return None
    try:
        return resolve_all(spec.finetuning.checkpoints)
    except SourceProblem as problem:
        context.note(problem.key, problem.reason)
        return None
