"""The extension points: task families and pretraining objectives, declared by name (torch-free).

A declaration says what the driver needs to plan, validate, key and report (names, report
category, which settings a family reads and how its trials spend tokens and memory, how an
objective tags a run name) and where the worker finds the code (`module:attribute`, imported only
on the worker). Adding one is a new module with the implementation plus one registration call:

    register_family(FamilyInfo(name="regression", category="REG",
                               implementation="my_lab.regression:Regression"),
                    tasks=[TaskInfo(name="sts-b", family="regression", ...)])
    register_objective(ObjectiveInfo(name="span-mlm", loss="my_lab.spans:span_mlm_loss",
                                     settings={"mask_ratio": 0.3, "mean_span": 3.0}, tag="span{mask_ratio:.0%}"))

Registrations go to the registry in use (`current()`, a `Registry`); the shipped entries are
declared at the bottom of this file (the tasks in sweeper.contract.catalog). Modules outside the package register
theirs when named in the `SWEEPER_PLUGINS` environment variable (comma-separated module names,
imported by the driver before a spec is read); the worker imports `implementation` / `loss`
itself, so the module must be importable there too (PYTHONPATH, or Ray's runtime_env).

Contracts: a family implements `trainables.tasks.family.TaskFamily`; a loss has the signature of
`trainables.objectives.ObjectiveLoss`.
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Iterator

from sweeper.contract.catalog import SHIPPED_TASKS, TaskStatistics, shipped_task_statistics
from sweeper.contract.configs import TaskInfo, positive
from sweeper.contract.estimates import EXTRACTIVE_QA, GENERIC, RETRIEVAL, FamilyEstimate
from sweeper.contract.heavy_imports import imports_frozen

PLUGINS_VARIABLE = "SWEEPER_PLUGINS"


@dataclass(frozen=True, kw_only=True, slots=True)
class FamilyInfo:
    """A task family: how a task is encoded, which head it trains and how it is scored."""

    name: str
    """What `TaskInfo.family` names (sequence_classification, ...)."""
    category: str
    """Report category of its tasks (SC, TC, QA, IR); report columns follow registration order."""
    implementation: str
    """`module:Class` implementing trainables.tasks.family.TaskFamily."""
    settings: tuple[str, ...] = ()
    """`finetuning` fields this family reads: part of its tasks' trial keys, of no other's."""
    encoding_settings: tuple[str, ...] = ()
    """Of `settings`, those that change the tokenised data (they name its cache folder)."""
    check: Callable | None = None
    """Extra spec check `(finetuning spec) -> iterator of (key, reason)`, run when a task of
    this family is in the study."""
    score_range: tuple[float, float] = (0.0, 100.0)
    """(lowest, highest) score its metric can give; the report's figures clip intervals to it
    (accuracy, F1, NDCG x 100 lie in 0-100; a correlation x 100 in -100..100)."""
    estimate: FamilyEstimate = GENERIC
    """How its trials spend tokens and memory, for `sweeper plan` (sweeper.contract.estimates)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ObjectiveInfo:
    """A pretraining objective: a loss on packed token batches."""

    name: str
    """What a run's `objective` or a phase's `objective` names (mlm, clm, ...)."""
    loss: str
    """`module:function` with the signature of trainables.objectives.ObjectiveLoss."""
    tag: str
    """Run-name tag, formatted with the settings (`mlm{mask_ratio:.0%}` would give mlm40%);
    a callable `settings -> str` where a format string cannot say it."""
    settings: dict = field(default_factory=dict)
    """Settings the loss reads, with their defaults (a phase may set each)."""
    causal: bool = False
    """Whether attention is causal (shown in `sweeper plan`)."""

    def run_tag(self, settings: dict) -> str:
        values = {**self.settings, **settings}
        return self.tag(values) if callable(self.tag) else self.tag.format(**values)


