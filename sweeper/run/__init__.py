"""The run stage: `sweeper run` on a Ray cluster, and what runs on it.

Owns the whole study's order (`runner`), the corpus (`corpora`), the
pretraining grid on Ray Train (`train_grid`), the fine-tuning grid on Ray Tune (`task_prep`,
`shards`, `search`, `early_stopping`, `idle_workers`, `recording`, `tune_grid`), the study's single-writer lease
(`lease`), progress lines, what the console shows and the debug log (`console`), the recorded code version, and every
use of Ray's or Tune's private API (`ray_compat`). The only stage that imports Ray and launches worker code
(`trainables`); it may import every stage below it (design, report, plan, spec, contract, store).
The stages and every module, in one place: docs/architecture.md.
"""
