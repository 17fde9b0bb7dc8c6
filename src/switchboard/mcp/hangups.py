"""Notice a client that hung up on a call still being answered, so a long-poll claim stops waiting.

Calls are answered with one JSON body (docs/mcp.md), and the SDK's JSON answer path does not watch the
connection: a ``claim_next`` with ``wait_seconds`` whose client went away would wait out its deadline and
could then claim a todo for nobody, which would sit claimed until its lease ran out. :class:`Hangups`
wraps the MCP app: once a POST's body has been read, it listens for the ASGI ``http.disconnect`` message
(the server's public signal that the client closed the connection) and sets the request's event, which
it puts in the ASGI scope under :data:`HANGUP_KEY`. The gate binds that event for the verb
(:func:`watching`), and a waiting claim ends, claiming nothing, when it is set (:func:`client_gone`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HANGUP_KEY = "switchboard.hangup"

_gone: ContextVar[asyncio.Event | None] = ContextVar("switchboard_mcp_hangup", default=None)


def client_gone() -> asyncio.Event | None:
    """The current call's hang-up event (set when its client closed the connection), if it has one."""
    return _gone.get()


@contextlib.contextmanager
def watching(request: object) -> Iterator[None]:
    """Bind the hang-up event of ``request`` (the call's Starlette request) while a verb runs."""
    event = request.scope.get(HANGUP_KEY) if isinstance(request, Request) else None
    token = _gone.set(event if isinstance(event, asyncio.Event) else None)
    try:
        yield
    finally:
        _gone.reset(token)


class Hangups:
    """ASGI middleware in front of the SDK's app: a hang-up event per POST (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        gone = asyncio.Event()
        watcher: asyncio.Task[None] | None = None

        async def watch() -> None:
            # After the last body chunk the server answers receive() only when the connection is over.
            if (await receive())["type"] == "http.disconnect":
                gone.set()

        async def receive_body() -> Message:
            nonlocal watcher
            if watcher is not None:  # the app listens too (a streamed answer): share the one signal
                await gone.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                watcher = asyncio.create_task(watch(), name="mcp-hangup-watch")
            return message

        try:
            await self.app({**scope, HANGUP_KEY: gone}, receive_body, send)
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
