"""The pretraining grid: a spec's run entries -> named, keyed runs, each a list of phases.

A run is a list of phases (objective, first step, end step, settings), nanotron's `data_stages`
idiom. A spec entry gives them in the short form (`objective: clm-mlm, clm_fraction: [0.25]`,
expanded over its lists) or the long form (`phases: [{objective: clm, until: 0.25},
{objective: mlm, mask_ratio: 0.4}]`); both resolve to the same phases, the same name and the
same key. A phase of no steps is dropped, so a CLM share of 0 or 1 is a pure run.

Names follow the authors' scheme: each phase's tag then its end step (`610m-mlm40-42k`,
`610m-clm-42k`, `610m-clm-10k-mlm40-42k`); continued pretraining `610m-clm-dec42k-mlm40-64k`.
Keys hash the resolved configuration (`identity`): runs of the shapes the paper uses (MLM, CLM,
CLM then MLM) keep the layout their keys always had; other phase lists hash their phases.

This module imports no spec at run time (the spec's own checks use `expand_base_runs`).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from sweeper import registry
from sweeper.catalog import MODEL_PRESETS
from sweeper.configs import PhaseConfig, stable_key

if TYPE_CHECKING:
    from sweeper.spec import RunGridSpec, StudySpec


def format_steps(steps: int) -> str:
    """The authors' step notation: 42000 -> '42k', 1500 -> '1500'."""
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


@dataclass(frozen=True, kw_only=True, slots=True)
class PretrainingRun:
    name: str
    run_key: str
    preset: str
    objective: str
    """mlm | clm | clm-mlm for the paper's shapes, else the phases' objectives joined by '-'."""
    phases: tuple[PhaseConfig, ...]
    mask_ratio: float | None
    """Masking ratio of the last masking phase (None: the run masks nothing)."""
    clm_fraction: float
    """Share of the steps trained with CLM, as the spec gave it."""
    switch_step: int
    """First step after the leading CLM phase (0 for MLM, total_steps for CLM)."""
    total_steps: int
    """Steps this run trains (for continued pretraining: the added steps)."""
    checkpoint_steps: tuple[int, ...]
    """Intermediate steps that are fine-tuned; the final step always is."""
    model_config: dict
    warmup_steps: int
    decay_steps: int
    init_from_run: str | None = None
    """Continued pretraining from this study run's final (decayed) checkpoint."""
    init_from_hf: str | None = None
    """Continued pretraining from this Hugging Face causal LM (path or name)."""
    steps_before: int = 0
    """Steps the starting checkpoint had already trained (its data is not seen again)."""
    identity: dict = field(compare=False, repr=False, default_factory=dict)
    """The resolved configuration the run_key hashes (kept to explain what changed)."""

    @property
    def init_from(self) -> str | None:
        return self.init_from_run or (f"hf:{self.init_from_hf}" if self.init_from_hf else None)

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer this run's data is encoded with: None = the study's."""
        return self.init_from_hf


def run_name(preset: str, phases: tuple[PhaseConfig, ...]) -> str:
    """`610m-mlm40-42k`, `610m-clm-42k`, `610m-clm-10k-mlm40-42k`: each phase's tag, then its end."""
    parts = [f"{registry.OBJECTIVES[p.objective].run_tag(p.settings)}-{format_steps(p.end_step)}" for p in phases]
    return "-".join([preset, *parts])


def cpt_name(source: PretrainingRun | str, mask_ratio: float, added_steps: int) -> str:
    """`610m-clm-dec42k-mlm40-64k`: source objective, `dec` + the decayed source's steps, then
    the MLM phase up to the new total. A Hugging Face source: `hf-<model>-mlm40-<added>`."""
    tag = registry.mlm_tag({"mask_ratio": mask_ratio})
    if isinstance(source, str):
        model = re.sub(r"[^A-Za-z0-9.]+", "-", source.rstrip("/").split("/")[-1]).strip("-").lower()
        return f"hf-{model}-{tag}-{format_steps(added_steps)}"
    prefix = source.name.removesuffix(f"-{format_steps(source.total_steps)}")
    total = source.total_steps + added_steps
    return f"{prefix}-dec{format_steps(source.total_steps)}-{tag}-{format_steps(total)}"


def model_config(spec: StudySpec, preset: str) -> dict:
    """Preset + vocabulary and context from the data section + the spec's overrides."""
    return {**MODEL_PRESETS[preset], "vocab_size": spec.data.vocab_size,
            "max_position_embeddings": max(2048, spec.data.seq_len), **spec.model.overrides}


def switch_step(total_steps: int, clm_fraction: float, decay_steps: int = 0, of: str = "total") -> int:
    """First MLM step (0-based): round(clm_fraction x total_steps), or, with of="pre_decay",
    round(clm_fraction x (total_steps - decay_steps)), the authors' convention (25 % of 42k with
    2k of decay = `clm-10k-mlm40-42k`; 100 % = 40k CLM then 2k MLM)."""
    span = total_steps - decay_steps if of == "pre_decay" else total_steps
    return round(clm_fraction * span)


