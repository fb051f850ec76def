"""The fine-tuning cost model (sweeper.plan.cost) and the fine-tuning memory check of `sweeper plan`."""
from __future__ import annotations

from dataclasses import replace

import pytest
from cli_process import sweeper_cli
from conftest import ROOT

from sweeper.plan.cost import (
    finetuning_cost,
    mi250x_hours,
    padded_finetuning_cost,
    trial_tokens,
)
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.contract.catalog import PAPER_TASK_STATISTICS
from sweeper.contract.registry import get_task, task_statistics
from sweeper.contract.estimates import QA_PAPER_FRAME


@pytest.fixture(scope="module")
def paper():
    spec = load_study(ROOT / "search_spaces" / "paper.yaml").spec
    return spec, plan_study(spec)


def with_finetuning(spec, **changes):
    return replace(spec, finetuning=replace(spec.finetuning, **changes))


def with_statistics(monkeypatch, task: str, **changes) -> None:
    monkeypatch.setitem(PAPER_TASK_STATISTICS, task, replace(PAPER_TASK_STATISTICS[task], **changes))


def test_every_paper_task_has_statistics_with_lengths_for_its_family():
    for task, stats in PAPER_TASK_STATISTICS.items():
        family = get_task(task).family
        assert stats.test_rows > 0 and (stats.train_rows > 0) == (get_task(task).train_task is None), task
        lengths = {"sequence_classification": [stats.mean_tokens], "token_classification": [stats.mean_tokens],
                   "extractive_qa": [stats.context_tokens, stats.question_tokens],
                   "retrieval": [stats.query_tokens, stats.document_tokens, stats.documents_per_query]}[family]
        assert all(value > 0 for value in lengths), task


def test_splits_follow_the_study_carving():
    # 5 % of train is validation (rounded, as trainables.tasks.data carves it); the source's
    # validation split is the test set; a source's own validation split is kept (the TC copies,
    # MLDR's dev); NQ halves its one judged split.
    assert task_statistics("qqp").split_rows() == (345_654, 18_192, 40_430)
    assert task_statistics("conll2003").split_rows() == (14_041, 3_250, 3_453)
    assert task_statistics("mldr-en").split_rows() == (0, 200, 800)
    assert task_statistics("nq").split_rows() == (0, 1_726, 1_726)
    assert task_statistics("qqp").split_rows(max_train=1000, max_eval=500) == (1000, 500, 500)


def test_wordnet_statistics_come_from_the_shipped_files():
    stats = task_statistics("wordnet-supersense-cls")
    assert stats.train_rows + stats.test_rows == 9_772  # trainables/data_files/README.md
    assert 5 < stats.mean_tokens < 60
    assert task_statistics("wordnet-usage-retrieval").documents_per_query == 8


def test_a_task_with_twice_the_examples_costs_twice(paper, monkeypatch):
    spec, _ = paper
    spec = with_finetuning(spec, max_steps=10**9)  # the epoch, not the step cap, bounds training
    before = trial_tokens(spec, "mnli")
    with_statistics(monkeypatch, "mnli", train_rows=2 * 392_702, test_rows=2 * 9_815)
    after = trial_tokens(spec, "mnli")
    # Not float error: ceil(steps) and round(5 % validation) move by <= 1 of 11,659 steps and of 29,450 rows.
    assert after.trained == pytest.approx(2 * before.trained, rel=1e-4)
    assert after.scored == pytest.approx(2 * before.scored, rel=1e-4)


def test_max_steps_caps_training_tokens(paper):
    spec, _ = paper
    tokens = trial_tokens(spec, "mnli")  # 1,000 steps x 32 rows x 50 tokens
    assert tokens.trained == 1000 * 32 * 50


def test_max_length_caps_each_row(paper, monkeypatch):
    spec, _ = paper
    with_statistics(monkeypatch, "sst2", mean_tokens=5_000)
    short, long = (trial_tokens(with_finetuning(spec, max_length=length), "sst2") for length in (512, 2048))
    # Same formula, float64 (both lines).
    assert long.trained == pytest.approx(4 * short.trained)
    assert trial_tokens(with_finetuning(spec, max_length=8192), "sst2").trained == pytest.approx(
        5_000 / 2048 * long.trained)


def test_a_long_qa_context_is_counted_in_windows(paper, monkeypatch):
    spec = with_finetuning(paper[0], max_length=512, doc_stride=128, scoring="standard")
    with_statistics(monkeypatch, "squad", context_tokens=1_000, question_tokens=12)
    # width 512 - 12 - 3 = 497: windows start at 0, 369 and 503 (the last ends at the context's end).
    tokens = trial_tokens(spec, "squad")
    _, validation, test = task_statistics("squad").split_rows()
    assert tokens.scored == pytest.approx(3 * 512 * (validation + test))  # same product, float64


