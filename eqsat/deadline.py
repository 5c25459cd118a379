"""The clock every limit reads, and the deadline one optimization's time limit sets."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def clock() -> float:
    """Seconds on the clock every limit reads (a test may replace it with a clock of its own)."""
    return time.perf_counter()


class TimeLimit(Exception):
    """The time limit of ``seconds`` passed where work could not stop with a result: the caller
    returns its input. The message says where it passed."""

    def __init__(self, seconds: float, where: str) -> None:
        super().__init__(f"time limit ({seconds:g} s) passed {where}")
        self.seconds = seconds


@dataclass
class Deadline:
    """When ``seconds`` from now are up: one for the whole optimization (loading, saturation,
    extraction), so ``Limits.timeout_s`` bounds it all."""

    seconds: float
    start: float = field(default_factory=lambda: clock())

    def elapsed(self) -> float:
        return clock() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def extend(self, seconds: float) -> None:
        """Move the deadline ``seconds`` later: time spent on what the limit does not bound
        (measurements: ``Limits.kernel_seconds`` bounds kernel timing)."""
        self.start += seconds

    def check(self, what: str) -> None:
        """Raise ``TimeLimit`` (naming ``what`` was cut short) if the time is up."""
        if self.left() < 0:
            raise TimeLimit(self.seconds, what)
