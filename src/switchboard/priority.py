"""Inbound requests go first on the event loop.

Ingest, MCP verbs and the outbound senders (notify hooks, A2A push) share one event loop and, on a small
machine, one core. The senders never hold a request up by waiting on it (REQ-7), but every attempt they
start takes loop time that an inbound request then queues behind. So a sender asks
:meth:`InboundPriority.yield_to_inbound` before it starts an attempt: while an inbound write request
(POST, PUT, PATCH, DELETE) is in flight, it waits until none is, for at most ``max_defer`` seconds, so it
can be slowed but never starved.

A request counts for its first ``horizon`` seconds only, so a long poll or a slow client cannot hold the
senders back; GET requests (MCP's event stream, pages, metrics) never count.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from switchboard.services import Services

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class InboundPriority:
    def __init__(self, *, max_defer: float = 0.05, horizon: float = 1.0) -> None:
        self.max_defer = max_defer
        self.horizon = horizon
        self._active = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self.deferred = 0  # waits so far
        self.waiting = asyncio.Event()  # set once any sender has had to wait (tests await it)

    @property
    def active(self) -> int:
        """Inbound write requests in flight (and younger than the horizon)."""
        return self._active

    def enter(self) -> _Ticket:
        self._active += 1
        self._quiet.clear()
        ticket = _Ticket(self)
        if self.horizon > 0:
            ticket.timer = asyncio.get_running_loop().call_later(self.horizon, ticket.release)
        return ticket

    def _leave(self) -> None:
        self._active -= 1
        if self._active == 0:
            self._quiet.set()

    async def yield_to_inbound(self) -> None:
        """Return at once when no inbound write is in flight; otherwise when none is, or after
        ``max_defer`` seconds, whichever comes first."""
        if self._active == 0 or self.max_defer <= 0:
            return
        self.deferred += 1
        self.waiting.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.max_defer):
                await self._quiet.wait()


class _Ticket:
    __slots__ = ("gate", "released", "timer")

    def __init__(self, gate: InboundPriority) -> None:
        self.gate = gate
        self.released = False
        self.timer: asyncio.TimerHandle | None = None

    def release(self) -> None:
        if not self.released:
            self.released = True
            if self.timer is not None:
                self.timer.cancel()
            self.gate._leave()


class InboundTracking:
    """ASGI middleware: every inbound write request holds a ticket until its response is complete."""

    def __init__(self, app: ASGIApp, gate: InboundPriority) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in WRITE_METHODS:
            await self.app(scope, receive, send)
            return
        ticket = self.gate.enter()

        async def tracked_send(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                ticket.release()  # the response is out: the rest (background tasks) is not the client's wait

        try:
            await self.app(scope, receive, tracked_send)
        finally:
            ticket.release()


def inbound_priority(services: Services) -> InboundPriority | None:
    """The instance's one gate, kept in ``Services.parts`` so the app and every sender share it; ``None``
    when the priority is off (the default), so no request and no attempt pays for it."""
    max_defer = services.settings.inbound_priority_max_defer_ms / 1000
    if max_defer <= 0:
        return None
    gate = services.parts.get(InboundPriority)
    if gate is None:
        gate = InboundPriority(max_defer=max_defer)
        services.parts.add(gate)
    return gate
