"""Importing the worker side: the package itself loads nothing heavy, so the environment probe and
data preparation never load transformers' model classes; the modules the driver's Ray tasks import
are imported with the cyclic collector paused and then frozen, leaving the collector as found;
and importing trainables.model registers the study's architecture with the Auto classes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

DRIVER_SIDE = """
import gc, json, sys
{before}
light = sys.modules.copy()
import trainables
package_loads = sorted({{m.partition(".")[0] for m in sys.modules}} - {{m.partition(".")[0] for m in light}})
frozen_before = gc.get_freeze_count()
from sweeper.run.environment import describe_environment
from sweeper.run.task_prep import prepare_task
from sweeper.run.corpora import prepare_corpus_task
frozen_by_driver_modules = gc.get_freeze_count() - frozen_before
probed = describe_environment()
"""
"""What the driver's Ray tasks import and the probe they run: every `imports_frozen` of the script."""
WORKER_SIDE = """
import trainables.tasks.data, trainables.corpus_prep, trainables.tokenizer  # what preparing data runs
import trainables.tasks.classification, trainables.tasks.qa, trainables.tasks.retrieval
from transformers import AutoTokenizer, PreTrainedTokenizerFast
frozen = gc.get_freeze_count() - frozen_before - frozen_by_driver_modules
model_classes = "transformers.modeling_utils" in sys.modules
from transformers import AutoConfig
before_model = "llama_encoder" in AutoConfig.for_model.__globals__["CONFIG_MAPPING"]
import trainables.model
after_model = "llama_encoder" in AutoConfig.for_model.__globals__["CONFIG_MAPPING"]
print(json.dumps({{"package_loads": package_loads, "collector": gc.isenabled(), "frozen": frozen,
                  "torch_threads": probed["torch_threads"], "model_classes": model_classes,
                  "registered": [before_model, after_model]}}))
"""
"""What preparing data and fine-tuning import after that, and what that loaded and froze."""
COLLECTOR = """
print(json.dumps({{"collector": gc.isenabled()}}))
"""
"""With the collector off before: its state once the driver side has run. The worker side's
imports run no `imports_frozen` (only sweeper.run's entries and plugin loading do), so this
interpreter stops there: transformers' tokenizers and model classes not imported a second time."""


@pytest.mark.slow  # two fresh interpreters import both sides: ~13 CPU-s, 10-13 s of the quick tier
def test_the_probe_and_data_preparation_load_no_model_classes_and_their_imports_are_frozen():
    scripts = {"on": (DRIVER_SIDE + WORKER_SIDE).format(before=""),
               "off": (DRIVER_SIDE + COLLECTOR).format(before="gc.disable()")}
    children = {state: subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for state, script in scripts.items()}
    seen = {}
    for state, child in children.items():
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-3000:]
        seen[state] = json.loads(out)
    on = seen["on"]
    assert on["package_loads"] == ["trainables"], "importing the package alone loads nothing else"
    assert not on["model_classes"], "the probe or data preparation loaded transformers' model classes"
    assert on["torch_threads"] >= 1  # the probe ran: torch imported on the worker side
    # torch (the probe's import): hundreds of thousands of objects, none traversed again.
    assert on["frozen"] > 100_000, on["frozen"]
    assert on["collector"] is True and seen["off"]["collector"] is False, "the collector is left as found"
    assert on["registered"] == [False, True], "importing trainables.model registers llama_encoder"
