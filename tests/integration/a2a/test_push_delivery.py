"""A2A push: every transition reaches the receiver in sequence order, with the token and authentication
the config asks for, retried on the outbox's schedule, and never after the config is deleted."""

from __future__ import annotations

import json
from pathlib import Path

from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from standardwebhooks import Webhook

from tests.integration.a2a.conftest import Env, a2a_env, message, push_config, send
from tests.support.receivers import Respond

TOKEN = "tok-please-keep-this-quiet-91"
CREDENTIALS = "cred-also-secret-27"


async def test_every_transition_arrives_in_sequence_with_the_token_and_authentication(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    config = push_config(env.url(), token=TOKEN, scheme="Bearer", credentials=CREDENTIALS)

    task = await send(client, message("Summarise PR 482"), push=config)
    lease = (await worker.ok("claim_next"))["todo"]["lease"]
    await worker.ok("ack", {"todo_id": task.id, "lease": lease, "result": "adds the thing"})
    await env.settle()

    pushes = env.pushes()
    assert [p.seq for p in pushes] == [1, 2, 3]
    assert [p.state for p in pushes] == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert [p.kind for p in pushes] == ["task", "statusUpdate", "task"]
    for push in pushes:
        assert push.task_id == task.id
        assert push.request.method == "POST" and push.request.path == "/a2a-hook"
        assert push.request.header("x-a2a-notification-token") == TOKEN
        assert push.request.header("authorization") == f"Bearer {CREDENTIALS}"
        assert push.request.header("a2a-version") == "1.0"
        assert push.request.header("content-type") == "application/json"
        assert push.request.header("x-switchboard-task-id") == task.id
        assert push.event["metadata"]["sequence"] == push.seq
        assert push.stream_response.ByteSize() > 0  # parses as the SDK's own StreamResponse
    final = pushes[-1].stream_response.task
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert final.artifacts[0].parts[0].text == "adds the thing"
    assert pushes[0].event["contextId"] == task.context_id
    assert env.metric("switchboard_a2a_push_deliveries_total", outcome="delivered") == 3
    assert env.metric("switchboard_a2a_push_attempts_total", result="2xx") == 3
    assert env.metric("switchboard_a2a_push_delivery_seconds_count") == 3


async def test_a_config_added_later_hears_the_transitions_after_it(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    await client.create_task_push_notification_config(push_config(env.url(), task_id=task.id))
    await worker.ok("claim_next")
    await client.cancel_task(CancelTaskRequest(id=task.id))
    await env.settle()
    pushes = env.pushes()
    assert [(p.seq, p.kind, p.state) for p in pushes] == [
        (2, "statusUpdate", "TASK_STATE_WORKING"),
        (3, "task", "TASK_STATE_CANCELED"),
    ]
    assert pushes[0].request.header("authorization") is None
    assert pushes[0].request.header("x-a2a-notification-token") is None


async def test_fan_out_to_every_config_of_a_task(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message(), push=push_config(env.url("/one"), config_id="one"))
    await client.create_task_push_notification_config(
        push_config(env.url("/two"), task_id=task.id, config_id="two")
    )
    await worker.ok("claim_next")
    await env.settle()
    by_path = sorted((p.request.path, p.seq) for p in env.pushes())
    assert by_path == [("/one", 1), ("/one", 2), ("/two", 2)]


async def test_standard_webhooks_signing_verifies_with_a_stock_library(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    created = await client.create_task_push_notification_config(
        push_config(env.url(), task_id=task.id, scheme="StandardWebhooks")
    )
    secret = created.authentication.credentials
    assert secret.startswith("whsec_")  # minted, shown this once
    await worker.ok("claim_next")
    await env.settle()
    (push,) = env.pushes()
    headers = push.request.header_map
    verified = Webhook(secret).verify(push.request.body, headers)
    assert verified == push.body
    assert headers["webhook-id"].startswith("msg_") and "authorization" not in headers
    again = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id)
    )
    assert again.authentication.credentials == "[redacted]"


async def test_failures_retry_with_the_adr_0007_backoff_and_keep_order(tmp_path: Path) -> None:
    # The order wait is raised past the 90 s this retries for (test_push_order.py bounds it).
    async with a2a_env(tmp_path, a2a_push_max_attempts=3, a2a_push_order_wait_seconds=3600) as env:
        _, token = await env.endpoint("client")
        worker = await env.worker()
        client = await env.client(token)
        env.receiver.behaviour = Respond(503)
        task = await send(client, message(), push=push_config(env.url()))
        lease = (await worker.ok("claim_next"))["todo"]["lease"]
        await env.settle()
        assert [p.seq for p in env.pushes()] == [1]  # seq 2 waits behind seq 1

        assert await env.advance(29) == 0  # 30 s base: nothing due yet
        await env.advance(1)
        assert [p.seq for p in env.pushes()] == [1, 1]
        await env.advance(59)
        assert len(env.pushes()) == 2  # doubled: 60 s
        env.receiver.behaviour = Respond(204)
        await env.advance(1)
        assert [p.seq for p in env.pushes()] == [1, 1, 1, 2]
        assert await env.outbox_statuses() == [(1, "delivered"), (2, "delivered")]
        # Delivery latency runs from the transition's commit (the row's created_at) to the 2xx, retries
        # included: seq 1 waited 90 s of backoff, seq 2 (committed at the claim, same clock) as long.
        assert env.metric("switchboard_a2a_push_delivery_seconds_count") == 2
        assert env.metric("switchboard_a2a_push_delivery_seconds_sum") >= 180
        assert env.metric("switchboard_a2a_push_delivery_seconds_bucket", le="60.0") == 0

        env.receiver.behaviour = Respond(500)
        await worker.ok("ack", {"todo_id": task.id, "lease": lease})
        await env.settle()
        await env.advance(30)
        await env.advance(60)  # third attempt: the cap
        await env.advance(3600)
        assert [p.seq for p in env.pushes()][-3:] == [3, 3, 3]
        assert (await env.outbox_statuses())[-1] == (3, "failed")
        assert env.metric("switchboard_a2a_push_deliveries_total", outcome="exhausted") == 1
        assert env.metric("switchboard_a2a_push_attempts_total", result="5xx") == 5


async def test_a_client_error_is_final_and_the_next_transition_still_goes(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    env.receiver.behaviour = Respond(400)
    task = await send(client, message(), push=push_config(env.url()))
    await env.settle()
    env.receiver.behaviour = Respond(200)
    lease = (await worker.ok("claim_next"))["todo"]["lease"]
    await worker.ok("ack", {"todo_id": task.id, "lease": lease})
    await env.settle()
    assert [p.seq for p in env.pushes()] == [1, 2, 3]
    assert await env.outbox_statuses() == [(1, "failed"), (2, "delivered"), (3, "delivered")]
    assert env.metric("switchboard_a2a_push_deliveries_total", outcome="failed") == 1


async def test_nothing_is_sent_after_delete(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    env.receiver.behaviour = Respond(503)
    task = await send(client, message(), push=push_config(env.url(), config_id="cfg"))
    await env.settle()
    lease = (await worker.ok("claim_next"))["todo"]["lease"]
    await env.settle()
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="cfg")
    )
    env.receiver.behaviour = Respond(204)
    await worker.ok("ack", {"todo_id": task.id, "lease": lease})
    await env.advance(3600)  # seq 1's retry, seq 2 and seq 3 would all be due by now
    assert [p.seq for p in env.pushes()] == [1]
    assert await env.outbox_statuses() == []


async def test_final_delivery_first_then_retention_then_cleanup(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, a2a_push_retention_hours=1) as env:
        _, token = await env.endpoint("client")
        worker = await env.worker()
        client = await env.client(token)
        done = await send(client, message("one"), push=push_config(env.url(), config_id="a"))
        lease = (await worker.ok("claim_next"))["todo"]["lease"]
        await worker.ok("ack", {"todo_id": done.id, "lease": lease})
        await env.settle()
        env.receiver.behaviour = Respond(503)
        stuck = await send(client, message("two"), push=push_config(env.url(), config_id="b"))
        lease = (await worker.ok("claim_next"))["todo"]["lease"]
        await worker.ok("ack", {"todo_id": stuck.id, "lease": lease})
        await env.settle()

        env.clock.advance(3600 + 1)
        await env.a2a.worker.cleanup_once()
        assert (
            await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=done.id)
            )
        ).configs == []
        (kept,) = (
            await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=stuck.id)
            )
        ).configs
        assert kept.id == "b"  # its final delivery is still pending: retention waits for it
        assert (
            await client.get_task(GetTaskRequest(id=done.id))
        ).status.state == TaskState.TASK_STATE_COMPLETED

        env.receiver.behaviour = Respond(204)
        # The background loop may have spent a retry on the 503 after the clock jump (its next try
        # is then a minute out on this clock): move past any retry's due time, not just "now".
        await env.advance(600)
        # Held back for longer than the order wait, the three may arrive in any order now; the
        # highest sequence (what a receiver keeps) is the final state.
        pushes = [p for p in env.pushes() if p.task_id == stuck.id and p.request.path == "/a2a-hook"]
        assert max(pushes, key=lambda p: p.seq).state == "TASK_STATE_COMPLETED"
        env.clock.advance(3600 + 1)
        await env.a2a.worker.cleanup_once()
        assert await env.config_count() == 0
        assert await env.outbox_statuses() == []


async def test_outbox_gauges(env: Env) -> None:
    _, token = await env.endpoint("client")
    client = await env.client(token)
    await env.worker()
    env.receiver.behaviour = Respond(503)
    await send(client, message(), push=push_config(env.url()))
    await env.settle()
    env.clock.advance(12)
    await env.a2a.worker.update_gauges()
    assert env.metric("switchboard_a2a_push_outbox_depth") == 1
    assert env.metric("switchboard_a2a_push_oldest_undelivered_seconds") >= 12
    body = env.pushes()[0].body
    assert json.loads(json.dumps(body))["task"]["metadata"]["transition"] == "created"
    assert MessageToDict(env.pushes()[0].stream_response)["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
