"""The environments a study ran in: `environments.json`, one entry per distinct environment.

What shapes a study's numbers besides its spec: the library versions (torch, transformers,
tokenizers, ray, numpy, ...), the CPU's model, the CPU vector path torch's kernels take
(`torch.backends.cpu.get_cpu_capability()`: AVX512, AVX2, ...; another path sums in another order),
torch's thread count, the GPU model and CUDA version, Python. `sweeper run` probes a worker shaped
like a trial (sweeper.run.environment) and records what it found here, with when and under which
kept spec (sweeper.store.spec_history); a resume on the same environment adds nothing. `sweeper
status` and the report show the latest entry and say when entries differ, since two runs of a
study on different environments need not give the same rows.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, UTC

from sweeper.store import storage
from sweeper.store.layout import StudyLayout

SHAPING = ("python", "machine", "cpu_model", "torch_cpu_capability", "torch_threads", "cpu_count", "gpu", "cuda",
           "packages")
"""The fields that describe an environment (the others say when it was seen)."""


def entries(layout: StudyLayout, damaged: Callable[[str, str], None] | None = None) -> list[dict]:
    """The recorded environments, oldest first ([] when none was recorded or the file is damaged)."""
    found = storage.read_json(layout.environments, default=None, damaged=damaged, kind=list)
    return [entry for entry in found or [] if isinstance(entry, dict)]


def same(kept: dict, found: dict) -> bool:
    """Whether `found` is the environment `kept` recorded. A field the kept entry lacks was added to
    SHAPING after it was written (`cpu_model`): not a difference."""
    return all(kept.get(field) == found.get(field) for field in SHAPING if field in kept)


def record(layout: StudyLayout, environment: dict, spec_entry: str | None = None) -> bool:
    """Add `environment` (SHAPING's fields) unless it is the latest entry's; True when added."""
    kept = entries(layout)
    if kept and same(kept[-1], environment):
        return False
    entry = {"recorded_at": datetime.now(UTC).isoformat(timespec="seconds"), "spec": spec_entry,
             **{field: environment[field] for field in SHAPING if field in environment}}
    storage.write_json(layout.environments, kept + [entry])
    return True


def describe(entry: dict) -> str:
    """One line: `torch 2.13.0+cpu on x86_64 (AMD EPYC 7B13), CPU path AVX2, 1 torch thread(s) of 2 CPUs,
    no GPU; python 3.11.7; numpy 2.4.6, ...`."""
    packages = entry.get("packages") or {}
    torch_version = packages.get("torch", "?")
    gpu = entry.get("gpu") or "no GPU"
    if entry.get("gpu") and entry.get("cuda"):
        gpu += f" (CUDA {entry['cuda']})"
    others = ", ".join(f"{name} {version}" for name, version in sorted(packages.items()) if name != "torch")
    model = f" ({entry['cpu_model']})" if entry.get("cpu_model") else ""
    return (f"torch {torch_version} on {entry.get('machine', '?')}{model}, "
            f"CPU path {entry.get('torch_cpu_capability', '?')}, "
            f"{entry.get('torch_threads', '?')} torch thread(s) of {entry.get('cpu_count', '?')} CPUs, {gpu}; "
            f"python {entry.get('python', '?')}; {others}")


def summary(layout: StudyLayout, damaged: Callable[[str, str], None] | None = None) -> list[str]:
    """What status and the report say: the latest environment, and how many differed before it."""
    kept = entries(layout, damaged)
    if not kept:
        return ["environment: not recorded (a study run before sweeper recorded it)"]
    lines = [f"environment: {describe(kept[-1])} (recorded {kept[-1].get('recorded_at', '?')})"]
    if len(kept) > 1:
        lines.append(f"{len(kept) - 1} earlier environment(s) differ from it (environments.json): rows recorded "
                     "on each need not match to the bit")
    return lines
