"""Receivers in their own process, on 127.0.0.1.

* ``ok``: an HTTPS HTTP/1.1 server (keep-alive, any number of requests per connection) that answers every
  request ``204`` at once. Per request it records the path's first segment (``sb``, ``a2a``, ``raw``),
  the wall-clock arrival time, the body size, the todo id and the timestamp the bench put in the todo
  title (it arrives in the notification's ``summary``). Parsing is a few byte searches: the receiver
  must stay cheap, it shares the machine with everything it measures.
* ``hang``: plain TCP listeners that accept connections and never send or read a byte (a TLS client
  waits for a ServerHello that never comes, until its own timeout).

Driven over a ``multiprocessing`` pipe: ``("collect",)`` returns and clears the records,
``("stats",)`` returns counters, ``("stop",)`` ends the process. Every listener is closed on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import time
from multiprocessing.connection import Connection
from typing import Any

from bench.common import LOOPBACK

_HEADER_END = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.I)
_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.I)
_STAMP = re.compile(rb'"summary":"[^"]*?t=(\d+\.\d+)')
_TODO = re.compile(rb'"todo_id":"(td_[A-Za-z0-9]+)"')
_RESPONSE = b"HTTP/1.1 204 No Content\r\nserver: bench-receiver\r\n\r\n"
_RESPONSE_CLOSE = b"HTTP/1.1 204 No Content\r\nserver: bench-receiver\r\nconnection: close\r\n\r\n"

Record = tuple[str, float, float, str, int]  # tag, arrival, title stamp (or -1), todo id (or ""), body bytes


class _State:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.connections = 0
        self.open_connections = 0
        self.requests = 0
        self.held: set[asyncio.Transport] = set()


class _Http(asyncio.Protocol):
    def __init__(self, state: _State) -> None:
        self.state = state
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.state.connections += 1
        self.state.open_connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.open_connections -= 1

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(_HEADER_END)
            if end < 0:
                return
            head = bytes(self.buf[:end])
            m = _CONTENT_LENGTH.search(head)
            size = int(m.group(1)) if m else 0
            total = end + 4 + size
            if len(self.buf) < total:
                return
            body = bytes(self.buf[end + 4 : total])
            del self.buf[:total]
            now = time.time()
            path = head.split(b" ", 2)[1]
            tag = path.split(b"/", 2)[1].decode("ascii", "replace") if path.count(b"/") >= 1 else ""
            stamp = _STAMP.search(body)
            todo = _TODO.search(body)
            self.state.requests += 1
            self.state.records.append(
                (
                    tag,
                    now,
                    float(stamp.group(1)) if stamp else -1.0,
                    todo.group(1).decode("ascii") if todo else "",
                    size,
                )
            )
            assert self.transport is not None
            if _CLOSE.search(head):
                self.transport.write(_RESPONSE_CLOSE)
                self.transport.close()
                return
            self.transport.write(_RESPONSE)


class _Hang(asyncio.Protocol):
    def __init__(self, state: _State) -> None:
        self.state = state
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.state.connections += 1
        self.state.open_connections += 1
        self.state.held.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.open_connections -= 1
        if self.transport is not None:
            self.state.held.discard(self.transport)


async def _serve(conn: Connection, config: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    state = _State()
    servers: list[asyncio.Server] = []
    mode = config["mode"]
    if mode == "ok":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(config["cert_pem"], config["key_pem"])
        for _ in range(config.get("ports", 1)):
            servers.append(await loop.create_server(lambda: _Http(state), LOOPBACK, 0, ssl=ctx, backlog=1024))
    elif mode == "hang":
        for _ in range(config.get("ports", 1)):
            servers.append(await loop.create_server(lambda: _Hang(state), LOOPBACK, 0, backlog=1024))
    else:
        raise ValueError(f"unknown receiver mode {mode!r}")
    ports = [int(s.sockets[0].getsockname()[1]) for s in servers]
    conn.send(("ready", ports))

    stopped = asyncio.Event()

    def on_command() -> None:
        if not conn.poll():
            return
        try:
            command = conn.recv()
        except EOFError:
            stopped.set()
            return
        if command[0] == "collect":
            records, state.records = state.records, []
            conn.send(records)
        elif command[0] == "stats":
            conn.send(
                {
                    "connections": state.connections,
                    "open_connections": state.open_connections,
                    "requests": state.requests,
                }
            )
        elif command[0] == "stop":
            stopped.set()

    loop.add_reader(conn.fileno(), on_command)
    # Bounded: the orchestrator always sends stop; a lost orchestrator ends the pipe (EOF) or, at the
    # latest, this timeout.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopped.wait(), timeout=config.get("max_seconds", 1800))
    loop.remove_reader(conn.fileno())
    for transport in list(state.held):
        transport.abort()
    for server in servers:
        server.close()
    conn.send(("stopped", state.connections))


def run(conn: Connection, config: dict[str, Any]) -> None:
    """The child process's entry point."""
    asyncio.run(_serve(conn, config))
