"""Worker side of the sweeper: models, objectives, data, tasks and the loops Ray runs.

Importing this package registers the `llama_encoder` architecture with transformers' Auto
classes, so checkpoints written by a study load with `AutoModel.from_pretrained(path)`.
"""
from trainables.model import register_with_auto_classes

register_with_auto_classes()
