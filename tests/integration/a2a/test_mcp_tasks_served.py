"""Issue 29 item 4: the MCP Tasks extension (``io.modelcontextprotocol/tasks``) against ``switchboard
serve`` as shipped. A producer agent (the official MCP client, declaring the extension through the
SDK's ``ClientExtension``) submits work and follows it with ``tasks/get``, ``tasks/update`` and
``tasks/cancel``; a worker agent claims, asks and acks over MCP; the a2a-sdk client reads the same
task through A2A GetTask. The SDK has no public call for the extension's methods by name, so they go
through ``ClientSession.send_request`` with request types of the test's own (tests/support/tasks_client.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import GetTaskRequest, TaskState
from mcp import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY, CallToolResult

from tests.integration.a2a.test_input_required import claim
from tests.integration.a2a.test_served import Served, metric, served, until
from tests.reliability.procs import cli
from tests.support.mcp_client import Agent, agent
from tests.support.secrets import reveal
from tests.support.tasks_client import (
    TASKS,
    CreateTaskResult,
    TasksClient,
    cancel_task,
    get_task,
    submit,
    update_task,
)

QUESTION = "Which branch should I deploy?"
ANSWER = "release-7"
SEQ = "io.github.switchboard/seq"


async def vend(sb: Served, slug: str, verbs: str) -> str:
    made = await cli(
        sb.env, sb.server.data_dir, "endpoint", "vend", "--human", "a2a-served@example.com",
        "--slug", slug, "--queues", "outbox", "--verbs", verbs,
    )  # fmt: skip
    reveal(made["token"])
    return str(made["token"])


async def producer(sb: Served, token: str, *, tasks: bool = True) -> Agent:
    kwargs: dict[str, Any] = {"extensions": [TasksClient()]} if tasks else {}
    joined = await sb.stack.enter_async_context(agent(sb.server.mcp_url, token, **kwargs))
    await joined.client.list_tools()  # 2026-07-28: a client lists a tool before it calls it
    return joined


async def a2a_task(sb: Served, token: str, task_id: str) -> Any:
    http = await sb.stack.enter_async_context(
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    )
    client = await create_client(sb.server.base_url, ClientConfig(httpx_client=http, streaming=False))
    sb.stack.push_async_callback(client.close)
    return await client.get_task(GetTaskRequest(id=task_id))


async def test_served_submit_work_is_one_task_on_three_faces(tmp_path: Path) -> None:
    async with served(tmp_path) as sb:
        await three_faces(sb)


async def test_served_submit_work_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    async with served(tmp_path, database_url=pg_url) as sb:
        await three_faces(sb)


async def three_faces(sb: Served) -> None:
    token = await vend(sb, "producer", "submit_work,a2a_get_task")
    other_token = await vend(sb, "other", "submit_work")
    prod = await producer(sb, token)
    other = await producer(sb, other_token)
    worker = await sb.worker()
    session = prod.client.session
    assert TASKS in (prod.client.server_capabilities.extensions or {})

    # 1. submit_work answers with a task handle, durable at once: tasks/get resolves it.
    created = await submit(session, {"message": "deploy please", "queue": "inbox"})
    assert isinstance(created, CreateTaskResult) and created.status == "working"
    task_id = created.task_id
    assert task_id.startswith("td_") and created.ttl_ms is None
    first = await get_task(session, task_id)
    assert first["resultType"] == "complete" and first["status"] == "working"
    assert first["taskId"] == task_id

    # 2. The worker claims it over MCP and asks: input_required, the question its statusMessage.
    todo = await claim(worker)
    assert todo["id"] == task_id
    lease = todo["lease"]
    await worker.ok("ask", {"todo_id": task_id, "lease": lease, "question": QUESTION})
    asking = await get_task(session, task_id)
    assert asking["status"] == "input_required" and asking["statusMessage"] == QUESTION
    ((key, request),) = asking["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["message"] == QUESTION

    # 3. The producer answers with tasks/update: the worker's heartbeat has it, the task works again.
    answer = {key: {"action": "accept", "content": {"answer": ANSWER}}}
    assert (await update_task(session, task_id, answer))["resultType"] == "complete"
    await update_task(session, task_id, answer)  # the same key again: a duplicate, nothing new
    beat = await worker.ok("heartbeat", {"todo_id": task_id, "lease": lease})
    assert [m["parts"][0]["text"] for m in beat["followups"]] == [ANSWER]
    assert (await get_task(session, task_id))["status"] == "working"

    # 4. The worker acks: completed with the result; A2A GetTask shows the same id and sequence.
    await worker.ok("ack", {"todo_id": task_id, "lease": lease, "result": {"deployed": "release-7"}})
    done = await get_task(session, task_id)
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"deployed": "release-7"}
    assert done["result"]["isError"] is False
    seen = await a2a_task(sb, token, task_id)
    assert seen.id == task_id and seen.status.state == TaskState.TASK_STATE_COMPLETED
    assert int(seen.metadata["sequence"]) == done["_meta"][SEQ] > first["_meta"][SEQ]
    assert [m.parts[0].text for m in seen.history] == ["deploy please", QUESTION, ANSWER]

    # 5. tasks/cancel on another task: the holder's next heartbeat answers canceled.
    second = await submit(session, {"message": "and the docs", "queue": "inbox"})
    assert isinstance(second, CreateTaskResult)
    held = await claim(worker)
    assert held["id"] == second.task_id
    assert (await cancel_task(session, second.task_id))["resultType"] == "complete"
    refused = await worker.call("heartbeat", {"todo_id": second.task_id, "lease": held["lease"]})
    assert refused.code == "canceled"
    assert (await get_task(session, second.task_id))["status"] == "cancelled"
    await cancel_task(session, second.task_id)  # ended already: still acknowledged

    # 6. Another endpoint's id is not found, for every method; without the grant, refused.
    for call in (
        get_task(other.client.session, task_id),
        cancel_task(other.client.session, second.task_id),
        update_task(other.client.session, task_id, answer),
    ):
        with pytest.raises(MCPError) as foreign:
            await call
        assert foreign.value.error.code == INVALID_PARAMS and "not found" in foreign.value.error.message
    with pytest.raises(MCPError) as ungranted:
        await get_task(worker.client.session, task_id)
    assert ungranted.value.error.code == INVALID_REQUEST

    # 7. The gate counted the methods like verbs: successes, the not-found answers, the refusal.
    calls = "switchboard_mcp_calls_total"
    assert await metric(sb.server, calls, verb="tasks/get", code="ok") == 5
    assert await metric(sb.server, calls, verb="tasks/get", code="protocol_error") == 1
    assert await metric(sb.server, calls, verb="tasks/get", code="forbidden") == 1
    assert await metric(sb.server, calls, verb="tasks/update", code="ok") == 2


async def test_served_submit_work_without_the_extension_and_refusals(tmp_path: Path) -> None:
    async with served(tmp_path) as sb:
        token = await vend(sb, "producer", "submit_work,a2a_send_message")
        plain = await producer(sb, token, tasks=False)
        await sb.worker()

        # A client that did not declare the extension gets the verb's ordinary result, never a task.
        result = await submit(plain.client.session, {"message": "plain", "queue": "inbox"})
        assert isinstance(result, CallToolResult) and not result.is_error
        content = result.structured_content
        assert isinstance(content, dict) and content["status"] == "working"
        assert content["task_id"].startswith("td_") and content["seq"] >= 1
        with pytest.raises(MCPError) as undeclared:
            await get_task(plain.client.session, content["task_id"])
        assert undeclared.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY

        # Resending the same message_id finds the first task; a queue nobody drains is refused.
        again = await submit(
            plain.client.session, {"message": "plain", "queue": "inbox", "message_id": "m-1"}
        )
        repeat = await submit(
            plain.client.session, {"message": "plain", "queue": "inbox", "message_id": "m-1"}
        )
        assert isinstance(again, CallToolResult) and isinstance(repeat, CallToolResult)
        assert again.structured_content and repeat.structured_content
        assert again.structured_content["task_id"] == repeat.structured_content["task_id"]
        nowhere = await plain.call("submit_work", {"message": "lost", "queue": "nobody-drains-this"})
        assert nowhere.code == "invalid_argument"
        # One operation under both faces: SendMessage refuses the same input with the same words.
        send = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m-lost",
                    "role": "ROLE_USER",
                    "parts": [{"text": "lost"}],
                    "metadata": {"queue": "nobody-drains-this"},
                }
            },
        }
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            sent = (await http.post(f"{sb.server.base_url}/a2a?A2A-Version=1.0", json=send)).json()
        assert sent["error"]["code"] == -32602
        assert sent["error"]["message"] == nowhere.data["message"]

        # submit_work is a granted verb: not in the default grant, so the worker may not call it.
        worker_calls = await sb.worker()
        refused = await worker_calls.call("submit_work", {"message": "sideways", "queue": "inbox"})
        assert refused.code == "forbidden"

        async def listed() -> bool:
            tools = {t.name for t in (await worker_calls.client.list_tools()).tools}
            return "submit_work" not in tools and "claim_next" in tools

        await until(listed, 5, "tools/list without submit_work")
