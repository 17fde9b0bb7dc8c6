"""The A2A harness: a real server, the a2a-sdk client, a real MCP worker agent, real HTTPS receivers on
127.0.0.1 with trustme certificates, test hostnames resolved by an injected resolver, and a manual clock
that drives the outbox's retries and rate limits."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from a2a.client import Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import ParseDict
from sqlalchemy import func, select

from switchboard.a2a.component import A2AComponent
from switchboard.a2a.worker import Policy
from switchboard.core.clock import ManualClock
from switchboard.core.verbs import A2A, DEFAULT_GRANT
from switchboard.services import Services
from switchboard.store.accounts import Endpoint
from switchboard.store.schema import todos
from switchboard.store.schema_a2a import a2a_push_outbox, push_notification_configs
from switchboard.web.component import WebComponent
from tests.support.logcapture import LogCapture
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import HTTPSReceiver, RecordedRequest, StaticResolver, client_ssl_context
from tests.support.secrets import reveal
from tests.support.server import Instance, make_settings, run_instance

A2A_VERBS = tuple(A2A.verbs)
WORKER_VERBS = DEFAULT_GRANT
HOST = "hooks.test"


@dataclass(frozen=True)
class Push:
    """One request a receiver got, decoded."""

    request: RecordedRequest
    body: dict[str, Any]

    @property
    def seq(self) -> int:
        return int(self.request.header("x-switchboard-sequence") or 0)

    @property
    def event(self) -> dict[str, Any]:
        (kind,) = self.body
        return dict(self.body[kind])

    @property
    def kind(self) -> str:
        (kind,) = self.body
        return str(kind)

    @property
    def task_id(self) -> str:
        event = self.event
        return str(event["id"] if self.kind == "task" else event["taskId"])

    @property
    def state(self) -> str:
        return str(self.event["status"]["state"])

    @property
    def stream_response(self) -> StreamResponse:
        """The body parsed by the SDK's own types: proof that it is a valid v1.0 StreamResponse."""
        parsed = StreamResponse()
        ParseDict(self.body, parsed)
        return parsed


def decode(request: RecordedRequest) -> Push:
    return Push(request, json.loads(request.body))


@dataclass
class Env:
    inst: Instance
    receiver: HTTPSReceiver
    resolver: StaticResolver
    ca: trustme.CA
    clock: ManualClock
    logs: LogCapture
    stack: AsyncExitStack
    human_id: str
    agents: dict[str, Agent] = field(default_factory=dict)

    @property
    def services(self) -> Services:
        return self.inst.services

    @property
    def a2a(self) -> A2AComponent:
        return self.services.parts.need(A2AComponent)

    async def endpoint(
        self,
        slug: str,
        *,
        queues: Sequence[str] = ("outbox",),
        verbs: Sequence[str] = A2A_VERBS,
        human_id: str | None = None,
    ) -> tuple[Endpoint, str]:
        endpoint, token = await self.services.accounts.vend_endpoint(
            human_id or self.human_id, slug, list(queues), list(verbs)
        )
        reveal(token)
        return endpoint, token

    async def client(self, token: str) -> Client:
        """The a2a-sdk client, from the served agent card, authenticated as one endpoint."""
        http = await self.stack.enter_async_context(
            httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10)
        )
        client = await create_client(self.inst.base_url, ClientConfig(httpx_client=http, streaming=False))
        self.stack.push_async_callback(client.close)
        return client

    async def worker(self, slug: str = "worker", queues: Sequence[str] = ("inbox",)) -> Agent:
        _, token = await self.endpoint(slug, queues=queues, verbs=WORKER_VERBS)
        self.agents[slug] = await self.stack.enter_async_context(agent(self.inst.mcp_url, token))
        return self.agents[slug]

    async def settle(self) -> int:
        """Every transition so far fanned out, and every delivery due now attempted."""
        await self.services.hub.idle()
        return await self.a2a.worker.drain()

    async def advance(self, seconds: float) -> int:
        """Move the clock once nothing is in flight: jumping past a claim's lease mid-attempt would
        hand the row to a second claim, a duplicate no real clock produces in a 5 s attempt."""
        await self.settle()
        self.clock.advance(seconds)
        return await self.settle()

    def url(self, path: str = "/a2a-hook", *, host: str = HOST, receiver: HTTPSReceiver | None = None) -> str:
        return (receiver or self.receiver).url(path, hostname=host)

    def pushes(self, receiver: HTTPSReceiver | None = None) -> list[Push]:
        return [decode(r) for r in (receiver or self.receiver).requests]

    def metric(self, name: str, **labels: str) -> float:
        value = self.services.metrics.registry.get_sample_value(name, labels)
        return float(value or 0.0)

    async def count(self, table: Any, *where: Any) -> int:
        async with self.services.db.read() as conn:
            stmt = select(func.count()).select_from(table).where(*where)
            return int((await conn.execute(stmt)).scalar_one())

    async def todo_count(self) -> int:
        return await self.count(todos)

    async def config_count(self) -> int:
        return await self.count(push_notification_configs)

    async def outbox_statuses(self) -> list[tuple[int, str]]:
        async with self.services.db.read() as conn:
            stmt = select(a2a_push_outbox.c.seq, a2a_push_outbox.c.status).order_by(a2a_push_outbox.c.seq)
            return [(int(r.seq), str(r.status)) for r in (await conn.execute(stmt)).all()]


