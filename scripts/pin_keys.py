"""Write tests/data/pinned_keys.json: every run key and trial key of the shipped and test specs.

Run once before a change that must not alter keys; `tests/unit/plan/test_pinned_keys.py` compares the plan
of each spec against this file. Small specs are pinned key by key (a failure names the cell);
paper.yaml's 18,000 trial keys are pinned as a count and a SHA-256 over the sorted lines.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study

SPECS = {
    "search_spaces/paper.yaml": "digest",
    "search_spaces/micro.yaml": "full",
    "search_spaces/smoke.yaml": "full",
    **{f"tests/specs/{p.name}": "full" for p in sorted((ROOT / "tests" / "specs").glob("*.yaml"))},
}


def describe(trial) -> str:
    lr = "none" if trial.learning_rate is None else repr(trial.learning_rate)
    return f"{trial.checkpoint.checkpoint_id}|{trial.task}|lr={lr}|seed={trial.seed}|sample={trial.sample}"


def keys_of(relative: str, how: str, replicates: int | None = None) -> dict:
    """The spec's keys as pinned; with `replicates`, those of replicate 0 of the spec planned
    with that many replicates of every run (which must be the pinned ones)."""
    spec = load_study(ROOT / relative).spec
    if replicates is not None:
        spec = replace(spec, pretraining=replace(spec.pretraining, replicates=replicates,
                                                 runs=[replace(entry, replicates=None)
                                                       for entry in spec.pretraining.runs]))
    plan = plan_study(spec)
    first = replicates is not None  # replicate 0's cells only
    trials = {
        describe(t): t.trial_key for t in plan.trials if not first or t.checkpoint.arm == t.checkpoint.checkpoint_id
    }
    pinned = {"runs": {run.name: run.run_key for run in plan.runs if not first or run.replicate == 0},
              "trial_count": len(trials)}
    if how == "full":
        pinned["trials"] = trials
    lines = "\n".join(f"{cell} {key}" for cell, key in sorted(trials.items()))
    pinned["trials_sha256"] = hashlib.sha256(lines.encode()).hexdigest()
    return pinned


if __name__ == "__main__":
    out = {relative: keys_of(relative, how) for relative, how in SPECS.items()}
    path = ROOT / "tests" / "data" / "pinned_keys.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}: " + ", ".join(f"{k} ({v['trial_count']} trials)" for k, v in out.items()))
