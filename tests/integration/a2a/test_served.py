"""Issue 14's A2A items against the server as shipped: ``switchboard serve`` as a child process with its
default process layout, set up through the CLI, driven over A2A (the a2a-sdk client and raw JSON-RPC)
and MCP, with receivers on loopback and ``/metrics`` as the window in."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trustme
from a2a.client import Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import GetTaskPushNotificationConfigRequest, SendMessageRequest

from switchboard.a2a.views import COMPLETED
from switchboard.core.verbs import A2A, DEFAULT_GRANT
from tests.integration.a2a.conftest import message, push_config
from tests.integration.a2a.test_push_policy import SlowReceiver
from tests.reliability.procs import ServerProcess, cli, server_env, servers
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import HTTPSReceiver, RecordedRequest
from tests.support.secrets import reveal
from tests.support.waits import wait_until

TOKEN = "tok-served-original-31"
CREDS = "creds-served-original-47"
QUERY = "sig=QUERY-SERVED-CANARY-83"
ONLY_TOKEN = "tok-served-token-only-59"


@dataclass
class Served:
    server: ServerProcess
    env: Mapping[str, str]
    client_token: str
    worker_token: str
    stack: AsyncExitStack

    async def client(self, server: ServerProcess | None = None) -> Client:
        http = await self.stack.enter_async_context(
            httpx.AsyncClient(headers={"Authorization": f"Bearer {self.client_token}"}, timeout=60)
        )
        client = await create_client(
            (server or self.server).base_url, ClientConfig(httpx_client=http, streaming=False)
        )
        self.stack.push_async_callback(client.close)
        return client

    async def worker(self, server: ServerProcess | None = None) -> Agent:
        return await self.stack.enter_async_context(agent((server or self.server).mcp_url, self.worker_token))


async def tenant(env: Mapping[str, str], data: Path) -> tuple[str, str]:
    """human create, then a client endpoint with the A2A verbs and a worker draining ``inbox``."""
    email = "a2a-served@example.com"
    await cli(env, data, "human", "create", email, "--password-stdin", stdin="correct horse battery\n")
    vend = ("endpoint", "vend", "--human", email)
    client, worker = await asyncio.gather(
        cli(env, data, *vend, "--slug", "client", "--queues", "outbox", "--verbs", ",".join(A2A.verbs)),
        cli(env, data, *vend, "--slug", "worker", "--queues", "inbox", "--verbs", ",".join(DEFAULT_GRANT)),
    )
    reveal(client["token"], worker["token"])
    return client["token"], worker["token"]


def settings(**extra: Any) -> dict[str, Any]:
    return {"push_allow_http": "true", "a2a_push_allow_cidrs": "127.0.0.0/8", **extra}


@asynccontextmanager
async def served(tmp_path: Path, *, database_url: str | None = None, **extra: Any) -> AsyncIterator[Served]:
    env = server_env(database_url=database_url, **settings(**extra))
    data = tmp_path / "sb"
    data.mkdir(parents=True, exist_ok=True)
    client_token, worker_token = await tenant(env, data)
    server = ServerProcess(data, env)
    with servers(server):
        server.start()
        await server.ready()
        async with AsyncExitStack() as stack:
            yield Served(server, env, client_token, worker_token, stack)


async def metric(server: ServerProcess, name: str, **labels: str) -> float:
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{server.base_url}/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        found = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if head.split("{")[0] == name and all(found.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total


async def until(check: Any, timeout: float, what: str) -> None:
    """Poll a child's state (a process boundary offers nothing to await) with a bounded deadline."""
    await wait_until(check, timeout, what)


async def claim_and_ack(worker: Agent, result: str, timeout: float = 10) -> str:
    async def claimed() -> bool:
        nonlocal todo
        todo = (await worker.ok("claim_next"))["todo"]
        return todo is not None

    todo: dict[str, Any] | None = None
    await until(claimed, timeout, "a task on the queue")
    assert todo is not None
    await worker.ok("ack", {"todo_id": todo["id"], "lease": todo["lease"], "result": result})
    return str(todo["id"])


def by_task(requests: list[RecordedRequest], task_id: str) -> list[RecordedRequest]:
    return [r for r in requests if r.header("x-switchboard-task-id") == task_id]


