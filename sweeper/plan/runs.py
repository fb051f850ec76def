"""The pretraining grid: a spec's run entries -> named, keyed runs, each a list of phases.

A run is a list of phases (objective, first step, end step, settings), nanotron's `data_stages`
idiom. A spec entry gives them in the short form (`objective: clm-mlm, clm_fraction: [0.25]`,
or the switch as steps, `switch_steps: [10000]`, expanded over its lists; sweeper.plan.phases) or the long form
(`phases: [{objective: clm, until: 0.25}, {objective: mlm, mask_ratio: 0.4}]`); both resolve to the same phases, the
same name and the same key. A phase of no steps is dropped, so a CLM share of 0 or 1 is a pure run.

Names follow the authors' scheme: each phase's tag then its end step (`610m-mlm40-42k`,
`610m-clm-42k`, `610m-clm-10k-mlm40-42k`); continued pretraining `610m-clm-dec42k-mlm40-64k`.
Keys hash the resolved configuration (`identity`): runs of the shapes the paper uses (MLM, CLM,
CLM then MLM) hash objective, mask ratio and switch step (the paper's vocabulary, pinned by
tests/unit/plan/test_pinned_keys.py); other phase lists hash their phases.

Ablation axes: any run field given as a grid (`pretraining.optimizer.*`, `global_batch_size`,
`warmup_steps`, `decay_steps`, `data.seq_len`, a model override, an entry's warmup / decay)
expands every entry over its values (`run_settings`). A run's name extends with one tag per
swept field whose value differs from the field's base: the first value listed, or for a model
override the preset's own value (`610m-mlm40-42k-lr1e-3`, `tiny-mlm40-600-layers2`), so the run
planned before a field was swept keeps its name, its key and its folder. The resolved values
travel on the run (`PretrainingRun.peak_lr`, `.optimizer`, ...; the swept ones in `params`):
nothing downstream of the plan reads them from the spec.
Each run is trained `replicates` times (sweeper.plan.replicates; a sequential plan's looks set
each run's count): replicate 0 is the run above, replicate r >= 1 `<name>-rep<r>`; a continued
replicate r continues from its source's replicate r, the source trained as often as its most
replicated continuation (`planned_counts`); the plan lists the replicates 0 first (from
scratch, then continued), then the replicates 1, ... Names: sweeper.plan.run_names; Hugging
Face sources: sweeper.plan.hf_init; checks that need the planned runs: sweeper.plan.load.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from sweeper.plan.hf_init import planned_hf_init
from sweeper.plan.phases import (describe, leading_clm_share, long_form_phases, masking_defaults, phase,
                                 short_form_phases, switch_choices)
from sweeper.plan.replicates import SourceGrowth, arm_name, by_replicate, grown_sources, replicate_name, replicated
from sweeper.plan.run_names import AXIS_TAGS, format_steps, run_name, tag
from sweeper.contract import registry
from sweeper.contract.catalog import MODEL_PRESETS
from sweeper.contract.configs import AdamWConfig, PhaseConfig, stable_key
from sweeper.spec.names import run_name_problem
from sweeper.spec.parsing import values_of
from sweeper.spec.pretraining import RunGridSpec
from sweeper.spec.reading import shown
from sweeper.spec.study import StudySpec


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
    hf_init: str | None = None
    """How it is continued: `convert` (to the encoder) or `native` (sweeper.plan.hf_init)."""
    steps_before: int = 0
    """Steps the starting checkpoint had already trained (its data is not seen again)."""
    identity: dict = field(compare=False, repr=False, default_factory=dict)
    """The resolved configuration the run_key hashes (kept to explain what changed)."""
    peak_lr: float = 5e-4
    optimizer: AdamWConfig = field(default_factory=AdamWConfig)
    global_batch_size: int = 2304
    """Sequences per optimizer step."""
    seq_len: int = 128
    """Tokens per packed sequence."""
    params: dict = field(default_factory=dict)
    """This run's values of the swept fields, by key path (`optimizer.peak_lr`,
    `model.num_hidden_layers`); empty when nothing is swept."""
    name_tags: tuple[str, ...] = ()
    """The tags its name ends with (`lr1e-3`): swept values that differ from their base."""
    replicate: int = 0
    """Which training of its configuration: 0 the run itself, r >= 1 `<name>-rep<r>`."""
    seed: int = 0
    """Weight-initialisation and masking seed (sweeper.plan.replicates.init_seed)."""

    @property
    def arm(self) -> str:
        """The name of replicate 0 of its configuration (its own for replicate 0)."""
        return arm_name(self.name, self.replicate)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_len

    @property
    def init_from(self) -> str | None:
        return self.init_from_run or (f"hf:{self.init_from_hf}" if self.init_from_hf else None)

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer this run's data is encoded with: None = the study's."""
        return self.init_from_hf


