"""A sentence-classification (SC) task whose score is planted from the checkpoint a trial fine-tunes:
the sequential end-to-end test's known truth (tests/test_sequential_e2e.py).

The model is the toy regression's and trains as it does; its score is
`BASE + effect (when the checkpoint's run trained MLM only) + the run's noise`, plus a thousandth
of the real Pearson r x 100 (so the trained weights still count, by at most 0.1 point). The run is
read from the checkpoint marker (`sweeper_checkpoint.json`) beside the weights the backbone was
loaded from, whose folder transformers keeps in `config._name_or_path`: the real record of which
run a trial fine-tunes. The run's noise is a deterministic function of its name (SD about 0.3), so
replicates differ and a rerun scores alike.

The effect (points) is read from `planted_effect.json` beside this module: the test copies the
module into one temporary folder per study and puts that folder (and tests/plugins, for the toy
regression it builds on) on PYTHONPATH, so the driver and the workers see the same file.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from sweeper.contract.registry import FamilyInfo, get_task, register_family
from toy_regression import ESTIMATE, Regression

EFFECT_FILE = Path(__file__).resolve().with_name("planted_effect.json")
"""`{"effect": points}`: what MLM checkpoints score above the others."""
BASE = 50.0
NOISE_HALF_WIDTH = 0.52
"""Run noise uniform in +-this: SD 0.52 / sqrt(3) = 0.3 points."""
MARKER = "sweeper_checkpoint.json"


def checkpoint_run(backbone) -> dict:
    """The marker of the checkpoint the backbone was loaded from (run name, phases)."""
    folder = Path(backbone.config._name_or_path)
    marker = folder / MARKER
    if not marker.is_file():
        raise RuntimeError(f"planted_score: no {MARKER} in {folder!s} (config._name_or_path)")
    return json.loads(marker.read_text())


def run_noise(run_name: str) -> float:
    fraction = int(hashlib.sha256(run_name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return (2 * fraction - 1) * NOISE_HALF_WIDTH


def planted(marker: dict) -> float:
    """The score planted for the marker's run."""
    effect = json.loads(EFFECT_FILE.read_text())["effect"]
    mlm = all(phase["objective"] == "mlm" for phase in marker["phases"])
    return BASE + effect * mlm + run_noise(marker["run_name"])


class PlantedScore(Regression):
    """Toy regression trained as usual, scored by the planted value of its checkpoint's run."""

    @staticmethod
    def build(backbone, meta: dict):
        model = Regression.build(backbone, meta)
        model.planted = planted(checkpoint_run(backbone))
        return model

    @classmethod
    def score(cls, model, split: dict, meta: dict, batch_size: int, device, protocol) -> float:
        return model.planted + Regression.score(model, split, meta, batch_size, device, protocol) / 1000


register_family(
    FamilyInfo(name="planted_score", category="SC", implementation="planted_score:PlantedScore",
               score_range=(0.0, 100.0), estimate=ESTIMATE),
    tasks=[replace(get_task("toy-word-count"), name="planted-sc", family="planted_score", category="SC")],
)
