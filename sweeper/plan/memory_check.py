"""`sweeper plan`'s memory check: every pretraining run against a worker's accelerator memory
(`resources.gpu_memory_gb`), every (model, task) pair of the fine-tuning grid against a trial's
GPU share, the lines that summarise them and the refusal that names the settings that would fit
(the micro batches tried: the batch's divisors, sweeper.plan.divisors), and a node's fine-tuning
actors against its host memory (sweeper.plan.host_memory). The estimates themselves are
sweeper.plan.memory's.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd

from sweeper.plan.divisors import divisors, largest_fitting
from sweeper.plan.host_memory import host_line, host_refusal
from sweeper.plan.memory import (FIT_SHARE, GB, Device, MemoryEstimate, MemorySetup, estimate_peak,
                                 estimate_trial_peak)
from sweeper.plan.study_plan import task_points
from sweeper.contract.registry import family_of, get_task
from sweeper.spec.parsing import values_of


@dataclass(frozen=True, kw_only=True, slots=True)
class RunMemory:
    """One run's estimate against what a worker has."""

    run: str
    preset: str
    setup: MemorySetup | None
    """None: the model's size is known only at run time (a Hugging Face source)."""
    estimate: MemoryEstimate | None
    budget: float | None
    """Bytes a worker may use (FIT_SHARE of its GPU memory); None on CPU-only specs."""

    @property
    def fits(self) -> bool:
        return self.budget is None or self.estimate is None or self.estimate.peak <= self.budget


def study_device(spec) -> Device:
    """What the loop runs on: CUDA under bf16 autocast when workers have GPUs."""
    return "cuda-bf16" if spec.resources.gpus_per_worker > 0 else "cpu-fp32"


def worker_budget(spec) -> float | None:
    """A worker's usable accelerator memory: gpu_memory_gb x FIT_SHARE, scaled down when workers
    share a GPU (gpus_per_worker < 1); a worker with several GPUs trains on one."""
    gpus = spec.resources.gpus_per_worker
    return spec.resources.gpu_memory_gb * GB * min(1.0, gpus) * FIT_SHARE if gpus > 0 else None


def predicted_share(run) -> float:
    """The largest share of tokens any phase computes logits for (MLM: its mask ratio)."""
    return max(float(phase.settings.get("mask_ratio", 1.0)) for phase in run.phases)


def run_setup(spec, run) -> MemorySetup:
    workers = max(1, spec.resources.pretraining_workers)
    share = run.global_batch_size // workers
    micro = spec.pretraining.micro_batch_size or share
    return MemorySetup(micro_batch_size=micro, accumulates=micro < share, seq_len=run.seq_len,
                       predicted_share=predicted_share(run), workers=workers, sharding=spec.resources.sharding,
                       activation_checkpointing=spec.pretraining.activation_checkpointing,
                       device=study_device(spec))


def check_runs(spec, runs) -> list[RunMemory]:
    budget = worker_budget(spec)
    checked = []
    for run in runs:
        setup = run_setup(spec, run) if run.model_config else None
        estimate = estimate_peak(run.model_config, setup) if setup else None
        checked.append(RunMemory(run=run.name, preset=run.preset, setup=setup, estimate=estimate, budget=budget))
    return checked


def micro_batch_choices(spec) -> list[int]:
    """Micro batches the spec accepts, ascending: the divisors of a worker's share of the global
    batch (found from its prime factors: a share of 2^40 is not tried number by number)."""
    share = gcd(*values_of(spec.pretraining.global_batch_size)) // max(1, spec.resources.pretraining_workers)
    return divisors(max(1, share))


def largest_fitting_micro_batch(config: dict, setup: MemorySetup, choices: list[int], budget: float) -> int | None:
    """The largest of the ascending `choices` whose estimate fits `budget` (the estimate grows
    with the micro batch: a bisection)."""
    return largest_fitting(choices, lambda m: estimate_peak(config, replace(setup, micro_batch_size=m)).peak <= budget)