def cpt_name(source: PretrainingRun | str, mask_ratio: float, added_steps: int) -> str:
    """`610m-clm-dec42k-mlm40-64k`: source objective, `dec` + the decayed source's steps, then
    the MLM phase up to the new total. A Hugging Face source: `hf-<model>-mlm40-<added>`."""
    mlm = registry.mlm_tag({"mask_ratio": mask_ratio})
    if isinstance(source, str):
        model = re.sub(r"[^A-Za-z0-9.]+", "-", source.rstrip("/").split("/")[-1]).strip("-").lower()
        return f"hf-{model}-{mlm}-{format_steps(added_steps)}"
    untagged = source.name.removesuffix("".join(f"-{t}" for t in source.name_tags))
    prefix = untagged.removesuffix(f"-{format_steps(source.total_steps)}")
    total = source.total_steps + added_steps
    return "-".join([f"{prefix}-dec{format_steps(source.total_steps)}-{mlm}-{format_steps(total)}", *source.name_tags])


def model_config(spec: StudySpec, preset: str, settings: RunSettings) -> dict:
    """Preset + vocabulary and context from the data section + the run's overrides."""
    return {**MODEL_PRESETS[preset], "vocab_size": spec.data.vocab_size,
            "max_position_embeddings": max(2048, settings.seq_len), **settings.overrides}


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSettings:
    """One point of a run entry's grid of swept fields: the values a run trains with."""

    peak_lr: float
    optimizer: AdamWConfig
    global_batch_size: int
    seq_len: int
    warmup_steps: int
    decay_steps: int
    overrides: dict
    params: dict
    """The swept fields' values at this point, by key path (fields with one value left out)."""
    tags: dict
    """Name tags of the swept values that differ from their base, by key path, in name order."""


def run_settings(spec: StudySpec, grid: RunGridSpec, preset: str | None) -> list[RunSettings]:
    """Every point of the entry's swept fields, in the order given (the first value of each grid
    first); `preset` None: the run's architecture is its source's (overrides are not swept)."""
    pre, optimizer = spec.pretraining, spec.pretraining.optimizer
    axes = {"seq_len": values_of(spec.data.seq_len), "global_batch_size": values_of(pre.global_batch_size),
            **{f"optimizer.{name}": values_of(getattr(optimizer, name))
               for name in ("peak_lr", "betas", "eps", "weight_decay", "grad_clip")},
            "warmup_steps": values_of(pre.warmup_steps if grid.warmup_steps is None else grid.warmup_steps),
            "decay_steps": values_of(pre.decay_steps if grid.decay_steps is None else grid.decay_steps)}
    overrides = spec.model.override_grid() if preset is not None else {}
    axes |= {f"model.{key}": values for key, values in overrides.items()}
    bases = {path: values[0] for path, values in axes.items()}
    for key in overrides:
        if preset in MODEL_PRESETS and key in MODEL_PRESETS[preset]:
            bases[f"model.{key}"] = MODEL_PRESETS[preset][key]
    order = [*(f"model.{key}" for key in overrides), *AXIS_TAGS]
    points = []
    for values in itertools.product(*axes.values()):
        point = dict(zip(axes, values))
        params = {path: point[path] for path in order if len(axes[path]) > 1}
        points.append(RunSettings(
            peak_lr=point["optimizer.peak_lr"],
            optimizer=AdamWConfig(**{name: point[f"optimizer.{name}"] for name in ("betas", "eps", "weight_decay",
                                                                                   "grad_clip")}),
            global_batch_size=point["global_batch_size"], seq_len=point["seq_len"],
            warmup_steps=point["warmup_steps"], decay_steps=point["decay_steps"],
            overrides={key: point[f"model.{key}"] for key in overrides}, params=params,
            tags={path: tag(path, value) for path, value in params.items() if value != bases[path]}))
    return points


def tagged(name: str, settings: RunSettings) -> str:
    return "-".join([name, *settings.tags.values()])


def identity_of(spec: StudySpec, config: dict, phases: tuple[PhaseConfig, ...], steps: int,
                settings: RunSettings) -> dict:
    """What the run key hashes: the paper's shapes (MLM, CLM, CLM then MLM with the default
    masking settings) by objective, mask ratio and switch step; any other phase list by its phases."""
    objective, ratio, switch = describe(phases, steps)
    shared = shared_identity(spec, settings)
    schedule = {"steps": steps, "warmup_steps": settings.warmup_steps, "decay_steps": settings.decay_steps}
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


