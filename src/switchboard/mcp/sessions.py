"""Live legacy (handshake-era) MCP sessions, by endpoint, and whether each has its GET stream open.

A legacy client hears server-initiated notifications only on its standalone GET stream, and the SDK
drops whatever is sent while that stream is closed. So a session is "ready" for the doorbell once it is
both registered (the gate saw an authenticated message carrying its ``mcp-session-id``, which gives us
the ``ServerSession`` to send on) and its GET stream answered 200 (seen by :class:`StreamWatch`, in
front of the SDK app). Whichever of the two happens second fires ``on_ready`` once per stream opening;
that is the "reconnect" moment. Nothing here is shared across instances: sessions are per process.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from mcp.server.session import ServerSession
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_HEADER = "mcp-session-id"
MAX_SUBSCRIPTIONS = 256  # URIs per session: one per scope queue plus the endpoint-wide one, with room

ReadyCallback = Callable[[str, str], None]


class LegacySessions:
    def __init__(self, on_ready: ReadyCallback, *, per_endpoint: int = 64) -> None:
        self._on_ready = on_ready
        self._per_endpoint = per_endpoint
        self._by_endpoint: dict[str, OrderedDict[str, ServerSession]] = {}
        self._owner: dict[str, str] = {}
        self._open: set[str] = set()
        self._announced: set[str] = set()
        self._subscribed: dict[str, set[str]] = {}  # sid -> URIs, once it used resources/subscribe

    def register(self, endpoint_id: str, sid: str, session: ServerSession) -> None:
        """Remember the session; a no-op for one we know (the SDK binds a session id to one principal)."""
        if sid in self._owner:
            return
        sessions = self._by_endpoint.setdefault(endpoint_id, OrderedDict())
        sessions[sid] = session
        self._owner[sid] = endpoint_id
        while len(sessions) > self._per_endpoint:  # a client that leaks sessions evicts its own oldest
            self.forget(next(iter(sessions)))
        self._maybe_ready(sid)

    def forget(self, sid: str) -> None:
        endpoint_id = self._owner.pop(sid, None)
        self._subscribed.pop(sid, None)
        self._open.discard(sid)
        self._announced.discard(sid)
        if endpoint_id is None:
            return
        sessions = self._by_endpoint.get(endpoint_id)
        if sessions is not None:
            sessions.pop(sid, None)
            if not sessions:
                del self._by_endpoint[endpoint_id]

    def subscribe(self, sid: str, uri: str) -> None:
        """``resources/subscribe``: from now on this session hears exactly the URIs it subscribed to
        (the unsolicited endpoint-wide ring stops for it). A URI cap bounds a misbehaving client."""
        if sid in self._owner:
            uris = self._subscribed.setdefault(sid, set())
            if len(uris) < MAX_SUBSCRIPTIONS or uri in uris:
                uris.add(uri)

    def unsubscribe(self, sid: str, uri: str) -> None:
        if sid in self._owner:
            self._subscribed.setdefault(sid, set()).discard(uri)

    def subscriptions(self, sid: str) -> frozenset[str] | None:
        """The URIs a session subscribed to, or None if it never called ``resources/subscribe``."""
        uris = self._subscribed.get(sid)
        return None if uris is None else frozenset(uris)

    def stream_opened(self, sid: str) -> None:
        self._open.add(sid)
        self._maybe_ready(sid)

    def stream_closed(self, sid: str) -> None:
        self._open.discard(sid)
        self._announced.discard(sid)

    def _maybe_ready(self, sid: str) -> None:
        owner = self._owner.get(sid)
        if owner is not None and sid in self._open and sid not in self._announced:
            self._announced.add(sid)
            self._on_ready(owner, sid)

    def has(self, endpoint_id: str) -> bool:
        return endpoint_id in self._by_endpoint

    def endpoints(self) -> list[str]:
        return list(self._by_endpoint)

    def of(self, endpoint_id: str) -> list[tuple[str, ServerSession]]:
        return list(self._by_endpoint.get(endpoint_id, {}).items())

    def without_stream(self) -> list[tuple[str, ServerSession]]:
        """Sessions whose GET stream is closed: the only ones whose liveness is in doubt."""
        return [
            (sid, session)
            for sessions in self._by_endpoint.values()
            for sid, session in sessions.items()
            if sid not in self._open
        ]

    def is_open(self, sid: str) -> bool:
        return sid in self._open


class StreamWatch:
    """ASGI wrapper around the SDK app that reports GET-stream opening/closing and session DELETEs.

    It only observes: the status it reacts to is the SDK's own answer (200 means the SDK authenticated
    the caller and found the session it owns), so a forged ``mcp-session-id`` changes nothing.
    """

    def __init__(self, app: ASGIApp, sessions: LegacySessions, path: str = "/mcp") -> None:
        self.app, self.sessions, self.path = app, sessions, path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        if scope["type"] != "http" or method not in ("GET", "DELETE") or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        sid = Headers(scope=scope).get(SESSION_HEADER)
        if not sid:
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = {"status": None}

        async def watching_send(message: Message) -> None:
            # Act before the client can see the answer, so what it does next finds us up to date.
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                if method == "GET" and message["status"] == 200:
                    self.sessions.stream_opened(sid)
                elif method == "DELETE" and message["status"] in (200, 202, 204):
                    self.sessions.forget(sid)
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        finally:
            if method == "GET" and state["status"] == 200:
                self.sessions.stream_closed(sid)
