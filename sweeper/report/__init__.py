"""The report stage: what the recorded results say, read from the store (no Ray, no torch).

Owns the paper's analyses (`analysis`), the tests behind each verdict (`statistics`), the
findings and their verdicts (`findings`), which checkpoints they compare and where each came
from (`provenance`), parameter importances (`importance`), figures (`figures`), `report.md`
(`writer`), the rows it reads and each row's standing (`study_history`; `used_rows` writes them
for `sweeper results`), repeated search points (`repeats`) and `sweeper status` (`status`).
Imports `sweeper.store`, and reads plan and spec types (`sweeper.plan`, `sweeper.spec`).
The stages and every module, in one place: docs/architecture.md.
"""
