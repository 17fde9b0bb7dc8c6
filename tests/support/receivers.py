"""Real HTTPS receivers and listening sockets on loopback, for outbound-HTTP tests.

Reusable by every suite that sends webhooks (push, notify hooks, A2A push):

- ``HTTPSReceiver``: an async context manager running an HTTP/1.1 server on 127.0.0.1
  (or ::1) with a trustme certificate for test host names. It records every request
  (method, target, headers, body) and answers according to its ``behaviour``:
  ``Respond`` (any status, headers, body), ``redirect(...)``, ``HangBeforeHeaders``,
  ``StreamBody``, ``CloseWithoutResponse`` or ``RawResponse``. Tests await ``next_request()`` instead of sleeping.
- ``ListeningSocket``: a bare TCP listener that records connections and never speaks.
  ``assert_untouched()`` proves that nothing connected to it, without sleeping.
- ``StaticResolver``: an injectable ``(host, port) -> [ip]`` resolver whose answers a
  test can change between calls (DNS rebinding), make fail or make hang.
- ``trustme_ca`` / ``client_ssl_context``: the CA every receiver's certificate chains
  to, and a client context that trusts it. ``trustme_ca`` is a pytest fixture; import
  it into a conftest to use it.

No helper here sleeps to wait for an event, and everything binds loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import h11
import pytest
import trustme

DEFAULT_HOSTNAME = "hooks.test"
MiB = 1024 * 1024


# --- TLS ------------------------------------------------------------------------------


def make_ca() -> trustme.CA:
    """A fresh throwaway certificate authority."""
    return trustme.CA()


@pytest.fixture
def trustme_ca() -> trustme.CA:
    """The CA for this test's receivers (fresh per test)."""
    return make_ca()


def client_ssl_context(ca: trustme.CA) -> ssl.SSLContext:
    """A verifying client context (hostname checks on) that trusts only ``ca``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname by default
    ca.configure_trust(ctx)
    return ctx


def server_ssl_context(ca: trustme.CA, *hostnames: str) -> ssl.SSLContext:
    """A server context presenting a certificate for ``hostnames`` signed by ``ca``."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*hostnames).configure_cert(ctx)
    return ctx


# --- Behaviours -----------------------------------------------------------------------


@dataclass(frozen=True)
class Respond:
    """Answer with ``status``, ``headers`` and ``body`` (Content-Length is added)."""

    status: int = 204
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""


def redirect(location: str, status: int = 302) -> Respond:
    """A redirect to ``location``."""
    return Respond(status=status, headers=[("location", location)])


@dataclass(frozen=True)
class HangBeforeHeaders:
    """Read and record the request, then never answer (until the receiver closes)."""


@dataclass(frozen=True)
class StreamBody:
    """Answer ``status`` and stream ``total`` bytes of body in ``chunk``-sized writes,
    stopping when the client goes away. Progress is in ``HTTPSReceiver.bytes_streamed``."""

    total: int = 10 * MiB
    chunk: int = 64 * 1024
    status: int = 200


@dataclass(frozen=True)
class CloseWithoutResponse:
    """Read and record the request, then close the connection without answering."""


@dataclass(frozen=True)
class RawResponse:
    """Read and record the request, write ``data`` verbatim (e.g. not HTTP), then close."""

    data: bytes


Behaviour = Respond | HangBeforeHeaders | StreamBody | CloseWithoutResponse | RawResponse


# --- Recorded requests ----------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the receiver saw it. Header names are lower-case, in wire order."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The value of the first header called ``name`` (any case), or ``None``."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key == wanted), None)

    @property
    def header_map(self) -> dict[str, str]:
        """Headers as a dict (a repeated header keeps its last value)."""
        return dict(self.headers)


# --- HTTPS receiver -------------------------------------------------------------------


