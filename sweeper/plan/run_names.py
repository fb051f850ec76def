"""Run names: the authors' scheme (`610m-mlm40-42k`, `610m-clm-10k-mlm40-42k`) and the tags a
swept field adds (`610m-mlm40-42k-lr1e-3`, `tiny-mlm40-600-layers2`).

Each phase contributes its objective's tag (sweeper.contract.registry) and its end step; a swept run
field whose value differs from its base adds one tag, in the order of AXIS_TAGS (model overrides
first). Continued-pretraining names (`cpt_name`) are sweeper.plan.runs'.
"""
from __future__ import annotations

from sweeper.contract import registry
from sweeper.contract.configs import PhaseConfig


def format_steps(steps: int) -> str:
    """The authors' step notation: 42000 -> '42k', 1500 -> '1500'."""
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


def run_name(preset: str, phases: tuple[PhaseConfig, ...]) -> str:
    """`610m-mlm40-42k`, `610m-clm-42k`, `610m-clm-10k-mlm40-42k`: each phase's tag, then its end."""
    parts = [f"{registry.objective_of(p.objective).run_tag(p.settings)}-{format_steps(p.end_step)}" for p in phases]
    return "-".join([preset, *parts])


# --- ablation axes -----------------------------------------------------------------------------

AXIS_TAGS = {"seq_len": "seq", "global_batch_size": "bs", "optimizer.peak_lr": "lr", "optimizer.betas": "betas",
             "optimizer.eps": "eps", "optimizer.weight_decay": "wd", "optimizer.grad_clip": "clip",
             "warmup_steps": "warmup", "decay_steps": "decay"}
"""Swept run field (key path under `pretraining`, or `seq_len` of `data`) -> its tag in run names,
in the order tags follow the name."""
OVERRIDE_TAGS = {"num_hidden_layers": "layers", "hidden_size": "hidden", "intermediate_size": "ffn",
                 "num_attention_heads": "heads", "num_key_value_heads": "kvheads", "rope_theta": "rope",
                 "rms_norm_eps": "normeps", "initializer_range": "init", "max_position_embeddings": "pos",
                 "vocab_size": "vocab"}
"""Model override -> its tag in run names (other fields: their own name)."""


def short_number(value) -> str:
    """A value as a run-name tag writes it: 1e-3, 2.5e-4, 0.1, 512, 0.9-0.98 (a pair)."""
    if isinstance(value, (tuple, list)):
        return "-".join(short_number(v) for v in value)
    if isinstance(value, int) or value == 0 or 1e-2 <= abs(value) < 1e5:
        return f"{value:g}" if isinstance(value, float) else str(value)
    mantissa, exponent = f"{value:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def tag(path: str, value) -> str:
    if path.startswith("model."):
        return f"{OVERRIDE_TAGS.get(path[6:], path[6:])}{short_number(value)}"
    if path in ("warmup_steps", "decay_steps"):
        return f"{AXIS_TAGS[path]}{format_steps(value)}"
    return f"{AXIS_TAGS[path]}{short_number(value)}"
