"""Long-poll claims (issue 18): a ``claim_next`` with ``wait_seconds`` that found nothing waits here
until a todo becomes ready on one of its queues, instead of the consumer polling in a loop.

In-process and per instance: the registry maps (endpoint id, queue) to the events of the calls waiting
on it, and a transition-hub subscriber (``claim_waiters``) sets only the events of the todo's endpoint
and queue. It reads nothing but ``Transition.ready``, ``endpoint_id`` and ``queue``; it is subscribed
with ``remote=True``, so on PostgreSQL the transitions other instances commit (the cluster relay) wake
it too, and after a relay gap :meth:`ClaimWaiters.wake_all` makes every waiter re-check.
``fallback_seconds`` (off by default) would add a periodic re-check on top.

A waiter is a ``with`` block: it leaves the registry when its call returns, times out or is cancelled,
and when its client hangs up (``gone``: :mod:`switchboard.mcp.hangups`) it returns claiming nothing. The claim is re-checked after the
waiter is registered, so a todo that became ready between the empty claim and the registration is not
missed; a ring that arrives during a claim is kept (the event is cleared before each claim).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

from prometheus_client import Gauge

from switchboard.store.transitions import Transition

T = TypeVar("T")

MAX_WAIT_SECONDS = 30


class ClaimWaiters:
    def __init__(self, gauge: Gauge | None = None, *, fallback_seconds: float | None = None) -> None:
        self._by_queue: dict[tuple[str, str], set[asyncio.Event]] = {}
        self._gauge = gauge
        self._count = 0
        self.fallback_seconds = fallback_seconds

    def __len__(self) -> int:
        """How many calls are waiting now."""
        return self._count

    @contextlib.contextmanager
    def waiting(self, endpoint_id: str, queues: Sequence[str]) -> Iterator[asyncio.Event]:
        """Register one waiting call on ``queues``; the event is set when a todo becomes ready there."""
        rang = asyncio.Event()
        keys = [(endpoint_id, q) for q in dict.fromkeys(queues)]
        for key in keys:
            self._by_queue.setdefault(key, set()).add(rang)
        self._moved(+1)
        try:
            yield rang
        finally:
            for key in keys:
                events = self._by_queue.get(key)
                if events is not None:
                    events.discard(rang)
                    if not events:
                        del self._by_queue[key]
            self._moved(-1)

    async def on_transition(self, t: Transition) -> None:
        """The hub subscriber: wake the calls waiting on this todo's endpoint and queue, no others."""
        if not t.ready or t.endpoint_id is None:
            return
        for rang in self._by_queue.get((t.endpoint_id, t.queue), ()):
            rang.set()

    async def wake_all(self) -> None:
        """Every waiter re-checks (transitions may have been missed: the relay's connection dropped)."""
        for events in self._by_queue.values():
            for rang in events:
                rang.set()

    async def claim_or_wait(
        self,
        endpoint_id: str,
        queues: Sequence[str],
        wait_seconds: float,
        claim: Callable[[], Awaitable[T]],
        gone: Callable[[], asyncio.Event | None] | None = None,
    ) -> T:
        """``claim()``; when it finds nothing (falsy) and ``wait_seconds`` > 0, claim again each time a
        todo becomes ready on ``queues`` (or every ``fallback_seconds``) until one is found or the
        deadline passes; one last claim at the deadline. Never polls faster than that. ``gone`` is asked
        for the hang-up event only when the claim is about to wait (asking starts watching the client)."""
        got = await claim()
        if got or wait_seconds <= 0:
            return got
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        hung_up = gone() if gone is not None else None
        with self.waiting(endpoint_id, queues) as rang:
            while True:
                rang.clear()  # a ring from here on is kept for the next wait
                got = await claim()  # the re-check: nothing slips in before the registration
                remaining = deadline - loop.time()
                if got or remaining <= 0:
                    return got
                timeout = (
                    remaining if self.fallback_seconds is None else min(remaining, self.fallback_seconds)
                )
                if await _rang_or_gone(rang, hung_up, timeout):
                    return got  # the caller hung up: claim nothing for nobody

    def _moved(self, by: int) -> None:
        self._count += by
        if self._gauge is not None:
            self._gauge.set(self._count)


async def _rang_or_gone(rang: asyncio.Event, gone: asyncio.Event | None, timeout: float) -> bool:
    """Wait up to ``timeout`` for a ring; True when ``gone`` is (or becomes) set instead."""
    if gone is None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await rang.wait()
        return False
    if gone.is_set():
        return True
    waits = {asyncio.ensure_future(rang.wait()), asyncio.ensure_future(gone.wait())}
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return gone.is_set()
