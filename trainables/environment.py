"""What shapes a study's numbers besides its spec, as a worker sees it (sweeper.store.environments).

Run on a worker shaped like a fine-tuning trial (sweeper.run.environment): its CPU vector path,
thread count and GPU are those trials compute with.
"""
from __future__ import annotations

import os
import platform
from importlib import metadata

import torch

from sweeper.contract import cpu

PACKAGES = ("torch", "transformers", "tokenizers", "ray", "numpy", "pyarrow", "scipy", "pandas", "flash-attn")
"""The libraries whose versions are recorded (those not installed are left out)."""


def installed_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def cpu_model() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo; `platform.processor()` elsewhere): the same torch
    path (AVX2) on two CPU models can differ 2x in speed, which `sweeper plan`'s estimate feels."""
    return cpu.cpuinfo_field("model name") or platform.processor() or None


def describe() -> dict:
    """The environment's fields (sweeper.store.environments.SHAPING)."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu_model": cpu_model(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(), "gpu": gpu, "cuda": torch.version.cuda if gpu else None,
            "packages": installed_versions()}