def fitting_settings(spec, runs) -> list[str]:
    """Settings that would make every run of `runs` fit (they share one spec, so one value each):
    the largest micro batch as things are, then with fsdp sharding, then with activation
    checkpointing, then with both; each with the largest micro batch that fits under it."""
    budget, choices = worker_budget(spec), micro_batch_choices(spec)
    known = [(run.model_config, run_setup(spec, run)) for run in runs if run.model_config]
    if budget is None or not known:
        return []
    workers = max(1, spec.resources.pretraining_workers)
    variants = [({}, "")]
    if workers > 1 and spec.resources.sharding != "fsdp":
        variants.append(({"sharding": "fsdp"}, "resources.sharding: fsdp"))
    if not spec.pretraining.activation_checkpointing:
        variants.append(({"activation_checkpointing": True}, "pretraining.activation_checkpointing: true"))
    if len(variants) == 3:
        variants.append(({"sharding": "fsdp", "activation_checkpointing": True},
                         "resources.sharding: fsdp + pretraining.activation_checkpointing: true"))
    lines = []
    for changes, words in variants:
        micros = [largest_fitting_micro_batch(config, replace(setup, **changes), choices, budget)
                  for config, setup in known]
        if None in micros:
            lines.append(f"{words or 'as set'}: does not fit even at micro batch 1")
            continue
        micro = min(micros)
        worst = max(estimate_peak(config, replace(setup, micro_batch_size=micro, **changes)).peak
                    for config, setup in known)
        setting = f"pretraining.micro_batch_size: {micro}"
        lines.append(f"{words + ' + ' if words else ''}{setting} (largest estimate {worst / GB:.1f} GB)")
    if workers <= 1:
        lines.append("resources.sharding: fsdp shards only over pretraining_workers > 1")
    return lines


def refusal(spec, checked: list[RunMemory], runs) -> str | None:
    """Why the plan cannot run on the accelerators it states (None: every run fits)."""
    failing = [memory for memory in checked if not memory.fits]
    if not failing:
        return None
    gpu = spec.resources.gpu_memory_gb * min(1.0, spec.resources.gpus_per_worker)
    lines = [f"{len(failing)} pretraining run(s) would not fit in a worker's GPU memory "
             f"(resources.gpu_memory_gb {spec.resources.gpu_memory_gb:g} x gpus_per_worker "
             f"{min(1.0, spec.resources.gpus_per_worker):g} = {gpu:g} GB; a run may use {FIT_SHARE:.0%}, "
             f"{failing[0].budget / GB:.1f} GB):"]
    groups: dict[tuple[str, str], list[str]] = {}  # runs with the same estimate share a line
    for memory in failing:
        groups.setdefault((f"{memory.estimate.peak_gb:.1f}", describe(memory.setup)), []).append(memory.run)
    lines += [
        f"  {', '.join(names)}: estimated {peak} GB per worker ({setup})" for (peak, setup), names in groups.items()
    ]
    names = {memory.run for memory in failing}
    lines.append("Settings that would make every such run fit:")
    lines += [f"  {line}" for line in fitting_settings(spec, [run for run in runs if run.name in names])]
    return "\n".join(lines)


def describe(setup: MemorySetup) -> str:
    return (f"micro batch {setup.micro_batch_size} x {setup.seq_len:,} tokens, {setup.workers} worker(s), "
            f"{setup.sharding if setup.workers > 1 else 'unsharded'}, activation checkpointing "
            f"{'on' if setup.activation_checkpointing else 'off'}, {setup.device}")


def summary(spec, checked: list[RunMemory]) -> list[str]:
    """`sweeper plan`'s memory lines: one per preset (range of its runs' estimates); `-v` adds
    each run's own figure to its run line (`run_figure`)."""
    if not checked:
        return []
    setup = next((memory.setup for memory in checked if memory.setup), None)
    budget = worker_budget(spec)
    against = (f"a run may use {FIT_SHARE:.0%} of resources.gpu_memory_gb "
               f"{spec.resources.gpu_memory_gb * min(1.0, spec.resources.gpus_per_worker):g} = {budget / GB:.1f} GB"
               if budget else "for information: the workers have no GPU")
    lines = [f"  estimated peak memory per worker ({describe(setup) if setup else study_device(spec)}; {against}):"]
    presets: dict[str, list[RunMemory]] = {}
    for memory in checked:
        presets.setdefault(memory.preset, []).append(memory)
    for preset, group in presets.items():
        peaks = [memory.estimate.peak_gb for memory in group if memory.estimate]
        count = f"{len(group)} run{'s' if len(group) > 1 else ''}"
        if not peaks:
            lines.append(f"    {preset:10s} {count:>8s}   sized at run time (a Hugging Face source)")
            continue
        spread = f"{min(peaks):.1f} GB" if max(peaks) - min(peaks) < 0.05 else f"{min(peaks):.1f}-{max(peaks):.1f} GB"
        failing = sum(not memory.fits for memory in group)
        verdict = "" if budget is None else ("  fit" if not failing else f"  {failing} do not fit")
        lines.append(f"    {preset:10s} {count:>8s}   {spread}{verdict}")
    return lines


