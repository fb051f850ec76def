"""A sequential replicate plan (`pretraining.sequential`) run end to end on local Ray: real
`sweeper run` drivers, real nano pretraining runs, real fine-tuning trials of a task whose score is
planted from the run a trial fine-tunes (tests/plugins/planted_score.py: MLM + effect, run noise
SD 0.3). Two arms (MLM, CLM), looks at 3 and 4 replicates per arm.

- A large planted effect (30 points) is decided at the first look: 6 runs trained, none more.
- Equal arms reach the last look and end *cannot tell*: futility is judged from 5 runs per arm on
  (FUTILITY_UNITS), so a plan of 3 then 4 never stops for it, and the planted run noise gives
  paired p = 0.49 at look 1 and 0.97 at look 2, far from either boundary. The driver is killed
  while the second look's runs train, and the same command, rerun, completes without losing or
  repeating a run or a trial.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from conftest import ROOT, nano_study, run_sweeper
from sweeper.contract import registry

pytestmark = pytest.mark.e2e

PLUGINS = ROOT / "tests" / "plugins"
DESIGN = "  sequential: {first: 3, step: 1, maximum: 4, every_count: true}\n"
SPEC = nano_study("planted", "    - {objective: mlm}\n    - {objective: clm}\n", """\
  tasks: [planted-sc]
  learning_rates: [0.001]
  seeds: [0]
  batch_size: 8
  micro_batch_size: 8
  max_steps: 2
  max_length: 16
  max_train_examples: 16
  max_eval_examples: 8
""").replace("  runs:\n", DESIGN + "  runs:\n", 1)


B_STEPS = 120
"""Study B's runs are longer than A's: a kill at a -rep3 run's first progress marker (step 6) lands
well before its end (about 4 s of training), however fast the machine."""
ARMS_OF_B = (f"nano-mlm40-{B_STEPS}", f"nano-clm-{B_STEPS}")


def planted_study(tmp_path: Path, effect: float, steps: int = 12) -> tuple[Path, Path, dict]:
    """The spec, the study folder and the driver's environment of a study whose MLM runs score
    `effect` points above its CLM runs (each run `steps` long): the plugin copied beside its own
    effect file."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    shutil.copy(PLUGINS / "planted_score.py", plugin)
    (plugin / "planted_effect.json").write_text(json.dumps({"effect": effect}))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("  steps: 12\n", f"  steps: {steps}\n", 1))
    env = {registry.PLUGINS_VARIABLE: "planted_score", "PYTHONPATH": f"{plugin}{os.pathsep}{PLUGINS}"}
    return spec, tmp_path / "study", env


def table(study: Path, name: str):
    return ds.dataset(study / "results" / name, format="parquet", partitioning="hive").to_table().to_pandas()


def run_folders(study: Path) -> set[str]:
    folder = study / "pretraining"
    return {p.name for p in folder.iterdir() if p.is_dir()} if folder.exists() else set()