def shared_identity(spec: StudySpec, settings: RunSettings) -> dict:
    """The run's data, optimizer and batch as the key hashes them (`data` as
    DataSpec.identity gives it, `optimizer` as OptimizerSpec's asdict), at this point's values."""
    pre = spec.pretraining
    optimizer = {**asdict(settings.optimizer), "peak_lr": settings.peak_lr}
    return {"data": {**spec.data.identity(), "seq_len": settings.seq_len}, "optimizer": optimizer, "seed": pre.seed,
            "global_batch_size": settings.global_batch_size, "random_replace": pre.random_replace,
            "keep_original": pre.keep_original}


def resolved(settings: RunSettings) -> dict:
    """The PretrainingRun fields a point of the grid sets."""
    return dict(peak_lr=settings.peak_lr, optimizer=settings.optimizer, global_batch_size=settings.global_batch_size,
                seq_len=settings.seq_len, warmup_steps=settings.warmup_steps, decay_steps=settings.decay_steps,
                params=settings.params, name_tags=tuple(settings.tags.values()))


def expand_base_runs(spec: StudySpec) -> list[PretrainingRun]:
    """Runs trained from scratch (no init_from), deduplicated by name, in spec order: replicate
    0 of each, the names a continued-pretraining entry may start from."""
    return [run for run in expand_runs(spec, include_cpt=False) if run.replicate == 0]


def scratch_runs(spec: StudySpec, grid: RunGridSpec):
    """The runs of one entry trained from scratch, over its list-valued fields and the swept ones."""
    presets = grid.preset or [spec.model.preset]
    for preset in presets:
        for settings in run_settings(spec, grid, preset):
            yield from entry_runs(spec, grid, preset, settings)


def entry_runs(spec: StudySpec, grid: RunGridSpec, preset: str, settings: RunSettings):
    """The entry's runs of one preset at one point of the swept fields."""
    decay, budgets = settings.decay_steps, grid.steps or [spec.pretraining.steps]
    if grid.phases is not None:
        choices = [(steps, long_form_phases(spec, grid, steps, decay), leading_clm_share(grid)) for steps in budgets]
    else:
        masks = grid.objective == "clm-mlm" or "mask_ratio" in registry.objective_of(grid.objective).settings
        ratios = grid.mask_ratio if masks else [None]
        pure = [(1.0 if grid.objective == "clm" else 0.0, None)]
        choices = [(steps, short_form_phases(spec, grid.objective, steps, ratio, share, decay, stated), share)
                   for steps in budgets for ratio in ratios
                   for share, stated in (switch_choices(grid, steps) if grid.objective == "clm-mlm" else pure)]
    for steps, phases, share in choices:
        objective, ratio, switch = describe(phases, steps)
        share = {"clm": 1.0, "mlm": 0.0}.get(objective, share)
        config = model_config(spec, preset, settings)
        identity = identity_of(spec, config, phases, steps, settings)
        yield PretrainingRun(
            name=tagged(run_name(preset, phases), settings), run_key=stable_key(identity), preset=preset,
            objective=objective, phases=phases, mask_ratio=ratio, clm_fraction=share, switch_step=switch,
            total_steps=steps, checkpoint_steps=tuple(sorted(set(grid.checkpoint_steps))), model_config=config,
            identity=identity, **resolved(settings),
        )


class RunNameProblem(ValueError):
    """A run entry plans a run whose name cannot be its folder's: a spec error naming the entry."""

    def __init__(self, entry: int, reason: str):
        self.key, self.reason = f"pretraining.runs[{entry}]", reason
        super().__init__(f"{self.key}: {self.reason}")


class RunNameClash(RunNameProblem):
    """Two entries plan different runs under one name (one run folder)."""

    def __init__(self, entry: int, name: str, other_entry: int):
        super().__init__(entry, f"plans a run named {name!r} that runs[{other_entry}] also plans, with other settings; "
                                "a run's folder is its name: change one of them (e.g. its steps or masking ratio)")


