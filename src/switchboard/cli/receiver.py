"""The receiver side of the first hour, as the Stripe and Svix CLIs do it (docs/cli.md):

* ``switchboard listen``: a local receiver (HTTPS with ``--cert``/``--key``, else HTTP) that verifies
  each notification with the hook's secret, using the stock Standard Webhooks verifier, and prints it
  as one JSON line; a request that does not verify is answered 401 and reported on stderr.
* ``switchboard verify``: checks one captured HTTP request (request line, headers, blank line, body) read
  from stdin.

The secret comes from ``--secret`` or ``SWITCHBOARD_HOOK_SECRET`` (prefer the variable: a command line is
visible to every user of the machine).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


class NotVerified(Exception):
    pass


def verify(secret: str, body: bytes, headers: dict[str, str]) -> Any:
    """The notification's JSON payload, or NotVerified."""
    try:
        return Webhook(secret).verify(body, {k.lower(): v for k, v in headers.items()})
    except (WebhookVerificationError, ValueError) as exc:  # ValueError: a malformed header
        raise NotVerified(str(exc) or type(exc).__name__) from None


def parse_request(raw: bytes) -> tuple[dict[str, str], bytes]:
    """Headers and body of a captured HTTP/1.1 request (``curl --trace``, ``nc -l`` or a proxy dump)."""
    separator = b"\r\n\r\n" if b"\r\n\r\n" in raw else b"\n\n"
    head, sep, body = raw.partition(separator)
    if not sep:
        raise NotVerified("no blank line between the headers and the body")
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").splitlines()[1:]:  # after the request line
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    if length is not None and length.isdigit():
        body = body[: int(length)]
    return headers, body


def listen_app(secret: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def receive(request: Request) -> Response:
        body = await request.body()
        try:
            payload = verify(secret, body, dict(request.headers))
        except NotVerified as exc:
            print(f"refused: signature does not verify ({exc})", file=sys.stderr, flush=True)
            return Response(status_code=401)
        print(json.dumps({"webhook-id": request.headers.get("webhook-id"), "payload": payload}), flush=True)
        return Response(status_code=204)

    return Starlette(routes=[Route("/{path:path}", receive, methods=["POST"])])
