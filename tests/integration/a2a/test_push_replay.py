"""Issue 29 for A2A pushes, over MCP: a finished push resent (delivered or failed) with the same
webhook-id and event, a new timestamp and valid signature, a new attempt cycle and a ``replay`` row in the
delivery log; a config's failed pushes recovered oldest first once the receiver is back; another
endpoint's ids not found; rows logged before migration 0018 refused clearly; a deleted config or a
pruned task answered, nothing sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from a2a.client import Client
from sqlalchemy import select, update
from standardwebhooks import Webhook

from switchboard.a2a.configs import PUSH_VERB
from switchboard.store.schema import notify_deliveries
from switchboard.store.schema_a2a import a2a_tasks
from tests.integration.a2a.conftest import A2A_VERBS, Env, a2a_env, message, push_config, send
from tests.integration.web.helpers import Human
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import Respond
from tests.support.secrets import reveal

REPLAY = ("resend_a2a_push", "recover_a2a_push")


async def _me(env: Env, slug: str = "client") -> tuple[str, Client, Agent]:
    endpoint, token = await env.endpoint(slug, verbs=(*A2A_VERBS, *REPLAY))
    client = await env.client(token)
    me = await env.stack.enter_async_context(agent(env.inst.mcp_url, token))
    return endpoint.id, client, me


async def _task_with_config(env: Env, client: Client) -> tuple[str, str, str]:
    """A task and a StandardWebhooks config on it: (task id, config id, signing secret)."""
    task = await send(client, message())
    created = await client.create_task_push_notification_config(
        push_config(env.url(), task_id=task.id, scheme="StandardWebhooks")
    )
    secret = created.authentication.credentials
    reveal(secret)
    return task.id, created.id, secret


async def _log(env: Env) -> list[Any]:
    async with env.services.db.read() as conn:
        stmt = select(notify_deliveries).where(notify_deliveries.c.kind == "a2a")
        return list((await conn.execute(stmt.order_by(notify_deliveries.c.seq))).all())


async def test_resend_a_delivered_and_a_failed_push(env: Env) -> None:
    me_id, client, me = await _me(env)
    worker = await env.worker()
    first, _, first_secret = await _task_with_config(env, client)
    await worker.ok("claim_next")  # first's claimed transition: pushed, delivered
    await env.settle()
    env.receiver.behaviour = Respond(400)  # a final failure: no retry
    second, _, second_secret = await _task_with_config(env, client)
    await worker.ok("claim_next")
    await env.settle()
    delivered, failed = await _log(env)
    assert (delivered.subject_id, delivered.outcome) == (first, "delivered")
    assert (failed.subject_id, failed.outcome) == (second, "failed")
    assert delivered.endpoint_id == me_id and delivered.event_seq is not None  # migration 0018's fields
    original = env.pushes()[0].request
    assert original.header("webhook-id") == delivered.id
    assert original.header("x-switchboard-sequence") == str(delivered.event_seq)

    env.receiver.behaviour = Respond(204)
    await env.advance(5)  # a later second: the replay's timestamp is new
    seen = len(env.receiver.requests)
    for row, secret in ((delivered, first_secret), (failed, second_secret)):
        answer = await me.ok("resend_a2a_push", {"notification_id": row.id})
        assert answer["queued"] is True and answer["seq"] == row.event_seq, answer
        await env.settle()
        got = env.receiver.requests[-1]
        assert got.header("webhook-id") == row.id
        assert got.header("x-switchboard-task-id") == row.subject_id
        assert got.header("x-switchboard-sequence") == str(row.event_seq)
        Webhook(secret).verify(got.body, got.header_map)
    assert len(env.receiver.requests) == seen + 2
    again = env.receiver.requests[seen]
    assert again.body == original.body  # the same event, from the task's event log
    assert int(again.header("webhook-timestamp") or 0) > int(original.header("webhook-timestamp") or 0)
    assert again.header("webhook-signature") != original.header("webhook-signature")

    rows = await _log(env)
    replays = [(r.id, r.reason, r.outcome) for r in rows[2:]]
    assert replays == [(delivered.id, "replay", "delivered"), (failed.id, "replay", "delivered")]
    assert [a["n"] for a in json.loads(rows[3].attempts)] == [1]  # a new attempt cycle


async def test_recover_a_configs_failed_pushes_oldest_first(env: Env) -> None:
    _, client, me = await _me(env)
    worker = await env.worker()
    env.receiver.behaviour = Respond(400)
    task_id, config_id, secret = await _task_with_config(env, client)
    claimed = (await worker.ok("claim_next"))["todo"]
    lease = claimed["lease"]
    await worker.ok("ask", {"todo_id": task_id, "lease": lease, "question": "which branch?"})
    await worker.ok("ack", {"todo_id": task_id, "lease": lease, "result": "done"})
    await env.settle()
    failed = await _log(env)
    assert [r.outcome for r in failed] == ["failed"] * 3
    since = int(env.clock.now()) - 60

    env.receiver.behaviour = Respond(204)
    seen = len(env.receiver.requests)
    answer = await me.ok(
        "recover_a2a_push", {"task_id": task_id, "config_id": config_id, "since": str(since)}
    )
    assert answer["found"] == 3 and answer["queued"] == 3, answer
    await env.settle()
    replays = env.receiver.requests[seen:]
    assert [r.header("webhook-id") for r in replays] == [r.id for r in failed]
    assert [int(r.header("x-switchboard-sequence") or 0) for r in replays] == sorted(
        r.event_seq for r in failed
    )
    for r in replays:
        Webhook(secret).verify(r.body, r.header_map)

    # Every one of them is delivered now: a second recover finds nothing.
    again = await me.ok("recover_a2a_push", {"task_id": task_id, "config_id": config_id, "since": str(since)})
    assert again["found"] == 0


async def test_another_endpoints_ids_are_not_found(env: Env) -> None:
    _, client, _ = await _me(env)
    _, _, stranger = await _me(env, "stranger")
    worker = await env.worker()
    task_id, config_id, _ = await _task_with_config(env, client)
    await worker.ok("claim_next")
    await env.settle()
    (row,) = await _log(env)
    seen = len(env.receiver.requests)

    theirs = await stranger.call("resend_a2a_push", {"notification_id": row.id})
    unknown = await stranger.call("resend_a2a_push", {"notification_id": "msg_unknown"})
    assert theirs.code == unknown.code == "not_found"
    assert theirs.data["message"] == unknown.data["message"]
    recover = await stranger.call(
        "recover_a2a_push", {"task_id": task_id, "config_id": config_id, "since": "0"}
    )
    assert recover.code == "not_found"
    await env.settle()
    assert len(env.receiver.requests) == seen  # nothing sent


async def test_what_cannot_be_replayed_is_answered_and_nothing_is_sent(env: Env) -> None:
    _, client, me = await _me(env)
    worker = await env.worker()
    task_id, config_id, _ = await _task_with_config(env, client)
    await worker.ok("claim_next")
    await env.settle()
    (row,) = await _log(env)
    seen = len(env.receiver.requests)

    # A row as builds before migration 0018 wrote it: no endpoint, no sequence.
    async with env.services.db.begin() as conn:
        await conn.execute(
            update(notify_deliveries)
            .where(notify_deliveries.c.id == row.id)
            .values(endpoint_id=None, event_seq=None)
        )
    old = await me.call("resend_a2a_push", {"notification_id": row.id})
    assert old.code == "invalid_argument" and "cannot be replayed" in old.data["message"]
    async with env.services.db.begin() as conn:
        await conn.execute(
            update(notify_deliveries)
            .where(notify_deliveries.c.id == row.id)
            .values(endpoint_id=row.endpoint_id, event_seq=row.event_seq)
        )

    # The scope cut: without a2a_push_config no push goes out, a replay neither.
    accounts = env.services.accounts
    kept = [v for v in (*A2A_VERBS, *REPLAY) if v != PUSH_VERB]
    await accounts.set_scope(row.endpoint_id, verbs=kept)
    paused = await me.ok("resend_a2a_push", {"notification_id": row.id})
    assert paused == {"notification_id": row.id, "error": "push_paused"}
    await accounts.set_scope(row.endpoint_id, verbs=[*A2A_VERBS, *REPLAY])

    assert await env.a2a.configs.delete(row.endpoint_id, task_id, config_id)
    gone = await me.ok("resend_a2a_push", {"notification_id": row.id})
    assert gone == {"notification_id": row.id, "error": "config_gone"}

    async with env.services.db.begin() as conn:  # the task pruned by retention
        await conn.execute(a2a_tasks.delete().where(a2a_tasks.c.todo_id == task_id))
    pruned = await me.ok("resend_a2a_push", {"notification_id": row.id})
    assert pruned == {"notification_id": row.id, "error": "task_gone"}
    await env.settle()
    assert len(env.receiver.requests) == seen


async def test_console_resend_and_recover(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, web=True) as env:
        await _console(env)


async def _console(env: Env) -> None:
    """The endpoint card: a Resend button on each A2A delivery-log row and a Recover form on each push
    config (POSTs with CSRF), each an audit line; another owner's card answers not found."""
    _, client, _ = await _me(env)
    worker = await env.worker()
    env.receiver.behaviour = Respond(400)
    task_id, config_id, secret = await _task_with_config(env, client)
    await worker.ok("claim_next")
    await env.settle()
    (failed,) = await _log(env)
    email = f"owner-{env.inst.port}@example.com"
    owner = Human(env.inst, email)
    env.stack.push_async_callback(owner.close)
    assert (await owner.sign_in("correct horse battery")).status_code == 303
    card = "/endpoints/client"
    page = (await owner.http.get(card)).text
    assert page.count('data-testid="push-resend"') == 1 and failed.id in page

    env.receiver.behaviour = Respond(204)
    r = await owner.post(f"{card}/push-deliveries/resend", {"notification": failed.id}, csrf_from=card)
    assert r.status_code == 200 and 'data-queued="yes"' in r.text
    await env.settle()
    got = env.receiver.requests[-1]
    assert got.header("webhook-id") == failed.id
    Webhook(secret).verify(got.body, got.header_map)
    recover = f"{card}/push-configs/{task_id}/{config_id}/recover"
    r = await owner.post(recover, {"since": "2000-01-01T00:00:00Z"}, csrf_from=card)
    assert r.status_code == 200 and 'data-found="0"' in r.text  # its newest row is the delivered replay
    r = await owner.post(recover, {"since": "yesterday"}, csrf_from=card)
    assert r.status_code == 400
    r = await owner.http.post(f"{card}/push-deliveries/resend", data={"notification": failed.id})
    assert r.status_code == 403  # no CSRF token: refused
    page = (await owner.http.get(card)).text
    assert page.count('data-reason="replay"') == 1

    resends = [e for e in env.logs.events("audit") if e.get("action") == "a2a_push.resend"]
    assert [(e["notification_id"], e["actor"], e["outcome"]) for e in resends] == [
        (failed.id, email, "queued")
    ]
    recovers = [e for e in env.logs.events("audit") if e.get("action") == "a2a_push.recover"]
    assert [(e["actor"], e["found"]) for e in recovers] == [(email, 0)]

    other_id = await env.services.accounts.create_human("other@example.com", "correct horse battery")
    await env.endpoint("theirs", human_id=other_id)
    other = Human(env.inst, "other@example.com")
    env.stack.push_async_callback(other.close)
    assert (await other.sign_in("correct horse battery")).status_code == 303
    theirs = "/endpoints/theirs"
    r = await other.post(f"{theirs}/push-deliveries/resend", {"notification": failed.id}, csrf_from=theirs)
    assert r.status_code == 404
    r = await other.post(
        f"{theirs}/push-configs/{task_id}/{config_id}/recover", {"since": "0"}, csrf_from=theirs
    )
    assert r.status_code == 404
    r = await other.post(f"{card}/push-deliveries/resend", {"notification": failed.id}, csrf_from=theirs)
    assert r.status_code == 404
