"""A loopback reverse proxy that adds ``Authorization: Bearer <token>`` to every request, for clients
with no auth-header option (the official MCP conformance suite).

Its own Host and Origin (``127.0.0.1:<port>`` / ``localhost:<port>``) are rewritten to the server's, so
the server's DNS-rebinding protection sees what a direct client would send; any other Host or Origin
passes through unchanged, so a foreign one still reaches the server as foreign and is refused there.
Responses stream through as they come (SSE included).

Run by hand: ``python -m tests.integration.mcp.bearer_proxy <upstream base URL> <port>`` with the token
in ``SWITCHBOARD_TEST_BEARER``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import uvicorn
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
OWN = {"date", "server"}  # uvicorn adds its own


class BearerProxy:
    def __init__(self, upstream: str, token: str, own_port: int) -> None:
        self.upstream = upstream.rstrip("/")
        self.token = token
        up = urlsplit(self.upstream)
        self.up_host = up.netloc
        self.own_hosts = {f"127.0.0.1:{own_port}", f"localhost:{own_port}"}
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(30, read=None))

    def _headers(self, request: Request) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for name, value in request.headers.items():
            lower = name.lower()
            if lower in HOP_BY_HOP or lower == "authorization":
                continue
            if lower == "host" and value in self.own_hosts:
                value = self.up_host
            if lower == "origin" and urlsplit(value).netloc in self.own_hosts:
                value = f"http://{self.up_host}"
            out.append((lower, value))
        out.append(("authorization", f"Bearer {self.token}"))
        return out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        url = self.upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")

        async def body() -> AsyncIterator[bytes]:
            async for chunk in request.stream():
                if chunk:
                    yield chunk

        upstream = self.http.build_request(
            request.method, url, headers=self._headers(request), content=body()
        )
        response = await self.http.send(upstream, stream=True)
        headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP | OWN}
        reply = StreamingResponse(
            response.aiter_raw(),
            response.status_code,
            headers=headers,
            background=BackgroundTask(response.aclose),
        )
        await reply(scope, receive, send)


def main() -> None:
    upstream, port = sys.argv[1], int(sys.argv[2])
    app = BearerProxy(upstream, os.environ["SWITCHBOARD_TEST_BEARER"], port)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