def kill_group(pgid: int) -> None:
    """SIGKILL to the driver's process group (its own session); Ray's workers are the head's."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def looks_section(report: str) -> str:
    return report.split("## Sequential looks", 1)[1].split("\n## ", 1)[0]


def test_a_large_planted_effect_stops_at_the_first_look(ray_head, tmp_path):
    spec, study, env = planted_study(tmp_path, effect=30.0)
    result = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0], env=env)
    output = result.stdout[-5000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
    runs = table(study, "pretraining")["run_name"].unique()
    assert len(runs) == 6 and not any(name.endswith("-rep3") for name in runs), runs
    assert not any(name.endswith("-rep3") for name in run_folders(study)), run_folders(study)
    trials = table(study, "trials")
    assert len(trials) == 6 and trials["trial_key"].is_unique and set(trials["status"]) == {"ok"}
    mlm = trials[trials["objective"] == "mlm"]["test_score"]
    assert (mlm > 75).all() and (trials[trials["objective"] == "clm"]["test_score"] < 55).all(), "the planted scores"
    assert "adding" not in result.stdout, "no look added replicates"
    report = (study / "report.md").read_text()
    looks = looks_section(report)
    sc = [line for line in looks.splitlines() if "SC: MLM beats CLM" in line]
    assert len(sc) == 1 and "| 1 of 2 |" in sc[0] and sc[0].rstrip(" |").endswith("supports"), looks
    assert "6 pretraining runs trained against 8" in looks, looks
    status = run_sweeper("status", str(study), address=ray_head[0], env=env).stdout
    assert "pretraining: 6 runs: 6 done" in status and "fine-tuning: 6 trials: 6 ok" in status, status
    part = next(line for line in report.split("## Sequential looks")[0].splitlines() if "SC: MLM beats CLM" in line)
    assert "group-sequential, look 1 of 2" in part and part.rstrip(" |").endswith("supports"), part


def test_equal_arms_grow_to_the_maximum_and_a_killed_driver_resumes_exactly(ray_head, tmp_path):
    spec, study, env = planted_study(tmp_path, effect=0.0, steps=B_STEPS)
    command = [sys.executable, "-m", "sweeper", "run", str(spec), "--storage", str(study)]
    driver_env = {**os.environ, "RAY_ADDRESS": ray_head[0], "PYTHONUNBUFFERED": "1", **env}
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=driver_env,
                              cwd=ROOT, start_new_session=True)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(driver.stdout), daemon=True)
    reader.start()
    try:
        # The second look's runs are training: a -rep3 run has written its first progress marker
        # (step 6 of 120), read from its folder as it is written.
        progress = [study / "pretraining" / f"{arm}-rep3" / "progress.json" for arm in ARMS_OF_B]
        deadline = time.time() + 600
        while not any(p.exists() for p in progress) and driver.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert any(p.exists() for p in progress), "".join(seen[-80:])
    finally:
        kill_group(driver.pid)
        driver.wait()
        reader.join(timeout=10)
        driver.stdout.close()
    finals = [(study / "pretraining" / f"{arm}-rep3" / f"step-{B_STEPS}" / "sweeper_checkpoint.json").exists()
              for arm in ARMS_OF_B]
    assert not any(finals), "killed during the second look's pretraining, before its runs finished"
    assert any("look 1" in line and "adding" in line for line in seen), "".join(seen[-80:])
    trials_before = table(study, "trials")
    assert len(trials_before) == 6, "the first look's trials are recorded; the second look's are not"
    status = run_sweeper("status", str(study), address=ray_head[0], env=env).stdout
    assert "pretraining: 8 runs: 6 done" in status and "fine-tuning: 8 trials: 6 ok" in status, status

    result = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0], env=env)
    output = result.stdout[-5000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
    pretraining, trials = table(study, "pretraining"), table(study, "trials")
    runs = set(pretraining["run_name"])
    assert len(runs) == 8 and sum(name.endswith("-rep3") for name in runs) == 2, runs
    assert not pretraining.duplicated(["run_key", "step"]).any(), "each run's steps recorded once"
    assert len(trials) == 8 and trials["trial_key"].is_unique and set(trials["status"]) == {"ok"}
    assert set(trials["run_name"]) == runs
    # The rerun replays look 1 from the store, plans the same second look and trains only what it lacks.
    assert result.stdout.count("adding") == 1, output
    assert f"adding 1 x {ARMS_OF_B[1]}, 1 x {ARMS_OF_B[0]}" in result.stdout, output
    assert "8 runs: 6 already done" in result.stdout and "8 trials: 6 already recorded" in result.stdout, output
    looks = looks_section((study / "report.md").read_text())
    sc = [line for line in looks.splitlines() if "SC: MLM beats CLM" in line]
    assert [line.split("|")[3].strip() for line in sc] == ["1 of 2", "2 of 2"], looks
    assert sc[0].rstrip(" |").endswith("continue") and sc[1].rstrip(" |").endswith("cannot tell"), looks
    assert "8 pretraining runs trained against 8" in looks, looks
    status = run_sweeper("status", str(study), address=ray_head[0], env=env).stdout
    assert "pretraining: 8 runs: 8 done" in status and "fine-tuning: 8 trials: 8 ok" in status, status
