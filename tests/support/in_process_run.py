"""A pretraining run trained in the test's own process: the reference for a run a study trained
some other way (sharded, killed and resumed)."""
from __future__ import annotations

from pathlib import Path

import ray

from sweeper.plan.load import load_study
from sweeper.run.corpora import corpus_config, corpus_dir
from sweeper.run.train_grid import fit_run, pretrain_config
from sweeper.store.layout import StudyLayout


def trained_in_process(spec: Path, corpus_study: str, out_study: str, address: str):
    """The one pretraining run `spec` plans, trained by the study's own local-mode task body
    (`fit_run`: Train's local mode, in this process, as a driver of the head at `address`) into
    `out_study`, on the corpus `corpus_study` prepared for it (the same key: no preparation here).
    Returns its PretrainConfig."""
    loaded = load_study(spec)
    (run,) = loaded.plan.runs
    corpus = corpus_dir(StudyLayout(corpus_study), corpus_config(loaded.spec, loaded.plan, run.tokenizer))
    config = pretrain_config(run, loaded.spec, StudyLayout(out_study), corpus, {run.name: run})
    ray.init(address=address, log_to_driver=False)
    try:
        fit_run(config, {"cpus_per_worker": 1, "gpus_per_worker": 0, "max_failures": 0})
    finally:
        ray.shutdown()
    return config
