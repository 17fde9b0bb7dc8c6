"""The JSON boundary in front of the SDK-served surfaces (/mcp, /a2a, /register).

The MCP and A2A SDKs and the OAuth registration route parse request bodies themselves, after
authentication for some and with their own limits: a body nested a thousand levels deep became a 500 on
/a2a, invalid UTF-8 an error quoting the codec, NaN passed into tool arguments, a lone surrogate reached
the store. This layer reads each POST body once, capped at ``max_body_bytes``, and refuses with a 4xx
and a fixed message whatever :func:`switchboard.core.text.loads_strict` refuses, before any authentication
or SDK code runs. What passes is replayed to the app byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.core.text import Unstorable, loads_strict
from switchboard.edge.answers import replaying, send_json

# The scope key under which a POST body this layer parsed is handed on (as loads_strict returned it), so
# a layer behind it that looks into the body (obs.asgi.McpTiming) does not read and parse it again.
PARSED_BODY = "switchboard.parsed_body"

JSONRPC_PARSE_ERROR = -32700
JSONRPC_INVALID_REQUEST = -32600


def jsonrpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def oauth_error(_code: int, message: str) -> dict[str, Any]:
    return {"error": "invalid_client_metadata", "error_description": message}


Shape = Callable[[int, str], dict[str, Any]]


class TooLarge(Exception):
    pass


class JsonBoundary:
    """ASGI middleware: for POSTs to ``paths``, a capped, strictly parsed body or a 4xx."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, paths: Iterable[tuple[str, Shape]]) -> None:
        self.app = app
        self.cap = max_body_bytes
        self.paths = dict(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        shape = self.paths.get(scope.get("path", "")) if scope["type"] == "http" else None
        if shape is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(scope, receive, self.cap)
        except TooLarge:
            await _answer(send, 413, shape(JSONRPC_INVALID_REQUEST, f"bodies are capped at {self.cap} bytes"))
            return
        if body is None:  # the client went away mid-body: nobody to answer
            return
        try:
            parsed = loads_strict(body)
        except Unstorable as exc:
            await _answer(send, 400, shape(JSONRPC_PARSE_ERROR, f"parse error: {exc}"))
            return
        scope[PARSED_BODY] = parsed
        await self.app(scope, replaying(body, receive), send)


async def read_body(scope: Scope, receive: Receive, cap: int) -> bytes | None:
    """The whole request body, or None if the client went away; :class:`TooLarge` past ``cap``."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit() and int(value) > cap:
            raise TooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    await send_json(send, status, json.dumps(body).encode())


REVOCATION_BODY_CAP = 64 * 1024


class RevocationForm:
    """``/revoke`` for public clients (RFC 7009 with only ``client_id``).

    The SDK's revocation request model requires a ``client_secret`` field, so a public client
    (``token_endpoint_auth_method: none``, what MCP clients register) was answered 400 and its token
    stayed valid. When the form has no such field this adds an empty one; client authentication itself
    is unchanged (a secret-holding client still has to present its secret).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(scope, receive, REVOCATION_BODY_CAP)
        except TooLarge:
            await _answer(send, 413, {"error": "invalid_request", "error_description": "body too large"})
            return
        if body is None:
            return
        keys = {key for key, _ in parse_qsl(body.decode("latin-1"), keep_blank_values=True)}
        if "client_secret" not in keys:
            body = body + (b"&" if body else b"") + b"client_secret="
        headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.app({**scope, "headers": headers}, replaying(body, receive), send)


# For responses that no UI route dressed (JSON APIs, the SDKs' own 404 and 405 pages): they are never
# meant to render or be framed. The web UI's SecureHeaders sets its own, fuller set, which wins.
BASELINE_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
)


class BaselineHeaders:
    """Adds :data:`BASELINE_HEADERS` to every HTTP response that lacks them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def dressed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in BASELINE_HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, dressed)
