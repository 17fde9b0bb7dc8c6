"""One ``Authorization`` header per request, in one spelling, before any face reads it (docs/mcp.md,
"Limits key on identity").

Two readers of one request once disagreed about who was calling: the MCP bearer check took the first
``Authorization`` header, the per-credential session cap the last, and the cap keyed on the header's
raw text while ``Bearer`` was matched in any case. One endpoint with one valid token (a random second
header, or another case of ``Bearer`` each time) was a new "credential" on every ``initialize`` and
filled the instance's session cap, so another tenant's ``initialize`` got 503.

So, for every HTTP request, whatever its path (MCP, A2A, ingest, the OAuth endpoints):

* more than one ``Authorization`` header is refused with 400 (RFC 6750 ``invalid_request``, which names
  a repeated parameter) before anything else runs: nothing is authenticated, counted or opened;
* one ``Authorization: Bearer <token>`` in any case of ``Bearer``, with any run of spaces or tabs
  around the token (RFC 6750: ``"Bearer" 1*SP b64token``; schemes are case-insensitive, RFC 9110
  §11.1), is handed on as ``Bearer <token>``, so every reader sees the same text. Any other value is
  handed on unchanged (a ``Basic`` client credential at ``/token``; a malformed bearer, which the face
  answers 401).

The limits themselves key on the endpoint the request authenticated as, never on this header
(``sessioncap``, the MCP and A2A gates).
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from switchboard.edge.answers import send_json

HEADER = b"authorization"
SCHEME = b"bearer"
CANONICAL = b"Bearer "
MAX_TOKEN = 4096
_BLANK = b" \t"

DUPLICATE_BODY = json.dumps(
    {
        "error": "invalid_request",
        "error_description": "send exactly one Authorization header; this request has more than one",
    }
).encode()


def bearer_value(raw: bytes) -> bytes | None:
    """The token of a bearer ``Authorization`` value (``Bearer`` in any case, blanks around the token),
    or None when it is not one."""
    value = raw.strip(_BLANK)
    if len(value) <= len(SCHEME) or value[: len(SCHEME)].lower() != SCHEME:
        return None
    if value[len(SCHEME)] not in _BLANK:
        return None
    token = value[len(SCHEME) :].strip(_BLANK)
    if not token or len(token) > MAX_TOKEN or b" " in token or b"\t" in token:  # _BLANK, byte by byte in C
        return None
    return token


def bearer_token(authorization: str | None) -> str | None:
    """:func:`bearer_value` for a header already decoded (Starlette's ``request.headers``)."""
    if not authorization:
        return None
    token = bearer_value(authorization.encode("latin-1", "replace"))
    return token.decode("latin-1") if token is not None else None


class OneAuthorization:
    """ASGI middleware: 400 for a request with more than one ``Authorization`` header; a bearer one
    rewritten to its canonical spelling. HTTP only (the app serves no websockets)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", ())
        found = [i for i, (name, _) in enumerate(headers) if name.lower() == HEADER]
        if len(found) > 1:
            await _refuse(send)
            return
        if found:
            (at,) = found
            raw = headers[at][1]
            token = bearer_value(raw)
            if token is not None and raw != CANONICAL + token:
                rewritten = list(headers)
                rewritten[at] = (HEADER, CANONICAL + token)
                scope = {**scope, "headers": rewritten}
        await self.app(scope, receive, send)


async def _refuse(send: Send) -> None:
    await send_json(
        send,
        400,
        DUPLICATE_BODY,
        [(b"www-authenticate", b'Bearer realm="switchboard", error="invalid_request"')],
    )
