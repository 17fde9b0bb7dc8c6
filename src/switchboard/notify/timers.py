"""Retries as timers: a notification waiting for its next attempt holds no worker. When its time comes
it is queued again (or, after a stop began, dropped with reason ``shutdown``); a stop cancels every
timer not yet due and drops its notification, so each one still ends with one outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from switchboard.notify.flow import Flow
from switchboard.notify.notification import Notification
from switchboard.notify.outcomes import Outcomes


class RetryTimers:
    def __init__(self, *, flow: Flow, put: Callable[[Notification], None], outcomes: Outcomes) -> None:
        self.flow, self.put, self.outcomes = flow, put, outcomes
        self._timers: dict[asyncio.TimerHandle, Notification] = {}  # retries waiting for their time
        flow.holds_nothing_when(lambda: not self._timers)

    def __bool__(self) -> bool:
        return bool(self._timers)

    def later(self, n: Notification, delay: float) -> None:
        """Queue ``n`` again in ``delay`` seconds."""
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            assert handle is not None
            self._timers.pop(handle, None)
            if self.flow.accepting:
                self.put(n)
            else:
                self.outcomes.dropped(n, "shutdown")
            self.flow.settle()

        handle = loop.call_later(delay, fire)
        self._timers[handle] = n

    def cancel_all(self) -> None:
        """A stop: no retry fires; each waiting notification is dropped (``shutdown``)."""
        for timer, n in list(self._timers.items()):
            timer.cancel()
            self.outcomes.dropped(n, "shutdown")
        self._timers.clear()
