"""The study's own checkpoints, read as hostile input before their trials run.

A checkpoint a pretraining run wrote is the study's, but its folder can be edited after the run
(by hand, by a tool, by anyone who can write to the study). A config.json or tokenizer_config.json
given an `auto_map` that names code the study did not write, or a `model_type` that
transformers does not ship, asks the loader for the folder's own code. Workers never run such
code (`trust_remote_code=False`: transformers refuses it; a tokenizer edited since the task data
was encoded is refused too, trainables.finetune_loop.check_tokenizer), but each trial of the
checkpoint would then fail on a worker, one at a time. So the driver reads those two files of each
written checkpoint whose trials are about to run, once per `sweeper run`, with the checks
`sweeper plan` makes of a checkpoint from elsewhere (sweeper.plan.checkpoint_checks). A refused
checkpoint's trials are recorded failed with one line naming the file
(sweeper.run.tune_grid.record_unrunnable), and nothing from its folder reaches a worker.

Checked: config.json's JSON (bounded, sweeper.plan.source_tree), its `model_type`, its sizes,
for the study's architecture an `auto_map` other than the one the study writes
(`STUDY_AUTO_MAP`), and a tokenizer_config.json `auto_map` for a tokenizer class transformers
does not ship (local studies). Not checked: a checkpoint without a config.json (its trials fail
at load with that reason), and a checkpoint written while this run's fine-tuning already runs
(the study's own writing: nobody edited it).
"""
from __future__ import annotations

import os

from sweeper.plan.checkpoint_checks import (
    STUDY_AUTO_MAP, STUDY_MODEL_TYPE, config_problem, model_type_problem, tokenizer_problem,
)
from sweeper.plan.checkpoint_sources import CONFIG_FILE
from sweeper.plan.source_tree import MAX_JSON_BYTES, parse_json, read_json
from sweeper.plan.study_plan import EvaluatedCheckpoint
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.quarantine import relative

TOKENIZER_CONFIG = "tokenizer_config.json"


def read_config(folder: str):
    """The JSON value of `folder`'s config.json, read as hostile input; None when there is none.
    ValueError with a one-line reason when it cannot be read as such."""
    if not storage.is_remote(folder):
        if not os.path.lexists(os.path.join(folder, CONFIG_FILE)):
            return None
        return read_json(folder, CONFIG_FILE)  # a link out of the folder, a FIFO: refused, never read
    size = storage.file_sizes(folder).get(CONFIG_FILE)
    if size is None:
        return None
    if size > MAX_JSON_BYTES:
        raise ValueError(f"is {size:,} bytes, more than the {MAX_JSON_BYTES:,} read of such a file")
    return parse_json(storage.read_bytes(storage.join(folder, CONFIG_FILE)))


def auto_map_problem(config: dict) -> str | None:
    """`auto_map: reason` when config.json of the study's architecture names code other than the
    study's own (`STUDY_AUTO_MAP`, which every checkpoint the study writes carries), or None."""
    auto_map = config.get("auto_map")
    if config.get("model_type") != STUDY_MODEL_TYPE or auto_map is None:
        return None
    if not isinstance(auto_map, dict):
        return f"auto_map: a JSON {type(auto_map).__name__}, not the study's {{class: code}} object"
    foreign = {str(k)[:60]: str(v)[:80] for k, v in auto_map.items() if STUDY_AUTO_MAP.get(k) != v}
    if not foreign:
        return None
    named = ", ".join(f"{k} -> {v}" for k, v in sorted(foreign.items())[:3])
    return f"auto_map names code the study did not write ({named}); the study never runs a folder's code"


def config_refusal(folder: str) -> str | None:
    """Why the config.json of the study's checkpoint `folder` is refused (one line), or None."""
    try:
        config = read_config(folder)
    except (OSError, ValueError) as error:  # ValueError: not JSON, too large, too deep, a link out of the folder
        return f"cannot be read as the study writes it: {' '.join(str(error).split())[:200]}"
    if config is None:
        return None
    if not isinstance(config, dict):
        return "not a JSON object"
    return model_type_problem(config) or auto_map_problem(config) or config_problem(config)


def refusal(folder: str) -> str | None:
    """`<file in the study>: reason` for the first file of the study's checkpoint `folder` that is
    refused: its config.json (`config_refusal`), or its tokenizer_config.json when that asks for
    code of its own (sweeper.plan.checkpoint_checks.tokenizer_problem; a local study only: in an
    object store the worker's `trust_remote_code=False` load refuses it). None when neither is."""
    if why := config_refusal(folder):
        return f"{CONFIG_FILE}: {why}"
    if not storage.is_remote(folder) and os.path.lexists(os.path.join(folder, TOKENIZER_CONFIG)):
        return tokenizer_problem(folder, {TOKENIZER_CONFIG})
    return None


def refuse_edited_checkpoints(checkpoints: list[EvaluatedCheckpoint], layout: StudyLayout,
                              refused: dict[str, str]) -> None:
    """Put each written study checkpoint among `checkpoints` whose config.json is refused
    (`config_refusal`) in `refused` (checkpoint id -> one line naming the file and why), saying so
    in one line each. Checkpoints from elsewhere are `sweeper plan`'s and the import's to check."""
    seen = set()
    for checkpoint in checkpoints:
        if checkpoint.run is None or checkpoint.checkpoint_id in seen:
            continue
        seen.add(checkpoint.checkpoint_id)
        folder = layout.checkpoint(checkpoint.run.name, checkpoint.step)
        if (why := refusal(folder)) is None:
            continue
        refused[checkpoint.checkpoint_id] = f"{relative(layout, folder)}/{why}"
        print(f"[finetune] checkpoint {checkpoint.checkpoint_id}: {refused[checkpoint.checkpoint_id]}: its trials are "
              "recorded failed, nothing from its folder ran", flush=True)
