"""Sampling searches (issue #17): joint TPE per cell on Optuna's own storage (search: optuna) and
Tune-style random search planned like a grid (search: random).

Fast tests need no Ray cluster: the random plan, the draws' semantics, a cell's Optuna study
reconciled with the store on resume (the searcher driven by hand, as Tune would), importances.
The end-to-end test runs a nano study in optuna mode over two distributions with ASHA, extends
it, and reads each cell's study back with `optuna.load_study`.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from conftest import ROOT, SMOKE_SPEC as SMOKE, edited_spec
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study, trial_count_text
from sweeper.run.recording import trial_row
from sweeper.run.pipeline import Pipeline
from sweeper.run.shards import EvaluationSets, optuna_shards
from sweeper.spec import space
from sweeper.spec.parsing import Distribution
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, write_rows

RANDOM = ("  learning_rates: [0.001] ", "  search: random\n  random: {samples: 3, lr_min: 1.0e-4, lr_max: 1.0e-2}\n"
                                        "  weight_decay: {uniform: [0.0, 0.2]} ")
BATCH_CHOICE = ("  batch_size: 16 ", "  batch_size: {choice: [8, 16]} ")


def points(plan) -> dict[tuple, tuple]:
    """(checkpoint, task, sample) -> (learning rate, params) of a random plan, checking that a
    sample's seeds share them."""
    found: dict[tuple, tuple] = {}
    for t in plan.trials:
        point = (t.learning_rate, json.dumps(t.params, sort_keys=True))
        assert found.setdefault((t.checkpoint.checkpoint_id, t.task, t.sample), point) == point
    return found


# --- search: random ---------------------------------------------------------------------------

def test_random_mode_plans_each_cells_samples_deterministically_and_extends_them(tmp_path):
    spec = load_study(edited_spec(tmp_path, RANDOM, BATCH_CHOICE)).spec
    plan = plan_study(spec)
    ft = spec.finetuning
    assert len(plan.trials) == len(plan.checkpoints) * len(ft.tasks) * 3 * len(ft.seeds) == 120
    assert trial_count_text(spec, plan) == (
        "120 = 4 checkpoints x 5 datasets x 3 random samples x 2 seeds; drawn per cell from learning_rate "
        "loguniform [0.0001, 0.01], batch_size choice [8, 16], weight_decay uniform [0.0, 0.2]")
    assert len({t.trial_key for t in plan.trials}) == len(plan.trials)
    drawn = points(plan)
    for t in plan.trials:  # the drawn values are the protocol's (and so the key's and the store's)
        assert t.search_mode == "random" and set(t.params) == {"batch_size", "weight_decay"}
        assert 1e-4 <= t.learning_rate <= 1e-2 and 0.0 <= t.params["weight_decay"] <= 0.2
        assert t.protocol.batch_size == t.params["batch_size"] in (8, 16)
        assert t.protocol.optimizer.weight_decay == t.params["weight_decay"]
    # Cells draw apart; an evaluation-only set is scored at its training task's points.
    assert len({lr for lr, _ in drawn.values()}) > len(drawn) // 2
    for (checkpoint, task, sample), point in drawn.items():
        if task == "wordnet-definition-retrieval":
            assert point == drawn[(checkpoint, "wordnet-usage-retrieval", sample)]
    assert points(plan_study(load_study(edited_spec(tmp_path, RANDOM, BATCH_CHOICE, name="again.yaml")).spec)) == drawn

    more = plan_study(load_study(edited_spec(tmp_path, (RANDOM[0], RANDOM[1].replace("samples: 3", "samples: 5")),
                                          BATCH_CHOICE, name="more.yaml")).spec)
    assert {k: v for k, v in points(more).items() if k[2] < 3} == drawn, "more samples keep the first ones"
    keys = {t.trial_key for t in plan.trials}
    assert keys < {t.trial_key for t in more.trials}

    # A checkpoint added to a run leaves every other cell's points as they were.
    added = plan_study(load_study(edited_spec(tmp_path, RANDOM, BATCH_CHOICE, ("checkpoint_steps: [20]",
                                                                            "checkpoint_steps: [10, 20]"),
                                           name="checkpoint.yaml")).spec)
    new_points = points(added)
    assert {k[0] for k in new_points} - {k[0] for k in drawn} == {"nano-mlm40-40-10"}
    assert {k: v for k, v in new_points.items() if k[0] != "nano-mlm40-40-10"} == drawn
    assert keys < {t.trial_key for t in added.trials}


def test_random_mode_prints_its_plan_without_ray(tmp_path):
    import subprocess
    import sys

    path = edited_spec(tmp_path, RANDOM, BATCH_CHOICE)
    code = ("import sys; from sweeper.cli import main; status = main(['plan', sys.argv[1]]); "
            "print('ray imported' if 'ray' in sys.modules else 'no ray'); sys.exit(status)")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert re.search(r"result rows:\s+120 = 4 checkpoints x 5 datasets x 3 random samples", result.stdout)
    assert result.stdout.strip().endswith("no ray")


def test_draws_follow_tunes_semantics_and_map_onto_optuna():
    rng = np.random.default_rng(0)
    ints = {space.draw(Distribution("randint", (2, 5)), rng) for _ in range(400)}
    assert ints == {2, 3, 4}, "randint excludes hi, as Tune's"
    steps = [space.draw(Distribution("quniform", (0.0, 0.2, 0.05)), rng) for _ in range(400)]
    assert set(steps) == {0.0, 0.05, 0.1, 0.15, 0.2}
    logs = np.array([space.draw(Distribution("loguniform", (1e-5, 1e-1)), rng) for _ in range(2000)])
    assert logs.min() >= 1e-5 and logs.max() <= 1e-1
    assert abs(np.mean(np.log10(logs) < -3) - 0.5) < 0.05, "uniform in log space"  # 2,000 draws: SD 0.011, 4.5 SD
    qlogs = {space.draw(Distribution("qloguniform", (1e-4, 1e-2, 1e-4)), rng) for _ in range(200)}
    # float64 multiples of 1e-4 divide back to within ~1e-14 of an integer; an unrounded draw is off by up to 0.5.
    assert all(1e-4 <= v <= 1e-2 and abs(v / 1e-4 - round(v / 1e-4)) < 1e-9 for v in qlogs)
    pairs = Distribution("choice", ((0.9, 0.95), (0.9, 0.98)))
    assert {space.draw(pairs, rng) for _ in range(50)} == set(pairs.args)

    # Each form as an Optuna distribution, and back: what a study holds is what ran.
    cases = [(Distribution("randint", (2, 5)), 4), (Distribution("quniform", (0.0, 0.2, 0.05)), 0.15),
             (Distribution("loguniform", (1e-5, 1e-1)), 3e-4), (Distribution("uniform", (0.0, 0.2)), 0.07),
             (Distribution("qloguniform", (1e-4, 1e-2, 1e-4)), 3e-4), (pairs, (0.9, 0.98)),
             (Distribution("choice", (16, 32)), 32)]
    for dist, value in cases:
        internal = space.optuna_distribution(dist)
        stored = space.to_optuna(dist, value)
        assert internal._contains(internal.to_internal_repr(stored)), dist
        assert space.from_optuna(dist, stored) == value
    assert isinstance(space.optuna_distribution(Distribution("randint", (2, 5))), optuna.distributions.IntDistribution)
    assert space.optuna_distribution(Distribution("randint", (2, 5))).high == 4


# --- search: optuna, a cell's study and the store -----------------------------------------------

OPTUNA = ("  learning_rates: [0.001] ", "  search: optuna\n  optuna: {samples: 4, startup_samples: 2}\n"
                                        "  weight_decay: {uniform: [0.0, 0.2]} ")


def journal(study: Path):
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(study / "optuna" /
                                                                                         "journal.log")))


def start_search(spec, plan, layout, done=frozenset()):
    tasks = spec.finetuning.tasks
    sets = EvaluationSets(plan, tasks, set(done))
    shard, = optuna_shards(spec, plan, list(plan.trials), set(done), layout, {(None, t): "unused" for t in tasks}, sets)
    return shard, shard.tuner_args(spec, Pipeline())["search_alg"]


def run_sample(shard, searcher, trial_ids: list[str], score) -> list:
    """Ask and finish one sample of the searcher's first cell (all its seeds): the configs."""
    configs = [searcher.suggest(tid) for tid in trial_ids]
    assert len({c["sample"] for c in configs}) == 1 and [c["seed_index"] for c in configs] == [0, 1]
    for tid, config in zip(trial_ids, configs):
        searcher.on_trial_complete(tid, {"search_score": score(config)})
    return configs


def test_a_resumed_search_reconciles_the_cells_study_with_the_store(tmp_path):
    """A driver killed mid-search: sample 0 recorded, sample 1 told to Optuna but its rows never
    written, sample 2 asked and left running. On resume the study fails the running trial, runs
    sample 1 again at the point it had, and a study that lacks recorded samples gets them."""
    text = re.sub(r"  tasks: .*?\]\n", "  tasks: [wordnet-supersense-cls]\n", SMOKE.replace(*OPTUNA, 1), count=1,
                  flags=re.S)
    assert "  tasks: [wordnet-supersense-cls]\n" in text
    (tmp_path / "spec.yaml").write_text(text)
    spec = load_study(tmp_path / "spec.yaml").spec
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path / "study"))
    shard, searcher = start_search(spec, plan, layout)

    def score(config):
        return 50.0 + 100 * config["point"]["weight_decay"] + config["seed_index"]

    first = run_sample(shard, searcher, ["a", "b"], score)
    second = run_sample(shard, searcher, ["c", "d"], score)
    assert searcher.suggest("e")["sample"] == 2  # asked, then the driver dies
    rows = [trial_row("s", shard.trial(config), {"validation_score": score(config), "test_score": 1.0}, "ok", None)
            for config in first]
    write_rows(layout, TRIALS, rows)
    name = searcher.cells[0].study_name
    assert name.startswith("nano-mlm40-40-20/wordnet-supersense-cls/")
    assert [t.state.name for t in optuna.load_study(study_name=name, storage=journal(tmp_path / "study")).trials] == [
        "COMPLETE", "COMPLETE", "RUNNING"]

    done = {row["trial_key"] for row in rows}
    shard, searcher = start_search(spec, plan, layout, done)
    assert searcher.cells[0].first_sample == 1 and searcher.cells[0].evaluated[0][0] == 0
    again = run_sample(shard, searcher, ["f", "g"], score)
    assert again[0]["sample"] == 1 and again[0]["point"] == second[0]["point"], "the unrecorded sample reruns as it was"
    study = optuna.load_study(study_name=name, storage=journal(tmp_path / "study"))
    states = [(t.state.name, t.user_attrs.get("sample")) for t in study.trials]
    assert states == [("COMPLETE", 0), ("COMPLETE", 1), ("FAIL", 2), ("COMPLETE", 1)]
    assert study.trials[0].value == pytest.approx(np.mean([score(c) for c in first]))  # same mean, float64

    # A journal lost (or a study started before this version): the recorded sample is added from the store.
    (tmp_path / "study" / "optuna" / "journal.log").unlink()
    shard, searcher = start_search(spec, plan, layout, done)
    next_config = searcher.suggest("h")
    study = optuna.load_study(study_name=name, storage=journal(tmp_path / "study"))
    recorded, asked = study.trials
    assert recorded.user_attrs == {"sample": 0, "from_store": True} and recorded.state.name == "COMPLETE"
    # The store's float64 values and the same mean: approx's default (both asserts).
    assert recorded.params == pytest.approx({"learning_rate": first[0]["point"]["learning_rate"],
                                             "weight_decay": first[0]["point"]["weight_decay"]})
    assert recorded.value == pytest.approx(np.mean([score(c) for c in first]))
    assert asked.state.name == "RUNNING" and next_config["sample"] == 1


def test_parameter_importances_name_the_parameter_that_moves_the_score():
    from sweeper.report.importance import cell_importances, importance_summary, sample_scores

    rng = np.random.default_rng(1)
    rows = []
    for checkpoint, sample in ((c, s) for c in ("a-40", "b-40") for s in range(12)):
        lr, wd = float(np.exp(rng.uniform(np.log(1e-4), np.log(1e-2)))), float(rng.uniform(0.0, 0.2))
        for seed in (0, 1):  # the score follows weight decay; the learning rate barely matters
            rows.append({"checkpoint_id": checkpoint, "task": "t", "objective": "mlm", "sample": sample, "seed": seed,
                         "learning_rate": lr, "params": json.dumps({"weight_decay": wd}), "status": "ok",
                         "validation_score": 40 + 200 * wd + 0.01 * math.log(lr) + seed})
    rows.append({**rows[-1], "checkpoint_id": "c-40", "sample": 0})  # a cell with one sample: left out
    rows += [{**rows[k], "checkpoint_id": "d-40", "validation_score": 12.5} for k in range(10)]  # all alike: left out
    samples = sample_scores(pd.DataFrame(rows))
    # float64 mean of the two seeds' scores (s and s + 1): s + 0.5 up to rounding.
    assert len(samples) == 30 and samples["score"].iloc[0] == pytest.approx(rows[0]["validation_score"] + 0.5)
    space_ = {"learning_rate": space.log_range(1e-4, 1e-2), "weight_decay": Distribution("uniform", (0.0, 0.2))}
    per_cell = cell_importances(samples, space_)
    assert set(per_cell["checkpoint_id"]) == {"a-40", "b-40"}
    table = importance_summary(per_cell).set_index("task")
    assert table.loc["t", "weight_decay"] > 0.8 > table.loc["t", "learning_rate"] and table.loc["t", "cells"] == 2
    assert importance_summary(cell_importances(samples)).loc[0, "weight_decay"] > 0.8  # bounds from the samples


# --- end to end -----------------------------------------------------------------------------------


def test_a_resumed_cell_draws_no_point_it_has_tried(tmp_path):
    """A driver interrupted in a cell's start-up draws (random until `startup_samples` results),
    after sample 0 is recorded and sample 1 asked: the resumed sampler continues the search; it
    does not begin its random draws again at sample 0's point (issue #54)."""
    text = re.sub(r"  tasks: .*?\]\n", "  tasks: [wordnet-supersense-cls]\n", SMOKE.replace(*OPTUNA, 1), count=1,
                  flags=re.S)
    (tmp_path / "spec.yaml").write_text(text)
    spec = load_study(tmp_path / "spec.yaml").spec
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path / "study"))

    def score(config):
        return 50.0 + 100 * config["point"]["weight_decay"] + config["seed_index"]

    shard, searcher = start_search(spec, plan, layout)
    first = run_sample(shard, searcher, ["a", "b"], score)
    rows = [trial_row("s", shard.trial(config), {"validation_score": score(config), "test_score": 1.0}, "ok", None)
            for config in first]
    write_rows(layout, TRIALS, rows)
    assert searcher.suggest("c")["sample"] == 1  # asked, then the driver is interrupted
    done = {row["trial_key"] for row in rows}

    shard, searcher = start_search(spec, plan, layout, done)
    resumed = [run_sample(shard, searcher, [f"r{n}a", f"r{n}b"], score) for n in range(3)]
    assert [configs[0]["sample"] for configs in resumed] == [1, 2, 3]
    tried = [first[0]["point"], *(configs[0]["point"] for configs in resumed)]
    assert len({json.dumps(point, sort_keys=True) for point in tried}) == 4, tried

    # The journal lost too: the store's sample 0 is the study's one trial, and sample 1 is a new point.
    (tmp_path / "study" / "optuna" / "journal.log").unlink()
    shard, searcher = start_search(spec, plan, layout, done)
    assert run_sample(shard, searcher, ["x", "y"], score)[0]["point"] != first[0]["point"]
