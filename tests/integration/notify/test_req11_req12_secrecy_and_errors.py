"""SPEC-0024 REQ-11 (observability and secrecy) and REQ-12 (errors), plus the attempt log line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.notify.conftest import Env, notify_env
from tests.reliability.hostile import RawTLSServer, answer_after
from tests.support.pg import PostgresServer
from tests.support.receivers import Respond


async def test_secret_never_logged(env: Env) -> None:
    world, a = await env.tenant("ep-a")
    created = await a.ok("create_notify_hook", {"url": env.hook_url("/hook", query="api_key=QUERYCANARY")})
    secrets = [created["signing_secret"]]
    signatures: list[str] = []
    for behaviour in (Respond(500), Respond(204)):
        env.receiver.behaviour = behaviour
        await env.deliver(world)
        await env.settle()
        rotated = await a.ok("rotate_notify_hook", {"hook_id": created["hook_id"]})
        secrets.append(rotated["signing_secret"])
    await env.deliver(world)
    await env.settle()
    signatures = [r.header("webhook-signature") or "" for r in env.receiver.requests]
    assert len(env.receiver.requests) >= 4 and all(signatures)
    assert env.receiver.requests[0].path.endswith("?api_key=QUERYCANARY")  # the receiver does get its query
    listed = str(await a.ok("list_notify_hooks"))
    metrics = env.services.metrics.render().decode()
    haystacks = [*env.logs.lines, listed, metrics]
    for text in haystacks:
        assert "QUERYCANARY" not in text
        for secret in secrets:
            assert secret not in text and secret.removeprefix("whsec_") not in text
        for header in signatures:
            for entry in header.split(" "):
                assert entry.split(",", 1)[1] not in text
    attempt_lines = env.logs.events("notify attempt")
    assert attempt_lines
    assert {"hook_id", "notification_id", "attempt", "result", "duration_ms"} <= set(attempt_lines[0])


@pytest.mark.postgres
async def test_store_outage_during_health_update(
    tmp_path: Path, pg_server: PostgresServer, pg_url: str
) -> None:
    async with (
        notify_env(tmp_path, database_url=pg_url) as env,
        RawTLSServer(env.ca, answer_after(1.5)) as slow,
    ):
        world, a = await env.tenant("ep-a")
        created = await a.ok("create_notify_hook", {"url": slow.url()})
        await env.deliver(world)
        await slow.requests.get()  # the attempt is in flight (the receiver answers 200 after 1.5 s)...
        pg_server.kill()  # ...when the database goes away: the delivery succeeds, its health write fails
        try:
            await env.notify.dispatcher.idle()
        finally:
            pg_server.start()
        failures = env.logs.events("hook health update failed")
        assert failures
        assert failures[0]["hook_id"] == created["hook_id"]
        assert failures[0]["notification_id"].startswith("msg_")
        assert failures[0]["stage"] == "health"
        assert (
            env.metric("switchboard_notify_hook_notifications_total", type="todo.ready", outcome="delivered")
            == 1
        )
        # the worker carries on with the next notification
        hook = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["hook_id"]
        await env.deliver(world)
        delivered = await env.receiver.next_request(timeout=10)
        assert delivered.header("webhook-id") != failures[0]["notification_id"]
        assert hook
