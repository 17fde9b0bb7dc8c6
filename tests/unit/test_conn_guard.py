"""The connection guard (switchboard.edge.conn) on a real loopback server, with a trivial inner protocol:
the cap evicts the oldest connection that has not finished its headers, never one that has (nor one
whose request arrived in the same accept burst as a flood), and the header deadline closes silent and
trickling connections."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

from switchboard.edge.conn import HARD_FACTOR, guarded_protocol


class Answer(asyncio.Protocol):
    """Stands in for uvicorn's protocol: answers once the request headers are complete."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if b"\r\n\r\n" in self.buffer and self.transport is not None:
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


@contextlib.asynccontextmanager
async def server(max_connections: int, header_timeout: float) -> AsyncIterator[int]:
    protocol = guarded_protocol(Answer, max_connections=max_connections, header_timeout=header_timeout)
    srv = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()
        await srv.wait_closed()


async def closed(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        async with asyncio.timeout(within):
            while await reader.read(100):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def test_cap_evicts_the_oldest_connection_still_in_its_headers() -> None:
    async with server(max_connections=3, header_timeout=30) as port:
        served_r, served_w = await asyncio.open_connection("127.0.0.1", port)
        served_w.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await served_r.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        # Cap 3: the served one stays; of four silent ones only the newest two fit.
        assert await closed(silent[0][0], 2) and await closed(silent[1][0], 2)
        assert not await closed(silent[2][0], 0.3) and not await closed(silent[3][0], 0.3)
        served_w.write(b"GET /again HTTP/1.1\r\nhost: x\r\n\r\n")
        assert b"ok" in await served_r.readuntil(b"ok")
        for _, w in [*silent, (served_r, served_w)]:
            w.close()


async def test_header_deadline_closes_silent_and_trickling_connections() -> None:
    async with server(max_connections=100, header_timeout=1.0) as port:
        started = time.monotonic()
        silent_r, silent_w = await asyncio.open_connection("127.0.0.1", port)
        trickle_r, trickle_w = await asyncio.open_connection("127.0.0.1", port)

        async def trickle() -> None:
            for ch in b"GET / HTTP/1.1\r\nhost: slow":
                trickle_w.write(bytes([ch]))
                await asyncio.sleep(0.1)

        feeder = asyncio.create_task(trickle())
        assert await closed(silent_r, 3) and await closed(trickle_r, 3)
        assert time.monotonic() - started < 2.5
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await feeder
        silent_w.close()
        trickle_w.close()


def burst(port: int, count: int) -> list[socket.socket]:
    """``count`` connections made without giving the loop a turn: the kernel completes them all, and
    the server accepts them in one burst."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    for sock in socks:
        sock.setblocking(False)
    return socks


async def test_a_request_in_the_same_accept_burst_as_a_flood_is_served() -> None:
    cap = 3
    async with server(max_connections=cap, header_timeout=30) as port:
        before = burst(port, 1)
        real = socket.create_connection(("127.0.0.1", port))
        real.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        real.setblocking(False)
        after = burst(port, cap + 1)  # more than the cap arrive before the server has read `real`
        real_r, real_w = await asyncio.open_connection(sock=real)
        assert (await real_r.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        streams = [await asyncio.open_connection(sock=s) for s in [*before, *after]]
        # The cap holds again: of the five silent ones the oldest three are closed, the newest two stay.
        assert [await closed(r, 1) for r, _ in streams[:3]] == [True] * 3
        assert [await closed(r, 0.2) for r, _ in streams[3:]] == [False] * 2
        for _, w in [*streams, (real_r, real_w)]:
            w.close()


async def test_past_twice_the_cap_a_burst_is_refused_and_the_cap_then_holds() -> None:
    cap = 3
    async with server(max_connections=cap, header_timeout=30) as port:
        flood = burst(port, HARD_FACTOR * cap + 2)
        streams = [await asyncio.open_connection(sock=s) for s in flood]
        outcome = [await closed(r, 1) for r, _ in streams]
        # Nothing in the burst had been read yet, so none of it is evicted for the newest two: they are
        # refused; the sweep then closes the oldest until three are open.
        assert outcome == [True] * (HARD_FACTOR * cap - cap) + [False] * cap + [True] * 2
        for _, w in streams:
            w.close()
