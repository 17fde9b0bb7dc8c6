"""McpTiming: labels bounded to the MCP method names and this server's verbs; the request body reaches
the app unchanged, and a large one is not held in memory to be looked into."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from switchboard.edge.boundary import JsonBoundary, jsonrpc_error
from switchboard.obs import asgi as asgi_module
from switchboard.obs.asgi import MAX_PARSED, McpTiming, labels_of
from switchboard.obs.metrics import Metrics


def test_labels_are_bounded() -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "claim_next"}}
    assert labels_of(json.dumps(call).encode()) == ("tools/call", "claim_next")
    call["params"] = {"name": "x" * 500}
    assert labels_of(json.dumps(call).encode()) == ("tools/call", "other")
    assert labels_of(b'{"method": "tools/list"}') == ("tools/list", "")
    assert labels_of(b'{"method": "made/up"}') == ("other", "")
    assert labels_of(b"not json") == ("other", "")
    assert labels_of(b'[{"method": "ping"}]') == ("ping", "")


async def test_the_body_passes_through_and_is_timed() -> None:
    seen: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        seen.append(size)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    metrics = Metrics()
    timed = McpTiming(app, metrics)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=timed), base_url="http://t") as http:
        small = json.dumps({"method": "tools/call", "params": {"name": "ack"}}).encode()
        assert (await http.post("/mcp", content=small)).status_code == 200

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(4):
                yield b"x" * MAX_PARSED

        assert (await http.post("/mcp", content=chunks())).status_code == 200
        await http.post("/other", content=small)
    assert seen == [len(small), 4 * MAX_PARSED, len(small)]
    text = metrics.render().decode()
    assert 'switchboard_mcp_request_seconds_count{method="tools/call",verb="ack"} 1.0' in text
    assert 'switchboard_mcp_request_seconds_count{method="other",verb=""} 1.0' in text


async def test_a_body_the_json_boundary_parsed_is_labelled_from_that_parse() -> None:
    """Behind JsonBoundary (as app.py stacks them), the body is read and parsed once: the timing layer
    takes the labels from the boundary's parse and leaves the body to the app."""
    reads: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reads.append((await receive())["type"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def parse_forbidden(_body: bytes) -> tuple[str, str]:
        raise AssertionError("the body was parsed a second time")

    metrics = Metrics()
    stack = JsonBoundary(McpTiming(app, metrics), max_body_bytes=1 << 20, paths=[("/mcp", jsonrpc_error)])
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "claim_next"}})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(asgi_module, "labels_of", parse_forbidden)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=stack), base_url="http://t") as http:
            assert (await http.post("/mcp", content=body.encode())).status_code == 200
    assert reads == ["http.request"]
    text = metrics.render().decode()
    assert 'switchboard_mcp_request_seconds_count{method="tools/call",verb="claim_next"} 1.0' in text
