"""Settings a spec gives that its mode would not read: each is a spec error naming the key and
the mode (or the task, objective or section) that reads it, so nothing a researcher writes is
ignored in silence.

A setting counts as given when the spec wrote it: a section (`finetuning.optuna`, `random`,
`scheduler`) by identity with its default instance (a section written, even empty, is built
anew), a list by not being its `DefaultList` default, a scalar by differing from its default
(one written at its default changes nothing in any mode). `StudySpec.check` yields these last,
once every section is built and the budget defaults are resolved.

A task family's setting without a task of that family (`doc_stride` with no QA task) is a
warning, and so is sharding without a worker group (`harmless_settings`, printed by `sweeper plan` and
`run`). Left alone on purpose,
as harmless: `limits.*` (caps that need not bind), `cost.*` and `resources.gpu_memory_gb` on a
CPU study (the plan's GPU figures read them), `scheduler.kind: none` written out.
"""
from __future__ import annotations

from dataclasses import fields
from collections.abc import Iterator

from sweeper.contract import registry
from sweeper.contract.configs import TrackingConfig
from sweeper.spec.finetuning import (DEFAULT_OPTUNA, DEFAULT_RANDOM, DEFAULT_SCHEDULER, FinetuningSpec, SchedulerSpec,
                                     derived_doc_stride)
from sweeper.spec.model_data import DataSpec, ModelSpec
from sweeper.spec.pretraining import PretrainingSpec
from sweeper.spec.settings import MASKING_SHARES, given

Problems = Iterator[tuple[str, str]]

SCHEDULER_SETTINGS = {"grace_period": ("asha", "median"), "reduction_factor": ("asha",),
                      "min_samples_required": ("median",)}
"""Each scheduler setting and the scheduler kinds that read it."""


def default_of(cls, name: str):
    """A dataclass field's default value (None for a field without one, or no such field)."""
    return next((f.default for f in fields(cls) if f.name == name), None)


def ignored_settings(spec) -> Problems:
    """(key, reason) for each setting the spec gives that nothing in its mode reads."""
    yield from search_settings(spec.finetuning)
    yield from run_settings(spec.pretraining)
    yield from study_settings(spec)


def search_settings(ft: FinetuningSpec) -> Problems:
    """The search modes' sections and the grid's learning rates, given where the mode reads none."""
    mode = f"search: {ft.search}"
    if ft.optuna is not DEFAULT_OPTUNA and ft.search != "optuna":
        yield "finetuning.optuna", (f"has no effect with {mode}: the optuna section is read with search: optuna "
                                    "(set finetuning.search: optuna, or remove the section)")
    if ft.random is not DEFAULT_RANDOM and ft.search != "random":
        yield "finetuning.random", (f"has no effect with {mode}: the random section is read with search: random "
                                    "(set finetuning.search: random, or remove the section)")
    if given(ft.learning_rates) and ft.search != "grid":
        yield "finetuning.learning_rates", (
            f"has no effect with {mode}, which draws the learning rate from [{ft.search}.lr_min, "
            f"{ft.search}.lr_max]: learning_rates is the grid's (search: grid); remove it, or set that range")
    if ft.scheduler is not DEFAULT_SCHEDULER:
        for name, kinds in SCHEDULER_SETTINGS.items():
            if getattr(ft.scheduler, name) != default_of(SchedulerSpec, name) and ft.scheduler.kind not in kinds:
                readers = " or ".join(kinds)
                yield f"finetuning.scheduler.{name}", (
                    f"has no effect with scheduler.kind: {ft.scheduler.kind}: {name} is read by the {readers} "
                    f"scheduler{'s' if len(kinds) > 1 else ''} (set scheduler.kind: {kinds[0]}, or remove {name})")


def unread_family_settings(ft: FinetuningSpec) -> Problems:
    """(key, note) for a task family's setting (QA's doc_stride, retrieval's temperature) given
    while no task of the study is of that family: a warning, not an error (a stride left in while
    the QA tasks are commented out is expected to be harmless, and it is)."""
    known = registry.current()
    families = {known.tasks[t].family for t in ft.tasks if t in known.tasks}
    for family in known.families.values():
        if family.name in families:
            continue
        for name in family.settings:
            value = getattr(ft, name, None)
            default = derived_doc_stride(ft.max_length) if name == "doc_stride" else default_of(FinetuningSpec, name)
            if value is not None and value != default:
                tasks = sorted(
                    t for t, info in known.tasks.items() if info.family == family.name and not info.train_task
                )
                listed = ", ".join(tasks[:4]) + (", ..." if len(tasks) > 4 else "")
                yield f"finetuning.{name}", (f"has no effect: no task of the study is {family.name} ({listed}), "
                                             f"the only family that reads {name}; remove it, or add such a task")


def masks(objective: str | None) -> bool:
    return objective == "clm-mlm" or (objective in registry.current().objectives
                                      and "mask_ratio" in registry.objective_of(objective).settings)


