"""The design stage: what a study's design can decide and what it is expected to cost, predicted
by running the report's own decision rule on the plan (no Ray, no torch).

Owns, for `sweeper plan`, the comparisons the design can decide and the smallest difference each
detects (`decidable`), and a sequential replicate plan's expected runs and GPU-hours (`sequential_cost`).
It sits above the report stage because it simulates the report's rule (`sweeper.report`: the
findings, their tests, the sequential looks) over the plan (`sweeper.plan`); the run stage and the
CLI sit above it.
The stages and every module, in one place: docs/architecture.md.
"""
