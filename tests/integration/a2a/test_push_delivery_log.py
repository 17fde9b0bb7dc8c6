"""A2A pushes leave a delivery-log record (issue 19): config id, task id, each attempt's status and
duration, the outcome; never the body, the token or the URL."""

from __future__ import annotations

import json

from sqlalchemy import select

from switchboard.store.schema import notify_deliveries
from tests.integration.a2a.conftest import Env, message, push_config, send
from tests.support.receivers import Respond

TOKEN = "tok-delivery-log-secret-55"


async def test_each_push_is_recorded_with_its_attempts(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()  # an endpoint that drains the queue
    client = await env.client(token)
    env.receiver.behaviour = Respond(status=503)
    task = await send(client, message("Summarise PR 9"), push=push_config(env.url(), token=TOKEN))
    await env.settle()  # the first attempt fails (503) and waits for its retry
    env.receiver.behaviour = Respond(status=204)
    await env.advance(120)
    async with env.services.db.read() as conn:
        rows = (await conn.execute(select(notify_deliveries))).all()
    assert len(rows) == 1
    (row,) = rows
    assert row.kind == "a2a" and row.subject_id == task.id and row.outcome == "delivered"
    attempts = json.loads(row.attempts)
    assert [(a["n"], a["status"]) for a in attempts] == [(1, 503), (2, 204)]
    assert row.id.startswith("msg_") and row.target_id.startswith("pc_")
    stored = " ".join(str(v) for v in row)
    assert TOKEN not in stored and "Summarise" not in stored and "hooks.test" not in stored
