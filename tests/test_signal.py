"""The pipeline carries signal: for every task family, a model pretrained by the micro study
beats the same architecture with random weights (fixed seeds, each side at its best learning rate).

The pretrained side is the micro study's CLM run (`tiny-clm-600`, the same run key as in
micro.yaml) pretrained and fine-tuned by `sweeper run` on the test's Ray head; the random side runs
the same trial function on the same prepared task data with the same protocol and seeds. At this
scale the CLM run is the one whose features help every family (the paper's data-efficiency
finding: CLM learns faster early on); the micro report shows the MLM runs' scores beside it.
"""
from __future__ import annotations

import pytest
import yaml

from sweeper.catalog import task_dict
from sweeper.finetuning import worker_protocol
from sweeper.plan import plan_study
from sweeper.spec import load_spec
from sweeper.store import read_trials
from trainables.finetune_loop import run_trial

from conftest import ROOT, run_sweeper

@pytest.fixture(scope="module")
def micro_clm_study(ray_head, tmp_path_factory):
    spec = yaml.safe_load((ROOT / "search_spaces" / "micro.yaml").read_text())
    spec["study"] = "micro-signal"
    spec["pretraining"]["runs"] = [{"objective": "clm"}]  # identity as in micro.yaml; no intermediate checkpoint
    spec["finetuning"].update(seeds=[0])  # the micro study's learning rates, one seed
    spec["resources"].update(cpus_per_worker=2)  # threads of the local-mode run: not part of its key
    folder = tmp_path_factory.mktemp("signal")
    path = folder / "micro-signal.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = run_sweeper("run", str(path), "--storage", str(folder / "study"), address=ray_head[0])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    micro_runs = {run.name: run.run_key for run in plan_study(load_spec(ROOT / "search_spaces" / "micro.yaml")).runs}
    (run,) = plan_study(load_spec(path)).runs
    assert micro_runs[run.name] == run.run_key, "the test pretrains the micro study's own run"
    return load_spec(path), run, folder / "study", ray_head[0]


def best_test_score(results: list[dict]) -> float:
    """Test score at the learning rate with the best validation score (one seed)."""
    return max(results, key=lambda r: r["validation_score"])["test_score"]


@pytest.mark.e2e
def test_a_micro_pretrained_model_beats_random_weights_on_every_family(micro_clm_study):
    spec, run, study_dir, ray_address = micro_clm_study
    rows = read_trials(study_dir).to_pandas()
    assert set(rows["status"]) == {"ok"}
    protocol = worker_protocol(spec)
    cache = study_dir / "cache" / "tasks"
    task_dirs = {task: str(next(cache.glob(f"{task}-study-*"))) for task in spec.finetuning.tasks}
    # The random-weight side: the same trials, two at a time as Ray tasks on the test's head.
    import ray

    payloads = []
    for task in spec.finetuning.tasks:
        info = task_dict(task)
        if info["train_task"]:
            continue  # scored by its training task's trials
        companions = [t for t in spec.finetuning.tasks if task_dict(t)["train_task"] == task]
        payloads += [{"trial_key": task, "checkpoint_path": None, "random_init_config": run.model_config,
                      "task": info, "task_data_dir": task_dirs[task], "learning_rate": lr, "seed": 0,
                      "also_evaluate": [{"trial_key": c, "task_data_dir": task_dirs[c]} for c in companions]}
                     for lr in spec.finetuning.learning_rates]
    ray.init(address=ray_address, log_to_driver=False)
    try:
        results = ray.get([ray.remote(run_trial).options(num_cpus=1).remote(p, protocol) for p in payloads])
    finally:
        ray.shutdown()
    random_scores = {task: [] for task in spec.finetuning.tasks}
    for result in results:
        random_scores[result["trial_key"]].append(result)
        for companion, scores in result["also_evaluated"].items():
            random_scores[companion].append({"validation_score": scores["validation"], "test_score": scores["test"]})
    lines, losing = [], []
    for task in spec.finetuning.tasks:
        pretrained = best_test_score(rows[rows.task == task][["validation_score", "test_score"]].to_dict("records"))
        random = best_test_score(random_scores[task])
        lines.append(f"{task} ({task_dict(task)['family']}): pretrained {pretrained:.1f} vs random {random:.1f}")
        if not pretrained > random:
            losing.append(task)
    print("\n".join(lines))
    assert not losing, "\n".join(lines)
