"""The floor's load generator, run in a process of its own (``bench.floor``): raw HTTP/1.1 keep-alive
over asyncio streams, one connection per client, request bytes built from a template, so the generator
costs as little CPU as possible on a box it shares with the server.

Each MCP client opens its own session the way the SDK's client does in handshake mode (``mode="legacy"``:
the same ``accept``/``content-type`` headers, ``initialize`` with the latest handshake version, the
``mcp-session-id`` it answers, then ``notifications/initialized`` with ``mcp-protocol-version``), then
calls ``tools/call whoami`` in a loop. Every answer is parsed (an SSE stream or a JSON body) and counted
only when it is a real success: HTTP 200, the JSON-RPC id of the request, no ``isError``, and
``structuredContent.endpoint`` equal to the caller's slug. Anything else is an error, never a call.

``/healthz`` is driven by the same loop on its own connections, in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from bench.common import cpu_seconds

HANDSHAKE_VERSION = "2025-11-25"  # mcp_types.version.LATEST_HANDSHAKE_VERSION, what the SDK client offers
HOST = "127.0.0.1"
MODERN_VERSION = (
    "2026-07-28"  # mcp_types.version.LATEST_MODERN_VERSION, what the SDK client adopts by default
)
MODERN_META = (
    b',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    b'"io.modelcontextprotocol/clientCapabilities":{},'
    b'"io.modelcontextprotocol/clientInfo":{"name":"switchboard-bench-floor","version":"1"}}'
)


class BadAnswer(Exception):
    """An answer that is not a success: never counted as a call."""


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


class RawConn:
    """One keep-alive HTTP/1.1 connection: write a request, read one response (content-length or
    chunked), nothing else."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> RawConn:
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer)

    async def exchange(self, raw: bytes) -> Answer:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0][9:12])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if b"content-length" in headers:
            body = await self.reader.readexactly(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            chunks: list[bytes] = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")  # no trailers are sent
                    break
                chunks.append((await self.reader.readexactly(size + 2))[:-2])
            body = b"".join(chunks)
        else:
            raise BadAnswer(f"HTTP {status} with neither content-length nor chunked body")
        if headers.get(b"connection", b"").lower() == b"close":
            raise BadAnswer(f"HTTP {status}: the server closed the connection")
        return Answer(status, headers, body)

    def close(self) -> None:
        self.writer.close()


def jsonrpc_of(answer: Answer) -> dict[str, Any]:
    """The one JSON-RPC message of an answer: a JSON body, or the last ``data:`` of an SSE stream."""
    ctype = answer.headers.get(b"content-type", b"")
    if ctype.startswith(b"text/event-stream"):
        data = [
            line[5:].strip()
            for line in answer.body.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:") and line[5:].strip()
        ]
        if not data:
            raise BadAnswer("an SSE answer without a message")
        message: Any = json.loads(data[-1])
    elif ctype.startswith(b"application/json"):
        message = json.loads(answer.body)
    else:
        raise BadAnswer(f"HTTP {answer.status} with content-type {ctype[:40]!r}")
    if not isinstance(message, dict):
        raise BadAnswer("not a JSON-RPC message")
    return message


def head_bytes(port: int, method: str, path: str, headers: dict[str, str]) -> bytes:
    """A request's head without its closing blank line (and without content-length)."""
    lines = [f"{method} {path} HTTP/1.1", f"host: {HOST}:{port}", "user-agent: switchboard-bench-floor"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return "\r\n".join(lines).encode()


def request_bytes(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> bytes:
    head = head_bytes(port, method, path, headers)
    if body is None:
        return head + b"\r\n\r\n"
    return head + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body


MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@dataclass
class McpClient:
    """One SDK-like MCP client on its own connection and session."""

    port: int
    token: str
    slug: str
    conn: RawConn | None = None
    next_id: int = 0
    session: str = ""
    head: bytes = b""  # the tools/call request head, up to content-length's value
    modern: bool = False  # the 2026-07-28 era: no handshake, each request carries its envelope

    async def start(self) -> None:
        self.conn = await RawConn.open(self.port)
        auth = {**MCP_HEADERS, "authorization": f"Bearer {self.token}"}
        if self.modern:
            auth |= {"mcp-protocol-version": MODERN_VERSION, "mcp-method": "tools/call", "mcp-name": "whoami"}
            self.head = head_bytes(self.port, "POST", "/mcp", auth)
            self.next_id = 1
            return
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "switchboard-bench-floor", "version": "1"},
            },
        }
        answer = await self.conn.exchange(
            request_bytes(self.port, "POST", "/mcp", auth, json.dumps(init).encode())
        )
        message = jsonrpc_of(answer)
        if answer.status != 200 or "result" not in message or b"mcp-session-id" not in answer.headers:
            raise BadAnswer(f"initialize: HTTP {answer.status} {str(message)[:200]}")
        self.session = answer.headers[b"mcp-session-id"].decode()
        version = message["result"].get("protocolVersion", HANDSHAKE_VERSION)
        auth |= {"mcp-session-id": self.session, "mcp-protocol-version": version}
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        answer = await self.conn.exchange(request_bytes(self.port, "POST", "/mcp", auth, note))
        if answer.status != 202:
            raise BadAnswer(f"notifications/initialized: HTTP {answer.status}")
        self.head = head_bytes(self.port, "POST", "/mcp", auth)
        self.next_id = 1

    async def whoami(self) -> None:
        assert self.conn is not None
        rid = self.next_id
        self.next_id += 1
        body = (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"whoami","arguments":{}%s}}'
            % (rid, MODERN_META if self.modern else b"")
        )
        answer = await self.conn.exchange(self.head + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        if answer.status != 200:
            raise BadAnswer(f"whoami: HTTP {answer.status}")
        message = jsonrpc_of(answer)
        result = message.get("result")
        if message.get("id") != rid or not isinstance(result, dict) or result.get("isError"):
            raise BadAnswer(f"whoami: {str(message)[:200]}")
        structured = result.get("structuredContent")
        if not isinstance(structured, dict) or structured.get("endpoint") != self.slug:
            raise BadAnswer("whoami: no structuredContent for this endpoint")

    async def stop(self) -> None:
        if self.conn is None:
            return
        if self.modern:
            self.conn.close()
            return
        with_delete = request_bytes(
            self.port,
            "DELETE",
            "/mcp",
            {**MCP_HEADERS, "authorization": f"Bearer {self.token}", "mcp-session-id": self.session},
        )
        with contextlib.suppress(OSError, TimeoutError, BadAnswer, asyncio.IncompleteReadError):
            await asyncio.wait_for(self.conn.exchange(with_delete), 5)
        self.conn.close()


@dataclass
class Health:
    port: int
    conn: RawConn | None = None
    raw: bytes = b""

    async def start(self) -> None:
        self.conn = await RawConn.open(self.port)
        self.raw = request_bytes(self.port, "GET", "/healthz", {"accept": "application/json"})

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
            except (BadAnswer, OSError, ValueError, asyncio.IncompleteReadError) as exc:
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
        clients: list[McpClient | Health] = (
            [McpClient(port, a["token"], a["slug"], modern=phase == "whoami_modern") for a in spec["agents"]]
            if phase.startswith("whoami")
            else [Health(port) for _ in spec["agents"]]
        )
        try:
            await asyncio.gather(*(c.start() for c in clients))
            calls = [c.whoami if isinstance(c, McpClient) else c.call for c in clients]
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
