"""The app ``switchboard serve`` listens with from its first moment (docs/self-hosting.md, "Start-up").

Importing and building the full app (the MCP and A2A SDKs, the web UI) and starting it (the schema, the
notify worker processes, the A2A push loop) took about two seconds on a quiet 2-core machine and several
under load, and the port was bound only after all of it. ``serve`` now binds at once with this app in
front of the full one:

* ``/healthz`` (liveness: the process serves HTTP) answers 200 from the first moment, with the body the
  full app gives it.
* ``/readyz`` answers 503 with the reason ``starting`` until the full app has started; from then on the
  full app answers it (and every other request): readiness stays what the documentation says it is.
* any other request waits until the full app has started and is then served by it: a client that does
  not wait for readiness is answered late, never refused nor served by half an app.

The full app is built in a thread (its imports are most of the cost, and on the loop they would stall
the /healthz answers) and started on the loop through the ASGI lifespan protocol, as uvicorn starts an
app; when uvicorn stops this app, the full app is stopped the same way.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.edge.boundary import BASELINE_HEADERS

STARTING = "starting"  # /readyz's reason while the full app is loading


class StartupFailed(Exception):
    """The full app did not start; ``message`` is what its lifespan said (a traceback)."""


class Lifespan:
    """Start and stop an ASGI app through the lifespan protocol, as a server does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def startup(self, state: dict[str, Any]) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": state}

        async def run() -> None:
            await self.app(scope, self._to_app.get, self._from_app.put)

        self._task = asyncio.create_task(run(), name="switchboard-app-lifespan")
        await self._to_app.put({"type": "lifespan.startup"})
        answer = await self._answer()
        if answer["type"] != "lifespan.startup.complete":
            raise StartupFailed(str(answer.get("message", "")))

    async def shutdown(self) -> None:
        await self._to_app.put({"type": "lifespan.shutdown"})
        answer = await self._answer()
        assert self._task is not None
        await self._task
        if answer["type"] != "lifespan.shutdown.complete":
            raise StartupFailed(str(answer.get("message", "")))

    async def _answer(self) -> Message:
        """The app's next lifespan message; the app's own error if it ended without one."""
        assert self._task is not None
        getter = asyncio.ensure_future(self._from_app.get())
        done, _ = await asyncio.wait({getter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            return getter.result()
        getter.cancel()
        self._task.result()  # raises what ended the app's lifespan
        raise StartupFailed("the app's lifespan ended without answering")


class Front:
    """The ASGI app uvicorn runs: answers /healthz at once, serves everything else through the app that
    ``build`` returns (called in a thread) once that app's lifespan has started."""

    def __init__(
        self,
        build: Callable[[], ASGIApp],
        *,
        health: dict[str, Any],
        instance: str,
        on_ready: Callable[[float], None] = lambda _seconds: None,
        on_failed: Callable[[BaseException], None] = lambda _exc: None,
    ) -> None:
        self._build = build
        self._health = _json(200, health)
        self._starting = _json(
            503,
            {"status": "not ready", "reasons": [STARTING], "instance": instance},
            (b"cache-control", b"no-store"),
        )
        self._unavailable = _json(
            503, {"error": "unavailable", "message": "the server could not start; see its log"}
        )
        self._on_ready, self._on_failed = on_ready, on_failed
        self._app: ASGIApp | None = None
        self._lifespan: Lifespan | None = None
        self._started = asyncio.Event()  # set when the full app serves, or failed to start
        self._warming: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self._app is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is not None:
            await app(scope, receive, send)
            return
        kind = scope["type"]
        if kind == "lifespan":
            await self._serve_lifespan(scope, receive, send)
            return
        if kind == "http" and scope["method"] in ("GET", "HEAD"):
            early = {"/healthz": self._health, "/readyz": self._starting}.get(scope["path"])
            if early is not None:
                await _send(send, early, head=scope["method"] == "HEAD")
                return
        await self._started.wait()
        if self._app is not None:
            await self._app(scope, receive, send)
        elif kind == "http":
            await _send(send, self._unavailable, head=False)

    async def _serve_lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        self._warming = asyncio.create_task(self._warm(scope.get("state", {})), name="switchboard-warm-up")
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            await self._stop()
        except Exception as exc:
            await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    async def _warm(self, state: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            app = await asyncio.to_thread(self._build)
            lifespan = Lifespan(app)
            await lifespan.startup(state)
        except Exception as exc:
            self._started.set()  # the waiting requests are answered 503
            self._on_failed(exc)  # inside the handler: a logger can take the traceback from sys.exc_info()
            return
        self._lifespan, self._app = lifespan, app
        self._started.set()
        self._on_ready(time.monotonic() - started)

    async def _stop(self) -> None:
        """A stop asked for during the warm-up waits for it (as uvicorn waits for a lifespan startup),
        then stops the full app."""
        if self._warming is not None:
            await self._warming
        if self._lifespan is not None:
            await self._lifespan.shutdown()


_Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


def _json(status: int, body: dict[str, Any], *extra: tuple[bytes, bytes]) -> _Answer:
    """An answer rendered once, as Starlette's JSONResponse renders it, with the baseline headers."""
    content = json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
    raw = content.encode()
    headers = [
        (b"content-length", str(len(raw)).encode()),
        (b"content-type", b"application/json"),
        *extra,
        *BASELINE_HEADERS,
    ]
    return status, headers, raw


async def _send(send: Send, answer: _Answer, *, head: bool) -> None:
    status, headers, body = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