def masking_defaults(spec: StudySpec) -> dict:
    """MLM settings every run shares unless a phase sets its own (pretraining.random_replace, ...)."""
    pre = spec.pretraining
    return {"random_replace": pre.random_replace, "keep_original": pre.keep_original}


def phase(spec: StudySpec, objective: str, start: int, end: int, given: dict) -> PhaseConfig:
    """A phase with the objective's settings resolved: registered defaults, the study's MLM
    settings for MLM, then what the spec gave; `loss` names the worker's function."""
    defaults = masking_defaults(spec) if objective == "mlm" else {}
    return PhaseConfig(objective=objective, loss=registry.OBJECTIVES[objective].loss, start_step=start, end_step=end,
                       settings=registry.objective_settings(objective, {**defaults, **given}))


def short_form_phases(spec: StudySpec, objective: str, steps: int, ratio: float | None, share: float,
                      decay: int) -> tuple[PhaseConfig, ...]:
    """mlm / clm / another registered objective: one phase; clm-mlm: CLM up to the switch step."""
    masking = {"mask_ratio": ratio} if ratio is not None else {}
    if objective != "clm-mlm":
        settings = masking if "mask_ratio" in registry.OBJECTIVES[objective].settings else {}
        return (phase(spec, objective, 0, steps, settings),)
    switch = min(switch_step(steps, share, decay, spec.pretraining.clm_fraction_of), steps)
    stretches = [("clm", 0, switch, {}), ("mlm", switch, steps, masking)]
    return tuple(phase(spec, *stretch) for stretch in stretches if stretch[2] > stretch[1])


def long_form_phases(spec: StudySpec, grid: RunGridSpec, steps: int, decay: int) -> tuple[PhaseConfig, ...]:
    span = steps - decay if spec.pretraining.clm_fraction_of == "pre_decay" else steps
    phases, start = [], 0
    for i, given in enumerate(grid.phases):
        last = i == len(grid.phases) - 1
        end = steps if last else min(round(given.until * span), steps)
        if end > start:
            phases.append(phase(spec, given.objective, start, end, given.objective_settings()))
        start = max(start, end)
    return tuple(phases)


def leading_clm_share(grid: RunGridSpec) -> float:
    """The CLM share of a long-form entry as its user wrote it (its first phase's `until`)."""
    first = grid.phases[0]
    if first.objective != "clm":
        return 0.0
    return 1.0 if len(grid.phases) == 1 else first.until


def describe(phases: tuple[PhaseConfig, ...], steps: int) -> tuple[str, float | None, int]:
    """(objective, mask ratio, switch step) of a run as rows and the report describe it."""
    names = [p.objective for p in phases]
    objective = {("mlm",): "mlm", ("clm",): "clm", ("clm", "mlm"): "clm-mlm"}.get(tuple(names), "-".join(names))
    ratios = [p.settings["mask_ratio"] for p in phases if "mask_ratio" in p.settings]
    switch = phases[0].end_step if names[0] == "clm" else 0
    return objective, (ratios[-1] if ratios else None), min(switch, steps)


def identity_of(spec: StudySpec, config: dict, phases: tuple[PhaseConfig, ...], steps: int, warmup: int,
                decay: int) -> dict:
    """What the run key hashes. The paper's shapes keep the layout their keys always had."""
    objective, ratio, switch = describe(phases, steps)
    shared = shared_identity(spec)
    schedule = {"steps": steps, "warmup_steps": warmup, "decay_steps": decay}
    paper_shape = objective in ("mlm", "clm", "clm-mlm") and all(
        {k: v for k, v in p.settings.items() if k != "mask_ratio"} == (masking_defaults(spec) if p.objective == "mlm"
                                                                       else {}) for p in phases)
    if paper_shape:
        return {"model": config, "objective": objective, "mask_ratio": ratio, "switch_step": switch,
                **schedule, **shared}
    # Where the loss function lives is no part of what the run computes: not hashed.
    phase_list = [{"objective": p.objective, "start_step": p.start_step, "end_step": p.end_step, "settings": p.settings}
                  for p in phases]
    return {"model": config, "phases": phase_list, **schedule, **shared}


def shared_identity(spec: StudySpec) -> dict:
    pre = spec.pretraining
    return {"data": spec.data.identity(), "optimizer": asdict(pre.optimizer), "seed": pre.seed,
            "global_batch_size": pre.global_batch_size, "random_replace": pre.random_replace,
            "keep_original": pre.keep_original}


def schedule_of(spec: StudySpec, grid: RunGridSpec) -> tuple[int, int]:
    pre = spec.pretraining
    return (pre.warmup_steps if grid.warmup_steps is None else grid.warmup_steps,
            pre.decay_steps if grid.decay_steps is None else grid.decay_steps)


def expand_base_runs(spec: StudySpec) -> list[PretrainingRun]:
    """Runs trained from scratch (no init_from), deduplicated by name, in spec order."""
    return expand_runs(spec, include_cpt=False)


