"""Importing the worker side (trainables/__init__.py) pauses the cyclic garbage collector for its
heavy imports, freezes what they created, and leaves the collector as it found it."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

CHECK = """
import gc
{before}
frozen_before = gc.get_freeze_count()
import trainables
print(gc.isenabled(), gc.get_freeze_count() - frozen_before, "torch" in __import__("sys").modules)
"""


def test_the_import_restores_the_collector_and_freezes_what_it_created():
    children = {state: subprocess.Popen([sys.executable, "-c", CHECK.format(before=before)], cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for state, before in (("on", ""), ("off", "gc.disable()"))}
    printed = {}
    for state, child in children.items():
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-3000:]
        printed[state] = out.split()
    enabled, frozen, torch_loaded = printed["on"]
    assert enabled == "True" and torch_loaded == "True"
    # torch and transformers' model classes: hundreds of thousands of objects, none traversed again.
    assert int(frozen) > 100_000, frozen
    assert printed["off"][0] == "False", "a collector that was off stays off"