@dataclass(slots=True)
class Registry:
    """What a spec can name: task families with their tasks, and pretraining objectives.

    The process has one in use (`current()`): the shipped entries plus the plugins' (SWEEPER_PLUGINS).
    A test that registers its own works on a fresh one (`with using(shipped()):`), so nothing it
    adds outlives it."""

    families: dict[str, FamilyInfo] = field(default_factory=dict)
    """Task families by name, in registration order (report categories follow it)."""
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    """Fine-tuning tasks by name: what `finetuning.tasks` may list."""
    objectives: dict[str, ObjectiveInfo] = field(default_factory=dict)
    """Pretraining objectives by name: what a run or a phase may name."""
    plugins: set[str] = field(default_factory=set)
    """Plugin modules (SWEEPER_PLUGINS) whose registrations it holds."""

    def register_family(self, info: FamilyInfo, tasks: Iterable[TaskInfo] = ()) -> FamilyInfo:
        """A family and its tasks, in one call."""
        self.families[info.name] = info
        for task in tasks:
            self.register_task(task)
        return info

    def register_task(self, info: TaskInfo) -> TaskInfo:
        """A task of a registered family (the family first: its tasks name it)."""
        if info.family not in self.families:
            raise ValueError(f"task {info.name!r} names family {info.family!r}, which is not registered "
                             f"(register_family(FamilyInfo(...), tasks=[...]) registers both)")
        self.tasks[info.name] = info
        return info

    def register_objective(self, info: ObjectiveInfo) -> ObjectiveInfo:
        self.objectives[info.name] = info
        return info


def shipped() -> Registry:
    """A new registry holding what ships: the four families with their tasks (sweeper.contract.catalog),
    MLM and CLM."""
    shipped_registry = Registry()
    tasks_of = {
        family: [task for task in SHIPPED_TASKS.values() if task.family == family] for family in SHIPPED_FAMILIES
    }
    for name, info in SHIPPED_FAMILIES.items():
        shipped_registry.register_family(info, tasks=tasks_of[name])
    for info in SHIPPED_OBJECTIVES:
        shipped_registry.register_objective(info)
    return shipped_registry


def current() -> Registry:
    """The registry in use: what specs are checked against and the plan looks up."""
    return _current


@contextmanager
def using(registry: Registry) -> Iterator[Registry]:
    """Within the block, `registry` is the one in use (lookups, registrations, plugins loaded);
    the one before is back afterwards. Tests: `with using(shipped()): ...`."""
    global _current
    before, _current = _current, registry
    try:
        yield registry
    finally:
        _current = before


def register_family(info: FamilyInfo, tasks: Iterable[TaskInfo] = ()) -> FamilyInfo:
    """Register a family and its tasks in the registry in use (a plugin's one call)."""
    return _current.register_family(info, tasks)


def register_task(info: TaskInfo) -> TaskInfo:
    """Register one more task of an already registered family."""
    return _current.register_task(info)


def register_objective(info: ObjectiveInfo) -> ObjectiveInfo:
    return _current.register_objective(info)


class PluginError(Exception):
    """A module named in SWEEPER_PLUGINS could not be imported: the message names the module and
    why (the CLI prints it and exits 2, before anything starts)."""


def load_plugins() -> list[str]:
    """Import the modules named in SWEEPER_PLUGINS (they register families and objectives) into the
    registry in use. A module imported before, into another registry, runs again for this one.
    Raises PluginError for a module that is not found or fails while it is imported."""
    names = [name.strip() for name in os.environ.get(PLUGINS_VARIABLE, "").split(",") if name.strip()]
    for name in names:
        if name in _current.plugins:
            continue
        _current.plugins.add(name)
        try:
            with imports_frozen():  # a plugin may import torch, as the worker side does
                if name in sys.modules:
                    importlib.reload(sys.modules[name])
                else:
                    importlib.import_module(name)
        except Exception as error:
            _current.plugins.discard(name)
            raise PluginError(plugin_failure(name, error)) from error
    return names


