"""The floor's load generator, run in a process of its own (``bench.floor``): the bench's raw MCP client
(:mod:`bench.mcp_wire`: keep-alive HTTP/1.1 over asyncio streams, one connection per client, request
bytes built from a template), so the generator costs as little CPU as possible on a box it shares with
the server.

Each MCP client calls ``tools/call whoami`` in a loop, in the handshake era (its own session, as the SDK
client in ``mode="legacy"``) or in the 2026-07-28 era (``whoami_modern``: no session, as the SDK client
by default). Every answer is parsed (an SSE stream or a JSON body) and counted only when it is a real
success: HTTP 200, the JSON-RPC id of the request, no ``isError``, and ``structuredContent.endpoint``
equal to the caller's slug. Anything else is an error, never a call.

``/healthz`` is driven by the same loop on its own connections, in the same run.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from bench.common import cpu_seconds
from bench.mcp_wire import BadAnswer, McpClient, RawConn, request_bytes

AGENT = "switchboard-bench-floor"


@dataclass
class Whoami:
    """One MCP client calling ``whoami``: a success only when it names the caller's endpoint."""

    client: McpClient
    slug: str

    async def start(self) -> None:
        await self.client.start()

    async def call(self) -> None:
        structured = await self.client.call("whoami")
        if structured.get("endpoint") != self.slug:
            raise BadAnswer("whoami: no structuredContent for this endpoint")

    async def stop(self) -> None:
        await self.client.stop()


@dataclass
class Health:
    port: int
    conn: RawConn | None = None
    raw: bytes = b""

    async def start(self) -> None:
        self.conn = await RawConn.open(self.port)
        self.raw = request_bytes(self.port, "GET", "/healthz", {"accept": "application/json"}, agent=AGENT)

    async def call(self) -> None:
        assert self.conn is not None
        answer = await self.conn.exchange(self.raw)
        if answer.status != 200 or json.loads(answer.body).get("status") != "ok":
            raise BadAnswer(f"healthz: HTTP {answer.status}")

    async def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()


@dataclass
class Window:
    """Completions inside [start, end): the warm-up before it and the tail after it are not counted."""

    start: float
    end: float
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


async def drive(calls: list[Callable[[], Awaitable[None]]], warmup: float, seconds: float) -> Window:
    """Every client loops its call until the window ends; errors end that client's loop (its
    connection may be out of step) and are reported, never counted as calls."""
    now = time.monotonic()
    window = Window(now + warmup, now + warmup + seconds)

    async def loop(call: Callable[[], Awaitable[None]]) -> None:
        while (t0 := time.monotonic()) < window.end:
            try:
                await call()
            except (BadAnswer, OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
                window.errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
                return
            t1 = time.monotonic()
            if t0 >= window.start and t1 < window.end:
                window.latencies.append(t1 - t0)

    await asyncio.gather(*(loop(c) for c in calls))
    return window


async def job_floor(spec: dict[str, Any], conn: Connection) -> dict[str, Any]:
    """Phases in ``spec["phases"]`` order (``healthz``, ``whoami``), each ``warmup`` + ``seconds``, with
    the server's CPU (``server_pids``) and this process's read over each window."""
    port: int = spec["port"]
    out: dict[str, Any] = {"clients": len(spec["agents"])}
    # Each phase opens its connections (and sessions) as it starts: the server closes a connection
    # idle for longer than its keep-alive timeout.
    for phase in spec["phases"]:
        clients: list[Whoami | Health] = (
            [
                Whoami(McpClient(port, a["token"], modern=phase == "whoami_modern", name=AGENT), a["slug"])
                for a in spec["agents"]
            ]
            if phase.startswith("whoami")
            else [Health(port) for _ in spec["agents"]]
        )
        try:
            await asyncio.gather(*(c.start() for c in clients))
            calls: list[Callable[[], Awaitable[None]]] = [c.call for c in clients]
            server_pids: list[int] = spec["server_pids"]
            task = asyncio.ensure_future(drive(calls, spec["warmup"], spec["seconds"]))
            await asyncio.sleep(max(0.0, spec["warmup"]))
            conn.send(("window", (phase, spec["seconds"])))
            t0, s0, c0 = time.monotonic(), sum(map(cpu_seconds, server_pids)), cpu_seconds_self()
            await asyncio.sleep(spec["seconds"])
            t1, s1, c1 = time.monotonic(), sum(map(cpu_seconds, server_pids)), cpu_seconds_self()
            window = await task
            out[phase] = {
                "calls": len(window.latencies),
                "seconds": window.end - window.start,
                "latencies": window.latencies,
                "errors": dict(window.errors),
                "server_cpu": (s1 - s0) / (t1 - t0),
                "client_cpu": (c1 - c0) / (t1 - t0),
            }
        finally:
            await asyncio.gather(*(c.stop() for c in clients))
    return out


def cpu_seconds_self() -> float:
    return time.process_time()


async def _main(conn: Connection) -> None:
    while True:
        command = await asyncio.to_thread(conn.recv)
        if command[0] == "stop":
            return
        _, spec = command
        try:
            result = await job_floor(spec, conn)
        except Exception:
            conn.send(("error", traceback.format_exc()))
        else:
            conn.send(("ok", result))


def run(conn: Connection) -> None:
    """The child process's entry point."""
    asyncio.run(_main(conn))
