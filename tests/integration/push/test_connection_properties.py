"""The properties our own connection pool keeps, each watched from a server the test writes byte by byte.

httpcore's pool was bent to keep these by overriding its private state; the pool is now ours
(``switchboard.push._pool``), and each property has a test here that fails when it is broken:

- a kept connection is never used for another address than the one its attempt's validation returned;
- bytes that arrived on an idle connection, or beyond the response that was read, are never taken as
  the next request's answer;
- a connection the server closed is never reused, and no request is lost or sent twice because of it;
- a request takes a kept connection at once (concurrent requests never share or wait for one);
- only validated addresses are dialled, in order.

(The idle bound counting idle connections only is ``test_keepalive.py::
test_busy_connections_do_not_count_against_the_idle_limit``.) Everything listens on 127.0.0.0/8.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import pytest
import trustme

from switchboard.push import NetworkFailure, Sender, Validator
from tests.integration.push.support import BODY, HOST, DialCounter, FakeClock
from tests.support.receivers import StaticResolver, client_ssl_context, server_ssl_context

NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
Answer = Callable[[int, int], bytes]
"""(connection number, request number on it) -> the bytes to write back."""


@dataclass
class RawServer:
    """An HTTP/1.1 server on loopback that records which connection carried each request (by its
    ``webhook-id``) and writes back exactly what ``answer`` returns. ``then`` says what it does after
    answering: ``keep`` (read the next request), ``close`` (a full close) or ``half_close`` (on the first
    connection only: send FIN, go on reading)."""

    ssl_context: ssl.SSLContext | None
    host: str = "127.0.0.1"
    port: int = 0
    answer: Answer = lambda _c, _r: NO_CONTENT
    then: str = "keep"
    requests: list[tuple[int, str]] = field(default_factory=list)  # (connection number, webhook-id)
    connections: int = 0

    async def __aenter__(self) -> Self:
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.ssl_context)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()  # wakes every handler blocked on a read
        await asyncio.gather(*self._tasks)
        await self._server.wait_closed()

    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{HOST}:{self.port}/h"

    def on(self, connection: int) -> list[str]:
        return [message for number, message in self.requests if number == connection]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        self._writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.append(task)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, OSError):
            for index in range(1_000):
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
                fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
                await reader.readexactly(int(fields["content-length"]))
                self.requests.append((number, fields.get("webhook-id", "")))
                writer.write(self.answer(number, index))
                await writer.drain()
                if self.then == "close":
                    break
                if self.then == "half_close" and number == 1:
                    writer.write_eof()
        writer.close()


def sender_for(resolver: StaticResolver, ca: trustme.CA, **kw: object) -> Sender:
    validator = Validator(allow_http=True, allow_cidrs=("127.0.0.0/8",), resolver=resolver)
    return Sender(validator, ssl_context=client_ssl_context(ca), clock=FakeClock(), **kw)  # type: ignore[arg-type]


async def post(sender: Sender, url: str, message: str) -> int:
    return (await sender.send(url, body=BODY, headers={"webhook-id": message})).status


async def settle() -> None:
    """Let the client's event loop take in what the server just sent (bytes, a FIN): there is no
    event to await on the client's side for that."""
    await asyncio.sleep(0.05)


async def test_a_kept_connection_is_never_used_for_another_address(
    resolver: StaticResolver, trustme_ca: trustme.CA
) -> None:
    """The name moves from 127.0.0.1 to 127.0.0.2 and back, with a live server on both: each request
    reaches the server at the address its own validation returned."""
    tls = server_ssl_context(trustme_ca, HOST)
    async with RawServer(tls) as one, RawServer(tls, host="127.0.0.2", port=one.port) as two:
        sender = sender_for(resolver, trustme_ca)
        assert await post(sender, one.url(), "m1") == 204  # kept: a connection to 127.0.0.1
        resolver.answers[HOST] = ["127.0.0.2"]
        assert await post(sender, one.url(), "m2") == 204
        resolver.answers[HOST] = ["127.0.0.1"]
        assert await post(sender, one.url(), "m3") == 204
        assert one.requests == [(1, "m1"), (1, "m3")] and one.connections == 1
        assert two.requests == [(1, "m2")] and two.connections == 1
        await sender.aclose()


async def test_bytes_beyond_the_response_are_never_the_next_answer(
    resolver: StaticResolver, trustme_ca: trustme.CA
) -> None:
    """The first answer comes with a second, unasked-for one in the same write. The next request must
    get its own answer (204), not that 500, so the connection it arrived on is not reused."""
    stray = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"
    tls = server_ssl_context(trustme_ca, HOST)
    async with RawServer(
        tls, answer=lambda c, r: NO_CONTENT + stray if (c, r) == (1, 0) else NO_CONTENT
    ) as rx:
        sender = sender_for(resolver, trustme_ca)
        assert await post(sender, rx.url(), "m1") == 204
        await settle()
        assert await post(sender, rx.url(), "m2") == 204
        assert await post(sender, rx.url(), "m3") == 204
        assert rx.requests == [(1, "m1"), (2, "m2"), (2, "m3")]
        await sender.aclose()


