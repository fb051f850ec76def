"""This machine's CPU as Linux describes it (/proc/cpuinfo): read by the plan (its calibration's
CPU had AVX512) and by the worker's environment record (the CPU's model)."""
from __future__ import annotations

CPUINFO = "/proc/cpuinfo"
"""Where Linux describes the CPU."""


def cpuinfo_field(name: str) -> str | None:
    """The first processor's `name` field (`model name`, `flags`), or None where it cannot be read."""
    try:
        with open(CPUINFO, encoding="utf-8") as lines:
            for line in lines:
                if line.split(":", 1)[0].strip() == name:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
