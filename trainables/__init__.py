"""Worker side of the sweeper: models, objectives, data, tasks and the loops Ray runs.

Importing this package registers the `llama_encoder` architecture with transformers' Auto
classes, so checkpoints written by a study load with `AutoModel.from_pretrained(path)`.

Every Ray worker process that computes imports this package first, and with it torch and
transformers' model classes: some 3 CPU-s a process, and the e2e tests start about 150 such
processes. That import runs with Python's cyclic garbage collector paused, and what it created
is then frozen (`gc.freeze`: never traversed again): modules, classes and their tables live as
long as the process, so the collector's passes over them found nothing to free and cost 0.5 CPU-s
of every import (benchmarks/worker_import.py, docs/benchmarks.md section 17). The collector is
left on or off as it was found.
"""
import gc

_collecting = gc.isenabled()
gc.disable()
try:
    from trainables.model import register_with_auto_classes
finally:
    gc.freeze()
    if _collecting:
        gc.enable()
    del _collecting

register_with_auto_classes()