def test_a_long_qa_context_under_paper_scoring_is_one_row_cut_at_max_length(paper, monkeypatch):
    """The authors' QA cuts the context: one row per example, whatever its length."""
    spec = with_finetuning(paper[0], max_length=512, doc_stride=128, scoring="paper")
    with_statistics(monkeypatch, "squad", context_tokens=1_000, question_tokens=12)
    _, validation, test = task_statistics("squad").split_rows()
    assert trial_tokens(spec, "squad").scored == pytest.approx(512 * (validation + test))
    with_statistics(monkeypatch, "squad", context_tokens=100, question_tokens=12)
    assert trial_tokens(spec, "squad").scored == pytest.approx((100 + 12 + QA_PAPER_FRAME) * (validation + test))


def test_msmarco_trials_pay_for_their_companions(paper, monkeypatch):
    spec, _ = paper
    alone = trial_tokens(with_finetuning(spec, tasks=["msmarco"]), "msmarco")
    both = trial_tokens(spec, "msmarco")
    nq, mldr = task_statistics("nq"), task_statistics("mldr-en")
    companions = sum(nq.split_rows()) * (nq.query_tokens + nq.documents_per_query * nq.document_tokens) + sum(
        mldr.split_rows()
    ) * (mldr.query_tokens + spec.finetuning.max_length)  # MLDR documents cut at max_length
    assert both.scored - alone.scored == pytest.approx(companions)  # same sums, float64
    assert both.trained == alone.trained
    assert trial_tokens(spec, "nq").scored == trial_tokens(spec, "mldr-en").scored == 0


def test_the_paper_plan_is_comparable_with_the_papers_compute(paper):
    """The paper reports ~9k MI250X GPU-hours for its ~15-18k fine-tuning runs. Counted with
    real token lengths, the same FLOPs are ~300 MI250X-hours at 40 % utilisation: a run whose
    batches hold ~1-5k real tokens is launch- and loading-bound, so the paper's figure measures
    wall-clock, not FLOPs. Padded to 2,048 tokens per row (what this worker and, apparently, the
    paper's runs compute) the estimate lands at ~7.9k MI250X-hours: within 0.5-1.5 x of 9k."""
    spec, plan = paper
    real, padded = finetuning_cost(spec, plan), padded_finetuning_cost(spec, plan)
    assert 80 < real.gpu_hours < 250  # H100-hours at 40 %
    assert 0.5 * 9_000 < mi250x_hours(spec, padded) < 1.5 * 9_000
    assert padded.gpu_hours > 10 * real.gpu_hours


def test_a_task_without_statistics_falls_back_to_padded_rows(paper, monkeypatch):
    from sweeper.plan import cost

    spec, plan = paper
    spec = with_finetuning(spec, tasks=["sst2"])
    plan = replace(plan, trials=tuple(t for t in plan.trials if t.task == "sst2"))
    monkeypatch.setattr(cost, "task_statistics", lambda task: None)  # as for a plugin's task
    assert trial_tokens(spec, "sst2") is None
    fallback = cost.fallback_tokens(spec, "sst2")
    length = spec.finetuning.max_length
    assert (fallback.trained, fallback.scored) == (1000 * 32 * length, 5000 * length)
    assert finetuning_cost(spec, plan).flops == pytest.approx(  # same sum, float64
        sum(fallback.flops(cost.backbone_count(t.checkpoint.run.model_config)) for t in plan.trials))


def sweeper(*argv):
    return sweeper_cli(*argv)


def test_the_paper_plan_prints_trial_memory_and_plans_cleanly():
    result = sweeper("plan", "search_spaces/paper.yaml")
    assert result.returncode == 0, result.stderr
    assert "estimated peak memory per fine-tuning trial (micro batch 4 x 2,028 tokens" in result.stdout
    assert "MI250X-hours" in result.stdout


def test_a_trial_that_cannot_fit_exits_2_naming_tasks_and_settings(tmp_path):
    text = (ROOT / "search_spaces" / "paper.yaml").read_text()
    text = text.replace("  micro_batch_size: 4             # examples", "  micro_batch_size: 32 # examples").replace(
        "  gpus_per_trial: 1 ", "  gpus_per_trial: 0.25 ")
    spec = tmp_path / "paper_packed.yaml"
    spec.write_text(text)
    result = sweeper("plan", str(spec))
    assert result.returncode == 2
    assert "fine-tuning trials would not fit" in result.stderr
    assert "1b on msmarco: estimated" in result.stderr and "sst2" in result.stderr
    suggestions = result.stderr.split("Settings that would make every trial fit")[1]
    assert "resources.gpus_per_trial: 1 + finetuning.micro_batch_size: 4" in suggestions
    # `sweeper run` refuses the same spec before anything exists.
    study = tmp_path / "study"
    refused = sweeper("run", str(spec), "--storage", str(study))
    assert refused.returncode == 2 and "fine-tuning trials would not fit" in refused.stderr
    assert "Nothing was started" in refused.stderr and not study.exists()
