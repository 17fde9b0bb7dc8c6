"""Issue 29: resend one finished notification and recover a hook's failed ones, over MCP, with the
dispatcher in its worker process: the same webhook-id, a new valid signature, a delivery-log row each."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from standardwebhooks import Webhook

from switchboard.store.schema import notify_deliveries, todos
from tests.integration.notify.conftest import Env, notify_env
from tests.support.receivers import Respond


async def rows(env: Env, hook_id: str) -> list[Any]:
    d = notify_deliveries.c
    stmt = select(d.id, d.reason, d.outcome).where(d.target_id == hook_id).order_by(d.seq)
    async with env.services.db.read() as conn:
        return list((await conn.execute(stmt)).all())


async def flushed(env: Env, hook_id: str, count: int) -> list[Any]:
    """The delivery log once every notification so far finished (settle waits for the worker's flush)."""
    await env.settle()
    found = await rows(env, hook_id)
    assert len(found) == count, found
    return found


async def drain(env: Env) -> int:
    """Take the requests already received (the failures' attempts), so the next ones are the replays'."""
    taken = 0
    while True:
        try:
            await env.receiver.next_request(timeout=0.2)
        except TimeoutError:
            return taken
        taken += 1


async def test_resend_and_recover_over_mcp(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_process=True) as env:
        world, a = await env.tenant("ep-a")
        _, b = await env.tenant("ep-b")
        created = await a.ok("create_notify_hook", {"url": env.hook_url()})
        hook, secret = created["hook_id"], created["signing_secret"]

        # one delivered, then resent: the same webhook-id, a new signature that verifies
        await env.deliver(world, title="delivered one")
        first = await env.receiver.next_request()
        delivered_id = first.header("webhook-id")
        (row,) = await flushed(env, hook, 1)
        assert row.outcome == "delivered"
        # the worker's clock is real: cross a second so the timestamp (and so the signature) must differ
        await asyncio.sleep(1.01 - time.time() % 1)
        answer = await a.ok("resend_notification", {"notification_id": delivered_id})
        assert answer["queued"] is True
        again = await env.receiver.next_request()
        assert again.header("webhook-id") == delivered_id
        assert int(again.header("webhook-timestamp") or 0) > int(first.header("webhook-timestamp") or 0)
        assert again.header("webhook-signature") != first.header("webhook-signature")
        Webhook(secret).verify(again.body, again.header_map)
        log = await flushed(env, hook, 2)
        assert (log[-1].id, log[-1].reason, log[-1].outcome) == (delivered_id, "replay", "delivered")

        # a foreign endpoint's view: not found, as an unknown id
        foreign = await b.call("resend_notification", {"notification_id": delivered_id})
        unknown = await b.call("resend_notification", {"notification_id": "msg_nope"})
        assert foreign.code == unknown.code == "not_found"
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        foreign = await b.call("recover_notify_hook", {"hook_id": hook, "since": "2000-01-01T00:00:00Z"})
        assert foreign.code == "not_found"

        # 20 failed (the hook disables itself after 10 in a row; its owner's rotate re-enables it)
        env.receiver.behaviour = Respond(500)
        failed_ids: list[str] = []
        for batch in range(2):
            for i in range(10):
                await env.deliver(world, title=f"fails {batch}-{i}", number=100 + batch * 10 + i)
            await flushed(env, hook, 2 + 10 * (batch + 1))
            await a.ok("rotate_notify_hook", {"hook_id": hook})
        log = await rows(env, hook)
        failed_ids = [r.id for r in log[2:]]
        assert len(set(failed_ids)) == 20 and {r.outcome for r in log[2:]} == {"failed"}
        assert await drain(env) == 60  # 3 attempts each
        env.receiver.behaviour = Respond(204)
        rotated = await a.ok("rotate_notify_hook", {"hook_id": hook})
        recovered = await a.ok("recover_notify_hook", {"hook_id": hook, "since": since})
        assert recovered["found"] == 20 and recovered["queued"] == 20
        log = await flushed(env, hook, 42)
        replays = log[22:]
        assert sorted(r.id for r in replays) == sorted(failed_ids)
        sent = [await env.receiver.next_request() for _ in range(20)]
        assert [r.header("webhook-id") for r in sent] == failed_ids  # oldest first, one attempt each
        for request in sent:
            Webhook(rotated["signing_secret"]).verify(request.body, request.header_map)
        assert {(r.reason, r.outcome) for r in replays} == {("replay", "delivered")}
        # a recover again finds nothing: each one's newest row is delivered
        assert (await a.ok("recover_notify_hook", {"hook_id": hook, "since": since}))["found"] == 0


async def test_a_replay_that_cannot_be_sent_says_why_and_sends_nothing(env: Env) -> None:
    world, a = await env.tenant("ep-gone")
    hook = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["hook_id"]
    (todo_id,) = await env.deliver(world)
    sent = (await env.receiver.next_request()).header("webhook-id")
    await flushed(env, hook, 1)

    await env.notify.verbs.set_enabled(world.endpoint, hook, False, actor="test")
    answer = await a.ok("resend_notification", {"notification_id": sent})
    assert answer == {"notification_id": sent, "error": "hook_unavailable"}

    await env.notify.verbs.set_enabled(world.endpoint, hook, True, actor="test")
    async with env.services.db.begin() as conn:  # as retention would prune it
        await conn.execute(delete(todos).where(todos.c.id == todo_id))
    answer = await a.ok("resend_notification", {"notification_id": sent})
    assert answer == {"notification_id": sent, "error": "todo_gone"}
    assert (await a.call("recover_notify_hook", {"hook_id": hook, "since": "soon"})).code == (
        "invalid_argument"
    )
    await env.settle()
    assert len(env.receiver.requests) == 1 and len(await rows(env, hook)) == 1  # nothing sent or logged
