"""Hostile HTTPS receivers that ``tests.support.receivers.HTTPSReceiver`` cannot play: they speak raw
bytes over TLS so they can dribble, overflow, stall and reset at exactly the point a test names.

``RawTLSServer`` accepts on 127.0.0.1, completes TLS with a trustme certificate for the test host
name, reads one request, and hands the connection to a behaviour coroutine. It records, per
connection, when it was accepted and when the client hung up, so a test can prove from the receiver's
side that Switchboard gave up in time. The behaviours pace themselves by waiting for the client's
hang-up with a timeout: nothing here sleeps to wait for an event it could await, and every loop is
bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import trustme

from tests.support.receivers import DEFAULT_HOSTNAME, server_ssl_context

MAX_BEHAVIOUR_SECONDS = 30.0  # no behaviour outlives this, whatever the client does


@dataclass
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    accepted_at: float  # time.monotonic() at TCP accept, before the TLS handshake
    request: bytes = b""
    hung_up_at: float | None = None  # when the client closed (EOF or reset), if it did
    bytes_written: int = 0
    _eof: asyncio.Task[bytes] | None = field(default=None, repr=False)

    async def read_request(self, limit: int = 1 << 20) -> bytes:
        """One request: the head up to the blank line, then Content-Length bytes of body."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = min(int(value.strip()), limit)
        body = await self.reader.readexactly(length) if length else b""
        self.request = head + body
        return self.request

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()
        self.bytes_written += len(data)

    async def client_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the client to hang up; True once it has."""
        if self._eof is None:
            self._eof = asyncio.ensure_future(self.reader.read(65536))
        done, _ = await asyncio.wait({self._eof}, timeout=timeout)
        if not done:
            return False
        with contextlib.suppress(Exception):
            if self._eof.result():  # the client sent more bytes: not a hang-up, keep watching
                self._eof = None
                return False
        if self.hung_up_at is None:
            self.hung_up_at = time.monotonic()
        return True

    def reset(self) -> None:
        """Close with SO_LINGER 0: the kernel sends RST instead of FIN (and no TLS close_notify)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def cancel_watch(self) -> None:
        if self._eof is not None:
            self._eof.cancel()


Behaviour = Callable[[Conn], Awaitable[None]]


class RawTLSServer:
    """A TLS listener on 127.0.0.1 whose every connection reads one request and runs ``behaviour``."""

    def __init__(
        self,
        ca: trustme.CA,
        behaviour: Behaviour,
        *,
        hostnames: tuple[str, ...] = (DEFAULT_HOSTNAME,),
        reset_on_accept: bool = False,
    ) -> None:
        self.behaviour = behaviour
        self.reset_on_accept = reset_on_accept
        self.ssl: ssl.SSLContext = server_ssl_context(ca, *hostnames)
        self.port = 0
        self.conns: list[Conn] = []
        self.requests: asyncio.Queue[Conn] = asyncio.Queue()
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()

        def accept() -> asyncio.Protocol:
            self.accepted += 1
            accepted_at = time.monotonic()
            reader = asyncio.StreamReader()

            def connected(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                task = asyncio.ensure_future(self._serve(Conn(r, w, accepted_at)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

            return asyncio.StreamReaderProtocol(reader, connected)

        if self.reset_on_accept:
            self._server = await loop.create_server(_Resetter, "127.0.0.1", 0)
        else:
            self._server = await loop.create_server(
                accept, "127.0.0.1", 0, ssl=self.ssl, ssl_handshake_timeout=10
            )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for conn in self.conns:
            conn.cancel_watch()
            conn.writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def url(self, path: str = "/hook", hostname: str = DEFAULT_HOSTNAME) -> str:
        return f"https://{hostname}:{self.port}{path}"

    async def next_request(self, timeout: float = 10.0) -> Conn:
        return await asyncio.wait_for(self.requests.get(), timeout)

    async def _serve(self, conn: Conn) -> None:
        self.conns.append(conn)
        try:
            async with asyncio.timeout(MAX_BEHAVIOUR_SECONDS):
                await conn.read_request()
                self.requests.put_nowait(conn)
                await self.behaviour(conn)
        except (
            ConnectionError,
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
        ):
            if conn.hung_up_at is None:
                conn.hung_up_at = time.monotonic()
        finally:
            conn.cancel_watch()
            conn.writer.transport.abort()


class _Resetter(asyncio.Protocol):
    """Accepts TCP and answers the ClientHello with a reset."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._transport.abort()


# --- behaviours -------------------------------------------------------------------------------------


def slowloris_headers(every: float = 0.5, max_bytes: int = 60) -> Behaviour:
    """A status line, then one header byte every ``every`` seconds; the head never ends."""

    async def run(conn: Conn) -> None:
        await conn.write(b"HTTP/1.1 200 OK\r\n")
        drip = b"x-slow: " + b"a" * max_bytes
        for byte in drip[:max_bytes]:
            await conn.write(bytes([byte]))
            if await conn.client_gone(every):
                return

    return run


def huge_headers(total: int = 100 * 1024) -> Behaviour:
    """A 200 whose head carries ``total`` bytes of headers, then waits for the client to leave."""

    async def run(conn: Conn) -> None:
        line = b"x-filler-%05d: " + b"b" * 1000 + b"\r\n"
        head = bytearray(b"HTTP/1.1 200 OK\r\n")
        i = 0
        while len(head) < total:
            head += line % i
            i += 1
        head += b"content-length: 0\r\n\r\n"
        await conn.write(bytes(head))
        await conn.client_gone(10)

    return run


def reset_after_request() -> Behaviour:
    """Read the request, then RST the connection."""

    async def run(conn: Conn) -> None:
        conn.reset()

    return run


def answer_after(delay: float, status: int = 200) -> Behaviour:
    """Answer ``status`` ``delay`` seconds after the TCP accept (so the client's own connect, TLS and
    request time count against the delay, as they count against its deadline)."""

    async def run(conn: Conn) -> None:
        wait = conn.accepted_at + delay - time.monotonic()
        if wait > 0 and await conn.client_gone(wait):
            return
        await conn.write(f"HTTP/1.1 {status} OK\r\ncontent-length: 0\r\n\r\n".encode())
        await conn.client_gone(10)

    return run


def stalled_body(sent: int = 10, declared: int = 1_000_000) -> Behaviour:
    """A 200 whose body declares ``declared`` bytes, sends ``sent``, and then nothing, ever."""

    async def run(conn: Conn) -> None:
        await conn.write(f"HTTP/1.1 200 OK\r\ncontent-length: {declared}\r\n\r\n".encode() + b"z" * sent)
        await conn.client_gone(MAX_BEHAVIOUR_SECONDS - 1)

    return run


def endless_continue(every: float = 0.05) -> Behaviour:
    """``100 Continue`` forever (bounded here): interim responses that never become a final one."""

    async def run(conn: Conn) -> None:
        for _ in range(int(20 / every)):
            await conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            if await conn.client_gone(every):
                return

    return run
