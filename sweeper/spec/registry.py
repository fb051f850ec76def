"""The extension points: task families and pretraining objectives, declared by name (torch-free).

A declaration says what the driver needs to plan, validate, key and report (names, report
category, which settings a family reads, how an objective tags a run name) and where the worker
finds the code (`module:attribute`, imported only on the worker). Adding one is a new module
with the implementation plus one registration line:

    register_family(FamilyInfo(name="regression", category="REG",
                               implementation="my_lab.regression:Regression"))
    register_objective(ObjectiveInfo(name="span-mlm", loss="my_lab.spans:span_mlm_loss",
                                     settings={"mask_ratio": 0.3, "mean_span": 3.0}, tag="span{mask_ratio:.0%}"))

The shipped ones are registered at the bottom of this file. Modules outside the package register
theirs when named in the `SWEEPER_PLUGINS` environment variable (comma-separated module names,
imported by the driver before a spec is read); the worker imports `implementation` / `loss`
itself, so the module must be importable there too (PYTHONPATH, or Ray's runtime_env).

Contracts: a family implements `trainables.tasks.family.TaskFamily`; a loss has the signature of
`trainables.objectives.ObjectiveLoss`.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Callable, Iterator

from sweeper.spec.configs import positive

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


FAMILIES: dict[str, FamilyInfo] = {}
OBJECTIVES: dict[str, ObjectiveInfo] = {}


def register_family(info: FamilyInfo) -> FamilyInfo:
    FAMILIES[info.name] = info
    return info


def register_objective(info: ObjectiveInfo) -> ObjectiveInfo:
    OBJECTIVES[info.name] = info
    return info


def load_plugins() -> list[str]:
    """Import the modules named in SWEEPER_PLUGINS (they register families and objectives)."""
    names = [name.strip() for name in os.environ.get(PLUGINS_VARIABLE, "").split(",") if name.strip()]
    for name in names:
        importlib.import_module(name)
    return names


def resolve(implementation: str):
    """The object `module:attribute` names (on the worker: a family class, a loss function)."""
    module, _, attribute = implementation.partition(":")
    return getattr(importlib.import_module(module), attribute)


def categories() -> tuple[str, ...]:
    """Report categories in registration order (SC, TC, QA, IR, then plugins')."""
    return tuple(dict.fromkeys(info.category for info in FAMILIES.values()))


def family_of(task_family: str) -> FamilyInfo:
    return FAMILIES[task_family]


def objective_settings(objective: str, given: dict) -> dict:
    """The objective's settings with its defaults filled in."""
    return {**OBJECTIVES[objective].settings, **given}


def mlm_tag(settings: dict) -> str:
    return f"mlm{round(settings['mask_ratio'] * 100)}"


def check_doc_stride(finetuning) -> Iterator[tuple[str, str]]:
    if not 0 <= finetuning.doc_stride < finetuning.max_length // 2:
        yield "doc_stride", (f"must be in [0, max_length / 2) so a window advances over a long context, "
                             f"got {finetuning.doc_stride} with max_length {finetuning.max_length}")


def check_temperature(finetuning) -> Iterator[tuple[str, str]]:
    yield from positive(finetuning, "retrieval_temperature")


# --- what ships -----------------------------------------------------------------------------

register_family(FamilyInfo(name="sequence_classification", category="SC",
                           implementation="trainables.tasks.classification:SequenceClassification"))
register_family(FamilyInfo(name="token_classification", category="TC",
                           implementation="trainables.tasks.classification:TokenClassification"))
register_family(FamilyInfo(name="extractive_qa", category="QA", implementation="trainables.tasks.qa:ExtractiveQA",
                           settings=("doc_stride",), encoding_settings=("doc_stride",), check=check_doc_stride))
register_family(FamilyInfo(name="retrieval", category="IR", implementation="trainables.tasks.retrieval:Retrieval",
                           settings=("retrieval_temperature",), check=check_temperature))

register_objective(ObjectiveInfo(name="mlm", loss="trainables.objectives:mlm_loss", tag=mlm_tag,
                                 settings={"mask_ratio": 0.4, "random_replace": 0.0, "keep_original": 0.0}))
register_objective(ObjectiveInfo(name="clm", loss="trainables.objectives:clm_loss", tag="clm", causal=True))