async def test_served_a2a_round_trip_token_only_wait_and_protocol(tmp_path: Path) -> None:
    reveal(QUERY)
    async with served(tmp_path) as sb, HTTPSReceiver(tls=False) as receiver:
        client = await sb.client()
        worker = await sb.worker()

        # 1. get-then-set (the a2a-sdk pattern) keeps credentials, token and query.
        task = await _first(client.send_message(_request(message("round trip"), immediately=True)))
        created = await client.create_task_push_notification_config(
            push_config(receiver.url(f"/rt?{QUERY}", hostname="127.0.0.1"), task_id=task.id, token=TOKEN,
                        scheme="Bearer", credentials=CREDS)
        )  # fmt: skip
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id)
        )
        assert got.authentication.credentials == "[redacted]" and got.url.endswith("?[redacted]")
        await client.create_task_push_notification_config(got)

        # 2. a token-only config, inline on SendMessage.
        only = await _first(
            client.send_message(
                _request(
                    message("token only"),
                    immediately=True,
                    push=push_config(receiver.url("/only", hostname="127.0.0.1"), token=ONLY_TOKEN),
                )
            )
        )

        assert await claim_and_ack(worker, "one") == task.id
        assert await claim_and_ack(worker, "two") == only.id
        # The round-trip config came after its task's creation: claimed and done; token-only: all three.
        await until(lambda: _count(receiver, 5), 20, "five deliveries")
        for request in by_task(receiver.requests, task.id):
            assert request.path == f"/rt?{QUERY}"
            assert request.header("authorization") == f"Bearer {CREDS}"
            assert request.header("x-a2a-notification-token") == TOKEN
        token_only = by_task(receiver.requests, only.id)
        assert len(token_only) == 3
        for request in token_only:
            assert request.header("authorization") == f"Bearer {ONLY_TOKEN}"
            assert request.header("x-a2a-notification-token") == ONLY_TOKEN

        # 3. returnImmediately unset: the call waits for the agent's ack and returns the task COMPLETED.
        waiting = asyncio.create_task(_send_and_wait(client))
        acked = await claim_and_ack(worker, "waited for")
        finished = await asyncio.wait_for(waiting, 30)
        assert finished.id == acked and finished.status.state == COMPLETED
        assert finished.artifacts[0].parts[0].text == "waited for"

        # 4. the version query parameter, -32009, the v0.3 delete's null result, List's pageSize.
        url = f"{sb.server.base_url}/a2a"
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {sb.client_token}"}, timeout=10
        ) as http:
            by_param = (
                await http.post(f"{url}?A2A-Version=1.0", json=_rpc("GetTask", {"id": task.id}))
            ).json()
            unsupported = (
                await http.post(url, json=_rpc("GetTask", {"id": task.id}), headers={"A2A-Version": "2.0"})
            ).json()
            v03_with_v1 = (
                await http.post(url, json=_rpc("tasks/get", {"id": task.id}), headers={"A2A-Version": "1.0"})
            ).json()
            deleted = (
                await http.post(
                    url,
                    json=_rpc(
                        "tasks/pushNotificationConfig/delete",
                        {"id": only.id, "pushNotificationConfigId": "x"},
                    ),
                )
            ).json()
            for n in range(3):
                await http.post(
                    url,
                    headers={"A2A-Version": "1.0"},
                    json=_rpc(
                        "CreateTaskPushNotificationConfig",
                        {
                            "taskId": only.id,
                            "id": f"p{n}",
                            "url": receiver.url(f"/p{n}", hostname="127.0.0.1"),
                        },
                    ),
                )
            page = (
                await http.post(
                    url,
                    headers={"A2A-Version": "1.0"},
                    json=_rpc("ListTaskPushNotificationConfigs", {"taskId": only.id, "pageSize": 2}),
                )
            ).json()
        assert by_param["result"]["id"] == task.id
        assert unsupported["error"]["code"] == -32009 and v03_with_v1["error"]["code"] == -32009
        assert deleted == {"jsonrpc": "2.0", "id": 1, "result": None}
        assert len(page["result"]["configs"]) == 2 and page["result"]["nextPageToken"]

        # 5. A stop does not wait out a waiting SendMessage: it answers with the task as it stands.
        pending = asyncio.create_task(_send_and_wait(client))
        await until(lambda: _queued(worker), 10, "the waiting call's task on the queue")
        loop = asyncio.get_running_loop()
        stopping = loop.time()
        await asyncio.to_thread(sb.server.stop)
        answered = await asyncio.wait_for(pending, 10)
        assert answered.status.state != COMPLETED
        assert loop.time() - stopping < 15  # not the 30 s maximum wait


