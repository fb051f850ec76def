"""Worker side of the sweeper: models, objectives, data, tasks and the loops Ray runs.

Importing this package registers the `llama_encoder` architecture with transformers' Auto
classes, so checkpoints written by a study load with `AutoModel.from_pretrained(path)`.

Every Ray worker process that computes imports this package first, and with it torch and
transformers' model classes: some 3 CPU-s a process, and the e2e tests start about 150 such
processes. That import runs with Python's cyclic garbage collector paused, and what it created
is then frozen (sweeper.contract.heavy_imports: 0.5 CPU-s of every import saved).
"""
from sweeper.contract.heavy_imports import imports_frozen

with imports_frozen():
    from trainables.model import register_with_auto_classes

register_with_auto_classes()
