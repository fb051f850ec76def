"""The spec stage: what a study may say, read from YAML into frozen, validated dataclasses.

Owns the spec types (`study`, `pretraining`, `finetuning`; `limits`: the plan's size bounds, and
the plan's size counted; `resources`: the layouts a cluster can run; `settings`: objective settings
and overrides checked the same for a study and each phase; `names`: what a name may hold), reading a spec file within bounds (`reading`) and converting it field
by field (`parsing`, with grids and distributions), a fine-tuning cell's search space (`space`),
what a spec can name (`catalog`: the shipped tasks and model presets; `registry`: the `Registry`
of task families, tasks and objectives), how a family's trials spend tokens and memory
(`estimates`) and the typed configs that cross to the workers (`configs`). Imports only
`sweeper.store` below it; no Ray, no torch.
"""