async def test_served_slow_receiver_and_bad_certificate(tmp_path: Path) -> None:
    """A receiver that answers in 6 s (the attempt timeout is 5 s) is delivered twice, then done; a
    certificate the server does not trust is retried up to the attempt cap."""
    ca = trustme.CA()  # the child does not trust it
    async with (
        served(tmp_path, a2a_push_retry_base_seconds=1, a2a_push_max_attempts=3) as sb,
        SlowReceiver(tls=False, delay=6.0) as slow,
        HTTPSReceiver(ca=ca, cert_hostnames=("127.0.0.1",)) as untrusted,
    ):
        client = await sb.client()
        await _send(client, "slow", push_config(slow.url("/slow", hostname="127.0.0.1")))
        await _send(client, "untrusted", push_config(untrusted.url("/tls", hostname="127.0.0.1")))

        async def delivered() -> bool:
            return await metric(sb.server, "switchboard_a2a_push_deliveries_total", outcome="delivered") >= 1

        async def given_up() -> bool:
            return await metric(sb.server, "switchboard_a2a_push_deliveries_total", outcome="exhausted") >= 1

        await until(delivered, 40, "the slow receiver's delivery")
        assert len(slow.requests) == 2  # one attempt timed out awaiting the answer, the next was answered
        await until(given_up, 40, "the untrusted receiver's delivery to be given up")
        assert untrusted.connections == 3 and untrusted.requests == []
        assert await metric(sb.server, "switchboard_a2a_push_attempts_total", result="tls") == 3


async def test_served_mixed_cluster_pushes_what_the_push_disabled_instance_moves(
    tmp_path: Path, pg_url: str
) -> None:
    async with (
        served(tmp_path / "on", database_url=pg_url) as sb,
        HTTPSReceiver(tls=False) as receiver,
    ):
        off_env = dict(sb.env, SWITCHBOARD_A2A_PUSH_ENABLED="false")
        off = ServerProcess(tmp_path / "off", off_env, name="off")
        with servers(off):
            off.start()
            await off.ready()
            client = await sb.client()
            task = await _send(client, "mixed", push_config(receiver.url("/m", hostname="127.0.0.1")))
            worker = await sb.worker(off)  # the agent works through the instance that does not deliver
            assert await claim_and_ack(worker, "done") == task.id
            await until(lambda: _count(receiver, 3), 20, "three deliveries")
        states = [json.loads(r.body) for r in receiver.requests]
        assert [s.get("task", s.get("statusUpdate"))["status"]["state"] for s in states] == [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED",
        ]


def _request(msg: Any, *, immediately: bool, push: Any = None) -> SendMessageRequest:
    request = SendMessageRequest(message=msg)
    request.configuration.return_immediately = immediately
    if push is not None:
        request.configuration.task_push_notification_config.CopyFrom(push)
    return request


async def _send(client: Client, text: str, push: Any) -> Any:
    return await _first(client.send_message(_request(message(text), immediately=True, push=push)))


async def _send_and_wait(client: Client) -> Any:
    # Exactly what the SDK client sends by default: returnImmediately false.
    return await _first(client.send_message(SendMessageRequest(message=message("wait for me"))))


async def _first(events: AsyncIterator[Any]) -> Any:
    """The one task a non-streaming SendMessage answers with."""
    tasks = [event.task async for event in events]
    assert len(tasks) == 1
    return tasks[0]


async def _queued(worker: Agent) -> bool:
    """Is a task waiting on the worker's queue? (peek: nothing is claimed)"""
    return bool((await worker.ok("list_todos", {"status": "pending"}))["todos"])


async def _count(receiver: HTTPSReceiver, n: int) -> bool:
    return len(receiver.requests) >= n


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
