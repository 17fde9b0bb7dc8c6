"""MCP request latency, measured at the ASGI layer around the whole app, so the MCP server's own code
stays as the SDK shapes it. The label values are bounded: the JSON-RPC method and the tool name are
kept only when they are ones this server defines; anything else is ``other``."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.core.verbs import ALL_VERBS
from switchboard.edge.boundary import PARSED_BODY
from switchboard.obs.metrics import Children, Metrics

MCP_PATH = "/mcp"
MAX_PARSED = 256 * 1024  # a larger body is still served; it is only not looked into
# The JSON-RPC methods of the MCP specification (2025-11-25 and 2026-07-28), as mcp_types names them.
METHODS = frozenset(
    {
        "completion/complete",
        "elicitation/create",
        "initialize",
        "logging/setLevel",
        "notifications/cancelled",
        "notifications/elicitation/complete",
        "notifications/initialized",
        "notifications/message",
        "notifications/progress",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/roots/list_changed",
        "notifications/subscriptions/acknowledged",
        "notifications/tasks/status",
        "notifications/tools/list_changed",
        "ping",
        "prompts/get",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/templates/list",
        "resources/unsubscribe",
        "roots/list",
        "sampling/createMessage",
        "server/discover",
        "subscriptions/listen",
        "tasks/cancel",
        "tasks/get",
        "tasks/list",
        "tasks/result",
        "tools/call",
        "tools/list",
    }
)


def labels_of(body: bytes) -> tuple[str, str]:
    """(method, verb) of a JSON-RPC request body; a batch is labelled by its first request."""
    try:
        message: Any = json.loads(body)
    except ValueError:
        return "other", ""
    return labels_of_message(message)


def labels_of_message(message: Any) -> tuple[str, str]:
    """:func:`labels_of` for a body already parsed."""
    if isinstance(message, list):
        message = message[0] if message else None
    if not isinstance(message, dict):
        return "other", ""
    method = message.get("method")
    if method is None and ("result" in message or "error" in message):
        return "response", ""
    if not isinstance(method, str) or method not in METHODS:
        return "other", ""
    if method != "tools/call":
        return method, ""
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return method, name if isinstance(name, str) and name in ALL_VERBS else "other"


class McpTiming:
    """Time POST /mcp from arrival to the last byte of the response (switchboard_mcp_request_seconds)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics
        self._seconds = Children(metrics.mcp_request_seconds)  # bounded: METHODS x ALL_VERBS, plus "other"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        if PARSED_BODY in scope:  # JsonBoundary, in front, has read and parsed the whole body
            method, verb = labels_of_message(scope[PARSED_BODY])
            await self.app(scope, receive, self._timed(send, started, method, verb))
            return
        # Read the body first (up to MAX_PARSED: the rest streams on unread), then hand it on unchanged.
        messages: list[Message] = []
        size, complete = 0, False
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                complete = True
                break
            if size > MAX_PARSED:
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        method, verb = labels_of(body) if complete and size <= MAX_PARSED else ("other", "")
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, self._timed(send, started, method, verb))

    def _timed(self, send: Send, started: float, method: str, verb: str) -> Send:
        """``send``, observing the time from ``started`` when the last byte of the body has gone."""
        done = False

        async def timed_send(message: Message) -> None:
            nonlocal done
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not done:
                done = True
                self._seconds(method, verb).observe(time.monotonic() - started)

        return timed_send
