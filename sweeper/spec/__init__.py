"""The spec stage: what a study may say, read from YAML into frozen, validated dataclasses.

Owns the spec types (`study`, `pretraining`, `finetuning`; `limits`: the plan's size bounds, and
the plan's size counted; `resources`: the layouts a cluster can run; `settings`: objective settings
and overrides checked the same for a study and each phase; `names`: what a name may hold), reading a spec file within
bounds (`reading`) and converting it field by field (`parsing`, with grids and distributions), a fine-tuning cell's
search space (`space`), what the spec's names resolve to through `sweeper.contract` (the registry, the catalog and
the configs that cross to the workers), and what is generated from the spec types: the JSON
Schema (`schema`), docs/spec.md (`reference`), both from the fields' docstrings (`field_docs`).
Where this stage sits among the others: docs/architecture.md. Imports only `sweeper.contract` and `sweeper.store` below
it; no Ray, no torch.
"""
