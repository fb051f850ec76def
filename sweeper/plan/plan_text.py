"""What `sweeper plan` prints of a loaded study: its runs, checkpoints, trials, the cost and
memory estimates (sweeper.plan.cost, sweeper.plan.memory), with `-v` every run, and for a
spec that claims the paper's protocol every departure from it (sweeper.plan.departures)."""
from __future__ import annotations

import os

from sweeper.plan.branches import Branch, prefix_branches
from sweeper.plan.cost import (StageCost, describe_external, finetuning_comparison, finetuning_cost, parameter_count,
                               parameters_text, pretraining_cost, wall_time_lines)
from sweeper.plan.departures import protocol_lines
from sweeper.plan.load import LoadedStudy
from sweeper.plan.memory import run_figure, summary, trial_summary
from sweeper.plan.replicates import shared_sources
from sweeper.plan.runs import planned_counts
from sweeper.plan.study_plan import run_count_text, trained_trials, trial_count_text


def replicate_source_lines(spec) -> list[str]:
    """The sources trained more often than their entries ask (a continued replicate r continues
    from its source's own replicate r: sweeper.plan.replicates), and the continued runs whose
    replicates share one Hugging Face checkpoint."""
    _, continued, growth = planned_counts(spec)
    lines = [f"    source grown: {g.line()}" for g in growth]
    if shared := shared_sources(continued):
        lines.append(f"    one fixed source: {'; '.join(shared)}: their replicates differ by initialisation and data "
                     "order from that one checkpoint, so their spread (and a verdict on them) is about it, not about "
                     "training such a source again")
    return lines


def sharing_lines(spec, plan, branches: dict[str, Branch], cost: StageCost) -> list[str]:
    """What training each shared prefix once saves (sweeper.plan.branches), or, with
    `share_prefixes: false`, would save."""
    if not branches:
        return []
    every = pretraining_cost(spec, plan.runs)
    saved = every.gpu_hours - pretraining_cost(spec, plan.runs, branches).gpu_hours
    steps = sum(branch.step for branch in branches.values())
    runs = f"{len(branches)} runs start" if len(branches) != 1 else "1 run starts"
    if spec.pretraining.share_prefixes:
        return [f"      {runs} from another run's checkpoint ({steps:,} shared steps, `plan -v`): "
                f"{gpu_time(saved)} saved, -{saved / every.gpu_hours:.0%} of {gpu_time(every.gpu_hours)} from "
                "scratch (pretraining.share_prefixes)"]
    return [f"      every run from scratch (pretraining.share_prefixes: false); sharing prefixes would save "
            f"{gpu_time(saved)} (-{saved / every.gpu_hours:.0%}, {steps:,} steps)"]


def gpu_time(hours: float) -> str:
    """GPU-hours to one decimal, or GPU-seconds below a tenth of an hour (two significant digits
    below a tenth of a second: a CPU study's nano runs), so a saving is never printed as 0.0."""
    seconds = hours * 3600
    return (f"{hours:,.1f} GPU-h" if hours >= 0.1 else f"{seconds:,.1f} GPU-s" if seconds >= 0.1
            else f"{seconds:.2g} GPU-s")


def plan_lines(study: LoadedStudy, verbose: bool = False) -> list[str]:
    spec, plan = study.spec, study.plan
    final = sum(1 for c in plan.checkpoints if c.run is not None and c.step == c.run.total_steps)
    external = sum(1 for c in plan.checkpoints if c.external is not None)
    lines = [f"study {spec.study}"]
    if study.overrides:
        lines.append(f"  overrides:              {' '.join(study.overrides)}")
    lines.append(f"  pretraining runs:       {run_count_text(spec, plan)}")
    lines += replicate_source_lines(spec)
    lines += [
        f"  evaluated checkpoints:  {len(plan.checkpoints)} ({final} final + "
        f"{len(plan.checkpoints) - final - external} intermediate"
        + (f" + {external} from elsewhere)" if external else ")")
    ]
    lines += [
        f"    from elsewhere: {describe_external(c.external)}" for c in plan.checkpoints if c.external is not None
    ]
    trained, also = trained_trials(plan)
    if also:  # a trial writes a result row per set it scores: the factors below count rows
        lines.append(f"  fine-tuning trials:     {trained:,} ({also})")
    lines.append(f"  {('result rows' if also else 'fine-tuning trials') + ':':<24}{trial_count_text(spec, plan)}")
    lines += wall_time_lines(spec, plan, len(os.sched_getaffinity(0)))  # a CPU study: its duration here
    branches = prefix_branches(plan.runs)
    pre_cost = pretraining_cost(spec, plan.runs, branches if spec.pretraining.share_prefixes else None)
    ft_cost = finetuning_cost(spec, plan)
    lines.append(
        f"  estimated GPU-hours at {spec.cost.gpu_peak_tflops:g} TFLOP/s x {spec.cost.utilization:.0%} utilisation "
        "(6 x parameters x tokens):"
    )
    for stage, cost in (("pretraining", pre_cost), ("fine-tuning", ft_cost)):
        extra = f" (+ {cost.unknown} items sized at run time)" if cost.unknown else ""
        lines.append(f"    {stage:12s} {cost.gpu_hours:>12,.1f} GPU-h  ({cost.flops:.2e} FLOPs){extra}")
        if stage == "pretraining":
            lines += sharing_lines(spec, plan, branches, pre_cost)
    lines.append(f"    {'total':12s} {pre_cost.gpu_hours + ft_cost.gpu_hours:>12,.1f} GPU-h")
    # fine-tuning: the padded figure and the paper's units
    lines += (finetuning_comparison(spec, plan, ft_cost) + trial_summary(spec, study.trial_memory)
              + summary(spec, study.run_memory))
    if verbose:
        lines.append("  runs:")
        for run, run_memory in zip(plan.runs, study.run_memory):
            size = parameters_text(parameter_count(run.model_config, include_embedding=True)) \
                if run.model_config else "size from its source"
            extra = f", from {run.init_from}" if run.init_from else ""
            if (branch := branches.get(run.name)) and spec.pretraining.share_prefixes:
                extra += f", from {branch.trunk} at step {branch.step:,}, trains {run.total_steps - branch.step:,}"
            elif branch:
                extra += f", from scratch (shares its first {branch.step:,} steps with {branch.trunk})"
            lines.append(f"    {run.name}  ({run.objective}, {run.total_steps:,} steps, {size}{extra}, "
                         f"checkpoints {list(run.checkpoint_steps)}, {run_figure(run_memory)})")
    return lines + protocol_lines(spec, plan, verbose)  # departures from a claimed protocol (#36)
