"""``switchboard call TOOL key=value ... --token-stdin``: call one MCP verb as an endpoint, with the
official ``mcp`` client, and print its result. For the README and for scripts: hooks are created by their
endpoint (SPEC-0024 REQ-2), so an operator's script creates one as the endpoint it vended.

Arguments are ``key=value``; a value that parses as JSON (``true``, ``3``, ``["a","b"]``) is passed as
that, anything else as a string. The token is read from the first line of stdin, never from argv (argv
is visible to every user of the machine).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


class CallError(Exception):
    pass


def parse_arguments(pairs: Sequence[str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CallError(f"{pair!r} is not key=value")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


async def call_tool(
    mcp_url: str, token: str, tool: str, arguments: dict[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """(ok, the tool's structured result or its error object)."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(mcp_url, http_client=http)) as client,
    ):
        result = await client.call_tool(tool, arguments)
    data: Any = result.structured_content
    if data is None:
        text = "".join(getattr(part, "text", "") for part in result.content)
        try:
            data = json.loads(text)
        except ValueError:
            data = {"text": text}
    return not result.is_error, dict(data) if isinstance(data, dict) else {"result": data}
