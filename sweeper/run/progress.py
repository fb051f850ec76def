"""Progress lines for long work: counts, outcome tallies, elapsed time and an ETA."""
from __future__ import annotations

import sys
import time
from collections import Counter


def format_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


class ProgressLine:
    """Prints `[stage] done/total unit (tallies) | elapsed, ~left` at most every `interval` s."""

    def __init__(self, stage: str, total: int, unit: str, interval: float = 5.0):
        # No stream attribute: Tune pickles its callbacks (and this with them); sys.stdout is
        # looked up at print time instead.
        self.stage, self.total, self.unit, self.interval = stage, total, unit, interval
        self.started = self.last_print = time.time()
        self.done = 0
        self.tally: Counter[str] = Counter()

    def advance(self, outcome: str) -> None:
        self.done += 1
        self.tally[outcome] += 1
        if time.time() - self.last_print >= self.interval or self.done == self.total:
            self.print()

    def print(self) -> None:
        elapsed = time.time() - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        tallies = ", ".join(f"{n} {k}" for k, n in sorted(self.tally.items()))
        percent = 100 * self.done / self.total if self.total else 100
        print(f"[{self.stage}] {self.done}/{self.total} {self.unit} ({percent:.0f}%; {tallies}) | "
              f"{format_duration(elapsed)} elapsed, ~{format_duration(left)} left", file=sys.stdout, flush=True)
        self.last_print = time.time()

    def finish(self) -> None:
        if self.done and self.last_print < time.time() - 0.01 and self.done != self.total:
            self.print()
