"""A real MCP client (the official SDK over streamable HTTP) bound to one endpoint's credential."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.secrets import harvest


@dataclass
class ToolResult:
    ok: bool
    data: dict[str, Any]

    @property
    def code(self) -> str | None:
        return None if self.ok else self.data.get("code")


class Agent:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, verb: str, args: dict[str, Any] | None = None) -> ToolResult:
        result = await self.client.call_tool(verb, args or {})
        data = result.structured_content
        if data is None:
            text = "".join(getattr(c, "text", "") for c in result.content)
            try:
                data = json.loads(text)
            except ValueError:
                data = {"text": text}
        harvest(data)
        return ToolResult(not result.is_error, dict(data))

    async def ok(self, verb: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.call(verb, args)
        assert result.ok, f"{verb} failed: {result.data}"
        return result.data


@asynccontextmanager
async def agent(mcp_url: str, token: str, **client_kwargs: Any) -> AsyncIterator[Agent]:
    """The client lives in a task of its own: the SDK's anyio scopes must be exited by the task that
    entered them, and fixtures are torn down from another task than the one that set them up."""
    ready: asyncio.Future[Agent] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def own() -> None:
        try:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
                Client(streamable_http_client(mcp_url, http_client=http), **client_kwargs) as client,
            ):
                ready.set_result(Agent(client))
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
                return
            raise

    task = asyncio.create_task(own())
    try:
        yield await ready
    finally:
        stop.set()
        await task
