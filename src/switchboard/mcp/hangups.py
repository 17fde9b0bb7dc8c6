"""Notice a client that hung up on a call still being answered, so a long-poll claim stops waiting.

Calls are answered with one JSON body (docs/mcp.md), and the SDK's JSON answer path does not watch the
connection: a ``claim_next`` with ``wait_seconds`` whose client went away would wait out its deadline and
could then claim a todo for nobody, which would sit claimed until its lease ran out. :class:`Hangups`
wraps the MCP app and puts a :class:`Hangup` in the ASGI scope under :data:`HANGUP_KEY`; the gate binds
it for the verb (:func:`watching`). A claim about to wait asks for its event (:func:`client_gone`): from
then on, the body having been read, it listens for the ASGI ``http.disconnect`` message (the server's
public signal that the client closed the connection) and sets the event, and the waiting claim ends,
claiming nothing. Calls that do not wait never start the watch (a task per call was measurable on the
claim path, issue 18).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.process.tasks import cancel_and_wait

HANGUP_KEY = "switchboard.hangup"

_gone: ContextVar[Hangup | None] = ContextVar("switchboard_mcp_hangup", default=None)


def client_gone() -> asyncio.Event | None:
    """The current call's hang-up event (set when its client closed the connection), if it has one.
    Asking starts watching the connection: call it when about to wait, not on every call."""
    hangup = _gone.get()
    return None if hangup is None else hangup.event()


@contextlib.contextmanager
def watching(request: object) -> Iterator[None]:
    """Bind the hang-up signal of ``request`` (the call's Starlette request) while a verb runs."""
    hangup = request.scope.get(HANGUP_KEY) if isinstance(request, Request) else None
    token = _gone.set(hangup if isinstance(hangup, Hangup) else None)
    try:
        yield
    finally:
        _gone.reset(token)


class Hangup:
    """One POST's hang-up signal. Watching costs a task per request, and almost no call waits, so the
    watch starts only when a verb is about to wait (:meth:`event`) or the app itself reads past the
    body (a streamed answer listening for the disconnect): both then share the one watch."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.gone = asyncio.Event()
        self._body_read = False
        self._wanted = False
        self._watcher: asyncio.Task[None] | None = None

    def event(self) -> asyncio.Event:
        """The event set when the client has closed the connection; watching starts now (or, if the
        body is still being read, as soon as it has been)."""
        self._wanted = True
        if self._body_read:
            self._start()
        return self.gone

    async def receive(self) -> Message:
        """The app's receive: the body as the server hands it over, then the shared hang-up."""
        if self._body_read:
            self._start()
            await self.gone.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.gone.set()
        elif not message.get("more_body", False):
            self._body_read = True
            if self._wanted:
                self._start()
        return message

    def _start(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="mcp-hangup-watch")

    async def _watch(self) -> None:
        # After the last body chunk the server answers receive() only when the connection is over.
        if (await self._receive())["type"] == "http.disconnect":
            self.gone.set()

    async def close(self) -> None:
        if self._watcher is not None:  # every POST passes here; most never started a watch
            await cancel_and_wait(self._watcher)


class Hangups:
    """ASGI middleware in front of the SDK's app: a hang-up signal per POST (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        hangup = Hangup(receive)
        try:
            await self.app({**scope, HANGUP_KEY: hangup}, hangup.receive, send)
        finally:
            await hangup.close()
