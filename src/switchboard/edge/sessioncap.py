"""Per-endpoint caps on MCP sessions and open streams, behind authentication (docs/mcp.md, "Limits").

The SDK caps sessions per instance only (``max_sessions``, 10,000): one endpoint that opened sessions
without end filled it in under a minute and every other tenant's ``initialize`` got 503; one endpoint's
listen streams took every slot the same way. This layer keeps, per endpoint the request authenticated
as (``SWITCHBOARD_ENDPOINTS_PER_HUMAN`` bounds how many a human holds):

- at most ``sessions`` sessions: an ``initialize`` that finds them all open first closes the least
  recently used session with no request in flight (an ordinary ``DELETE`` with the same credential,
  through the SDK app), else the least recently used one; if every slot is an ``initialize`` still
  being answered, it is refused with 429. So the endpoint never holds more than its cap, not even for
  a moment, and cannot push the instance to its ``max_sessions``;
- at most ``streams`` streams: requests open for more than :data:`STREAM_AGE` seconds (a standalone
  GET stream, a ``subscriptions/listen`` stream). A new request that finds the cap full ends the oldest
  stream, by telling the SDK its client disconnected (the ASGI ``http.disconnect`` message). Many quick
  tool calls in parallel are never affected.

It runs inside the SDK's authentication (``build_mcp`` wraps the ``/mcp`` route with it) and keys on
the endpoint id of the verified token in ``scope["user"]``, never on the ``Authorization`` text: another
spelling of ``Bearer``, another OAuth token of the same endpoint, or a second header (refused before
anything, ``switchboard.edge.authorization``) is the same endpoint. A request that did not authenticate
passes through uncounted (the SDK answers 401). A session the SDK already dropped (idle timeout) is
forgotten when its turn to be closed comes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.edge.answers import send_json
from switchboard.edge.boundary import PARSED_BODY
from switchboard.edge.conn import Coalesced
from switchboard.edge.ending import Answer, receive_until
from switchboard.obs.logs import get_logger

log = get_logger("switchboard.mcp.limits")

SESSION_HEADER = b"mcp-session-id"
_ids = itertools.count()
MAX_CREDENTIALS = 50_000  # endpoints tracked at once (bounded memory)
# The SDK closes a session idle for 30 minutes (its default, which build_mcp keeps); after that we stop
# counting it.
FORGET_AFTER = 1800.0
STREAM_AGE = 5.0  # a request open longer than this is a stream; quick tool calls never count
_NOT_COPIED = frozenset({SESSION_HEADER, b"content-length", b"content-type", b"transfer-encoding"})


@dataclass
class Inflight:
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    sid: str | None = None
    started: float = field(default_factory=time.monotonic)


@dataclass
class Credential:
    """What one endpoint holds open (the name is older than the keying on the endpoint)."""

    sessions: OrderedDict[str, float] = field(default_factory=OrderedDict)  # sid -> last used, LRU first
    inflight: OrderedDict[int, Inflight] = field(default_factory=OrderedDict)  # oldest first
    opening: int = 0  # initialize requests being answered: each may open a session
    closing: int = 0  # sessions past the cap whose DELETE the SDK is still answering

    def held(self) -> int:
        """Sessions the SDK may hold for this endpoint now: open, opening, or not closed yet."""
        return len(self.sessions) + self.opening + self.closing


BUSY_BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "this endpoint is opening as many sessions at once as it may hold; retry",
        },
    }
).encode()

# Who a request authenticated as: ``switchboard.mcp.auth.authenticated_endpoint`` (the verified token's
# endpoint id), or None for a request that did not authenticate.
Identify = Callable[[Scope], str | None]


class SessionCap:
    def __init__(
        self, app: ASGIApp, identify: Identify, *, sessions: int, streams: int, path: str = "/mcp"
    ) -> None:
        self.app, self.identify, self.path = app, identify, path
        self.max_sessions, self.max_streams = sessions, streams
        self.credentials: dict[str, Credential] = {}
        self.closed_sessions, self.closed_streams = Coalesced(), Coalesced()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        key = self.identify(scope)
        if key is None:  # not authenticated: the SDK answers 401, and nothing is counted
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        cred = self.credentials.get(key)
        if cred is None:
            if len(self.credentials) >= MAX_CREDENTIALS:  # bounded memory: forget the oldest idle entry
                idle = next((k for k, c in self.credentials.items() if not c.inflight), None)
                if idle is not None:
                    del self.credentials[idle]
            cred = self.credentials[key] = Credential()
        raw_sid = headers.get(SESSION_HEADER)
        sid = raw_sid.decode("latin-1") if raw_sid else None
        now = time.monotonic()
        while cred.sessions and now - next(iter(cred.sessions.values())) > FORGET_AFTER:
            cred.sessions.popitem(last=False)  # the SDK has closed it for idleness by now
        if sid is not None and sid in cred.sessions:
            cred.sessions[sid] = now
            cred.sessions.move_to_end(sid)
        me = Inflight(sid=sid)
        ticket = next(_ids)
        cred.inflight[ticket] = me
        # Fewer requests in flight than the cap: none of them can be a stream past it (no scan).
        streams = (
            [t for t, i in cred.inflight.items() if now - i.started > STREAM_AGE]
            if len(cred.inflight) > self.max_streams
            else []
        )
        for oldest in streams[: max(0, len(streams) - self.max_streams + 1)]:
            cred.inflight.pop(oldest).ended.set()
            if (n := self.closed_streams.hit()) is not None:
                log.info(
                    "mcp streams closed: too many open for one credential", streams=self.max_streams, closed=n
                )
        opened: list[str] = []
        answer = Answer(send)

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start" and sid is None and message["status"] == 200:
                for name, value in message.get("headers", ()):
                    if name.lower() == SESSION_HEADER:
                        opened.append(value.decode("latin-1"))
            await answer.send(message)

        body_read = False

        async def ending_receive() -> Message:
            nonlocal body_read
            if not body_read and not me.ended.is_set():  # the body is handed over at once: no race
                message = await receive()
                body_read = message["type"] != "http.request" or not message.get("more_body", False)
                return message
            return await receive_until(receive, me.ended)

        # Only an initialize answer can open a session: another JSON-RPC request (JsonBoundary, in front,
        # parsed it) is answered without the watching wrapper around every message it sends.
        parsed = scope.get(PARSED_BODY)
        opens = sid is None and not (isinstance(parsed, dict) and parsed.get("method") != "initialize")
        reserves = opens and scope.get("method") == "POST"
        # Only an SSE answer can be left open when this ends it (a JSON answer always completes): only
        # those (and initialize) get a wrapper around every message they send.
        sse = scope.get("method") == "GET" or (
            isinstance(parsed, dict) and parsed.get("method") == "subscriptions/listen"
        )
        chosen = watching_send if opens else answer.send if sse else send
        try:
            if reserves:
                while cred.sessions and cred.held() >= self.max_sessions:
                    await self._close_one(scope, cred)  # room first: never one session past the cap
                if cred.held() >= self.max_sessions:
                    await _busy(send)
                    return
                cred.opening += 1
            try:
                await self.app(scope, ending_receive, chosen)
                if me.ended.is_set():
                    await answer.finish()  # a stream this ended: the SDK left its answer open
            finally:
                if reserves:
                    cred.opening -= 1
        finally:
            cred.inflight.pop(ticket, None)
            if scope.get("method") == "DELETE" and sid is not None:
                cred.sessions.pop(sid, None)
        for new_sid in opened:
            cred.sessions[new_sid] = time.monotonic()
            while len(cred.sessions) > self.max_sessions:
                await self._close_one(scope, cred)
        if not cred.sessions and not cred.inflight and not cred.opening and not cred.closing:
            self.credentials.pop(key, None)

    async def _close_one(self, scope: Scope, cred: Credential) -> None:
        busy = {i.sid for i in cred.inflight.values()}
        victim = next((s for s in cred.sessions if s not in busy), next(iter(cred.sessions)))
        cred.sessions.pop(victim, None)
        for inflight in list(cred.inflight.values()):
            if inflight.sid == victim:
                inflight.ended.set()
        delete_scope = {
            **scope,
            "method": "DELETE",
            "headers": [
                *((k, v) for k, v in scope.get("headers", ()) if k not in _NOT_COPIED),
                (SESSION_HEADER, victim.encode("latin-1")),
            ],
            "query_string": b"",
        }

        async def no_body() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(_message: Message) -> None:
            return None

        cred.closing += 1
        try:
            await self.app(delete_scope, no_body, discard)
        finally:
            cred.closing -= 1
        if (n := self.closed_sessions.hit()) is not None:
            log.info(
                "mcp sessions closed: too many open for one credential", sessions=self.max_sessions, closed=n
            )


async def _busy(send: Send) -> None:
    await send_json(send, 429, BUSY_BODY, [(b"retry-after", b"1")])