def message(text: str = "Summarise PR 482", *, queue: str | None = "inbox", **meta: Any) -> Message:
    metadata = dict(meta)
    if queue is not None:
        metadata["queue"] = queue
    return Message(
        message_id=f"m-{uuid.uuid4()}", role=Role.ROLE_USER, parts=[Part(text=text)], metadata=metadata
    )


def push_config(
    url: str,
    *,
    token: str = "",
    scheme: str | None = None,
    credentials: str = "",
    config_id: str = "",
    task_id: str = "",
) -> TaskPushNotificationConfig:
    reveal(token, credentials)
    config = TaskPushNotificationConfig(id=config_id, task_id=task_id, url=url, token=token)
    if scheme is not None:
        config.authentication.CopyFrom(AuthenticationInfo(scheme=scheme, credentials=credentials))
    return config


async def send(
    client: Client,
    msg: Message,
    *,
    push: TaskPushNotificationConfig | None = None,
    return_immediately: bool = True,
) -> Task:
    """SendMessage through the SDK client. ``return_immediately`` defaults to true here: most tests
    want the task as submitted; the SDK client itself sends false (wait), see test_send_wait.py."""
    request = SendMessageRequest(message=msg)
    request.configuration.return_immediately = return_immediately
    if push is not None:
        request.configuration.task_push_notification_config.CopyFrom(push)
    tasks = [event.task async for event in client.send_message(request)]
    assert len(tasks) == 1
    return tasks[0]


@asynccontextmanager
async def a2a_env(
    tmp_path: Path,
    *,
    database_url: str | None = None,
    allow_cidrs: str = "127.0.0.1/32",
    resolver: StaticResolver | None = None,
    ca: trustme.CA | None = None,
    clock: ManualClock | None = None,
    policy: Callable[[Services], Policy] | None = None,
    human_id: str | None = None,
    web: bool = False,
    **settings: Any,
) -> AsyncIterator[Env]:
    """``web``: with the console too (the endpoint card's push controls)."""
    ca = ca or trustme.CA()
    resolver = resolver or StaticResolver({HOST: ["127.0.0.1"]})
    # Standard Webhooks verifiers compare timestamps with real time: start the manual clock at now.
    clock = clock or ManualClock(datetime.now(UTC).timestamp())
    logs = LogCapture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(logs)
    root.setLevel(logging.INFO)
    try:
        async with AsyncExitStack() as stack:
            inst = await stack.enter_async_context(
                run_instance(
                    make_settings(tmp_path, database_url, a2a_push_allow_cidrs=allow_cidrs, **settings),
                    clock=clock,
                    resolver=resolver,
                    ssl_context=client_ssl_context(ca),
                    components=lambda s: [
                        A2AComponent(s, policy=policy(s) if policy else None),
                        *([WebComponent(s)] if web else []),
                    ],
                )
            )
            # Entered after the instance, so it closes first: a hanging attempt ends with it.
            receiver = await stack.enter_async_context(HTTPSReceiver(ca=ca, cert_hostnames=(HOST,)))
            if human_id is None:
                human_id = await inst.services.accounts.create_human(
                    f"owner-{inst.port}@example.com", "correct horse battery"
                )
            yield Env(inst, receiver, resolver, ca, clock, logs, stack, human_id)
    finally:
        root.removeHandler(logs)
        root.setLevel(old_level)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with a2a_env(tmp_path) as e:
        yield e
