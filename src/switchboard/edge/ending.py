"""Ending a long-lived response from outside: what the per-endpoint stream caps (MCP's sessioncap.py,
A2A's a2a/stream_cap.py) do to the oldest stream of an endpoint past its cap.

The app that streams is never told to stop by a private hook: it is told its client went away, with the
ASGI ``http.disconnect`` message its own disconnect watch is already waiting for (the MCP SDK and
sse-starlette both watch ``receive``). It then stops as for a client gone, which leaves its answer
unfinished; :func:`finish` sends the last empty body, so the client sees the stream end cleanly rather
than a cut connection.
"""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Send

DISCONNECT: Message = {"type": "http.disconnect"}


async def receive_until(receive: Receive, ended: asyncio.Event) -> Message:
    """The next message of ``receive``, or ``http.disconnect`` as soon as ``ended`` is set."""
    if ended.is_set():
        return DISCONNECT
    pending = asyncio.ensure_future(receive())
    stop = asyncio.ensure_future(ended.wait())
    try:
        await asyncio.wait({pending, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when the caller is cancelled: leave no task behind
        for waiter in (pending, stop):
            if not waiter.done():
                waiter.cancel()
    if pending.done() and not pending.cancelled():
        return pending.result()
    return DISCONNECT


class Answer:
    """Whether the response a ``send`` carried has started and completed: :meth:`send` wraps it."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.completed = False

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.started = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.completed = True
        await self._send(message)

    async def finish(self) -> None:
        """End a started answer the app left open (it stopped as for a client gone)."""
        if self.started and not self.completed:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
            self.completed = True
