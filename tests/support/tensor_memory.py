"""Peak bytes of CPU tensors a call allocates, from torch.profiler's allocator events.

With `profile_memory=True` the profiler records every allocation and free of the CPU allocator
as a `[memory]` event (`nbytes`: positive on allocation, negative on free) with its time; summed
in time order they give the bytes live above what existed before the call, and their maximum is
the peak (the CPU has no `torch.cuda.max_memory_allocated`). The events are read from the raw
profiler results (`prof.profiler.kineto_results`): the aggregated `prof.events()` folds frees
that happen inside an op, or inside a Python autograd Function, into that op's net figure.
"""
from __future__ import annotations

from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile


def peak_allocated_bytes(fn: Callable[[], object]) -> int:
    """Most bytes of CPU tensors that `fn()` held at once beyond those live when it started."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak
