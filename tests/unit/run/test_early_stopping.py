"""Early stopping (issue #17): Tune schedulers on the validation curve, `stopped` trials.

Unit tests of the scheduler (sweeper.run.early_stopping: a point's seeds judged on their mean and
stopped together), of the worker's curve callback, and of how a stopped trial is recorded; a
Tune run with a real searcher and recorder; and an Optuna study with ASHA end to end, rerun
without a duplicate row.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule, TrialScheduler

from conftest import ROOT, nano_study
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.report import analysis
from sweeper.run.early_stopping import TIME_ATTR, CellScheduler, make_scheduler
from sweeper.run.progress import ProgressLine
from sweeper.run.recording import FINAL, ResultsRecorder
from sweeper.run.search import SEARCH_METRIC
from sweeper.run.shards import GridShard
from sweeper.store.layout import StudyLayout
from sweeper.store.results import EVAL_CURVES, TRIALS, finished_trial_keys

ES_SPEC = nano_study("early-stopping", "    - {objective: mlm}\n", """\
  tasks: [wordnet-supersense-cls]
  search: optuna
  optuna: {learning_rates_per_cell: 5, lr_min: 0.0001, lr_max: 0.3, startup_samples: 3}
  scheduler: {kind: asha, grace_period: 1}
  seeds: [0, 1]
  batch_size: 8
  micro_batch_size: 8
  max_steps: 8
  eval_every: 2
  max_length: 32
  max_train_examples: 64
  max_eval_examples: 32
""")


def es_spec(tmp_path, text: str = ES_SPEC):
    path = tmp_path / "es.yaml"
    path.write_text(text)
    return path


class FakeTrial:
    """What a scheduler and a callback read of a Tune trial: its id, config and last result
    (hashable by identity, as Tune's trials are)."""

    def __init__(self, trial_id: str, config: dict):
        self.trial_id, self.config, self.last_result = trial_id, config, {}


def fake_trial(trial_id: str, cell: str, point: str | None = None) -> FakeTrial:
    return FakeTrial(trial_id, {"cell": cell, "point": point or trial_id})


def point(step: int, score: float) -> dict:
    return {TIME_ATTR: step, SEARCH_METRIC: score}


def curve_point(step: int, score: float) -> dict:
    """A curve point as the trainable reports it under a scheduler: not final."""
    return {**point(step, score), FINAL: False}


class FakeController:
    """What the scheduler calls on Tune's controller: stop a held seed (Tune then completes it
    in the scheduler) or resume it (its next `train` call)."""

    def __init__(self, scheduler):
        self.scheduler, self.stopped, self.resumed = scheduler, [], []

    def stop_trial(self, trial) -> None:
        self.stopped.append(trial.trial_id)
        self.scheduler.on_trial_complete(self, trial, trial.last_result)

    def _schedule_trial_train(self, trial) -> None:
        self.resumed.append(trial.trial_id)

    def get_live_trials(self) -> list:
        return []


def seeded_scheduler(tmp_path):
    """ASHA (first rung at step 2, rf 3) judging points, with a first point whose seeds both
    score 80 at the rung: the bar the next point is measured against."""
    ft = load_study(es_spec(tmp_path)).spec.finetuning
    scheduler = make_scheduler(ft, cell_of=lambda config: config["cell"], point_of=lambda config: config["point"])
    controller = FakeController(scheduler)
    first = [fake_trial(f"p0-s{i}", "A", "p0") for i in range(2)]
    for trial in first:
        scheduler.on_trial_add(controller, trial)
    assert scheduler.on_trial_result(controller, first[0], curve_point(2, 80.0)) == TrialScheduler.NOOP
    assert scheduler.on_trial_result(controller, first[1], curve_point(2, 80.0)) == TrialScheduler.CONTINUE
    assert controller.resumed == ["p0-s0"], "the held seed resumes once its sibling reached the step"
    return scheduler, controller


# -- the scheduler -----------------------------------------------------------------------------

def test_no_scheduler_in_the_spec_is_none_and_grid_mode_refuses_one(tmp_path):
    from sweeper.spec.reading import SpecError

    spec = load_study(es_spec(tmp_path, ES_SPEC.replace("  scheduler: {kind: asha, grace_period: 1}\n", ""))).spec
    assert make_scheduler(spec.finetuning) is None
    grid = ES_SPEC.replace("  search: optuna\n", "  learning_rates: [0.001]\n")
    with pytest.raises(SpecError, match="scheduler.kind"):
        _ = load_study(es_spec(tmp_path, grid)).spec
    with pytest.raises(SpecError, match="eval_every"):
        _ = load_study(es_spec(tmp_path, ES_SPEC.replace("  eval_every: 2\n", ""))).spec


@pytest.mark.parametrize("kind", ["asha", "median"])
def test_make_scheduler_judges_search_score_at_optimizer_steps_with_the_grace_in_curve_points(tmp_path, kind):
    own = "reduction_factor: 2" if kind == "asha" else "min_samples_required: 4"  # each kind's own setting
    text = ES_SPEC.replace("{kind: asha, grace_period: 1}", f"{{kind: {kind}, grace_period: 3, {own}}}")
    ft = load_study(es_spec(tmp_path, text)).spec.finetuning
    scheduler = make_scheduler(ft, cell_of=lambda config: config["cell"])
    assert isinstance(scheduler, CellScheduler) and scheduler.metric == SEARCH_METRIC
    assert isinstance(scheduler.build(), ASHAScheduler if kind == "asha" else MedianStoppingRule)
    settings = scheduler.build.keywords  # what each cell's Tune scheduler is built with
    # The grace: 3 curve points of eval_every (2) optimizer steps.
    assert settings["time_attr"] == TIME_ATTR == "train_steps" and settings["grace_period"] == 3 * 2
    assert settings["metric"] == SEARCH_METRIC and settings["mode"] == "max"
    if kind == "asha":
        assert settings["reduction_factor"] == 2
    else:
        assert settings["min_samples_required"] == 4 and settings["hard_stop"]


def test_asha_compares_trials_within_their_cell_only(tmp_path):
    ft = load_study(es_spec(tmp_path)).spec.finetuning  # asha, grace 1 curve point = 2 steps, rf 3
    scheduler = make_scheduler(ft, cell_of=lambda config: config["cell"])
    good, bad, other = fake_trial("a1", "A"), fake_trial("a2", "A"), fake_trial("b1", "B")
    for trial in (good, bad, other):
        scheduler.on_trial_add(None, trial)
    assert scheduler.on_trial_result(None, good, point(2, 90.0)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, bad, point(2, 10.0)) == TrialScheduler.STOP
    # Cell B's first trial has nobody to be compared with: another task's 90 is no bar for it.
    assert scheduler.on_trial_result(None, other, point(2, 10.0)) == TrialScheduler.CONTINUE
    scheduler.on_trial_complete(None, bad, point(2, 10.0))
    assert set(scheduler.by_cell) == {"A", "B"} and "a2" not in scheduler.point_of_trial
    # A trial is judged at its step, whatever its number of reports: step 7 is past rung 6.
    late = fake_trial("a3", "A")
    scheduler.on_trial_add(None, late)
    assert scheduler.on_trial_result(None, late, point(7, 50.0)) == TrialScheduler.CONTINUE


def test_median_stopping_never_pauses_a_trial(tmp_path):
    """A function trainable has no checkpoint: a paused trial would start over. With too few
    other trials to compare with, the median rule yields to waiting trials by pausing; not here."""
    text = ES_SPEC.replace("{kind: asha, grace_period: 1}", "{kind: median, grace_period: 1, min_samples_required: 2}")
    scheduler = make_scheduler(load_study(es_spec(tmp_path, text)).spec.finetuning)
    waiting = SimpleNamespace(get_live_trials=lambda: [SimpleNamespace(status="PENDING")])
    first, second, third = (fake_trial(f"t{i}", "A") for i in range(3))
    for trial in (first, second, third):
        scheduler.on_trial_add(waiting, trial)
    assert scheduler.on_trial_result(waiting, first, point(2, 80.0)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(waiting, second, point(2, 70.0)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(waiting, third, point(2, 10.0)) == TrialScheduler.STOP
    # Even a rule built to pause (hard_stop off) only ever continues or stops through CellScheduler.
    pausing = CellScheduler(lambda: MedianStoppingRule(time_attr=TIME_ATTR, metric=SEARCH_METRIC, mode="max",
                                                       grace_period=1, hard_stop=False), lambda config: None)
    lone = fake_trial("x", "A")
    pausing.on_trial_add(waiting, lone)
    assert pausing.on_trial_result(waiting, lone, point(2, 10.0)) == TrialScheduler.CONTINUE


def test_a_point_whose_seed_mean_is_low_is_stopped_with_all_its_seeds_though_one_seed_is_high(tmp_path):
    scheduler, controller = seeded_scheduler(tmp_path)
    high, low = fake_trial("p1-s0", "A", "p1"), fake_trial("p1-s1", "A", "p1")
    for trial in (high, low):
        scheduler.on_trial_add(controller, trial)
    # Alone, 90 clears the rung (the first point's 80); the point's mean, (90 + 10) / 2, does not.
    high.last_result = curve_point(2, 90.0)
    assert scheduler.on_trial_result(controller, high, high.last_result) == TrialScheduler.NOOP, "held for its sibling"
    assert scheduler.on_trial_result(controller, low, curve_point(2, 10.0)) == TrialScheduler.STOP
    assert controller.stopped == ["p1-s0"] and "p1-s0" not in controller.resumed, "stopped with the point"
    assert scheduler.on_trial_result(controller, high, curve_point(4, 95.0)) == TrialScheduler.STOP
    # A seed that starts after its point was stopped is stopped at its first report.
    late = fake_trial("p1-s2", "A", "p1")
    scheduler.on_trial_add(controller, late)
    assert scheduler.on_trial_result(controller, late, curve_point(2, 99.0)) == TrialScheduler.STOP
    assert "1 of 2 points stopped" in scheduler.debug_string()


def test_a_point_whose_seed_mean_is_high_runs_on_with_all_its_seeds_though_one_seed_is_low(tmp_path):
    scheduler, controller = seeded_scheduler(tmp_path)
    high, low, waiting = (fake_trial(f"p1-s{i}", "A", "p1") for i in range(3))
    waiting.status = "PENDING"  # no worker yet: it holds nobody back
    for trial in (high, low, waiting):
        scheduler.on_trial_add(controller, trial)
    # Alone, 70 is under the rung's cutoff; the point's mean, (95 + 70) / 2, is above the bar.
    assert scheduler.on_trial_result(controller, low, curve_point(2, 70.0)) == TrialScheduler.NOOP
    assert scheduler.on_trial_result(controller, high, curve_point(2, 95.0)) == TrialScheduler.CONTINUE
    assert controller.resumed[-1] == "p1-s1" and controller.stopped == []
    # A seed that ended holds its siblings back no more; a seed that starts once its siblings
    # passed the rung is not judged there again on its own (0 alone would be stopped).
    scheduler.on_trial_complete(controller, high, {**point(8, 96.0), FINAL: True})
    assert scheduler.on_trial_result(controller, low, curve_point(4, 72.0)) == TrialScheduler.CONTINUE
    scheduler.on_trial_complete(controller, low, {**point(8, 71.0), FINAL: True})
    waiting.status = "RUNNING"
    for step in (2, 4, 6):
        assert scheduler.on_trial_result(controller, waiting, curve_point(step, 0.0)) == TrialScheduler.CONTINUE
    assert controller.stopped == [] and "0 of 2 points stopped" in scheduler.debug_string()


# -- the worker ----------------------------------------------------------------------------------

def test_the_trial_hands_each_curve_point_to_the_callback_and_ends_where_tune_stops_it(tmp_path, wordpiece_dir):
    from sweeper.contract.configs import AdamWConfig, FinetuneProtocol, TrialConfig, TrialRuntime
    from sweeper.contract.registry import family_of, get_task
    from trainables.finetune_loop import run_trial
    from trainables.tasks import data as task_data

    task = get_task("wordnet-supersense-cls")
    family = family_of(task.family)
    out = tmp_path / "prepared"
    task_data.prepare_task_data(task, family.implementation, wordpiece_dir, 32, str(out), 48, 16, {})
    trial = TrialConfig(
        trial_key="k", task=task, family=family.implementation, seed=0, checkpoint_path=None,
        protocol=FinetuneProtocol(learning_rate=1e-3, batch_size=8, max_steps=7, epochs=10.0, max_length=32,
                                  warmup_ratio=0.1, optimizer=AdamWConfig()),
        task_data_dir=str(out), runtime=TrialRuntime(micro_batch_size=8, eval_batch_size=16, eval_every=2),
        random_init_config={"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                            "num_attention_heads": 4, "num_key_value_heads": 2})
    points = []
    result = run_trial(trial, lambda *p: points.append(p))
    assert [p[0] for p in points] == [2, 4, 6], "a point every eval_every steps; the final weights are the result"
    assert [(c["step"], c["train_loss"], c["validation_score"]) for c in result["curve"][:-1]] == points
    assert result["train_steps"] == 7 and result["status"] == "ok"

    def stop_at_second(step, train_loss, validation_score):  # what tune.report does to a stopped trial
        if step == 4:
            raise SystemExit(0)
    with pytest.raises(SystemExit):
        run_trial(trial, stop_at_second)
    assert run_trial(replace(trial, seed=1))["status"] == "ok", "the worker runs its next trial as usual"


# -- recording -------------------------------------------------------------------------------------

def smoke_shard(tmp_path, n: int = 3):
    trials = list(plan_study(load_study(ROOT / "search_spaces" / "smoke.yaml").spec).trials[:n])
    layout = StudyLayout(str(tmp_path))
    return trials, layout, GridShard(trials, layout, {(None, t.task): "unused" for t in trials})


def test_a_stopped_trial_is_recorded_with_its_last_curve_point_and_is_finished(tmp_path):
    trials, layout, shard = smoke_shard(tmp_path)
    recorder = ResultsRecorder("smoke", layout, shard, ProgressLine("finetune", 2, unit="trials"))
    stopped, finished = fake_trial("s", "A"), fake_trial("f", "A")
    stopped.config = {"trial_index": 0}
    finished.config = {"trial_index": 1}
    for step, score in [(2, 40.0), (4, 45.0)]:
        last = {"trial_key": trials[0].trial_key, "learning_rate": 0.001, "train_steps": step, "train_loss": 1.0 / step,
                "validation_score": score, SEARCH_METRIC: score, "wall_time_s": 0.5, FINAL: False}
        recorder.on_trial_result(0, [], stopped, last)
    stopped.last_result = {**last, "done": True}
    recorder.on_trial_start(0, [], stopped)
    recorder.on_trial_complete(0, [], stopped)
    final = {"status": "ok", "validation_score": 60.0, "test_score": 55.0, "train_loss": 0.2, "train_steps": 8,
             "curve": [{"step": 8, "train_loss": 0.2, "validation_score": 60.0, "test_score": 55.0}], FINAL: True}
    recorder.on_trial_result(0, [], finished, final)
    finished.last_result = final
    recorder.on_trial_start(0, [], finished)
    recorder.on_trial_complete(0, [], finished)
    recorder.flush()

    rows = {row["trial_key"]: row for row in pq.read_table(tmp_path / "results" / TRIALS).to_pylist()}
    row = rows[trials[0].trial_key]
    assert row["status"] == "stopped" and row["validation_score"] == 45.0 and row["test_score"] is None
    assert row["train_steps"] == 4 and row["train_loss"] == 0.25 and row["learning_rate"] == 0.001
    assert rows[trials[1].trial_key]["status"] == "ok"
    curves = pq.read_table(tmp_path / "results" / EVAL_CURVES).to_pandas()
    mine = curves[curves["trial_key"] == trials[0].trial_key].sort_values("step")
    assert mine[["step", "validation_score"]].values.tolist() == [[2, 40.0], [4, 45.0]]
    assert mine["test_score"].isna().all() and not recorder.curves
    # Finished: never run again, with or without --retry-failed.
    assert trials[0].trial_key in finished_trial_keys(layout)
    assert trials[0].trial_key in finished_trial_keys(layout, include_failed=False)


def test_stopped_rows_are_counted_but_never_selected_nor_in_intervals(tmp_path):
    import pandas as pd

    from sweeper.run.recording import trial_row

    trials, _, _ = smoke_shard(tmp_path, 8)
    cell = [t for t in trials if (t.checkpoint.checkpoint_id, t.task) == (trials[0].checkpoint.checkpoint_id,
                                                                         trials[0].task)]
    rows = []
    for i, trial in enumerate(cell[:2]):
        rows.append(trial_row("s", trial, {"validation_score": 50.0 + i, "test_score": 40.0 + i, "train_steps": 8},
                              "ok", None))
    best_stopped = replace(cell[0], seed=7)
    rows.append(trial_row("s", best_stopped, {"learning_rate": 5e-3, "validation_score": 99.0, "train_steps": 2},
                          "stopped", None))
    rows[-1]["learning_rate"], rows[-1]["trial_key"] = 5e-3, "stopped-key"
    frame = pd.DataFrame(rows)
    best = analysis.best_params_table(frame)
    assert len(best) == 1 and best.loc[0, "learning_rate"] == 1e-3 and best.loc[0, "seeds"] == 2
    assert analysis.selected_scores(frame, best)["test_score"].notna().all()
    counts = analysis.status_counts(frame)
    assert counts.loc[0, "ok"] == 2 and counts.loc[0, "stopped"] == 1 and counts.loc[0, "trials"] == 3
    # A point one of whose seeds was stopped has a survivor-biased mean: a point that finished
    # every seed is selected before it, however high the survivor scored.
    for seed, status in ((8, "ok"), (9, "stopped")):
        rows.append(trial_row("s", replace(cell[0], seed=seed), {"validation_score": 80.0, "test_score": 70.0,
                                                                 "train_steps": 8}, status, None))
        rows[-1]["learning_rate"], rows[-1]["trial_key"] = 2e-3, f"lucky-{seed}"
    best = analysis.best_params_table(pd.DataFrame(rows))
    assert best.loc[0, "learning_rate"] == 1e-3 and best.loc[0, "seeds"] == 2
    # Where no point finished every seed, the best of them is still selected.
    only_partial = pd.DataFrame([r for r in rows if r["learning_rate"] == 2e-3])
    assert analysis.best_params_table(only_partial).loc[0, "learning_rate"] == 2e-3


# -- on Tune ------------------------------------------------------------------------------------------


# -- end to end ----------------------------------------------------------------------------------------
