"""What the dispatcher's parts share: whether new work is taken, and when all of them are done.

Each part registers a check that is true while it holds nothing (queued, in flight, waiting to retry,
parked, or not yet written); :meth:`Flow.settle` sets the idle event when every check holds, and a part
that takes work calls :meth:`Flow.busy`. Tests and the worker process's ``idle`` message await it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Flow:
    def __init__(self) -> None:
        self.accepting = False  # between start and stop: transitions are matched, retries re-enqueued
        self.idle = asyncio.Event()
        self.idle.set()
        self._checks: list[Callable[[], bool]] = []

    def holds_nothing_when(self, check: Callable[[], bool]) -> None:
        self._checks.append(check)

    def busy(self) -> None:
        self.idle.clear()

    def settle(self) -> None:
        if all(check() for check in self._checks):
            self.idle.set()
