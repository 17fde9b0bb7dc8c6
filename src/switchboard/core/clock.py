"""Time as a dependency: tests inject a clock instead of sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def ms(seconds: float) -> int:
    """Store times as integer epoch milliseconds: portable across SQLite and PostgreSQL."""
    return int(seconds * 1000)
