"""Warmup-stable-decay learning-rate schedule: one schedule spans every objective phase."""
from __future__ import annotations


def wsd_lr(step: int, *, peak_lr: float, total_steps: int, warmup_steps: int, decay_steps: int,
           min_lr_ratio: float = 0.0) -> float:
    """LR at 0-based `step`: linear warmup to peak, constant, then linear decay to min over the
    last `decay_steps` (the paper: 2,000 warmup, 2,000 decay to 0 over 42,000 steps)."""
    if warmup_steps > 0 and step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    decay_start = total_steps - decay_steps
    if step < decay_start or decay_steps == 0:
        return peak_lr
    progress = min(1.0, (step - decay_start + 1) / decay_steps)
    return peak_lr * (1.0 - progress * (1.0 - min_lr_ratio))


def linear_warmup_decay_lr(step: int, *, peak_lr: float, total_steps: int, warmup_ratio: float) -> float:
    """Fine-tuning schedule: warmup over `warmup_ratio` of the steps, then linear decay to 0."""
    warmup = max(1, round(warmup_ratio * total_steps))
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    return peak_lr * max(0.0, (total_steps - step) / max(1, total_steps - warmup))
