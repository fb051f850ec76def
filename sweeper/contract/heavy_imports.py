"""How both sides import their heavy dependencies: with Python's cyclic garbage collector paused,
then frozen.

A worker process imports torch and transformers' model classes (the trainables modules that the
run stage's Ray tasks import, sweeper/run); a driver imports Ray Tune, pandas, scipy.stats and
matplotlib (sweeper/cli.py). What such an import creates (modules, classes, their tables) lives
as long as the process, so the collector's passes over it during the import, and every full pass
after it, find nothing to free. Measured on the project's 2-core machine, idle
(`benchmarks/heavy_imports.py --samples 5`): a worker's import 3.44 CPU-s against 4.08 with the
collector on, a driver's 2.37 against 2.90; the smoke study's driver spent 0.88 of 7.44 CPU-s in
the collector before, 0.16 of 5.72 after (the runs: docs/benchmarks.md as of 46b741f). `gc.freeze` moves
everything alive at the end of the block to the permanent generation, which the collector never
traverses again. It freezes cyclic garbage that exists at that moment too: one-time and small.
The collector is left on or off as it was found.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def imports_frozen():
    """Run the block (its imports) with the collector paused; then freeze what is alive."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
