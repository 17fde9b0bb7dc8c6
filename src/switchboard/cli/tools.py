"""The commands that need no database: ``call`` (an MCP verb as an endpoint), ``listen`` and ``verify``
(a local receiver), and ``wait-ready``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from switchboard.cli.base import EXIT_FAILED, CliError, load_settings

# The settings (pydantic) and the logging helpers load inside the commands that use them: `verify` and
# `listen` need neither.


def run(args: argparse.Namespace) -> int:
    """The command ``args.group`` names: one of wait-ready, call, listen, verify."""
    if args.group == "wait-ready":
        return wait_until_ready(args)
    if args.group == "call":
        return call_verb(args)
    return listen_receiver(args) if args.group == "listen" else verify_stdin(args)


def call_verb(args: argparse.Namespace) -> int:
    from switchboard.cli.call import CallError, call_tool, parse_arguments
    from switchboard.obs.logs import scrub
    from switchboard.process import preflight

    try:
        arguments = parse_arguments(args.arguments)
    except CallError as exc:
        raise CliError(str(exc)) from None
    token = sys.stdin.readline().strip()
    if not token:
        raise CliError("no token on stdin (pass the endpoint's token as the first line of stdin)")
    url = args.url or preflight.local_url(load_settings(args)) + "/mcp"
    try:
        ok, data = asyncio.run(call_tool(url, token, args.tool, arguments))
    except Exception as exc:  # the SDK's transport errors: name them, never the token
        raise CliError(f"{url}: call failed ({type(exc).__name__})", "unavailable", EXIT_FAILED) from None
    if not ok:
        code = str(data.get("code") or "tool_error")
        if args.json:
            print(json.dumps({"error": code, "result": data}))
        print(f"error: {args.tool}: {scrub(json.dumps(data))}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(data) if args.json else json.dumps(data, indent=2))
    return 0


def _hook_secret(args: argparse.Namespace) -> str:
    secret = args.secret or os.environ.get("SWITCHBOARD_HOOK_SECRET", "")
    if not secret.startswith("whsec_"):
        raise CliError("give the hook's signing secret (whsec_...) in SWITCHBOARD_HOOK_SECRET or --secret")
    return str(secret)


def verify_stdin(args: argparse.Namespace) -> int:
    from switchboard.cli.receiver import NotVerified, parse_request, verify

    secret = _hook_secret(args)
    try:
        headers, body = parse_request(sys.stdin.buffer.read())
        payload = verify(secret, body, headers)
    except NotVerified as exc:
        raise CliError(f"signature does not verify ({exc})", "not_verified", EXIT_FAILED) from None
    print(json.dumps({"verified": True, "webhook-id": headers.get("webhook-id"), "payload": payload}))
    return 0


def listen_receiver(args: argparse.Namespace) -> int:
    import uvicorn

    from switchboard.cli.receiver import listen_app

    secret = _hook_secret(args)
    if bool(args.cert) != bool(args.key):
        raise CliError("--cert and --key go together")
    scheme = "https" if args.cert else "http"
    print(f"listening on {scheme}://{args.host}:{args.port}/ (Ctrl-C to stop)", file=sys.stderr, flush=True)
    uvicorn.run(
        listen_app(secret),
        host=args.host,
        port=args.port,
        ssl_certfile=args.cert,
        ssl_keyfile=args.key,
        log_level="warning",
        access_log=False,
    )
    return 0


def wait_until_ready(args: argparse.Namespace) -> int:
    from switchboard.process import preflight

    url = args.url or preflight.local_url(load_settings(args))
    ready, answer = preflight.wait_ready(url, args.timeout)
    if not ready:
        raise CliError(f"{url} not ready after {args.timeout:g} s: {answer}", "not_ready", EXIT_FAILED)
    print(f"switchboard is ready at {url}")
    return 0
