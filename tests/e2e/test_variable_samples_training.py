"""`data.sample_lengths: variable` reaches the worker: a nano MLM run trained by the study's own
task body (Train's local mode, a real local Ray head) on the authors' samples."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.train_grid import pretrain_config
from sweeper.store.layout import StudyLayout
from sweeper.store.results import PRETRAINING, read_table

SPEC = ("study: samples\nmodel: {{preset: nano}}\ndata: {{vocab_size: 512, seq_len: 48{extra}}}\n"
        "pretraining:\n  steps: 6\n  global_batch_size: 4\n  warmup_steps: 1\n  decay_steps: 2\n  log_every: 3\n"
        "  runs:\n    - {{objective: mlm}}\nfinetuning: {{tasks: [wordnet-supersense-cls]}}\n")


@pytest.mark.e2e
def test_a_run_on_variable_samples_trains_on_them(ray_head, wordpiece_dir, tmp_path):
    """The same run on fixed windows and on variable samples: other run keys, other losses (the
    worker attends within samples, not documents), the same tokens seen (rows are never padded)."""
    import ray

    from sweeper.run.train_grid import fit_run, record_finished_run

    seen = {}
    ray.init(address=ray_head[0], log_to_driver=False)
    try:
        for name, extra in (("fixed", ""), ("variable", ", sample_lengths: variable")):
            spec_file = tmp_path / f"{name}.yaml"
            spec_file.write_text(SPEC.format(extra=extra))
            spec = load_study(spec_file).spec
            (run,) = plan_study(spec).runs
            layout = StudyLayout(str(tmp_path / name))
            config = pretrain_config(run, spec, layout, str(Path(wordpiece_dir).parent), {run.name: run})
            assert config.sample_lengths == name
            outcome = fit_run(config, {"cpus_per_worker": 1, "gpus_per_worker": 0, "max_failures": 0})
            record_finished_run(spec.study, layout, run, outcome["wall_time_s"])
            marker = json.loads((Path(layout.run(run.name).checkpoint(6)) / "sweeper_checkpoint.json").read_text())
            table = read_table(layout, PRETRAINING).to_pandas()
            seen[name] = (run.run_key, marker["loss"], int(table["tokens_seen"].max()))
    finally:
        ray.shutdown()
    (fixed_key, fixed_loss, fixed_tokens), (variable_key, variable_loss, variable_tokens) = seen.values()
    assert fixed_key != variable_key
    assert math.isfinite(variable_loss) and variable_loss != fixed_loss
    assert fixed_tokens == variable_tokens == 6 * 4 * 48
