"""Per-credential caps on MCP sessions and open streams, in front of the SDK app (docs/mcp.md, "Limits").

The SDK caps sessions per instance only (``max_sessions``, 10,000): one endpoint that opened sessions
without end filled it in under a minute and every other tenant's ``initialize`` got 503; one endpoint's
listen streams took every slot the same way. This layer keeps, per bearer credential (so per endpoint
or per OAuth grant; ``SWITCHBOARD_ENDPOINTS_PER_HUMAN`` bounds how many a human holds):

- at most ``sessions`` sessions: when a new one opens past the cap, the least recently used session
  with no request in flight is closed (an ordinary ``DELETE`` with the same credential, through the SDK
  app), else the least recently used one;
- at most ``streams`` streams: requests open for more than :data:`STREAM_AGE` seconds (a standalone
  GET stream, a ``subscriptions/listen`` stream). A new request that finds the cap full ends the oldest
  stream, by telling the SDK its client disconnected (the ASGI ``http.disconnect`` message). Many quick
  tool calls in parallel are never affected.

Only the credential's hash is kept. A session the SDK already dropped (idle timeout) is forgotten when
its turn to be closed comes.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.boundary import PARSED_BODY
from switchboard.conn import Coalesced
from switchboard.obs.logs import get_logger

log = get_logger("switchboard.mcp.limits")

SESSION_HEADER = b"mcp-session-id"
_ids = itertools.count()
MAX_CREDENTIALS = 50_000
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
    sessions: OrderedDict[str, float] = field(default_factory=OrderedDict)  # sid -> last used, LRU first
    inflight: OrderedDict[int, Inflight] = field(default_factory=OrderedDict)  # oldest first


class SessionCap:
    def __init__(self, app: ASGIApp, *, sessions: int, streams: int, path: str = "/mcp") -> None:
        self.app, self.max_sessions, self.max_streams, self.path = app, sessions, streams, path
        self.credentials: dict[bytes, Credential] = {}
        self.closed_sessions, self.closed_streams = Coalesced(), Coalesced()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        authorization = headers.get(b"authorization")
        if not authorization:
            await self.app(scope, receive, send)
            return
        key = hashlib.sha256(authorization).digest()
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

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start" and sid is None and message["status"] == 200:
                for name, value in message.get("headers", ()):
                    if name.lower() == SESSION_HEADER:
                        opened.append(value.decode("latin-1"))
            await send(message)

        body_read = False

        async def ending_receive() -> Message:
            nonlocal body_read
            if me.ended.is_set():
                return {"type": "http.disconnect"}
            if not body_read:  # the body is handed over at once: no race (two tasks) needed for it
                message = await receive()
                body_read = message["type"] != "http.request" or not message.get("more_body", False)
                return message
            pending = asyncio.ensure_future(receive())
            ended = asyncio.ensure_future(me.ended.wait())
            try:
                await asyncio.wait({pending, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # also when this request is cancelled: leave no task behind
                for waiter in (pending, ended):
                    if not waiter.done():
                        waiter.cancel()
            if pending.done() and not pending.cancelled():
                return pending.result()
            return {"type": "http.disconnect"}

        # Only an initialize answer can open a session: another JSON-RPC request (JsonBoundary, in front,
        # parsed it) is answered without the watching wrapper around every message it sends.
        parsed = scope.get(PARSED_BODY)
        opens = sid is None and not (isinstance(parsed, dict) and parsed.get("method") != "initialize")
        try:
            await self.app(scope, ending_receive, watching_send if opens else send)
        finally:
            cred.inflight.pop(ticket, None)
            if scope.get("method") == "DELETE" and sid is not None:
                cred.sessions.pop(sid, None)
        for new_sid in opened:
            cred.sessions[new_sid] = time.monotonic()
            while len(cred.sessions) > self.max_sessions:
                await self._close_one(scope, cred)
        if not cred.sessions and not cred.inflight:
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

        await self.app(delete_scope, no_body, discard)
        if (n := self.closed_sessions.hit()) is not None:
            log.info(
                "mcp sessions closed: too many open for one credential", sessions=self.max_sessions, closed=n
            )
