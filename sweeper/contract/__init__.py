"""The contract between the driver and the workers: what both sides import, and nothing else.

Owns the typed configs that cross the Ray boundary (`configs`), the registry of task families, tasks
and objectives (`registry`) with the shipped tasks and model presets it names (`catalog`), how a
family's trials spend tokens and memory (`estimates`), where pretraining text comes from
(`text_sources`: corpus documents and task rows; the driver checks a source with it, the workers
read with it), W&B (`tracking`) and how both import their heavy dependencies (`heavy_imports`).
Imports only `sweeper.store` below it; no Ray, no torch: the driver stages above (spec, plan,
report, design, run) and the worker side (`trainables`) both stand on it, so no arrow points from the
workers back up into the driver.
The stages and every module, in one place: docs/architecture.md.
"""
