"""The plan stage: a spec -> the concrete study, with no Ray and no torch.

Owns the pretraining runs (`runs`, named by `run_names`), the evaluated checkpoints and
fine-tuning trials with their keys (`study_plan`), the checks only a plan can make while a spec
is loaded (`load`: `load_study`, the one way into a study), what `sweeper plan` prints (`plan_text`,
and against a study `preview`), the cost and memory estimates of `sweeper plan` (`cost`, `memory`,
`divisors`), what an edited spec changes in a recorded study
(`changes`), and checkpoints from elsewhere read as hostile input (`checkpoint_sources`,
`source_tree`, `checkpoint_checks`).
Imports `sweeper.spec` and `sweeper.store`.
The stages and every module, in one place: docs/architecture.md.
"""
