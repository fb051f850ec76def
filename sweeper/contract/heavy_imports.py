"""How both sides import their heavy dependencies: with Python's cyclic garbage collector paused,
then frozen.

A worker process imports torch and transformers' model classes (the trainables modules that the
run stage's Ray tasks import, sweeper/run); a driver imports Ray Tune, pandas, scipy.stats and
matplotlib (sweeper/cli.py). What such an import creates (modules, classes, their tables) lives
as long as the process, so the collector's passes over it during the import, and every full pass
after it, find nothing to free: about 0.5 CPU-s of a worker's import and a tenth of a study
driver's CPU (benchmarks/heavy_imports.py, docs/benchmarks.md section 17). `gc.freeze` moves
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
