"""A real MCP client (the official SDK over streamable HTTP) bound to one endpoint's credential."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


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
        return ToolResult(not result.is_error, dict(data))

    async def ok(self, verb: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.call(verb, args)
        assert result.ok, f"{verb} failed: {result.data}"
        return result.data


@asynccontextmanager
async def agent(mcp_url: str, token: str, **client_kwargs: Any) -> AsyncIterator[Agent]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(mcp_url, http_client=http), **client_kwargs) as client,
    ):
        yield Agent(client)
