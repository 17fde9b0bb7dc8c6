"""Issue 20: a worker moves an A2A task to input-required and back (MCP ``ask``; the sender's follow-up
answers it), and a worker holding a task sees follow-ups in ``heartbeat``. Against ``switchboard serve``
as shipped: the a2a-sdk client (blocking SendMessage, a SubscribeToTask stream), the official MCP client
as the worker, and a push receiver on loopback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)

from tests.integration.a2a.conftest import message, push_config
from tests.integration.a2a.test_served import _count, _first, served, until
from tests.support.mcp_client import Agent
from tests.support.receivers import HTTPSReceiver

QUESTION = "Which branch should I deploy?"
ANSWER = "release-7"


def kind_state(event: StreamResponse) -> tuple[str, int]:
    kind = event.WhichOneof("payload")
    assert kind is not None
    if kind == "task":
        return kind, event.task.status.state
    if kind == "status_update":
        return kind, event.status_update.status.state
    return kind, 0


async def claim(worker: Agent) -> dict[str, Any]:
    todo: dict[str, Any] | None = None

    async def claimed() -> bool:
        nonlocal todo
        todo = (await worker.ok("claim_next"))["todo"]
        return todo is not None

    await until(claimed, 10, "a task on the queue")
    assert todo is not None
    return todo


async def test_served_ask_input_required_and_back_with_heartbeat_follow_ups(tmp_path: Path) -> None:
    async with served(tmp_path) as sb, HTTPSReceiver(tls=False) as receiver:
        client = await sb.client()
        worker = await sb.worker()
        http = await sb.stack.enter_async_context(
            httpx.AsyncClient(headers={"Authorization": f"Bearer {sb.client_token}"}, timeout=60)
        )
        streamer = await create_client(sb.server.base_url, ClientConfig(httpx_client=http, streaming=True))
        sb.stack.push_async_callback(streamer.close)

        # The sender's SendMessage, returnImmediately unset (the SDK's default), with a push config.
        first = SendMessageRequest(message=message("deploy please"))
        first.configuration.task_push_notification_config.CopyFrom(
            push_config(receiver.url("/ir", hostname="127.0.0.1"))
        )
        waiting = asyncio.create_task(_first(client.send_message(first)))
        todo = await claim(worker)
        task_id, lease = todo["id"], todo["lease"]
        assert (await worker.ok("heartbeat", {"todo_id": task_id, "lease": lease}))["followups"] == []

        events: list[StreamResponse] = []
        subscribed = asyncio.Event()

        async def follow() -> None:
            async for event in streamer.subscribe(SubscribeToTaskRequest(id=task_id)):
                events.append(event)
                subscribed.set()

        reader = asyncio.create_task(follow())
        await asyncio.wait_for(subscribed.wait(), 10)

        # 1. ask: the waiting SendMessage returns, interrupted, with the worker's question.
        asked = await worker.ok("ask", {"todo_id": task_id, "lease": lease, "question": QUESTION})
        assert asked["task_state"] == "TASK_STATE_INPUT_REQUIRED" and asked["todo"]["status"] == "claimed"
        interrupted = await asyncio.wait_for(waiting, 10)
        assert interrupted.id == task_id
        assert interrupted.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert interrupted.status.message.parts[0].text == QUESTION
        assert interrupted.status.message.role == Role.ROLE_AGENT
        assert interrupted.status.message.message_id == asked["message_id"]
        listed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_INPUT_REQUIRED))
        assert [t.id for t in listed.tasks] == [task_id]
        working = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
        assert list(working.tasks) == []

        # 2. The sender answers with a follow-up (taskId): working again; the holder sees it in heartbeat.
        answer = Message(
            message_id="m-answer",
            task_id=task_id,
            context_id=interrupted.context_id,
            role=Role.ROLE_USER,
            parts=[Part(text=ANSWER)],
        )
        finishing = asyncio.create_task(_first(client.send_message(SendMessageRequest(message=answer))))
        later: list[Any] = []

        async def answered() -> bool:
            nonlocal later
            later = (await worker.ok("heartbeat", {"todo_id": task_id, "lease": lease}))["followups"]
            return bool(later)

        await until(answered, 10, "the answer in heartbeat")
        assert [(m["messageId"], m["parts"][0]["text"]) for m in later] == [("m-answer", ANSWER)]
        resumed = await client.get_task(GetTaskRequest(id=task_id))
        assert resumed.status.state == TaskState.TASK_STATE_WORKING
        assert [m.parts[0].text for m in resumed.history] == ["deploy please", QUESTION, ANSWER]
        assert not finishing.done()  # a working task: the follow-up's SendMessage still waits

        # 3. ack: the follow-up's SendMessage returns completed; the stream saw every state in order.
        await worker.ok("ack", {"todo_id": task_id, "lease": lease, "result": "deployed"})
        done = await asyncio.wait_for(finishing, 10)
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        await asyncio.wait_for(reader, 10)
        assert [kind_state(e) for e in events] == [
            ("task", TaskState.TASK_STATE_WORKING),
            ("status_update", TaskState.TASK_STATE_INPUT_REQUIRED),
            ("status_update", TaskState.TASK_STATE_WORKING),
            ("artifact_update", 0),
            ("status_update", TaskState.TASK_STATE_COMPLETED),
        ]
        assert events[1].status_update.status.message.parts[0].text == QUESTION

        # 4. Push hears the same turns, in order, with the question as the status message.
        await until(lambda: _count(receiver, 5), 20, "five deliveries")
        bodies = [json.loads(r.body) for r in receiver.requests]
        updates = [b.get("task", b.get("statusUpdate")) for b in bodies]
        assert [u["status"]["state"] for u in updates] == [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED",
        ]
        assert [u["metadata"]["transition"] for u in updates][2:4] == ["input_required", "resumed"]
        assert updates[2]["status"]["message"]["parts"][0]["text"] == QUESTION


async def test_served_ask_refusals(tmp_path: Path) -> None:
    async with served(tmp_path) as sb:
        client = await sb.client()
        worker = await sb.worker()
        sent = SendMessageRequest(message=message("short"))
        sent.configuration.return_immediately = True
        task = await _first(client.send_message(sent))

        no_claim = "ls_" + "0" * 32  # a well-formed handle no claim of this todo answered
        pending = await worker.call("ask", {"todo_id": task.id, "lease": no_claim, "question": "too early"})
        assert not pending.ok and pending.data["code"] == "lease_lost"
        unknown = await worker.call(
            "ask", {"todo_id": "td_01JZZZZZZZZZZZZZZZZZZZZZZZ", "lease": no_claim, "question": "?"}
        )
        assert not unknown.ok and unknown.data["code"] == "not_found"

        probe = (await worker.ok("self_test", {}))["todo"]  # a todo that is not an A2A task
        probe_lease = (await worker.ok("claim", {"todo_id": probe["id"]}))["todo"]["lease"]
        plain = await worker.call("ask", {"todo_id": probe["id"], "lease": probe_lease, "question": "?"})
        assert not plain.ok and plain.data["code"] == "invalid_argument"
        assert "followups" not in await worker.ok("heartbeat", {"todo_id": probe["id"], "lease": probe_lease})

        # Asked, then the worker gives the task back: the question ends with its claim.
        held = await claim(worker)
        assert held["id"] == task.id
        await worker.ok("ask", {"todo_id": task.id, "lease": held["lease"], "question": "anyone?"})
        asking = await client.get_task(GetTaskRequest(id=task.id))
        assert asking.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        await worker.ok(
            "fail", {"todo_id": task.id, "lease": held["lease"], "error": "gave up waiting", "retry": True}
        )
        requeued = await client.get_task(GetTaskRequest(id=task.id))
        assert requeued.status.state == TaskState.TASK_STATE_SUBMITTED

        tools = {t.name: t for t in (await worker.client.list_tools()).tools}
        ask = tools["ask"]
        assert ask.output_schema is not None and "task_state" in ask.output_schema["properties"]
        assert ask.annotations is not None and ask.annotations.read_only_hint is False
        assert ask.annotations.open_world_hint is False
        heartbeat_schema = tools["heartbeat"].output_schema
        assert heartbeat_schema is not None and "followups" in heartbeat_schema["properties"]