def plugin_failure(name: str, error: Exception) -> str:
    """Why the plugin module `name` did not import, in one line: not found on the path, or the
    exception it raised and the line of the plugin's own code (or the deepest line) it came from."""
    if isinstance(error, ModuleNotFoundError) and error.name == name.split(".")[0]:
        return (f"{PLUGINS_VARIABLE} names module '{name}', which is not importable here: no '{error.name}' "
                f"on the module path (put the folder that holds it on PYTHONPATH)")
    frames = traceback.extract_tb(error.__traceback__)
    own = [frame for frame in frames if "importlib" not in frame.filename and "<frozen" not in frame.filename]
    last = (own or frames or [None])[-1]
    where = f" at {last.filename}:{last.lineno}" if last else ""
    return f"{PLUGINS_VARIABLE}: importing module '{name}' failed{where}: {type(error).__name__}: {error}"


def resolve(implementation: str):
    """The object `module:attribute` names (on the worker: a family class, a loss function)."""
    module, _, attribute = implementation.partition(":")
    return getattr(importlib.import_module(module), attribute)


def categories() -> tuple[str, ...]:
    """Report categories in registration order (SC, TC, QA, IR, then plugins')."""
    return tuple(dict.fromkeys(info.category for info in _current.families.values()))


def family_of(task_family: str) -> FamilyInfo:
    return _current.families[task_family]


def objective_of(objective: str) -> ObjectiveInfo:
    return _current.objectives[objective]


def get_task(name: str) -> TaskInfo:
    try:
        return _current.tasks[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(sorted(_current.tasks))}") from None


def task_statistics(task: str) -> TaskStatistics | None:
    """Sizes and lengths of `task` for the plan's estimates: the catalog's for a shipped task, else
    what its family's estimate counts (None: unknown, costed as padded rows)."""
    if (stats := shipped_task_statistics(task)) is not None:
        return stats
    info = get_task(task)
    count = family_of(info.family).estimate.statistics
    return count(info) if count else None


def objective_settings(objective: str, given: dict) -> dict:
    """The objective's settings with its defaults filled in."""
    return {**objective_of(objective).settings, **given}


def mlm_tag(settings: dict) -> str:
    return f"mlm{round(settings['mask_ratio'] * 100)}"


def check_doc_stride(finetuning) -> Iterator[tuple[str, str]]:
    if not 0 <= finetuning.doc_stride < finetuning.max_length // 2:
        yield "doc_stride", (f"must be in [0, max_length / 2) so a window advances over a long context, "
                             f"got {finetuning.doc_stride} with max_length {finetuning.max_length}")


def check_temperature(finetuning) -> Iterator[tuple[str, str]]:
    yield from positive(finetuning, "retrieval_temperature")


# --- what ships -----------------------------------------------------------------------------

SHIPPED_FAMILIES: dict[str, FamilyInfo] = {info.name: info for info in (
    FamilyInfo(name="sequence_classification", category="SC",
               implementation="trainables.tasks.classification:SequenceClassification"),
    FamilyInfo(name="token_classification", category="TC",
               implementation="trainables.tasks.classification:TokenClassification"),
    FamilyInfo(name="extractive_qa", category="QA", implementation="trainables.tasks.qa:ExtractiveQA",
               settings=("doc_stride",), encoding_settings=("doc_stride",), check=check_doc_stride,
               estimate=EXTRACTIVE_QA),
    FamilyInfo(name="retrieval", category="IR", implementation="trainables.tasks.retrieval:Retrieval",
               settings=("retrieval_temperature",), check=check_temperature, estimate=RETRIEVAL),
)}
SHIPPED_OBJECTIVES = (
    ObjectiveInfo(name="mlm", loss="trainables.objectives:mlm_loss", tag=mlm_tag,
                  settings={"mask_ratio": 0.4, "random_replace": 0.0, "keep_original": 0.0}),
    ObjectiveInfo(name="clm", loss="trainables.objectives:clm_loss", tag="clm", causal=True),
)

_current = shipped()
