"""At most ``SWITCHBOARD_A2A_STREAMS_PER_ENDPOINT`` open A2A streams per endpoint (docs/a2a.md, "Limits").

A ``SendStreamingMessage`` or ``SubscribeToTask`` answer is an SSE stream that stays open for as long
as its task runs, holding a connection of the instance's ``SWITCHBOARD_MAX_CONNECTIONS``. Without a
cap of its own, one endpoint could hold every connection and another tenant's requests would wait for
one. Keyed on the endpoint the gate authenticated (never on header text), like every limit.

A stream past the cap ends that endpoint's *oldest* stream, as the MCP stream cap does: a client that
lost track of its streams keeps working, and the one it forgot is told its stream ended (a clean end of
the SSE body, so the client may resubscribe; the task is untouched). The stream is counted from the
moment its answer starts to be sent until it ends, whoever ends it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from switchboard.edge.conn import Coalesced
from switchboard.edge.ending import Answer, receive_until
from switchboard.obs.logs import get_logger

log = get_logger("switchboard.a2a.limits")


class StreamSlots:
    """The open streams of each endpoint, oldest first; each has the event that ends it."""

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self.cap = cap
        self._open: dict[str, OrderedDict[int, asyncio.Event]] = {}
        self._tickets = itertools.count()
        self.closed = Coalesced()

    def hold(self, key: str) -> tuple[int, asyncio.Event]:
        """Count one more stream for ``key``, first ending its oldest ones past the cap."""
        streams = self._open.get(key)
        if streams is None:  # an entry per endpoint with a stream open: bounded by the connections
            streams = self._open[key] = OrderedDict()
        while len(streams) >= self.cap:
            _, oldest = streams.popitem(last=False)
            oldest.set()
            if (n := self.closed.hit()) is not None:
                log.info("a2a streams closed: too many open for one endpoint", streams=self.cap, closed=n)
        ticket, ended = next(self._tickets), asyncio.Event()
        streams[ticket] = ended
        return ticket, ended

    def release(self, key: str, ticket: int) -> None:
        streams = self._open.get(key)
        if streams is not None:
            streams.pop(ticket, None)
            if not streams:
                del self._open[key]

    def open_streams(self, key: str) -> int:
        return len(self._open.get(key, ()))


class HeldStream(Response):
    """A streaming answer that holds one of its endpoint's stream slots while it is sent."""

    def __init__(self, inner: Response, slots: StreamSlots, key: str) -> None:
        super().__init__(status_code=inner.status_code)
        self.inner, self.slots, self.key = inner, slots, key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ticket, ended = self.slots.hold(self.key)
        answer = Answer(send)

        async def ending_receive() -> Message:
            return await receive_until(receive, ended)

        try:
            await self.inner(scope, ending_receive, answer.send)
            if ended.is_set():
                await answer.finish()  # ended past the cap: sse-starlette stopped as for a client gone
        finally:
            self.slots.release(self.key, ticket)
