"""Cost model behind `sweeper plan`: training FLOPs = 6 x parameters x tokens (forward 2, backward 4).

Parameters exclude the input embedding (a lookup costs no FLOPs) and include the LM head.
GPU-hours = FLOPs / (peak TFLOP/s x utilisation x 3600). Fine-tuning counts the task's `max_steps`
steps of `batch_size x max_length` tokens (the one-epoch cap is data-dependent and ignored: an
upper bound; an evaluation-only retrieval set trains nothing) plus a forward pass
(2 x parameters x tokens) over `finetune_eval_examples`.
"""
from __future__ import annotations

from dataclasses import dataclass

from sweeper.catalog import get_task
from sweeper.plan import StudyPlan, finetune_protocol
from sweeper.runs import PretrainingRun
from sweeper.spec import StudySpec


def parameter_count(config: dict, include_embedding: bool = False) -> int:
    """Exact parameter count of the llama_encoder backbone + LM head for a config dict."""
    hidden, ffn, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head_dim = hidden // config["num_attention_heads"]
    attention = hidden * head_dim * (2 * config["num_attention_heads"] + 2 * config["num_key_value_heads"])
    per_layer = attention + 3 * hidden * ffn + 2 * hidden
    total = layers * per_layer + hidden + config["vocab_size"] * hidden  # final norm + LM head
    return total + (config["vocab_size"] * hidden if include_embedding else 0)


@dataclass(frozen=True, slots=True)
class StageCost:
    flops: float
    gpu_hours: float
    unknown: int
    """Items whose size is only known at run time (Hugging Face sources): not in the figures."""


def gpu_hours(flops: float, spec: StudySpec) -> float:
    return flops / (spec.cost.gpu_peak_tflops * 1e12 * spec.cost.utilization * 3600)


def pretraining_cost(spec: StudySpec, runs: tuple[PretrainingRun, ...]) -> StageCost:
    tokens_per_step = spec.pretraining.global_batch_size * spec.data.seq_len
    flops, unknown = 0.0, 0
    for run in runs:
        if not run.model_config:
            unknown += 1
            continue
        flops += 6 * parameter_count(run.model_config) * run.total_steps * tokens_per_step
    return StageCost(flops, gpu_hours(flops, spec), unknown)


def finetuning_cost(spec: StudySpec, plan: StudyPlan) -> StageCost:
    ft = spec.finetuning
    train_tokens = {task: 0 if get_task(task).train_task else
                    finetune_protocol(spec, task).max_steps * ft.batch_size * ft.max_length for task in ft.tasks}
    eval_tokens = spec.cost.finetune_eval_examples * ft.max_length
    flops, unknown = 0.0, 0
    for trial in plan.trials:
        config = trial.checkpoint.run.model_config
        if not config:
            unknown += 1
            continue
        backbone = parameter_count(config) - config["vocab_size"] * config["hidden_size"]  # no LM head
        flops += 6 * backbone * train_tokens[trial.task] + 2 * backbone * eval_tokens
    return StageCost(flops, gpu_hours(flops, spec), unknown)