def scratch_runs(spec: StudySpec, grid: RunGridSpec):
    """The runs of one entry trained from scratch, over its list-valued fields."""
    warmup, decay = schedule_of(spec, grid)
    presets, budgets = grid.preset or [spec.model.preset], grid.steps or [spec.pretraining.steps]
    if grid.phases is not None:
        choices = [(steps, long_form_phases(spec, grid, steps, decay), leading_clm_share(grid)) for steps in budgets]
    else:
        masks = grid.objective == "clm-mlm" or "mask_ratio" in registry.OBJECTIVES[grid.objective].settings
        ratios = grid.mask_ratio if masks else [None]
        shares = grid.clm_fraction if grid.objective == "clm-mlm" else [1.0 if grid.objective == "clm" else 0.0]
        choices = [(steps, short_form_phases(spec, grid.objective, steps, ratio, share, decay), share)
                   for steps, ratio, share in itertools.product(budgets, ratios, shares)]
    for preset, (steps, phases, share) in itertools.product(presets, choices):
        objective, ratio, switch = describe(phases, steps)
        share = {"clm": 1.0, "mlm": 0.0}.get(objective, share)
        config = model_config(spec, preset)
        identity = identity_of(spec, config, phases, steps, warmup, decay)
        yield PretrainingRun(
            name=run_name(preset, phases), run_key=stable_key(identity), preset=preset, objective=objective,
            phases=phases, mask_ratio=ratio, clm_fraction=share, switch_step=switch, total_steps=steps,
            checkpoint_steps=tuple(sorted(set(grid.checkpoint_steps))), model_config=config,
            warmup_steps=warmup, decay_steps=decay, identity=identity,
        )


class RunNameClash(ValueError):
    """Two entries plan different runs under one name (one run folder): a spec error."""

    def __init__(self, entry: int, name: str, other_entry: int):
        self.key = f"pretraining.runs[{entry}]"
        self.reason = (f"plans a run named {name!r} that runs[{other_entry}] also plans, with other settings; "
                       "a run's folder is its name: change one of them (e.g. its steps or masking ratio)")
        super().__init__(f"{self.key}: {self.reason}")


def expand_runs(spec: StudySpec, include_cpt: bool = True) -> list[PretrainingRun]:
    """Every run of the spec, in entry order; the same run from two entries is planned once, with
    the union of its checkpoints. Raises RunNameClash for two different runs of one name."""
    runs: dict[str, PretrainingRun] = {}
    entry_of: dict[str, int] = {}

    def add(run: PretrainingRun, entry: int) -> None:
        previous = runs.get(run.name)
        if previous is not None:
            if previous.run_key != run.run_key:
                raise RunNameClash(entry, run.name, entry_of[run.name])
            steps = tuple(sorted(set(run.checkpoint_steps) | set(previous.checkpoint_steps)))
            run = replace(run, checkpoint_steps=steps)
        runs[run.name] = run
        entry_of.setdefault(run.name, entry)

    for entry, grid in enumerate(spec.pretraining.runs):
        if grid.init_from is None:
            for run in scratch_runs(spec, grid):
                add(run, entry)
    if include_cpt:
        base = dict(runs)
        for entry, grid in enumerate(spec.pretraining.runs):
            if grid.init_from is None:
                continue
            warmup, decay = schedule_of(spec, grid)
            for source, steps, ratio in itertools.product(grid.init_from, grid.steps or [spec.pretraining.steps],
                                                          grid.mask_ratio):
                add(continued_run(spec, grid, source, base, steps, ratio, warmup, decay), entry)
    return list(runs.values())


def continued_run(spec: StudySpec, grid: RunGridSpec, source: str, base: dict, steps: int, ratio: float,
                  warmup: int, decay: int) -> PretrainingRun:
    """An MLM run that starts from a decayed checkpoint: a study run's, or a Hugging Face LM's."""
    checkpoints = tuple(sorted(set(grid.checkpoint_steps)))
    shared = shared_identity(spec)
    phases = (phase(spec, "mlm", 0, steps, {"mask_ratio": ratio}),)
    common = dict(objective="mlm", phases=phases, mask_ratio=ratio, clm_fraction=0.0, switch_step=0, total_steps=steps,
                  checkpoint_steps=checkpoints, warmup_steps=warmup, decay_steps=decay)
    schedule = {"objective": "mlm", "mask_ratio": ratio, "steps": steps, "warmup_steps": warmup, "decay_steps": decay}
    if source.startswith("hf:"):
        path = source[3:]
        identity = {"init_from_hf": path, **schedule, "model_overrides": spec.model.overrides, **shared}
        return PretrainingRun(name=cpt_name(path, ratio, steps), run_key=stable_key(identity), preset="hf",
                              model_config={}, init_from_hf=path, identity=identity, **common)
    origin = base[source]
    identity = {"init_from": origin.run_key, **schedule, **shared}
    return PretrainingRun(name=cpt_name(origin, ratio, steps), run_key=stable_key(identity), preset=origin.preset,
                          model_config=origin.model_config, init_from_run=origin.name,
                          steps_before=origin.total_steps, identity=identity, **common)
