"""Progress lines (sweeper.run.progress): best so far per cell, a line per failed trial, quiet
otherwise."""
from __future__ import annotations

from sweeper.run.progress import ProgressLine


def test_best_so_far_per_cell_only_when_it_rises(capsys):
    progress = ProgressLine("finetune", 4, "trials", interval=0.0)
    progress.scored("ckpt / sst2", 61.0, "LR 1e-4, seed 0")
    progress.scored("ckpt / sst2", 59.0, "LR 3e-4, seed 0")  # lower: the best stays
    progress.advance("ok")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[finetune] 1/4 trials")
    assert out[1:] == ["  best so far ckpt / sst2: 61.00 (LR 1e-4, seed 0)"]
    progress.scored("ckpt / sst2", 60.0, "LR 1e-5, seed 1")
    progress.advance("ok")
    assert len(capsys.readouterr().out.splitlines()) == 1  # no rise: the count line alone
    progress.scored("ckpt / sst2", 62.5, "LR 1e-5, seed 2")
    progress.advance("ok")
    assert "best so far ckpt / sst2: 62.50 (LR 1e-5, seed 2)" in capsys.readouterr().out


def test_a_failed_trial_is_one_line_with_its_errors_last_line(capsys):
    progress = ProgressLine("finetune", 4, "trials", interval=3600.0)
    error = "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA OOM\n"
    progress.failed("ckpt / sst2, LR 1e-4, seed 0", error)
    progress.advance("failed")  # within the interval: no count line
    expected = "[finetune] failed: ckpt / sst2, LR 1e-4, seed 0: RuntimeError: CUDA OOM"
    assert capsys.readouterr().out.splitlines() == [expected]