def run_figure(memory: RunMemory) -> str:
    """The memory part of a run's `-v` line."""
    if memory.estimate is None:
        return "memory sized at run time"
    verdict = "" if memory.budget is None else (" (fits)" if memory.fits else " (DOES NOT FIT)")
    return f"memory {memory.estimate.peak_gb:.1f} GB per worker{verdict}"


# --- fine-tuning: one trial against its share of a GPU --------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class TrialMemory:
    """One (model, task) pair of the fine-tuning grid against what a trial may use."""

    preset: str
    config: dict
    """The preset's LlamaEncoderConfig fields."""
    task: str
    forward_rows: int
    """Rows one example puts in a training forward pass (its family's `FamilyEstimate.forward_rows`)."""
    rows: int
    """Rows per training forward pass: the micro batch x forward_rows (retrieval: queries and documents)."""
    estimate: MemoryEstimate
    budget: float | None
    """Bytes a trial may use (FIT_SHARE of its GPU share); None when trials run on CPUs."""

    @property
    def fits(self) -> bool:
        return self.budget is None or self.estimate.peak <= self.budget


def trial_budget(spec) -> float | None:
    """A trial's usable accelerator memory: gpus_per_trial (at most one GPU: the loop trains on
    one device) x gpu_memory_gb x FIT_SHARE."""
    gpus = spec.resources.gpus_per_trial
    return spec.resources.gpu_memory_gb * GB * min(1.0, gpus) * FIT_SHARE if gpus > 0 else None


def trial_device(spec) -> Device:
    return "cuda-bf16" if spec.resources.gpus_per_trial > 0 else "cpu-fp32"


def trial_shapes(spec, task: str) -> list[tuple[int, int]]:
    """(micro batch, max_length) of each distinct shape the task's trials take (swept batch sizes
    and lengths included), largest first."""
    micro = spec.finetuning.micro_batch_size
    shapes = {(min(micro, protocol.batch_size), protocol.max_length) for _, protocol in task_points(spec, task)}
    return sorted(shapes, key=lambda shape: shape[0] * shape[1], reverse=True)


def largest_shape(spec) -> tuple[int, int, int]:
    """(micro batch, max_length, batch size) at their largest over the grid's points: what the
    memory lines and the refusal name."""
    ft = spec.finetuning.at({})
    points = [spec.finetuning.at(point) for point in spec.finetuning.points()]
    return (max(min(ft.micro_batch_size, p.batch_size) for p in points), max(p.max_length for p in points),
            max(p.batch_size for p in points))


def check_trials(spec, checkpoints) -> list[TrialMemory]:
    """Every (architecture, task) pair of the grid, an architecture being a run's preset or a
    checkpoint from elsewhere (sized from its config.json): trials of one pair share their
    estimate, that of their largest shape (micro batch x max_length) when batch size or length
    is swept."""
    ft, budget, checked, seen = spec.finetuning, trial_budget(spec), [], set()
    for checkpoint in checkpoints:
        config = checkpoint.model_config
        label = checkpoint.run.preset if checkpoint.run is not None else checkpoint.external.name
        if not config or label in seen:
            continue
        seen.add(label)
        for task in ft.tasks:
            if get_task(task).train_task:  # scored inside its training task's trial
                continue
            forward_rows = family_of(get_task(task).family).estimate.forward_rows
            estimates = [(estimate_trial_peak(config, micro * forward_rows, length, ft.eval_batch_size,
                                              trial_device(spec)), micro) for micro, length in trial_shapes(spec, task)]
            estimate, micro = max(estimates, key=lambda pair: pair[0].peak)
            checked.append(TrialMemory(preset=label, config=config, task=task,
                                       forward_rows=forward_rows, rows=micro * forward_rows, estimate=estimate,
                                       budget=budget))
    return checked


