"""Worker side of the sweeper: models, objectives, data, tasks and the loops Ray runs.

Importing the package itself imports nothing heavy, so a worker that only probes the environment
or tokenises a corpus or a task never loads transformers' model classes (about 1 CPU-s a process,
docs/benchmarks.md section 17). Importing `trainables.model` (as every module that builds or
loads the backbone does) registers the `llama_encoder` architecture with transformers' Auto
classes, so checkpoints written by a study load with `AutoModel.from_pretrained(path)`.

The functions the driver hands to Ray (sweeper/run) import their worker modules inside
sweeper.contract.heavy_imports.imports_frozen: Python's cyclic collector paused for the import,
what it created frozen after it.
The stages and every module, in one place: docs/architecture.md.
"""
