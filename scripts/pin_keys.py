"""Write tests/data/pinned_keys.json: every run key and trial key of the shipped and test specs.

Run once before a change that must not alter keys; `tests/test_pinned_keys.py` compares the plan
of each spec against this file. Small specs are pinned key by key (a failure names the cell);
paper.yaml's 18,000 trial keys are pinned as a count and a SHA-256 over the sorted lines.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.plan.load import load_spec  # noqa: E402
from sweeper.plan.study_plan import plan_study  # noqa: E402

SPECS = {
    "search_spaces/paper.yaml": "digest",
    "search_spaces/micro.yaml": "full",
    "search_spaces/smoke.yaml": "full",
    **{f"tests/specs/{p.name}": "full" for p in sorted((ROOT / "tests" / "specs").glob("*.yaml"))},
}


def describe(trial) -> str:
    lr = "none" if trial.learning_rate is None else repr(trial.learning_rate)
    return f"{trial.checkpoint.checkpoint_id}|{trial.task}|lr={lr}|seed={trial.seed}|sample={trial.sample}"


def keys_of(relative: str, how: str) -> dict:
    plan = plan_study(load_spec(ROOT / relative))
    trials = {describe(t): t.trial_key for t in plan.trials}
    pinned = {"runs": {run.name: run.run_key for run in plan.runs}, "trial_count": len(trials)}
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
