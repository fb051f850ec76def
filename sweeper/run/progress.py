"""Progress lines for long work: counts, outcome tallies, elapsed time and an ETA; under them the
cells whose best score rose since the last line, and a line per failed item as it fails (quiet
otherwise)."""
from __future__ import annotations

import sys
import time
from collections import Counter

from sweeper.report.tables import format_duration  # shared with `sweeper status`, which writes ETAs too

SETTLE_ITEMS = 2.0
"""How many finished items of a group it takes for their measured speed to weigh as much as the
plan's estimate of it (`ProgressLine.seconds_left`)."""
RECENT_SHARE = 0.25
"""The ETA's memory: a finished item's timing weighs half as much once this share of the time
since the first item started has passed since it ended (at least MIN_HALF_LIFE_S)."""
MIN_HALF_LIFE_S = 30.0



class ProgressLine:
    """Prints `[stage] done/total unit (percent; tallies) | elapsed, ~left` at most every
    `interval` s, and on the last item.

    `work` (optional) is the plan's estimate: group -> (items, planned work of one item), the
    work in any unit proportional to an item's run time (fine-tuning: a trial's FLOPs from the
    plan's cost model, grouped by task). The caller tells `begin(item)` and `end(item, group)`
    as items start and finish (Tune's callbacks: sweeper.run.tune_grid.TrialClock), then
    `advance(outcome)`. How `seconds_left` uses them is in its docstring."""

    def __init__(self, stage: str, total: int, unit: str, interval: float = 5.0,
                 work: dict[str, tuple[int, float]] | None = None):
        # No stream attribute: Tune pickles its callbacks (and this with them); sys.stdout is
        # looked up at print time instead.
        self.stage, self.total, self.unit, self.interval = stage, total, unit, interval
        self.started = self.last_print = time.time()
        self.done = 0
        self.tally: Counter[str] = Counter()
        self.work = dict(work or {})
        self.first_start: float | None = None
        self.running: dict[str, float] = {}  # item -> when it started
        self.timed: list[tuple[float, float, str | None, float]] = []  # (begin, end, group, own seconds) per item
        self.best: dict[str, tuple[float, str]] = {}  # cell -> (best score so far, where: its point)
        self.risen: list[str] = []  # cells whose best rose since the last line, in order

    def begin(self, item: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.running[item] = now
        if self.first_start is None:
            self.first_start = now

    def end(self, item: str, group: str | None, seconds: float | None = None, now: float | None = None) -> None:
        """`item` finished; `seconds`: its own run time, when it measured one (a fine-tuning
        trial's `wall_time_s`: without its worker's start-up), else the time since `begin`."""
        now = time.time() if now is None else now
        started = self.running.pop(item, None)
        if started is not None:
            self.timed.append((started, now, group, now - started if seconds is None else min(seconds, now - started)))

    def scored(self, cell: str, score: float | None, where: str) -> None:
        """An item of `cell` finished with `score` (higher is better) at `where` (its point): the
        next line lists the cell if its best so far rose."""
        if score is None or score != score:
            return
        if cell not in self.best or score > self.best[cell][0]:
            self.best[cell] = (score, where)
            if cell not in self.risen:
                self.risen.append(cell)

    def failed(self, what: str, error: str | None) -> None:
        """One line for a failed item, at once: what it was and its error's last line."""
        last = (error or "").strip().splitlines()[-1:] or ["no error recorded"]
        print(f"[{self.stage}] failed: {what}: {last[0][:200]}", file=sys.stdout, flush=True)

    def advance(self, outcome: str) -> None:
        self.done += 1
        self.tally[outcome] += 1
        if time.time() - self.last_print >= self.interval or self.done == self.total:
            self.print()

    def seconds_left(self, now: float | None = None) -> float | None:
        """The ETA, in seconds (None before the first item is done): the one-at-a-time seconds
        of the items left over the parallelism measured lately.

        - One at a time: each group's remaining items cost their planned work times a rate in
          seconds per unit of work: the rate of the finished items (their own seconds over their
          planned work), blended into the group's own rate as its items finish (its rate weighs
          n / (n + SETTLE_ITEMS) with n of them done). So the plan's cost model says how the
          groups compare (a QA trial is ~9 SC trials in the default study) until each group's
          timings say it, and the first finished item sets the scale.
        - Parallelism: the seconds items ran (finished and running ones) over the wall time, in
          a window of twice the half-life below (since the first item started, at first: waiting
          for the first checkpoint is not counted, waiting between items is). An item counts
          from `begin` to `end` at first (a worker's start-up, paid once, included); as the share
          of the planned work done grows, its own seconds take over (the overhead between items
          then counts).
        - Lately: a finished item weighs half as much once RECENT_SHARE of the time since the
          first start has passed since it ended, so the ETA follows a grid that speeds up
          (pretraining done, CPUs freed) or slows down.
        Without `work` or timings: the time since the first item started (else since the line
        was made) per item done, times the items left."""
        if not self.done:
            return None
        now = time.time() if now is None else now
        since = now - (self.first_start if self.first_start is not None else self.started)
        if since <= 0 or not any(group in self.work for _, _, group, _ in self.timed):
            return since / self.done * max(0, self.total - self.done)
        half_life = max(MIN_HALF_LIFE_S, RECENT_SHARE * since)
        groups: dict[str, list[float]] = {}  # group -> [items done, own seconds, planned work] (weighted by age)
        for _, ended, group, own in self.timed:
            if group in self.work:
                weight = 0.5 ** ((now - ended) / half_life)
                record = groups.setdefault(group, [0, 0.0, 0.0])
                record[0] += 1
                record[1] += weight * own
                record[2] += weight * self.work[group][1]
        overall = sum(r[1] for r in groups.values()) / max(sum(r[2] for r in groups.values()), 1e-300)
        serial = work_left = done_work = 0.0
        for group, (items, per_item) in self.work.items():
            finished, seconds, planned = groups.get(group, (0, 0.0, 0.0))
            left = max(0, items - finished)
            done_work += finished * per_item
            if left and per_item > 0:
                rate = (seconds + SETTLE_ITEMS * per_item * overall) / (planned + SETTLE_ITEMS * per_item)
                serial += left * per_item * rate
                work_left += left * per_item
        share = done_work / (done_work + work_left) if work_left else 1.0
        window_start = max(now - 2 * half_life, now - since)
        busy = sum(now - max(begun, window_start) for begun in self.running.values())
        for begun, ended, _, own in self.timed:
            if ended > window_start:
                busy += ((1 - share) * (ended - max(begun, window_start))
                         + share * (ended - max(ended - own, window_start)))
        return serial / max(busy / (now - window_start), 1e-6)

    def line(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        left = self.seconds_left(now)
        tallies = ", ".join(f"{n} {k}" for k, n in sorted(self.tally.items()))
        percent = 100 * self.done / self.total if self.total else 100
        eta = "" if left is None else f", ~{format_duration(left)} left"
        return (f"[{self.stage}] {self.done}/{self.total} {self.unit} ({percent:.0f}%; {tallies}) | "
                f"{format_duration(now - self.started)} elapsed{eta}")

    def best_lines(self) -> list[str]:
        """The cells whose best rose since the last line, one line each ('best so far')."""
        return [f"  best so far {cell}: {self.best[cell][0]:.2f} ({self.best[cell][1]})" for cell in self.risen]

    def print(self) -> None:
        print("\n".join([self.line(), *self.best_lines()]), file=sys.stdout, flush=True)
        self.risen, self.last_print = [], time.time()

    def finish(self) -> None:
        if self.done and self.last_print < time.time() - 0.01 and self.done != self.total:
            self.print()
