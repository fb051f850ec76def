"""A run's phases (objective, first step, end step, settings) from a spec entry: the short form
(`objective: clm-mlm` with `clm_fraction` or `switch_steps`) and the long form (`phases:`).

The switch of a CLM -> MLM run is a share of the steps (`clm_fraction`, of all steps or of the
steps before the decay: `clm_fraction_of`) or a step count (`switch_steps`: the paper's Tables
10-13 list 3k/6k/9k at 12k, 5k/11k/17k at 22k, 10k/21k/32k at 42k, which no share rule gives).
Either way the run key hashes the switch step, so one switch stated both ways is one run.
"""
from __future__ import annotations

from sweeper.contract import registry
from sweeper.contract.configs import PhaseConfig
from sweeper.spec.pretraining import RunGridSpec
from sweeper.spec.study import StudySpec


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
    return PhaseConfig(objective=objective, loss=registry.objective_of(objective).loss, start_step=start, end_step=end,
                       settings=spec.pretraining.phase_settings(objective, given))


def short_form_phases(spec: StudySpec, objective: str, steps: int, ratio: float | None, share: float,
                      decay: int, stated_switch: int | None = None) -> tuple[PhaseConfig, ...]:
    """mlm / clm / another registered objective: one phase; clm-mlm: CLM up to the switch step
    (`stated_switch` when the spec gives it as a step, else from the share)."""
    masking = {"mask_ratio": ratio} if ratio is not None else {}
    if objective != "clm-mlm":
        settings = masking if "mask_ratio" in registry.objective_of(objective).settings else {}
        return (phase(spec, objective, 0, steps, settings),)
    switch = stated_switch if stated_switch is not None else switch_step(steps, share, decay,
                                                                         spec.pretraining.clm_fraction_of)
    switch = min(switch, steps)
    stretches = [("clm", 0, switch, {}), ("mlm", switch, steps, masking)]
    return tuple(phase(spec, *stretch) for stretch in stretches if stretch[2] > stretch[1])


def long_form_phases(spec: StudySpec, grid: RunGridSpec, steps: int, decay: int) -> tuple[PhaseConfig, ...]:
    span = steps - decay if spec.pretraining.clm_fraction_of == "pre_decay" else steps
    phases, start = [], 0
    for i, given in enumerate(grid.phases):
        last = i == len(grid.phases) - 1
        end = steps if last else min(round(given.until * span), steps)
        if end > start:
            phases.append(phase(spec, given.objective, start, end, given.given_settings()))
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




def switch_choices(grid: RunGridSpec, steps: int) -> list[tuple[float, int | None]]:
    """(CLM share the results record, stated switch step or None) of each clm-mlm run of an entry
    at one budget: `switch_steps` with their `clm_fraction` labels (default: switch / steps),
    else each `clm_fraction` (default 0.25) with the switch left to the share rule."""
    if grid.switch_steps is None:
        return [(share, None) for share in grid.clm_fraction or [0.25]]
    labels = grid.clm_fraction or [switch / steps for switch in grid.switch_steps]
    return list(zip(labels, grid.switch_steps))
