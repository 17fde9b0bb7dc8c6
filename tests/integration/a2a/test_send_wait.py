"""SendMessage and A2A v1.0 ``returnImmediately``: unset or false waits (at most
SWITCHBOARD_A2A_SEND_WAIT_SECONDS) until the task is terminal; true answers at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from a2a.types.a2a_pb2 import Task

from switchboard.a2a.views import COMPLETED, SUBMITTED
from tests.integration.a2a.conftest import WORKER_VERBS, a2a_env, message, send
from tests.support.mcp_client import Agent, agent


async def _work_one(worker: Agent, result: str) -> str:
    """The agent's side: wait for the task (bounded), claim it over MCP, ack it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        claimed = (await worker.ok("claim_next"))["todo"]
        if claimed is not None:
            await worker.ok("ack", {"todo_id": claimed["id"], "lease": claimed["lease"], "result": result})
            return str(claimed["id"])
        assert loop.time() < deadline, "the task never reached the queue"
        await asyncio.sleep(0.05)  # nothing to await across the MCP boundary: bounded poll


async def test_unset_waits_for_the_agent_to_complete_the_task(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, a2a_send_wait_seconds=60) as env:
        _, token = await env.endpoint("client")
        worker = await env.worker()
        client = await env.client(token)
        loop = asyncio.get_running_loop()
        started = loop.time()
        # The SDK client sends returnImmediately false (it is not in polling mode).
        sending = asyncio.create_task(send(client, message("please summarise"), return_immediately=False))
        worked = await _work_one(worker, "the summary")
        task = await sending
        assert task.id == worked
        assert task.status.state == COMPLETED
        assert task.artifacts[0].parts[0].text == "the summary"
        assert loop.time() - started < 45  # answered on the transition, not at the 60 s maximum


async def test_true_answers_at_once_with_the_submitted_task(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, a2a_send_wait_seconds=20) as env:
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = await send(client, message(), return_immediately=True)
        assert task.status.state == SUBMITTED
        assert loop.time() - started < 5


async def test_the_maximum_wait_returns_the_task_as_it_stands(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, a2a_send_wait_seconds=0.5) as env:
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = await send(client, message(), return_immediately=False)
        elapsed = loop.time() - started
        assert task.status.state == SUBMITTED
        assert 0.5 <= elapsed < 5


async def test_the_wait_follows_an_ack_on_another_instance(tmp_path: Path, pg_url: str) -> None:
    """Two instances on one PostgreSQL: the send waits on one, the agent acks through the other, which
    raises no event here; the documented fallback re-read finds the completed task."""
    async with (
        a2a_env(tmp_path / "a", database_url=pg_url, a2a_send_wait_seconds=60) as one,
        a2a_env(tmp_path / "b", database_url=pg_url, human_id=one.human_id) as two,
    ):
        _, token = await one.endpoint("client")
        _, worker_token = await one.endpoint("worker", queues=("inbox",), verbs=WORKER_VERBS)
        client = await one.client(token)
        async with agent(two.inst.mcp_url, worker_token) as worker:
            loop = asyncio.get_running_loop()
            started = loop.time()
            sending = asyncio.create_task(send(client, message(), return_immediately=False))
            await _work_one(worker, "done elsewhere")
            task: Task = await sending
        assert task.status.state == COMPLETED
        assert loop.time() - started < 45  # the fallback re-read, not the 60 s maximum
