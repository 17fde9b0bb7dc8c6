"""Real SDK clients against a real instance: vend endpoints, connect in either protocol era, and
collect doorbell notifications without sleeping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ResourceUpdatedNotification, TextContent

from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.mcp.doorbell import META_KEY, doorbell_uri
from switchboard.mcp.errors import ERROR_META
from switchboard.mcp.server import McpSurface
from switchboard.store.accounts import Endpoint
from switchboard.store.todos import NewTodo
from tests.integration.mcp.schema_check import CheckedClient
from tests.support.secrets import reveal
from tests.support.server import Instance

PASSWORD = "correct-horse-battery"


@dataclass
class Agent:
    endpoint: Endpoint
    token: str

    @property
    def id(self) -> str:
        return self.endpoint.id

    @property
    def uri(self) -> str:
        return doorbell_uri(self.endpoint.slug)


async def vend(
    inst: Instance,
    slug: str,
    *,
    queues: Sequence[str] = ("inbox",),
    verbs: Sequence[str] = DEFAULT_GRANT,
    human_id: str | None = None,
) -> Agent:
    accounts = inst.services.accounts
    if human_id is None:
        human_id = await accounts.create_human(f"{slug}@example.com", PASSWORD)
    endpoint, token = await accounts.vend_endpoint(human_id, slug, list(queues), list(verbs))
    reveal(token)  # the suite's secrecy scan checks no log line and no metrics page carries it
    return Agent(endpoint, token)


async def add_todo(
    inst: Instance,
    agent: Agent,
    title: str = "a todo",
    *,
    queue: str = "inbox",
    verified: bool = True,
    **kw: Any,
) -> str:
    created = await inst.services.todos.create(
        [
            NewTodo(
                endpoint_id=agent.id,
                queue=queue,
                title=title,
                payload={"title": title},
                verified=verified,
                **kw,
            )
        ]
    )
    return created.created[0]


@dataclass
class Bell:
    """Doorbell notifications one legacy session received, and whether its GET stream is open."""

    rings: asyncio.Queue[ResourceUpdatedNotification] = field(default_factory=asyncio.Queue)
    stream_open: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.rings.put_nowait(message)

    async def on_response(self, response: httpx2.Response) -> None:
        # The SDK drops notifications sent while the GET stream is closed, so tests wait for it.
        if response.request.method == "GET" and response.status_code == 200:
            self.stream_open.set()

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next ring's ``_meta`` payload (and its URI under ``uri``)."""
        note = await asyncio.wait_for(self.rings.get(), timeout)
        meta = dict((note.params.meta or {}).get(META_KEY) or {})
        meta["uri"] = note.params.uri
        return meta


@asynccontextmanager
async def connect(
    inst: Instance,
    token: str,
    *,
    mode: Literal["auto", "legacy"] = "auto",
    bell: Bell | None = None,
    statuses: list[int] | None = None,
    settle: bool = True,
) -> AsyncIterator[Client]:
    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    hooks = [record] + ([bell.on_response] if bell else [])
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=10, event_hooks={"response": hooks}) as http:
        transport = streamable_http_client(inst.mcp_url, http_client=http)
        handler = bell.on_message if bell else None
        checked = CheckedClient(transport, mode=mode, message_handler=handler, read_timeout_seconds=10)
        async with checked as client:
            if bell is not None:
                await asyncio.wait_for(bell.stream_open.wait(), 30)  # a bound: a loaded CI box is slow
            if bell is not None and settle:
                # Ready for the doorbell: GET stream open, session registered (any request does it),
                # and the reconnect check that those two trigger has run, so it cannot race the test.
                await client.list_tools()
                await inst.services.parts.need(McpSurface).doorbell.settle()
            yield client


async def call(client: Client, verb: str, **arguments: Any) -> dict[str, Any]:
    """A verb that must succeed: its structured result."""
    result = await client.call_tool(verb, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def refuse(client: Client, verb: str, **arguments: Any) -> tuple[str, str]:
    """A verb that must fail: (code, message)."""
    result = await client.call_tool(verb, arguments)
    return error_of(result)


def error_of(result: CallToolResult) -> tuple[str, str]:
    assert result.is_error, result.structured_content
    assert result.structured_content is None, (
        "an error carries no structuredContent (outputSchema is for results)"
    )
    body = json.loads(result.content[0].text) if isinstance(result.content[0], TextContent) else None
    assert body == (result.meta or {}).get(ERROR_META), "the text and _meta carry the same error object"
    assert isinstance(body, dict) and set(body) == {"code", "message"}, body
    return str(body["code"]), str(body["message"])


def sample(inst: Instance, name: str, **labels: str) -> float:
    value = inst.services.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
