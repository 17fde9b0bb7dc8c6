"""Issue 20: real A2A clients against ``switchboard serve`` (a child process, set up through the CLI):
the a2a-sdk client and @a2a-js/sdk (npm, pinned in ``js/package-lock.json``) each stream one task's
events in order to completion while an agent claims and acks it over MCP, and resubscribe after a
dropped connection without missing an event. Neither sends Switchboard metadata: the messages go to
the client endpoint's default A2A queue, set at vend time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, SubscribeToTaskRequest
from google.protobuf.json_format import MessageToDict

from switchboard.core.verbs import A2A, DEFAULT_GRANT
from tests.integration.mcp.npm import npm_install
from tests.reliability.procs import ServerProcess, cli, server_env, servers
from tests.support.mcp_client import Agent, agent
from tests.support.secrets import reveal

JS_DIR = Path(__file__).parent / "js"
DEADLINE = 30.0
STREAM_KINDS = ["task", "statusUpdate", "artifactUpdate", "statusUpdate"]
STATES = ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", None, "TASK_STATE_COMPLETED"]


@dataclass
class World:
    server: ServerProcess
    client_token: str
    worker: Agent


@asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[World]:
    env = server_env()
    data = tmp_path / "sb"
    data.mkdir(parents=True, exist_ok=True)
    email = "clients@example.com"
    await cli(env, data, "human", "create", email, "--password-stdin", stdin="correct horse battery\n")
    vend = ("endpoint", "vend", "--human", email)
    client = await cli(
        env, data, *vend, "--slug", "client", "--queues", "outbox", "--verbs", ",".join(A2A.verbs),
        "--a2a-queue", "inbox",
    )  # fmt: skip
    worker = await cli(
        env, data, *vend, "--slug", "worker", "--queues", "inbox", "--verbs", ",".join(DEFAULT_GRANT)
    )
    reveal(client["token"], worker["token"])
    assert client["a2a_default_queue"] == "inbox"
    server = ServerProcess(data, env)
    with servers(server):
        server.start()
        await server.ready()
        async with agent(server.mcp_url, worker["token"]) as worker_agent:
            yield World(server, client["token"], worker_agent)


def kinds_and_states(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    out = []
    for event in events:
        ((kind, body),) = event.items()
        out.append((kind, body.get("status", {}).get("state")))
    return out


async def claim(worker: Agent, task_id: str) -> str:
    """Claims the task's todo; answers the claim's lease."""
    claimed = (await worker.ok("claim_next"))["todo"]
    assert claimed["id"] == task_id
    assert claimed["payload"]["a2a"]["message"]["parts"][0]["text"].startswith("generic")
    return str(claimed["lease"])


async def test_a2a_sdk_client_streams_and_resubscribes(tmp_path: Path) -> None:
    async with world(tmp_path) as w, AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx.AsyncClient(headers={"Authorization": f"Bearer {w.client_token}"}, timeout=DEADLINE)
        )
        client = await create_client(w.server.base_url, ClientConfig(httpx_client=http, streaming=True))
        stack.push_async_callback(client.close)

        def request(text: str) -> SendMessageRequest:
            msg = Message(message_id=f"py-{text}", role=Role.ROLE_USER, parts=[Part(text=text)])
            return SendMessageRequest(message=msg)

        # 1. One task, streamed in order to completion.
        stream = client.send_message(request("generic one"))
        events = [MessageToDict(await anext(stream))]
        task_id = events[0]["task"]["id"]

        async def rest() -> None:
            async for event in stream:
                events.append(MessageToDict(event))

        reader = asyncio.create_task(rest())
        lease = await claim(w.worker, task_id)
        await w.worker.ok("ack", {"todo_id": task_id, "lease": lease, "result": "first"})
        await asyncio.wait_for(reader, DEADLINE)
        assert kinds_and_states(events) == list(zip(STREAM_KINDS, STATES, strict=True))

        # 2. The connection drops after the first event; the client resubscribes.
        dropped = client.send_message(request("generic two"))
        first = MessageToDict(await anext(dropped))
        await dropped.aclose()
        second_id = first["task"]["id"]
        lease = await claim(w.worker, second_id)  # while no stream is open
        resumed: list[dict[str, Any]] = []
        subscribed = asyncio.Event()

        async def follow() -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=second_id)):
                resumed.append(MessageToDict(event))
                subscribed.set()

        follower = asyncio.create_task(follow())
        # Ack once the subscription is open (its first event, the task as it stands, has arrived): an
        # ack that wins the race against the subscribe finds nothing left to stream.
        await asyncio.wait_for(subscribed.wait(), DEADLINE)
        await w.worker.ok("ack", {"todo_id": second_id, "lease": lease, "result": "second"})
        await asyncio.wait_for(follower, DEADLINE)
        # The task as it stands already shows the claim made during the gap: nothing missed.
        assert kinds_and_states(resumed) == [
            ("task", "TASK_STATE_WORKING"),
            ("artifactUpdate", None),
            ("statusUpdate", "TASK_STATE_COMPLETED"),
        ]


async def node_client(base: str, token: str, *args: str) -> asyncio.subprocess.Process:
    installed = npm_install(JS_DIR, "client.mjs")
    return await asyncio.create_subprocess_exec(
        "node", str(installed / "client.mjs"), base, token, *args,
        cwd=installed, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def read_event(proc: asyncio.subprocess.Process) -> dict[str, Any] | None:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), DEADLINE)
    return json.loads(line) if line else None


async def finished(proc: asyncio.subprocess.Process) -> list[dict[str, Any]]:
    events = []
    while (event := await read_event(proc)) is not None:
        events.append(event)
    code = await asyncio.wait_for(proc.wait(), DEADLINE)
    assert proc.stderr is not None
    assert code == 0, f"node client exited {code}: {(await proc.stderr.read())[-2000:]!r}"
    return events


async def test_a2a_js_client_streams_and_resubscribes(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        base, token = w.server.base_url, w.client_token
        # 1. One task, streamed in order to completion.
        proc = await node_client(base, token, "send", "generic js one")
        first = await read_event(proc)
        assert first is not None
        task_id = first["task"]["id"]
        lease = await claim(w.worker, task_id)
        await w.worker.ok("ack", {"todo_id": task_id, "lease": lease, "result": "first"})
        events = [first, *await finished(proc)]
        assert kinds_and_states(events) == list(zip(STREAM_KINDS, STATES, strict=True))

        # 2. Dropped after the first event, then resubscribed.
        dropped = await finished(await node_client(base, token, "send", "generic js two", "1"))
        second_id = dropped[0]["task"]["id"]
        lease = await claim(w.worker, second_id)
        follower = await node_client(base, token, "resubscribe", second_id)
        opening = await read_event(follower)
        await w.worker.ok("ack", {"todo_id": second_id, "lease": lease, "result": "second"})
        resumed = [opening, *await finished(follower)] if opening else []
        assert kinds_and_states(resumed) == [
            ("task", "TASK_STATE_WORKING"),
            ("artifactUpdate", None),
            ("statusUpdate", "TASK_STATE_COMPLETED"),
        ]
