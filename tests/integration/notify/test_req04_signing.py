"""SPEC-0024 REQ-4: Standard Webhooks signing, verified by the stock `standardwebhooks` library."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from standardwebhooks import Webhook, WebhookVerificationError

from switchboard import __version__
from switchboard.core.clock import ManualClock
from switchboard.store.schema import notify_hooks
from tests.integration.notify.conftest import Env, notify_env
from tests.support.receivers import HangBeforeHeaders, RecordedRequest, Respond


def signatures(request: RecordedRequest) -> list[str]:
    value = request.header("webhook-signature")
    assert value is not None
    return value.split(" ")


async def test_a_receiver_verifies_a_notification(env: Env) -> None:
    world, a = await env.tenant("ep-a")
    secret = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["signing_secret"]
    await env.deliver(world)
    request = await env.receiver.next_request()
    msg_id, ts = request.header("webhook-id"), request.header("webhook-timestamp")
    assert msg_id is not None and msg_id.startswith("msg_") and len(msg_id) == 30
    assert ts is not None and ts.isdigit()
    key = base64.b64decode(secret.removeprefix("whsec_"))
    assert len(key) == 32
    expected = base64.b64encode(
        hmac.new(key, f"{msg_id}.{ts}.".encode() + request.body, hashlib.sha256).digest()
    )
    assert signatures(request) == [f"v1,{expected.decode()}"]
    assert request.header("content-type") == "application/json"
    assert request.header("user-agent") == f"switchboard/{__version__}"


async def test_a_stock_standard_webhooks_library_verifies_it(env: Env) -> None:
    world, a = await env.tenant("ep-a")
    secret = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["signing_secret"]
    for title in ("first", "second", "third"):
        await env.deliver(world, title=title)
        request = await env.receiver.next_request()
        event = Webhook(secret).verify(request.body, request.header_map)
        assert event["type"] == "todo.ready" and event["summary"].endswith(title)
    # A hex-encoded key (what the inbound minter makes) would not verify: the guard this test exists for.
    hex_secret = "whsec_" + base64.b64decode(secret.removeprefix("whsec_")).hex()
    with pytest.raises(WebhookVerificationError):
        Webhook(hex_secret).verify(request.body, request.header_map)


async def test_retries_keep_the_id(env: Env) -> None:
    world, a = await env.tenant("ep-a")
    secret = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["signing_secret"]
    env.receiver.behaviour = HangBeforeHeaders()
    await env.deliver(world)
    first = await env.receiver.next_request()
    env.receiver.behaviour = Respond(204)
    env.clock.advance(7)  # the attempt times out after 5 s; the retry is signed at its own time
    second = await env.receiver.next_request(timeout=15)
    assert first.header("webhook-id") == second.header("webhook-id")
    assert int(second.header("webhook-timestamp") or 0) == int(first.header("webhook-timestamp") or 0) + 7
    assert signatures(first) != signatures(second)
    for request in (first, second):
        Webhook(secret).verify(request.body, request.header_map)
    await env.settle()
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["consecutive_failures"] == 0 and hook["last_status"] == 204


async def test_rotation_grace(tmp_path: Path) -> None:
    start = datetime.now(UTC).timestamp() - 3600  # so "an hour after the rotation" is real now
    async with notify_env(tmp_path, clock=ManualClock(start)) as env:
        world, a = await env.tenant("ep-a")
        created = await a.ok("create_notify_hook", {"url": env.hook_url()})
        rotated = await a.ok("rotate_notify_hook", {"hook_id": created["hook_id"]})
        old, new = created["signing_secret"], rotated["signing_secret"]
        assert old != new
        env.clock.advance(3600)
        await env.deliver(world)
        request = await env.receiver.next_request()
        entries = signatures(request)
        assert len(entries) == 2
        for secret in (old, new):
            Webhook(secret).verify(request.body, request.header_map)
            # and each entry verifies with exactly one of the secrets
        solo = [sum(_verifies(secret, request, entry) for secret in (old, new)) for entry in entries]
        assert solo == [1, 1]
        assert _verifies(new, request, entries[0])  # newest first

        # When the grace period ends the previous secret is destroyed and no longer signs.
        env.clock.advance(24 * 3600)
        assert await env.notify.store.destroy_expired_secrets() == 1
        async with env.services.db.read() as conn:
            row = (await conn.execute(select(notify_hooks.c.prev_secret_enc))).one()
        assert row.prev_secret_enc is None


def _verifies(secret: str, request: RecordedRequest, entry: str) -> bool:
    headers = {**request.header_map, "webhook-signature": entry}
    try:
        Webhook(secret).verify(request.body, headers)
    except WebhookVerificationError:
        return False
    return True
