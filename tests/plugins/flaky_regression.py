"""A task whose trials fail while a poison file exists: the deterministic fault behind the
`--retry-failed` test (tests/e2e/test_study_management.py), with no change to the spec between runs.

The test copies this module and the toy regression rows into a temporary folder that it puts on
PYTHONPATH, so the task's source, and the poison file beside it, are that folder's: the driver
(which registers the task) and the workers (which build the model) see the same path. The family
is the toy regression's, with a model that cannot be built while the poison file exists.
"""
from __future__ import annotations

from pathlib import Path

from sweeper.contract.configs import TaskInfo
from sweeper.contract.registry import FamilyInfo, register_family
from toy_regression import ESTIMATE, Regression

DATA = Path(__file__).resolve().parent / "flaky-data"
"""The task's rows (train.jsonl, validation.jsonl), copied here by the test."""
POISON = DATA / "poison"
"""While this file exists, every trial of the task raises."""


class FlakyRegression(Regression):
    """Toy regression whose head refuses to be built while POISON exists."""

    @staticmethod
    def build(backbone, meta: dict):
        if POISON.exists():
            raise RuntimeError(f"poisoned trial: {POISON} exists")
        return Regression.build(backbone, meta)


register_family(
    FamilyInfo(name="flaky_regression", category="REG", implementation="flaky_regression:FlakyRegression",
               score_range=(-100.0, 100.0), estimate=ESTIMATE),  # Pearson r x 100
    tasks=[TaskInfo(name="flaky-word-count", family="flaky_regression", category="REG", metric="pearson",
                    source=str(DATA))],
)
