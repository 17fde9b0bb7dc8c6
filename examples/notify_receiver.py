"""A minimal notify-hook receiver: verify with a stock Standard Webhooks library, dedup on webhook-id,
then wake the worker that claims the work over MCP.

Run it over HTTPS (Switchboard only calls https URLs unless the operator allowed http):

    SWITCHBOARD_HOOK_SECRET=whsec_... python examples/notify_receiver.py \
        --cert receiver.pem --key receiver-key.pem --port 9000

For a certificate from a private CA, give Switchboard that CA with SWITCHBOARD_CA_BUNDLE. Behind a
TLS-terminating proxy, plain ``uvicorn examples.notify_receiver:app --port 9000`` serves it too.
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


def main(argv: list[str] | None = None) -> None:
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description="A notify-hook receiver that serves HTTPS.")
    parser.add_argument("--cert", required=True, help="PEM certificate chain for this host")
    parser.add_argument("--key", required=True, help="PEM private key")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args(argv)

    def show(event: object) -> None:
        print(f"verified notification: {event}", flush=True)

    secret = os.environ.get("SWITCHBOARD_HOOK_SECRET")
    if not secret:
        raise SystemExit("set SWITCHBOARD_HOOK_SECRET to the hook's signing secret (whsec_...)")
    uvicorn.run(
        make_app(secret, show),
        host=args.host,
        port=args.port,
        ssl_certfile=args.cert,
        ssl_keyfile=args.key,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
