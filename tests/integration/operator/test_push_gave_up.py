"""Operator events from the A2A push worker (docs/self-hosting.md, "Operator events"): a push that gives
up sends one ``operator.push_config_gave_up`` event, Standard Webhooks signed (checked with the stock
``standardwebhooks`` verifier), naming the config, task and owner by id only; an operator URL the SSRF
guard refuses stops the server's start before anything is dialled."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import trustme
from standardwebhooks import Webhook

from switchboard.push import mint_secret
from tests.integration.a2a.conftest import HOST, a2a_env, message, push_config, send
from tests.reliability.procs import ServerProcess, server_env, servers
from tests.support.receivers import HangBeforeHeaders, HTTPSReceiver, ListeningSocket, Respond
from tests.support.secrets import reveal


async def test_a_push_that_gives_up_sends_one_signed_operator_event(tmp_path: Path) -> None:
    secret = mint_secret()
    reveal(secret)
    ca = trustme.CA()
    async with (
        HTTPSReceiver(ca=ca, cert_hostnames=(HOST,)) as ops,
        a2a_env(
            tmp_path,
            ca=ca,
            a2a_push_max_attempts=2,
            notify_hook_allow_cidrs="127.0.0.1/32",  # the operator webhook's allowlist is the hooks'
            operator_webhook_url=ops.url("/ops?k=QUERYCANARY", hostname=HOST),
            operator_webhook_secret=secret,
        ) as env,
    ):
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        env.receiver.behaviour = Respond(503)
        task = await send(client, message(), push=push_config(env.url()))
        await env.settle()
        await env.advance(30)  # the second and last attempt: 503 again, the push gives up
        assert await env.outbox_statuses() == [(1, "failed")]
        request = await ops.next_request(timeout=10)
        event = Webhook(secret).verify(request.body, request.header_map)
        assert event["type"] == "operator.push_config_gave_up"
        data = event["data"]
        assert data["task_id"] == task.id and data["reason"] == "exhausted" and data["count"] == 1
        assert data["error"] == "server_error" and data["attempts"] == 2
        assert data["endpoint_slug"] == "client" and data["endpoint_id"].startswith("ep")
        assert data["instance_id"] == env.services.instance_id and data["config_id"]
        assert request.path == "/ops?k=QUERYCANARY"  # the URL as configured, and nowhere in the body
        assert b"QUERYCANARY" not in request.body and b"https://" not in request.body
        assert (request.header("webhook-id") or "").startswith("msg_")
        sent = env.logs.events("operator event sent")
        assert [line["type"] for line in sent] == ["operator.push_config_gave_up"]
        assert env.metric("switchboard_operator_events_total", type=event["type"], outcome="delivered") == 1
        assert json.loads(request.body) == event


@pytest.mark.parametrize(("host", "reason"), [("127.0.0.1", "loopback"), ("169.254.169.254", "link_local")])
async def test_an_operator_url_on_a_refused_address_stops_the_start_before_any_connection(
    tmp_path: Path, host: str, reason: str
) -> None:
    """``switchboard serve`` as shipped: no allowlist, so loopback is refused like any hook's."""
    async with ListeningSocket() as sock:
        env = server_env(
            operator_webhook_url=f"https://{host}:{sock.port}/ops?k=QUERYCANARY",
            operator_webhook_secret=mint_secret(),
        )
        server = ServerProcess(tmp_path / "data", env, name="refused")
        with servers(server):
            server.start()
            code = await asyncio.to_thread(server.reap, 90.0)
        await sock.assert_untouched()
    assert code != 0
    lines = [json.loads(line) for line in server.log_path.read_text().splitlines() if line.startswith("{")]
    (refused,) = [line for line in lines if line.get("event") == "operator webhook refused"]
    assert refused["reason"] == reason and refused["setting"] == "SWITCHBOARD_OPERATOR_WEBHOOK_URL"
    assert "QUERYCANARY" not in server.log_path.read_text()
    assert not any(line.get("event") == "switchboard started" for line in lines)


async def test_a_hanging_operator_receiver_does_not_hold_up_pushes(tmp_path: Path) -> None:
    secret = mint_secret()
    ca = trustme.CA()
    async with (
        HTTPSReceiver(ca=ca, cert_hostnames=(HOST,), behaviour=HangBeforeHeaders()) as ops,
        a2a_env(
            tmp_path,
            ca=ca,
            a2a_push_max_attempts=1,
            notify_hook_allow_cidrs="127.0.0.1/32",
            operator_webhook_url=ops.url("/ops", hostname=HOST),
            operator_webhook_secret=secret,
        ) as env,
    ):
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        env.receiver.behaviour = Respond(410)  # a final status: this push gives up at once
        await send(client, message(), push=push_config(env.url()))
        await env.settle()
        await ops.next_request(timeout=10)  # the operator's receiver now holds the event's attempt
        env.receiver.behaviour = Respond(204)
        started = time.monotonic()
        await send(client, message("the next task"), push=push_config(env.url()))
        await env.settle()
        assert sorted(status for _, status in await env.outbox_statuses()) == ["delivered", "failed"]
        assert time.monotonic() - started < 2.0  # not behind the operator attempt's 5 s deadline
        assert len(ops.requests) == 1 and not env.logs.events("operator event attempt failed")