def trial_summary(spec, checked: list[TrialMemory]) -> list[str]:
    """`sweeper plan`'s fine-tuning memory lines: per preset, the range over its tasks."""
    if not checked:
        return []
    budget = trial_budget(spec)
    against = (f"a trial may use {FIT_SHARE:.0%} of gpus_per_trial {min(1.0, spec.resources.gpus_per_trial):g} x "
               f"gpu_memory_gb {spec.resources.gpu_memory_gb:g} = {budget / GB:.1f} GB"
               if budget else "for information: trials have no GPU")
    micro, length, _ = largest_shape(spec)
    lines = [f"  estimated peak memory per fine-tuning trial (micro batch {micro} "
             f"x {length:,} tokens, {trial_device(spec)}; {against}):"]
    presets: dict[str, list[TrialMemory]] = {}
    for memory in checked:
        presets.setdefault(memory.preset, []).append(memory)
    for preset, group in presets.items():
        peaks = [memory.estimate.peak_gb for memory in group]
        spread = f"{min(peaks):.1f} GB" if max(peaks) - min(peaks) < 0.05 else f"{min(peaks):.1f}-{max(peaks):.1f} GB"
        failing = [memory.task for memory in group if not memory.fits]
        verdict = "" if budget is None else ("  fit" if not failing else f"  do not fit: {', '.join(failing)}")
        lines.append(f"    {preset:10s} {len(group):>3d} tasks   {spread}{verdict}")
    return lines + host_line(spec, checked)


def trial_refusal(spec, checked: list[TrialMemory]) -> str | None:
    """Why the fine-tuning grid cannot run: a trial above its GPU share, or a node's actors above
    its host memory (sweeper.plan.host_memory); None when it can."""
    return gpu_refusal(spec, checked) or host_refusal(spec, checked)


def gpu_refusal(spec, checked: list[TrialMemory]) -> str | None:
    """Why the fine-tuning grid cannot run on the GPU share it states (None: every trial fits),
    with the settings that would fit."""
    failing = [memory for memory in checked if not memory.fits]
    if not failing:
        return None
    ft, budget = spec.finetuning, trial_budget(spec)
    largest_micro_batch, max_length, _ = largest_shape(spec)
    lines = [f"fine-tuning trials would not fit in their GPU share (resources.gpus_per_trial "
             f"{spec.resources.gpus_per_trial:g} x gpu_memory_gb {spec.resources.gpu_memory_gb:g}; a trial may use "
             f"{FIT_SHARE:.0%}, {budget / GB:.1f} GB) at finetuning.micro_batch_size "
             f"{largest_micro_batch} x max_length {max_length:,}:"]
    groups: dict[tuple[str, str, int], list[str]] = {}  # tasks with the same estimate share a line
    for memory in failing:
        groups.setdefault((memory.preset, f"{memory.estimate.peak_gb:.1f}", memory.rows), []).append(memory.task)
    lines += [f"  {preset} on {', '.join(tasks)}: estimated {peak} GB per trial ({rows} rows per forward pass)"
              for (preset, peak, rows), tasks in groups.items()]
    lines.append("Settings that would make every trial fit (the largest micro batch dividing batch_size):")
    # A micro batch must divide every swept batch size: the divisors of their gcd.
    batch_sizes = {spec.finetuning.at(point).batch_size for point in spec.finetuning.points()}
    choices = divisors(gcd(*batch_sizes))

    def largest_micro(gpus: float, eval_batch: int) -> int | None:
        room = spec.resources.gpu_memory_gb * GB * min(1.0, gpus) * FIT_SHARE
        return largest_fitting(choices, lambda m: all(
            estimate_trial_peak(memory.config, m * memory.forward_rows, max_length, eval_batch).peak <= room
            for memory in failing))

    for gpus in sorted({spec.resources.gpus_per_trial, 0.5, 1.0}):
        if gpus < spec.resources.gpus_per_trial:
            continue
        change = "" if gpus == spec.resources.gpus_per_trial else f"resources.gpus_per_trial: {gpus:g} + "
        for eval_batch in (ft.eval_batch_size, 32, 8):  # scoring batches of max_length rows can be the peak
            if eval_batch > ft.eval_batch_size or (micro := largest_micro(gpus, eval_batch)) is None:
                continue
            extra = "" if eval_batch == ft.eval_batch_size else f" + finetuning.eval_batch_size: {eval_batch}"
            lines.append(f"  {change}finetuning.micro_batch_size: {micro}{extra}")
            break
        else:
            lines.append(f"  {change or 'as set: '}does not fit even at micro batch 1 and eval batch 8 "
                         f"(a smaller finetuning.max_length)")
    return "\n".join(lines)