def expand_runs(spec: StudySpec, include_cpt: bool = True, counts: Mapping[str, int] | None = None) -> list:
    """Every run of the spec, in entry order (`counts`: replicates by run name, set by a sequential
    plan's looks); one run from two entries is planned once, with the union of its checkpoints.
    Raises RunNameClash for two runs of one name, RunNameProblem for a name no folder takes."""
    runs: dict[str, PretrainingRun] = {}
    entry_of: dict[str, int] = {}

    def add(run: PretrainingRun, entry: int) -> None:
        if problem := run_name_problem(run.name):
            raise RunNameProblem(entry, f"plans a run named {shown(run.name)}, and a run's name is its folder's: "
                                        f"the name {problem}")
        previous = runs.get(run.name)
        if previous is not None:
            if previous.run_key != run.run_key:
                raise RunNameClash(entry, run.name, entry_of[run.name])
            steps = tuple(sorted(set(run.checkpoint_steps) | set(previous.checkpoint_steps)))
            run = replace(run, checkpoint_steps=steps)
        runs[run.name] = run
        entry_of.setdefault(run.name, entry)

    scratch, continued, _ = planned_counts(spec, include_cpt, counts)
    for entry, run, r, _ in by_replicate(scratch):
        add(replicated(spec, run, r), entry)
    base = dict(runs)
    for entry, run, r, source in by_replicate(continued):  # replicate r from its source's own (grown_sources)
        add(replicated(spec, run, r, base.get(replicate_name(source, r)) if r else None), entry)
    return list(runs.values())


def planned_counts(spec: StudySpec, include_cpt: bool = True,
                   counts: Mapping[str, int] | None = None) -> tuple[list, list, list[SourceGrowth]]:
    """(scratch, continued, growth): the (entry, run, replicates, source) of every replicate 0
    from scratch and continued, replicates as the entry (or `counts`) asks, each study-run source
    raised to the most replicates of a run continued from it (`growth`: the sources raised)."""
    pre, counts = spec.pretraining, counts or {}
    scratch = [(entry, run, counts.get(run.name, pre.replicates_of(grid)), None) for entry, grid in enumerate(pre.runs)
               if grid.init_from is None for run in scratch_runs(spec, grid)]
    if not include_cpt:
        return scratch, [], []
    origins: dict[str, PretrainingRun] = {}
    for _, run, _, _ in scratch:
        origins.setdefault(run.name, run)
    continued = []
    for entry, grid in enumerate(pre.runs):
        if grid.init_from is None:
            continue
        for source, steps, ratio, settings in itertools.product(
                grid.init_from, grid.steps or [pre.steps], grid.mask_ratio, run_settings(spec, grid, None)):
            run = continued_run(spec, grid, source, origins, steps, ratio, settings)
            continued.append((entry, run, counts.get(run.name, pre.replicates_of(grid)), source))
    scratch, growth = grown_sources(scratch, continued)
    return scratch, continued, growth


def continued_run(spec: StudySpec, grid: RunGridSpec, source: str, base: dict, steps: int, ratio: float,
                  settings: RunSettings) -> PretrainingRun:
    """An MLM run that starts from a decayed checkpoint: a study run's, or a Hugging Face LM's.
    A study run's continuation reads on in its data order: its source's batch and sequence
    length, whatever the grid says."""
    checkpoints = tuple(sorted(set(grid.checkpoint_steps)))
    phases = (phase(spec, "mlm", 0, steps, {"mask_ratio": ratio}),)
    warmup, decay = settings.warmup_steps, settings.decay_steps
    common = dict(objective="mlm", phases=phases, mask_ratio=ratio, clm_fraction=0.0, switch_step=0, total_steps=steps,
                  checkpoint_steps=checkpoints)
    schedule = {"objective": "mlm", "mask_ratio": ratio, "steps": steps, "warmup_steps": warmup, "decay_steps": decay}
    if source.startswith("hf:"):
        path, init = source[3:], planned_hf_init(source[3:], grid.hf_init)  # native: keyed; convert: as before
        identity = {"init_from_hf": path, **({"hf_init": "native"} if init.mode == "native" else {}), **schedule,
                    "model_overrides": spec.model.overrides, **shared_identity(spec, settings)}
        return PretrainingRun(name=tagged(cpt_name(path, ratio, steps), settings), run_key=stable_key(identity),
                              preset="hf", model_config=init.sizes, init_from_hf=path, hf_init=init.mode,
                              identity=identity, **common, **resolved(settings))
    origin = base[source]
    settings = replace(settings, global_batch_size=origin.global_batch_size, seq_len=origin.seq_len,
                       params={k: v for k, v in settings.params.items() if k not in ("global_batch_size", "seq_len")},
                       tags={k: v for k, v in settings.tags.items() if k not in ("global_batch_size", "seq_len")})
    identity = {"init_from": origin.run_key, **schedule, **shared_identity(spec, settings)}
    return PretrainingRun(name=tagged(cpt_name(origin, ratio, steps), settings), run_key=stable_key(identity),
                          preset=origin.preset, model_config=origin.model_config, init_from_run=origin.name,
                          steps_before=origin.total_steps, identity=identity, **common, **resolved(settings))
