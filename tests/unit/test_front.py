"""switchboard.edge.front: /healthz at once, /readyz 'starting' until the full app's lifespan has started,
every other request held and then served by the full app; a failed start answers 503 and says so."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message

from switchboard.edge.front import STARTING, Front

HEALTH = {"status": "ok", "version": "1", "instance": "i-1"}


def _full_app(events: list[str]) -> Starlette:
    async def readyz(_: Request) -> Response:
        return JSONResponse({"status": "ready"})

    async def work(_: Request) -> Response:
        return JSONResponse({"served": "full"})

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        events.append("started")
        yield
        events.append("stopped")

    return Starlette(routes=[Route("/readyz", readyz), Route("/work", work)], lifespan=lifespan)


async def _get(app: ASGIApp, path: str) -> tuple[int, dict[str, Any], dict[bytes, bytes]]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [],
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "http_version": "1.1",
    }
    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body), dict(sent[0]["headers"])


class _Lifespan:
    """uvicorn's side of the lifespan protocol, driving the front."""

    def __init__(self, app: ASGIApp) -> None:
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outbox: asyncio.Queue[Message] = asyncio.Queue()
        self.task = asyncio.create_task(
            app({"type": "lifespan", "state": {}}, self.inbox.get, self.outbox.put)
        )

    async def say(self, kind: str) -> str:
        await self.inbox.put({"type": f"lifespan.{kind}"})
        return str((await self.outbox.get())["type"])


async def test_health_at_once_readiness_and_work_once_the_full_app_runs() -> None:
    events: list[str] = []
    release = threading.Event()
    ready: list[float] = []

    def build() -> ASGIApp:
        assert release.wait(10)
        return _full_app(events)

    front = Front(build, health=HEALTH, instance="i-1", on_ready=ready.append)
    lifespan = _Lifespan(front)
    assert await lifespan.say("startup") == "lifespan.startup.complete"  # at once: the port can bind

    status, body, headers = await _get(front, "/healthz")
    assert (status, body) == (200, HEALTH)
    assert headers[b"x-content-type-options"] == b"nosniff"  # the baseline headers, as the full app
    status, body, headers = await _get(front, "/readyz")
    assert (status, body) == (503, {"status": "not ready", "reasons": [STARTING], "instance": "i-1"})
    assert headers[b"cache-control"] == b"no-store"
    held = asyncio.create_task(_get(front, "/work"))
    await asyncio.sleep(0.05)
    assert not held.done()  # waits for the full app, not refused

    release.set()
    assert (await held)[:2] == (200, {"served": "full"})
    assert events == ["started"] and len(ready) == 1 and front.ready
    assert (await _get(front, "/readyz"))[:2] == (200, {"status": "ready"})  # the full app answers now

    assert await lifespan.say("shutdown") == "lifespan.shutdown.complete"
    assert events == ["started", "stopped"]
    await lifespan.task


async def test_a_failed_start_answers_503_and_is_reported() -> None:
    failures: list[BaseException] = []

    def build() -> ASGIApp:
        raise RuntimeError("no app today")

    front = Front(build, health=HEALTH, instance="i-1", on_failed=failures.append)
    lifespan = _Lifespan(front)
    assert await lifespan.say("startup") == "lifespan.startup.complete"
    status, body, _ = await _get(front, "/work")
    assert status == 503 and body["error"] == "unavailable"
    assert [str(f) for f in failures] == ["no app today"]
    assert not front.ready
    assert await lifespan.say("shutdown") == "lifespan.shutdown.complete"
    await lifespan.task
