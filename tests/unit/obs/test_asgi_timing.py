"""McpTiming: labels bounded to the MCP method names and this server's verbs; the request body reaches
the app unchanged, and a large one is not held in memory to be looked into."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
from starlette.types import Receive, Scope, Send

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
