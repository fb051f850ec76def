"""Cost model behind `sweeper plan`: FLOPs = 6 x parameters x tokens trained (forward 2, backward
4) + 2 x parameters x tokens only run forward (scoring, embedding).

Parameters exclude the input embedding (a lookup costs no FLOPs). Pretraining includes the LM
head; fine-tuning drops it (the task heads are a few thousand weights). GPU-hours = FLOPs /
(peak TFLOP/s x utilisation x 3600).

Fine-tuning counts real tokens, from each task's published sizes and mean lengths
(`sweeper.contract.registry.task_statistics`), each length capped at `finetuning.max_length`, as the
task's family declares them (`FamilyInfo.estimate`, sweeper.contract.estimates; this module names no
family):
- training: min(max_steps, ceil(epochs x train examples x rows per example / batch)) steps of
  `batch_size` rows, as the worker loop runs them (an extractive-QA example is its windows, a
  retrieval example one row of a query and its positive document);
- scoring: the validation and test splits once at the end (and validation every `eval_every`
  steps when set), each example's scored tokens as its family declares (retrieval embeds each
  split's queries and its labelled document pool);
- a retrieval trial also scores its evaluation-only companions (NQ and MLDR for MS MARCO) with
  the same weights, so their cost is the training trial's and their own trials cost nothing.
A task without statistics (a plugin's that declares none) is costed generically: padded max_length tokens and
`cost.finetune_eval_examples` scored examples. The worker pads every row to max_length today
(trainables/tasks/*.py): these figures are what the paper's dynamically padded runs compute,
the work a length-bucketing loop would do; padded, the worker does more (`padded_finetuning_cost`).
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sweeper.plan.branches import Branch, new_steps, shared_prefixes
from sweeper.plan.checkpoint_sources import PACKING_TESTED, ExternalCheckpoint
from sweeper.plan.runs import PretrainingRun
from sweeper.plan.study_plan import StudyPlan, finetune_protocol, protocol_text
from sweeper.contract import cpu
from sweeper.contract.configs import FinetuneProtocol
from sweeper.contract.estimates import RowShape
from sweeper.contract.registry import family_of, get_task, task_statistics
from sweeper.spec.study import StudySpec
from sweeper.store import storage

MI250X_PEAK_TFLOPS = 383.0
"""AMD Instinct MI250X dense bf16 peak (the paper's accelerator, Adastra): 383 TFLOP/s per
module of two GCDs (191.5 each). Used only to restate the estimate in the paper's units."""
PAPER_FINETUNING_GPU_HOURS = 9_000
"""The paper's fine-tuning compute as issue #15 quotes it: ~9k MI250X GPU-hours for its
15-18k fine-tuning runs (whether a "GPU" there is a module or a GCD is not stated)."""


def parameter_count(config: dict, include_embedding: bool = False) -> int:
    """Exact parameter count of the llama_encoder backbone + LM head for a config dict."""
    hidden, ffn, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = hidden // config["num_attention_heads"]
    attention = hidden * head_dim * (2 * config["num_attention_heads"] + 2 * config["num_key_value_heads"])
    per_layer = attention + 3 * hidden * ffn + 2 * hidden
    total = layers * per_layer + hidden + config["vocab_size"] * hidden  # final norm + LM head
    return total + (config["vocab_size"] * hidden if include_embedding else 0)


def backbone_count(config: dict) -> int:
    """Parameters a fine-tuning token passes through: the blocks and final norm (no embedding
    lookup, no LM head)."""
    return parameter_count(config) - config["vocab_size"] * config["hidden_size"]


@dataclass(frozen=True, slots=True)
class StageCost:
    flops: float
    gpu_hours: float
    unknown: int
    """Items whose size is only known at run time (Hugging Face sources): not in the figures."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialTokens:
    """Tokens one trial of a task runs through the backbone."""

    trained: float
    """Forward and backward (6 x parameters each)."""
    scored: float
    """Forward only: scoring and embedding (2 x parameters each), companions included."""

    def flops(self, parameters: int) -> float:
        return 6 * parameters * self.trained + 2 * parameters * self.scored


def gpu_hours(flops: float, spec: StudySpec) -> float:
    return flops / (spec.cost.gpu_peak_tflops * 1e12 * spec.cost.utilization * 3600)


def pretraining_cost(spec: StudySpec, runs: tuple[PretrainingRun, ...],
                     branches: Mapping[str, Branch] | None = None) -> StageCost:
    """Every run's steps; with `branches` (sweeper.plan.branches) only the steps a run trains
    itself, its trunk's prefix left out."""
    flops, unknown = 0.0, 0
    for run in runs:
        if not run.model_config:
            unknown += 1
            continue
        steps = new_steps(run, branches) if branches is not None else run.total_steps
        flops += 6 * parameter_count(run.model_config) * steps * run.tokens_per_step
    return StageCost(flops, gpu_hours(flops, spec), unknown)


# --- fine-tuning: tokens per trial from the task's statistics ---------------------------------

def companions(spec: StudySpec, task: str) -> list[str]:
    """The study's evaluation-only sets scored with `task`'s trained weights."""
    return [other for other in spec.finetuning.tasks if get_task(other).train_task == task]


def trial_tokens(spec: StudySpec, task: str, padded: bool = False,
                 protocol: FinetuneProtocol | None = None) -> TrialTokens | None:
    """Tokens one trial of `task` runs with `protocol` (default: the task's protocol at the
    spec's first point), or None when the task has no statistics."""
    ft, info, stats = spec.finetuning, get_task(task), task_statistics(task)
    if stats is None:
        return None
    if info.train_task:  # scored inside its training task's trials (see `companions`)
        return TrialTokens(trained=0, scored=0)
    protocol = protocol or finetune_protocol(spec, task)
    estimate = family_of(info.family).estimate
    stride = protocol.family_settings.get("doc_stride", ft.at({}).doc_stride)
    shape = RowShape(protocol.max_length, stride, padded, protocol.scoring)
    train, validation, test = stats.split_rows(ft.max_train_examples, ft.max_eval_examples)
    # The loop's batches hold rows (a QA batch holds windows, not whole examples): steps follow them.
    rows_per_example, tokens_per_row = estimate.training_rows(stats, shape)
    rows = train * rows_per_example
    steps = min(protocol.max_steps, math.ceil(protocol.epochs * rows / protocol.batch_size))
    evaluations = 1 + (steps // ft.eval_every if ft.eval_every else 0)
    per_scored = estimate.tokens_scored(stats, shape)
    scored = evaluations * (validation * per_scored) + test * per_scored
    for companion in companions(spec, task):
        if (other := task_statistics(companion)) is not None:
            _, other_validation, other_test = other.split_rows(ft.max_train_examples, ft.max_eval_examples)
            other_estimate = family_of(get_task(companion).family).estimate
            scored += (other_validation + other_test) * other_estimate.tokens_scored(other, shape)
    return TrialTokens(trained=steps * protocol.batch_size * tokens_per_row, scored=scored)


def fallback_tokens(spec: StudySpec, task: str, protocol: FinetuneProtocol | None = None) -> TrialTokens:
    """A task without statistics: max_steps full batches of padded rows, and
    `cost.finetune_eval_examples` padded rows scored (an evaluation-only set trains nothing)."""
    protocol = protocol or finetune_protocol(spec, task)
    trained = 0 if get_task(task).train_task else protocol.max_steps * protocol.batch_size * protocol.max_length
    return TrialTokens(trained=trained, scored=spec.cost.finetune_eval_examples * protocol.max_length)


def trials_flops(spec: StudySpec, plan: StudyPlan, padded: bool = False) -> Iterator[float | None]:
    """Each planned trial's FLOPs in plan order (`trial_flops`; None: its backbone is sized at run
    time). Trials share their protocol object (a grid's seeds and checkpoints): its tokens are
    found once per object, and a backbone counted once per checkpoint, not once per trial."""
    tokens: dict[tuple[str, str], TrialTokens] = {}
    by_object: dict[tuple[str, int], TrialTokens] = {}
    counts: dict[int, int] = {}
    for trial in plan.trials:
        config = trial.checkpoint.model_config
        if not config:
            yield None
            continue
        held = (trial.task, id(trial.protocol))
        if held not in by_object:
            cell = (trial.task, protocol_text(trial.protocol))
            if cell not in tokens:
                tokens[cell] = (trial_tokens(spec, trial.task, padded, trial.protocol)
                                or fallback_tokens(spec, trial.task, trial.protocol))
            by_object[held] = tokens[cell]
        if id(trial.checkpoint) not in counts:
            counts[id(trial.checkpoint)] = backbone_count(config)
        yield by_object[held].flops(counts[id(trial.checkpoint)])


def finetuning_cost(spec: StudySpec, plan: StudyPlan, padded: bool = False) -> StageCost:
    """Every planned trial's FLOPs, its tokens from its own protocol (swept fields included)."""
    flops, unknown = 0.0, 0
    for each in trials_flops(spec, plan, padded):
        if each is None:
            unknown += 1
        else:
            flops += each
    return StageCost(flops, gpu_hours(flops, spec), unknown)


def trial_flops(spec: StudySpec, trial) -> float | None:
    """One planned trial's FLOPs as `finetuning_cost` counts them (companions' scoring included,
    0 for an evaluation-only set), or None when its backbone is sized at run time. What the
    fine-tuning ETA weighs trials by (sweeper.run.progress)."""
    config = trial.checkpoint.model_config
    if not config:
        return None
    tokens = trial_tokens(spec, trial.task, protocol=trial.protocol) or fallback_tokens(
        spec, trial.task, trial.protocol
    )
    return tokens.flops(backbone_count(config))


def padded_finetuning_cost(spec: StudySpec, plan: StudyPlan) -> StageCost:
    """The fine-tuning cost with every row padded to max_length, as the worker runs it today."""
    return finetuning_cost(spec, plan, padded=True)


def mi250x_hours(spec: StudySpec, cost: StageCost) -> float:
    """The same FLOPs on MI250X modules (the paper's accelerator) at the spec's utilisation."""
    return cost.flops / (MI250X_PEAK_TFLOPS * 1e12 * spec.cost.utilization * 3600)


def finetuning_comparison(spec: StudySpec, plan: StudyPlan, cost: StageCost) -> list[str]:
    """`sweeper plan`'s lines after the stage costs: fine-tuning with every row padded (what a
    trainer without packing pays; the worker packs, `trainables.tasks.packing`), and both figures in the paper's units
    (GPU-hours scale with the ratio of the peaks)."""
    padded = padded_finetuning_cost(spec, plan)
    return [f"    {'(padded)':12s} {padded.gpu_hours:>12,.1f} GPU-h  fine-tuning with every row padded to max_length "
            f"(without packing)",
            f"    in the paper's units ({MI250X_PEAK_TFLOPS:g} TFLOP/s per MI250X, same utilisation): fine-tuning "
            f"{mi250x_hours(spec, cost):,.0f} MI250X-hours, padded {mi250x_hours(spec, padded):,.0f} "
            f"(the paper: ~{PAPER_FINETUNING_GPU_HOURS:,})"]


def describe_external(external: ExternalCheckpoint) -> str:
    """One line of `sweeper plan` for a checkpoint from elsewhere: what it is, its size, how its
    rows will run."""
    count = external.meta.parameters or (parameter_count(external.sizes) if external.sizes else None)
    size = ("size unknown until imported" if count is None else
            f"{count / 1e6:,.1f}M params" if count >= 1e6 else f"{count:,} params")
    packing = (
        "packed rows (a tested architecture; each worker probes it first)"
        if external.model_type in PACKING_TESTED
        else "packed rows if its probe matches padded ones at the first trial, else dynamic padding"
    )
    pinned = f" at {external.revision[:12]}" if external.revision else ""
    return (f"{external.name}: {external.model_type or 'unknown architecture'}, {size}, "
            f"{storage.redact(external.source)}{pinned}; {packing}")


# --- wall time on CPUs: the cost model calibrated on measured CPU throughput -----------------

CPU_CALIBRATIONS = {
    "avx512": {
        "pretrain_token_s": {"mlm": 7.38e-06, "clm": 2.90e-05},
        "pretrain_flops_per_s": {"mlm": 6.82e10, "clm": 7.58e10},
        "pretrain_run_s": 0.23,
        "trial_s": 0.20,
        "trial_flops_per_s": 2.09e10,
    },
    "avx2": {
        "pretrain_token_s": {"mlm": 1.53e-05, "clm": 3.14e-05},
        "pretrain_flops_per_s": {"mlm": 3.28e10, "clm": 3.27e10},
        "pretrain_run_s": 0.0,
        "trial_s": 0.44,
        "trial_flops_per_s": 9.10e09,
    },
}
"""CPU seconds on one thread, fitted by benchmarks/wall_time.py (docs/benchmarks.md, section 14),
one set per kind of CPU (`cpu_kind`): a pretraining token costs pretrain_token_s + 6 x parameters
/ pretrain_flops_per_s (per objective: MLM scores only the masked positions), a run
pretrain_run_s more (start, final checkpoint); a fine-tuning trial trial_s (backbone load, data,
scoring set-up) + its FLOPs (`trial_flops`) / trial_flops_per_s. torch takes its AVX512 path
where the CPU has it: on an AVX2 CPU (an AMD EPYC, Zen 3) the same nano step took 2.1x the CPU
seconds, and one calibration for both put the default study's estimate at half its time."""


UNKNOWN_CPU_KIND = "avx2"
"""The calibration of a CPU whose flags cannot be read (not Linux, or an ARM CPU's `Features`):
the slower one, so that a plan errs long."""


def cpu_kind(flags: set[str] | None) -> str | None:
    """Which calibration a CPU with `flags` takes (None: its flags unknown)."""
    if flags is None:
        return None
    return "avx512" if "avx512f" in flags else "avx2"


def cpu_flags() -> set[str] | None:
    """This machine's CPU flags (Linux), or None where they cannot be read."""
    flags = cpu.cpuinfo_field("flags")
    return None if flags is None else set(flags.split())


STUDY_SETUP_S = 45.0
"""Seconds of a study before and after its work: Ray's start, the corpus and task data prepared,
the report written (an estimate from the default study's logs, not fitted)."""


@dataclass(frozen=True, slots=True)
class WallTime:
    """`sweeper plan`'s estimate of a CPU study's duration on `cpus` CPUs."""

    seconds: float
    pretraining_cpu_s: float
    """CPU seconds of every run (one thread each CPU a run takes)."""
    finetuning_cpu_s: float
    cpus: int
    unknown: int
    """Runs and trials sized only at run time (a Hugging Face source): not in the figure."""


def run_cpu_seconds(run: PretrainingRun, calibration: dict, start: int = 0) -> float | None:
    """CPU seconds of one pretraining run from step `start` (a branch's) on a CPU `calibration`
    (one of CPU_CALIBRATIONS), or None when its size is known only at run time."""
    if not run.model_config:
        return None
    flops_per_token = 6 * parameter_count(run.model_config)
    seconds = calibration["pretrain_run_s"]
    for phase in run.phases:
        kind = "mlm" if phase.objective == "mlm" else "clm"  # another objective: full logits, as CLM
        per_token = (
            calibration["pretrain_token_s"][kind] + flops_per_token / calibration["pretrain_flops_per_s"][kind]
        )
        seconds += max(0, phase.end_step - max(phase.start_step, start)) * run.tokens_per_step * per_token
    return seconds


def cpu_wall_time(spec: StudySpec, plan: StudyPlan, cpus: int, kind: str) -> WallTime | None:
    """How long the study takes on `cpus` CPUs of `kind` (a key of CPU_CALIBRATIONS), or None
    when it uses GPUs (its figure is the GPU-hours). Runs and trials share the CPUs as `sweeper
    run` schedules them (pretraining beside fine-tuning), so the work is their CPU seconds over
    the CPUs, and no less than its longest chain: a run, the continued run from it, then one
    trial."""
    res = spec.resources
    if res.gpus_per_worker or res.gpus_per_trial:
        return None
    calibration = CPU_CALIBRATIONS[kind]
    unknown, chain, runs = 0, {}, {run.name: run for run in plan.runs}
    branches = shared_prefixes(spec, plan.runs)
    starts = {name: branch.step for name, branch in branches.items()}
    # trunks before their branches (longest first), sources before the runs continued from them
    for run in sorted(plan.runs, key=lambda r: (r.init_from_run is not None, -r.total_steps)):
        seconds = run_cpu_seconds(run, calibration, starts.get(run.name, 0))
        if seconds is None:
            unknown += 1
            continue
        # a branch starts once its trunk has trained the shared steps
        trunk = (
            chain.get(branches[run.name].trunk, 0.0) * starts[run.name] / runs[branches[run.name].trunk].total_steps
            if run.name in branches
            else 0.0
        )
        chain[run.name] = seconds / max(res.cpus_per_worker, 1) + chain.get(run.init_from_run, 0.0) + trunk
    pretraining = sum(run_cpu_seconds(run, calibration, starts.get(run.name, 0)) or 0.0 for run in runs.values())
    finetuning, longest_trial = 0.0, 0.0
    for trial, flops in zip(plan.trials, trials_flops(spec, plan)):
        if get_task(trial.task).train_task:
            continue  # scored by its training task's trial
        if flops is None:
            unknown += 1
            continue
        seconds = calibration["trial_s"] + flops / calibration["trial_flops_per_s"]
        finetuning += seconds
        longest_trial = max(longest_trial, seconds)
    work = (pretraining + finetuning) / max(cpus, 1)
    longest = max(chain.values(), default=0.0) + longest_trial
    return WallTime(STUDY_SETUP_S + max(work, longest), pretraining, finetuning, cpus, unknown)


def duration_text(seconds: float) -> str:
    """`14 min`, `2.5 h`, `3.1 days`: a rough figure in the unit a reader plans with."""
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 72 * 3600 else f"{seconds / 86400:.1f} days"


def wall_time_lines(spec: StudySpec, plan: StudyPlan, cpus: int) -> list[str]:
    """`sweeper plan`'s wall-time lines: a CPU study's on `cpus` CPUs, a GPU study's on one node."""
    kind = cpu_kind(cpu_flags())
    estimate = cpu_wall_time(spec, plan, cpus, kind or UNKNOWN_CPU_KIND)
    if estimate is None:  # a GPU study: its GPU-hours over one node's GPUs, every GPU busy
        gpus = spec.resources.gpus_per_node
        hours = (pretraining_cost(spec, plan.runs, shared_prefixes(spec, plan.runs)).gpu_hours
                 + finetuning_cost(spec, plan).gpu_hours)
        return [f"  estimated wall time on one node of {gpus} GPUs (resources.gpus_per_node): "
                f"~{duration_text(hours * 3600 / gpus)} (the GPU-hours below over its GPUs, every GPU busy)"]
    extra = f" (+ {estimate.unknown} runs or trials sized at run time)" if estimate.unknown else ""
    lines = [f"  estimated wall time on {cpus} CPU{'s' if cpus != 1 else ''} (this machine's): "
             f"~{duration_text(estimate.seconds)}{extra}",
             f"    {estimate.pretraining_cpu_s / 60:,.1f} CPU-min of pretraining + "
             f"{estimate.finetuning_cpu_s / 60:,.1f} "
             f"of fine-tuning over the CPUs, + {STUDY_SETUP_S:.0f} s of set-up",
             f"    calibrated on an {(kind or UNKNOWN_CPU_KIND).upper()} CPU"
             + ("" if kind else " (this one's kind unknown: the slower calibration)")
             + " by benchmarks/wall_time.py (docs/benchmarks.md, section 14)"]
    return lines


def parameters_text(count: int) -> str:
    """`410k params`, `1.2M params`, `610M params`."""
    return f"{count / 1e3:,.0f}k params" if count < 1e6 else f"{count / 1e6:,.{1 if count < 1e7 else 0}f}M params"
