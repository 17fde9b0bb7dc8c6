"""Time as a dependency: tests inject a clock instead of sleeping."""

from __future__ import annotations

import time
from datetime import datetime
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


def since_ms(value: object) -> int:
    """A recover's ``since`` in epoch milliseconds: epoch seconds (a number, not a bool) or an ISO 8601
    time (``2026-12-07T05:00:00Z``). ValueError for anything else; each face words its own error."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 1000)
    if isinstance(value, str) and value:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    raise ValueError("not a time")