async def test_bytes_that_arrive_while_idle_are_never_the_next_answer(
    resolver: StaticResolver, trustme_ca: trustme.CA
) -> None:
    """A stray 500 arrives on the idle connection after the exchange ended."""
    stray = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"
    sent = asyncio.Event()

    def answer(connection: int, index: int) -> bytes:
        if (connection, index) == (1, 0):
            asyncio.get_running_loop().call_later(0.02, sent.set)
        return NO_CONTENT

    tls = server_ssl_context(trustme_ca, HOST)
    async with RawServer(tls, answer=answer) as rx:
        sender = sender_for(resolver, trustme_ca)
        assert await post(sender, rx.url(), "m1") == 204
        await sent.wait()
        rx._writers[0].write(stray)  # on the idle connection, nobody asked
        await settle()
        assert await post(sender, rx.url(), "m2") == 204
        assert rx.requests == [(1, "m1"), (2, "m2")]
        await sender.aclose()


async def test_a_connection_the_server_closed_is_never_reused_nor_a_request_sent_twice(
    resolver: StaticResolver, trustme_ca: trustme.CA
) -> None:
    """After its first answer the server sends its FIN on the first connection (and goes on reading).
    The next request goes out once, on a new connection, which is then kept: the closed one was never
    handed a request (had it been, the write would fail and the request would be sent again on a
    connection of its own, which is not kept: a third connection)."""
    async with RawServer(None, then="half_close") as rx:
        sender = sender_for(resolver, trustme_ca)
        for message in ("m1", "m2", "m3"):
            assert await post(sender, rx.url(), message) == 204
            await settle()
        assert rx.requests == [(1, "m1"), (2, "m2"), (2, "m3")]
        assert rx.connections == 2
        await sender.aclose()


async def test_a_request_takes_a_kept_connection_at_once(
    resolver: StaticResolver, trustme_ca: trustme.CA
) -> None:
    """Four idle connections, four requests started together: each takes one of them, none waits for
    or shares another's, and nothing new is dialled."""
    tls = server_ssl_context(trustme_ca, HOST)
    async with RawServer(tls) as rx:
        sender = sender_for(resolver, trustme_ca, max_keepalive_per_target=4)
        assert await asyncio.gather(*(post(sender, rx.url(), f"warm{i}") for i in range(4))) == [204] * 4
        assert rx.connections == 4
        rx.requests.clear()
        for round_ in range(3):
            batch = [f"r{round_}m{i}" for i in range(4)]
            assert await asyncio.gather(*(post(sender, rx.url(), m) for m in batch)) == [204] * 4
            assert sorted(number for number, m in rx.requests if m in batch) == [1, 2, 3, 4]
        assert rx.connections == 4
        await sender.aclose()


async def test_only_the_validated_addresses_are_dialled_in_order(
    resolver: StaticResolver, trustme_ca: trustme.CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    dials = DialCounter().attach(monkeypatch)
    tls = server_ssl_context(trustme_ca, HOST)
    async with RawServer(tls) as rx:
        resolver.answers[HOST] = ["127.0.0.2", "127.0.0.1"]  # nothing listens on 127.0.0.2 there
        sender = sender_for(resolver, trustme_ca)
        assert await post(sender, rx.url(), "m1") == 204
        assert dials.dials == [("127.0.0.2", rx.port), ("127.0.0.1", rx.port)]
        await sender.aclose()


@pytest.mark.parametrize(
    "status_line",
    [
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/9 200 OK\r\n\r\n",
    ],
)
async def test_a_status_line_the_parser_refuses_is_a_protocol_failure_sent_once(
    resolver: StaticResolver, trustme_ca: trustme.CA, status_line: bytes
) -> None:
    """On a new connection and on a kept one alike: ``NetworkFailure(stage="response",
    reason="protocol")`` (bytes came back, so it is not a connection closed under us and not sent
    again), and that connection is not kept."""
    tls = server_ssl_context(trustme_ca, HOST)
    async with RawServer(tls, answer=lambda c, r: status_line if r == 1 or c == 2 else NO_CONTENT) as rx:
        sender = sender_for(resolver, trustme_ca)
        assert await post(sender, rx.url(), "m1") == 204
        for message in ("m2", "m3"):  # m2 on the kept connection (its second request), m3 on a new one
            with pytest.raises(NetworkFailure) as info:
                await post(sender, rx.url(), message)
            err = info.value
            assert (err.stage, err.reason, err.result, err.retryable) == (
                "response",
                "protocol",
                "network",
                True,
            )
            assert err.__cause__ is None and err.__suppress_context__
        assert rx.requests == [(1, "m1"), (1, "m2"), (2, "m3")]
        await sender.aclose()
