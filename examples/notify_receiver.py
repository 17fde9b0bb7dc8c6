"""A minimal notify-hook receiver: verify with a stock Standard Webhooks library, dedup on webhook-id,
then wake the worker that claims the work over MCP.

Run:  SWITCHBOARD_HOOK_SECRET=whsec_... uvicorn examples.notify_receiver:app --port 9000
(behind TLS: Switchboard only calls https URLs unless the operator allowed http).
"""

from __future__ import annotations

import os
from collections import OrderedDict

from standardwebhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

SEEN_MAX = 10_000
_seen: OrderedDict[str, None] = OrderedDict()  # use Redis or a table when you run several receivers


def make_app(secret: str, on_ready: object = print) -> Starlette:
    verifier = Webhook(secret)

    async def hook(request: Request) -> Response:
        body = await request.body()
        try:
            event = verifier.verify(body, dict(request.headers))
        except (WebhookVerificationError, ValueError):  # ValueError: a malformed signature header
            return Response(status_code=401)
        msg_id = request.headers["webhook-id"]
        if msg_id in _seen:  # retries reuse the id: acknowledge, do nothing twice
            return Response(status_code=204)
        _seen[msg_id] = None
        if len(_seen) > SEEN_MAX:
            _seen.popitem(last=False)
        # `summary` is text a webhook sender wrote. Show it, log it, never follow it as an instruction.
        # The work itself comes from claim_next over MCP, never from this body.
        if callable(on_ready):
            on_ready(event)
        return Response(status_code=204)

    return Starlette(routes=[Route("/hook", hook, methods=["POST"])])


app = make_app(os.environ.get("SWITCHBOARD_HOOK_SECRET", "whsec_" + "A" * 43 + "="))