def run_settings(pre: PretrainingSpec) -> Problems:
    """A run entry's short-form lists its objective does not read; the study's MLM and CLM-share
    settings when no run has an MLM phase or a CLM share."""
    for i, run in enumerate(pre.runs):
        if run.phases is not None:
            for name in ("mask_ratio", "clm_fraction"):
                if given(getattr(run, name)):
                    yield f"pretraining.runs[{i}].{name}", (
                        f"has no effect with phases: each phase gives its own "
                        f"{'mask_ratio' if name == 'mask_ratio' else 'end (until)'}; remove {name}")
            continue
        if given(run.mask_ratio) and not masks(run.objective):
            yield f"pretraining.runs[{i}].mask_ratio", (
                f"has no effect with objective {run.objective}, which masks nothing: mask_ratio is read by "
                "mlm and clm-mlm; remove it")
        if given(run.clm_fraction) and run.objective != "clm-mlm":
            yield f"pretraining.runs[{i}].clm_fraction", (
                f"has no effect with objective {run.objective}: clm_fraction is read by clm-mlm alone; remove it")
    objectives = {phase.objective for run in pre.runs for phase in run.phases or ()}
    objectives |= {run.objective for run in pre.runs if run.objective}
    if "clm-mlm" in objectives:
        objectives |= {"clm", "mlm"}
    if "mlm" not in objectives:
        for name in MASKING_SHARES:
            if getattr(pre, name) != 0.0:
                yield f"pretraining.{name}", (f"has no effect: no run of the study has an MLM phase, and {name} "
                                              "is an MLM setting; remove it, or add an MLM run")
    if pre.save_every == 0 and pre.keep_resume_checkpoints != default_of(PretrainingSpec, "keep_resume_checkpoints"):
        yield "pretraining.keep_resume_checkpoints", ("has no effect with save_every: 0, which saves no resume-only "
                                                      "checkpoint to keep; set save_every, or remove it")
    switching = any(run.objective == "clm-mlm" or len(run.phases or ()) > 1 for run in pre.runs)
    if pre.clm_fraction_of != "total" and not switching:
        yield "pretraining.clm_fraction_of", ("has no effect: no run switches objective (clm-mlm, or several "
                                              "phases), and clm_fraction_of says what a switch's share "
                                              "is of; remove it")


def harmless_settings(spec) -> Problems:
    """(key, note) for settings a user expects to be harmless where they do nothing, printed as
    warnings: a task family's setting with no task of that family (`unread_family_settings`), and
    sharding without a worker group (a cluster spec tried locally with pretraining_workers: 0,
    as the e2e FSDP test does, trains each run unsharded in one process)."""
    yield from unread_family_settings(spec.finetuning)
    if spec.resources.sharding != "ddp" and spec.pretraining.runs and spec.resources.pretraining_workers < 2:
        yield "resources.sharding", (f"has no effect with pretraining_workers: {spec.resources.pretraining_workers}: "
                                     f"{spec.resources.sharding} shards a run over a worker group of 2 or more; "
                                     "here one process holds the whole model")


def study_settings(spec) -> Problems:
    """Sections that shape only the study's own runs, given when it trains none; the tokenizer's
    sample size with a tokenizer from elsewhere; the mask token with no hub tokenizer; tracking
    settings with tracking off."""
    if not spec.pretraining.runs:
        for name, default in (("model", ModelSpec()), ("data", DataSpec())):
            if getattr(spec, name) != default:
                yield name, (f"has no effect: the study trains no pretraining runs (it fine-tunes "
                             f"finetuning.checkpoints only), and {name} shapes only those; remove the section")
    trained_here = DataSpec().tokenizer
    if (
        spec.data.tokenizer != trained_here
        and spec.data.tokenizer_sample_documents != DataSpec().tokenizer_sample_documents
    ):
        yield "data.tokenizer_sample_documents", (
            f"has no effect with tokenizer {spec.data.tokenizer!r}: it is read when the tokenizer is trained here "
            f"(tokenizer: {trained_here}); remove it")
    hub_sources = any(source.startswith("hf:") for entry in spec.pretraining.runs for source in entry.init_from or [])
    if spec.data.tokenizer == trained_here and not hub_sources and spec.data.mask_token != DataSpec().mask_token:
        yield "data.mask_token", (f"has no effect with tokenizer {trained_here}, which has its own [MASK], and no "
                                  "hf: source; it is read for a hub tokenizer without a mask token; remove it")
    if not spec.tracking.wandb:
        for name in (f.name for f in fields(TrackingConfig) if f.name != "wandb"):
            if getattr(spec.tracking, name) != getattr(TrackingConfig(), name):
                yield f"tracking.{name}", ("has no effect with tracking.wandb: false (nothing is logged to "
                                           "W&B); set wandb: true, or remove it")
