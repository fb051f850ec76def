"""DDP training on a real local Ray head: split from tests/unit/trainables/test_accumulation.py,
whose single-process tests stay there."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file


from test_accumulation import planned_run


@pytest.mark.e2e
def test_two_ddp_workers_in_micro_batches_train_like_one_process_and_keep_only_what_is_needed(
        ray_head_two_cpus, wordpiece_dir, tmp_path):
    """One Train worker group (~40 s): 2 DDP workers (gloo) x 2 micro-batches of 4 against Train's
    local mode in one pass of 16, over 3 CLM then 3 MLM steps; a checkpoint every step, step 3
    evaluated. Same per-step losses and final weights; both run folders end with the evaluated
    checkpoints only (the final one is the newest resume point), step 3 without optimizer state."""
    import ray

    from sweeper.run.train_grid import fit_run

    corpus_dir = str(Path(wordpiece_dir).parent)
    runs = {name: planned_run(6, checkpoint_steps=(3,), run_dir=str(tmp_path / name), corpus_dir=corpus_dir,
                              workers=workers, micro_batch_size=micro)
            for name, workers, micro in (("local-16", 0, None), ("ddp-2x4", 2, 4))}
    ray.init(address=ray_head_two_cpus[0], log_to_driver=False)
    try:
        for run in runs.values():
            fit_run(run, {"cpus_per_worker": 1, "gpus_per_worker": 0, "max_failures": 0})
    finally:
        ray.shutdown()
    logs, weights = {}, {}
    for name, run in runs.items():
        run_dir = Path(run.run_dir)
        assert sorted(p.name for p in run_dir.glob("step-*")) == ["step-3", "step-6"], name
        assert not (run_dir / "step-3" / "training_state.pt").exists(), name
        assert (run_dir / "step-6" / "training_state.pt").exists(), name
        logs[name] = [row["loss"] for row in json.loads((run_dir / "step-6" / "train_log.json").read_text())]
        weights[name] = load_file(run_dir / "step-6" / "model.safetensors")
    assert len(logs["ddp-2x4"]) == 6
    # float32 token-loss sums in another grouping (~1e-7 relative), on weights that differ by < 1e-5.
    assert logs["ddp-2x4"] == pytest.approx(logs["local-16"], rel=1e-5)
    # float32 all-reduce rounding of a gradient entry is <~ 1e-9 (entries <~ 1e-2 after the clip);
    # AdamW (eps 1e-5) turns it into at most lr / eps = 3e-3 / 1e-5 = 300 times as much a step:
    # <~ 3e-7 a step, 2e-6 over 6 steps, within atol 1e-5 (rtol: weights of ~0.02 add 2e-6).
    for key, value in weights["local-16"].items():
        assert torch.allclose(weights["ddp-2x4"][key], value, rtol=1e-4, atol=1e-5), key


@pytest.mark.e2e
def test_a_run_resumed_at_its_final_checkpoint_applies_the_retention_it_missed(
    ray_head_two_cpus, wordpiece_dir, tmp_path
):
    """Killed between its final checkpoint and that step's retention, a run restarts at its last
    step and trains none: the loop applies retention at the resume point, or the resume-only
    checkpoints and the older evaluated one's optimizer state stay for good. The folder such a
    kill leaves is made by a first fit that keeps every checkpoint (keep 6); the second fit of the
    same run keeps 1 (Train's local mode, in this process)."""
    import ray

    from sweeper.run.train_grid import fit_run

    run_dir = tmp_path / "run"
    runs = [planned_run(6, checkpoint_steps=(3,), run_dir=str(run_dir), corpus_dir=str(Path(wordpiece_dir).parent),
                        keep=keep) for keep in (6, 1)]
    ray.init(address=ray_head_two_cpus[0], log_to_driver=False)
    try:
        fit_run(runs[0], {"cpus_per_worker": 1, "gpus_per_worker": 0, "max_failures": 0})
        assert sorted(p.name for p in run_dir.glob("step-*")) == [f"step-{s}" for s in range(1, 7)]
        final = (run_dir / "step-6" / "model.safetensors").stat().st_mtime_ns
        fit_run(runs[1], {"cpus_per_worker": 1, "gpus_per_worker": 0, "max_failures": 0})
    finally:
        ray.shutdown()
    assert (run_dir / "step-6" / "model.safetensors").stat().st_mtime_ns == final, "nothing retrained"
    assert sorted(p.name for p in run_dir.glob("step-*")) == ["step-3", "step-6"]
    assert [(run_dir / f"step-{s}" / "training_state.pt").exists() for s in (3, 6)] == [False, True]