@dataclass
class HTTPSReceiver:
    """An HTTP/1.1 receiver on loopback; TLS with a ``ca``-signed cert unless ``tls=False``.

    ``cert_hostnames`` are the names on its certificate: give a different name than
    the URL uses to test hostname verification. Change ``behaviour`` at any time; it
    applies to the next request.
    """

    ca: trustme.CA | None = None
    cert_hostnames: Sequence[str] = (DEFAULT_HOSTNAME,)
    host: str = "127.0.0.1"
    behaviour: Behaviour = field(default_factory=Respond)
    tls: bool = True
    bind_port: int = 0  # 0: any free port (a server configured before the receiver starts names one)

    requests: list[RecordedRequest] = field(default_factory=list, init=False)
    arrived: list[float] = field(default_factory=list, init=False)  # time.monotonic() of each request
    connections: int = field(default=0, init=False)
    bytes_streamed: int = field(default=0, init=False)
    stream_finished: bool = field(default=False, init=False)
    port: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.tls and self.ca is None:
            raise ValueError("a TLS receiver needs a trustme CA")
        self._queue: asyncio.Queue[RecordedRequest] = asyncio.Queue()
        self._server: asyncio.Server | None = None
        self._closing = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ssl = server_ssl_context(self.ca, *self.cert_hostnames) if self.tls and self.ca else None

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()

        def accept() -> asyncio.StreamReaderProtocol:
            # Called on TCP accept, before any TLS handshake: counts every connection,
            # including those whose handshake then fails (which asyncio only logs at
            # debug level, and which never reach _on_connection).
            self.connections += 1
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._on_connection)

        self._server = await loop.create_server(
            accept, self.host, self.bind_port, ssl=self._ssl, ssl_handshake_timeout=5 if self._ssl else None
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing.set()
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # wakes handlers blocked on reads or drains
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks, timeout=5)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        await self._server.wait_closed()

    def url(self, path: str = "/hook", *, hostname: str = DEFAULT_HOSTNAME) -> str:
        """The URL of this receiver under ``hostname`` (which tests resolve via a
        ``StaticResolver`` to ``self.host``)."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{hostname}:{self.port}{path}"

    async def next_request(self, timeout: float = 5.0) -> RecordedRequest:
        """Wait for the next request not yet taken (requests queue up in order)."""
        if not self._queue.empty():
            return self._queue.get_nowait()
        return await asyncio.wait_for(self._queue.get(), timeout)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass  # the client went away or spoke garbage; nothing to record
        except asyncio.CancelledError:
            # Only __aexit__ cancels, when shutting down. Ending normally keeps Python
            # 3.11's stream-server callback from logging the cancelled task as an error.
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await self._read_request(conn, reader)
            if request is None:
                return
            self.requests.append(request)
            self.arrived.append(time.monotonic())
            self._queue.put_nowait(request)
            behaviour = self.behaviour
            if isinstance(behaviour, HangBeforeHeaders):
                await self._closing.wait()
                return
            if isinstance(behaviour, StreamBody):
                await self._stream(conn, writer, behaviour)
                return
            if isinstance(behaviour, CloseWithoutResponse):
                return
            if isinstance(behaviour, RawResponse):
                writer.write(behaviour.data)
                await writer.drain()
                return
            headers = [*behaviour.headers, ("content-length", str(len(behaviour.body)))]
            writer.write(conn.send(h11.Response(status_code=behaviour.status, headers=headers)))
            if behaviour.body:
                writer.write(conn.send(h11.Data(data=behaviour.body)))
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> RecordedRequest | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
                continue
            if isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                headers = tuple((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in head.headers)
                return RecordedRequest(
                    head.method.decode(), head.target.decode("latin-1"), headers, bytes(body)
                )
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None

    async def _stream(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, behaviour: StreamBody
    ) -> None:
        headers = [("content-length", str(behaviour.total)), ("content-type", "application/octet-stream")]
        writer.write(conn.send(h11.Response(status_code=behaviour.status, headers=headers)))
        chunk = b"x" * behaviour.chunk
        while self.bytes_streamed < behaviour.total:
            piece = chunk[: behaviour.total - self.bytes_streamed]
            writer.write(conn.send(h11.Data(data=piece)))
            await writer.drain()  # raises once the client has closed the connection
            self.bytes_streamed += len(piece)
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        self.stream_finished = True


# --- Bare listening socket ------------------------------------------------------------


class _Recorder(asyncio.Protocol):
    def __init__(self, owner: ListeningSocket) -> None:
        self._owner = owner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._owner._accepted(transport)


class ListeningSocket:
    """A TCP listener that records who connects and never sends a byte.

    It holds accepted connections open until closed, so a TLS client connecting to it
    waits for a ServerHello that never comes (a TLS-stage hang). Use it as the "second
    socket" a redirect points at, or as the address a rebinding attack aims at.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.peers: list[int] = []
        self._transports: list[asyncio.BaseTransport] = []
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Condition()

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Recorder(self), self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for transport in self._transports:
            transport.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def _accepted(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.peers.append(int(peer[1]))
        self._transports.append(transport)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    @property
    def connections(self) -> int:
        return len(self.peers)

    async def wait_for_connection(self, count: int = 1, timeout: float = 5.0) -> None:
        """Wait until at least ``count`` connections have been accepted."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.peers) >= count)

    async def assert_untouched(self, timeout: float = 5.0) -> None:
        """Prove that nobody has connected so far, without sleeping.

        Opens a probe connection and waits until the listener accepts it. The kernel
        accepts in arrival order, and any earlier client finished its handshake before
        the probe began, so if the probe is the only connection seen, there was none.
        """
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        _, writer = await asyncio.open_connection(self.host, self.port, family=family)
        probe_port = int(writer.get_extra_info("sockname")[1])
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: probe_port in self.peers)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        others = [p for p in self.peers if p != probe_port]
        assert others == [], f"{len(others)} unexpected connection(s) reached the listener"


# --- Resolver -------------------------------------------------------------------------

HANG = object()
"""A ``StaticResolver`` answer that never returns (to exercise lookup timeouts)."""


class StaticResolver:
    """An injectable resolver: ``answers`` maps host -> IP list, an exception to raise,
    or ``HANG``. Unknown hosts raise ``socket.gaierror``. ``calls`` records
    ``(host, port)``. Reassign ``answers[host]`` between calls to rebind a name."""

    def __init__(self, answers: Mapping[str, Sequence[str] | BaseException | object] | None = None) -> None:
        self.answers: dict[str, Sequence[str] | BaseException | object] = dict(answers or {})
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        answer = self.answers.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if answer is HANG:
            await asyncio.Event().wait()
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, Sequence)
        return [str(ip) for ip in answer]
