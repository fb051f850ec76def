"""Loading a spec: the file -> a StudySpec that can be planned, or a SpecError naming file,
line, key and reason.

The spec stage checks every value (sweeper.spec); the checks here need the planned runs, so
they are the plan's: continued-pretraining sources must be runs of the study, and no two run
entries may plan different runs under one name (one run folder). They run last, as when they
were `StudySpec.check`'s last part: the first problem of a spec is reported, the same one.
"""
from __future__ import annotations

from pathlib import Path

from sweeper.plan.checkpoint_sources import SourceProblem, resolve_all
from sweeper.plan.hf_init import HfSourceProblem, resolve_hf_init
from sweeper.plan.runs import RunNameProblem, expand_base_runs, expand_runs
from sweeper.contract import registry
from sweeper.spec.parsing import build_dataclass
from sweeper.spec.reading import load_yaml, shown, suggestion
from sweeper.spec.study import StudySpec


def load_spec(path: str | Path) -> StudySpec:
    """Parse and validate a spec file; raises SpecError on any mistake. Plugin modules named in
    SWEEPER_PLUGINS are imported first (their families and objectives become valid names)."""
    registry.load_plugins()
    data, context = load_yaml(path)
    spec = build_dataclass(StudySpec, data, "", context)
    for key, reason in run_problems(spec):
        context.fail(key, reason)
    return spec


def run_problems(spec: StudySpec):
    """(key, reason) pairs: CPT sources must be runs of this study (non-CPT ones, so the order
    is well defined), every run's name as planned must be a folder name (sweeper.spec.names), and
    no two entries may plan different runs under one name."""
    try:
        base_names = {run.name for run in expand_base_runs(spec)}
    except RunNameProblem as clash:
        yield clash.key, clash.reason
        return
    unknown = False
    for i, grid in enumerate(spec.pretraining.runs):
        for j, source in enumerate(grid.init_from or []):
            if not source.startswith("hf:") and source not in base_names:
                unknown = True
                yield (f"pretraining.runs[{i}].init_from[{j}]",
                       f"no run named {shown(source)} in this study{suggestion(source, sorted(base_names))}"
                       " (a study run name, or hf:<path> for a Hugging Face causal LM)")
    if unknown:
        return
    try:
        runs = expand_runs(spec)
    except RunNameProblem as clash:
        yield clash.key, clash.reason
        return
    hf_problems = [problem for i, grid in enumerate(spec.pretraining.runs)
                   for j, source in enumerate(grid.init_from or []) if source.startswith("hf:")
                   for problem in [hf_problem(spec, grid, source, f"pretraining.runs[{i}]", j)] if problem]
    if hf_problems:
        yield from hf_problems
        return
    yield from external_problems(spec, runs)


def hf_problem(spec: StudySpec, grid, source: str, entry: str, j: int) -> tuple[str, str] | None:
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


def external_problems(spec: StudySpec, runs):
    """(key, reason): a checkpoint from elsewhere named like one the study trains, or a source
    that cannot be read (sweeper.plan.checkpoint_sources)."""
    own = {run.name for run in runs} | {f"{run.name}-{step}" for run in runs for step in run.checkpoint_steps}
    for i, entry in enumerate(spec.finetuning.checkpoints):
        if entry.name in own:
            yield (f"finetuning.checkpoints[{i}].name",
                   f"{shown(entry.name)} names a checkpoint this study trains: give the external one another name")
            return
    try:
        resolve_all(spec.finetuning.checkpoints)
    except SourceProblem as problem:
        yield problem.key, problem.reason
