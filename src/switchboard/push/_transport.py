"""The outbound transport: one POST to a validated, pinned address.

Built on httpcore's ``AsyncConnectionPool`` with a custom ``AsyncNetworkBackend``
(docs/push.md says why). The backend is the single place a socket is opened: it
dials only the IP strings of a ``ValidatedTarget`` and refuses any other origin, so no
second DNS lookup can happen. Connections are kept per validated target (scheme,
host, port and the exact addresses in order): an attempt reuses one only when its own
validation, run first as always, returned those same addresses. TLS is verified, with
SNI, against the URL's host because httpcore passes the origin host (or our
``sni_hostname``) to ``start_tls``. This module is the only one that imports httpcore.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import re
import ssl
import time
import typing
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass

import anyio
import httpcore

from switchboard import __version__

from ._errors import (
    AttemptTimeout,
    NetworkFailure,
    PushError,
    Stage,
    TargetRejected,
    TLSFailure,
    error_for_status,
)
from ._validator import ValidatedTarget, Validator

USER_AGENT = f"switchboard/{__version__}"

#: Headers the Sender owns. A caller may not set them: Host and framing decide where
#: and how the request goes, and are derived from the validated target and body.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "user-agent",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "proxy-authorization",
        "proxy-connection",
    }
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_X509_V_ERR_HOSTNAME_MISMATCH = 62
_X509_V_ERR_IP_ADDRESS_MISMATCH = 64


@dataclass(frozen=True)
class AttemptResult:
    """A delivered attempt (2xx). ``body_bytes_read`` counts the response bytes read
    and discarded, at most ``max_body``."""

    status: int
    duration: float
    body_bytes_read: int


class _Progress:
    """One attempt's state, shared with the backend and streams through ``_CURRENT``: how
    far it got (so a failure is blamed on the right stage), its deadline (for the
    per-address share of a dial), and whether it dialled or reused a connection."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.stage: Stage = "connect"
        self.response_bytes = 0
        self.tls_reason: str | None = None
        self.connect_reason: str | None = None
        self.connected = False  # this attempt opened a TCP connection
        self.reused = False  # this attempt's request went out on a connection an earlier one opened
        self.stream: _PinnedStream | None = None  # the stream this attempt's dial ended with


#: The attempt running in this task. httpcore dials, handshakes, writes and reads in the
#: caller's task, so a kept connection's stream reports to whichever attempt uses it now.
_CURRENT: contextvars.ContextVar[_Progress] = contextvars.ContextVar("switchboard_push_attempt")


def _progress() -> _Progress:
    """The current attempt, or (outside any attempt) one whose deadline has passed, so
    that nothing can be dialled without an attempt."""
    progress = _CURRENT.get(None)
    return progress if progress is not None else _Progress(deadline=0.0)


def _causes(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        for nxt in (current.__cause__, current.__context__):
            if nxt is not None:
                todo.append(nxt)


def _tls_reason(exc: BaseException) -> str:
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            if cause.verify_code in (_X509_V_ERR_HOSTNAME_MISMATCH, _X509_V_ERR_IP_ADDRESS_MISMATCH):
                return "hostname_mismatch"
            return "certificate"
    return "handshake"


def _connect_reason(exc: BaseException) -> str:
    for cause in _causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            return "connection_refused"
        if isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "unreachable"
    return "connect_failed"


class _PinnedStream(httpcore.AsyncNetworkStream):
    """Wraps the real stream to record the stage and classify TLS failures, always on the
    attempt using the stream now (a kept connection serves many attempts).

    httpcore's pool asks ``is_readable`` of every idle connection of a pool whenever a request
    is queued or a response closed (about 40 times per request in a burst to one receiver, each
    a ``getpeername`` and a ``poll`` through anyio: a fifth of the notify worker's CPU,
    docs/benchmarks.md). This stream answers "no" there, and :class:`_KeptConnection` asks
    :meth:`closed_by_peer` once instead, of the one connection about to carry a request."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        _progress().stream = self  # the newest layer (TLS over TCP) is the one a connection keeps

    def closed_by_peer(self) -> bool:
        """Readable while no request is out: the server closed it (or sent what nobody asked
        for); either way it must not carry a request. The stream underneath knows."""
        return bool(self._inner.get_extra_info("is_readable"))

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        progress = _progress()
        progress.stage = "response"
        data = await self._inner.read(max_bytes, timeout)
        progress.response_bytes += len(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _progress().stage = "send"
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        progress = _progress()
        progress.stage = "tls"
        try:
            inner = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except Exception as exc:
            progress.tls_reason = _tls_reason(exc)
            raise
        return _PinnedStream(inner)

    def get_extra_info(self, info: str) -> typing.Any:
        if info == "is_readable":
            return False  # asked of every idle connection on every pool event: see closed_by_peer
        return self._inner.get_extra_info(info)


class _AsyncioStream(httpcore.AsyncNetworkStream):
    """A TCP (then TLS) connection on asyncio's own streams, for httpcore.

    httpcore's AnyIO backend wraps each read and write in a cancel scope and runs TLS through
    anyio's memory-BIO stream; on this server's asyncio loop that was a third of a delivery
    process's CPU (docs/benchmarks.md). asyncio's transports do the same work in fewer layers.
    Errors become httpcore's, with the OS or TLS error as the cause (the Sender classifies it)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("read timed out") from None
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            async with asyncio.timeout(timeout):
                await self._writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout("write timed out") from None
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self._writer.close()  # the transport closes (TLS: close_notify) without holding the caller

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            self._writer.close()
            raise httpcore.ConnectTimeout("TLS handshake timed out") from None
        except OSError as exc:  # ssl.SSLError included
            self._writer.close()
            raise httpcore.ConnectError(str(exc)) from exc
        return self

    def get_extra_info(self, info: str) -> typing.Any:
        if info in ("ssl_object", "socket"):
            return self._writer.get_extra_info(info)
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "is_readable":
            # asyncio reads eagerly, so bytes or an EOF that arrived while idle are in the reader
            # already, not waiting on the socket (where httpcore's own test would look for them)
            buffered: bytearray = getattr(self._reader, "_buffer", bytearray())  # StreamReader's own
            return bool(buffered) or self._reader.at_eof() or self._writer.transport.is_closing()
        return None


class _AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if local_address is not None or socket_options:
            raise httpcore.ConnectError("local addresses and socket options are not used here")
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout("connect timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return _AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are never dialled")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _PinnedBackend(_AsyncioBackend):
    """Dials only the validated IPs of one target; refuses every other origin.

    The addresses are tried in resolver order, each with a fair share of what is left of
    the current attempt's deadline, so one black-holed address cannot use it all.
    """

    def __init__(self, host: str, port: int, ips: tuple[str, ...]) -> None:
        self._host = host
        self._port = port
        self._ips = ips
        self._inner = _AsyncioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if (host, port) != (self._host, self._port):
            raise httpcore.ConnectError("refusing to dial an origin that was not validated")
        progress = _progress()
        ips = self._ips
        last: Exception | None = None
        for index, ip in enumerate(ips):
            share = max(progress.deadline - time.monotonic(), 0.0) / (len(ips) - index)
            try:
                stream = await self._inner.connect_tcp(
                    ip, port, timeout=share, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
                continue
            progress.connected = True
            return _PinnedStream(stream)
        if last is None:  # pragma: no cover - a ValidatedTarget always has an address
            raise httpcore.ConnectError("no validated address")
        if isinstance(last, httpcore.ConnectError):
            progress.connect_reason = _connect_reason(last)
        raise last


class _KeptConnection(httpcore.AsyncConnectionInterface):
    """One pooled connection: httpcore's own, plus an idle expiry on the Sender's clock
    (httpcore's reads ``time.monotonic`` itself) and a note on the attempt when the
    request goes out on a connection an earlier attempt opened.

    httpcore's pool asks ``has_expired`` of every connection whenever a request is queued
    or a response is closed, so the first call after a connection turns idle starts its
    idle time; every reuse resets it.

    A kept connection the server closed while it was idle is found when the pool hands it
    the next request (its socket is readable): it then refuses with httpcore's
    ``ConnectionNotAvailable``, reports itself expired, and the pool closes it and gives the
    request another connection or a new one, as it does for any connection that turns out
    to be unavailable.
    """

    def __init__(
        self,
        inner: httpcore.AsyncConnectionInterface,
        expiry: float,
        clock: Callable[[], float],
        idle: _IdleConnections,
    ) -> None:
        self._inner = inner
        self._expiry = expiry
        self._clock = clock
        self._idle = idle
        self._requests = 0
        self._idle_since: float | None = None
        self._stream: _PinnedStream | None = None
        self._closed_by_peer = False
        # Taken by a request from its first line, before httpcore's connection marks itself busy (after
        # two lock acquisitions): the pool hands an idle connection to every request queued in the same
        # pass, and all but one would come back for another, each through those locks again.
        self._taken = False

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        if self._taken:
            raise httpcore.ConnectionNotAvailable()  # the pool handed it to another request as well
        if self._stream is not None and self._inner.is_idle() and self._stream.closed_by_peer():
            self._closed_by_peer = True
            raise httpcore.ConnectionNotAvailable()
        self._taken = True
        self._idle_since = None
        self._idle.leave(self)
        self._requests += 1
        progress = _progress()
        progress.reused = self._requests > 1
        try:
            return await self._inner.handle_async_request(request)
        finally:
            self._taken = False  # from here httpcore's own state says whether it is free
            if self._requests == 1:
                self._stream = progress.stream  # dialled by this first request

    async def aclose(self) -> None:
        self._idle.leave(self)
        await self._inner.aclose()

    def info(self) -> str:
        return self._inner.info()

    def can_handle_request(self, origin: httpcore.Origin) -> bool:
        return self._inner.can_handle_request(origin)

    def is_available(self) -> bool:
        return not self._taken and not self._closed_by_peer and self._inner.is_available()

    def has_expired(self) -> bool:
        # httpcore: the connect failed (the stream's is_readable is always False, see above).
        if self._closed_by_peer or self._inner.has_expired():
            self._idle.leave(self)
            return True
        if not self.is_idle():
            return False
        now = self._clock()
        if self._idle_since is None:
            if not self._idle.join(self):
                return True  # as many idle connections as the pool keeps already
            self._idle_since = now
        if now - self._idle_since >= self._expiry:
            self._idle.leave(self)
            return True
        return False

    def is_idle(self) -> bool:
        return not self._taken and self._inner.is_idle()

    def is_closed(self) -> bool:
        return self._inner.is_closed()


class _IdleConnections:
    """A pool's kept idle connections, at most ``limit``: a connection that turns idle while
    ``limit`` others are kept is closed.

    httpcore's own limit closes an idle connection whenever the pool holds more connections
    than the limit, busy ones counted: with more attempts in flight to one target than the
    limit, nearly every connection that turned idle was closed and the next attempt dialled
    anew (a TLS handshake per request). Here only idle connections count."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: set[_KeptConnection] = set()

    def join(self, connection: _KeptConnection) -> bool:
        """Keep ``connection`` idle if there is room; False when it should be closed."""
        if len(self._kept) >= self.limit:
            # a kept connection leaves when taken, expired or closed by us; one httpcore closed
            # itself while idle would otherwise hold its place
            self._kept = {c for c in self._kept if not c.is_closed()}
            if len(self._kept) >= self.limit:
                return False
        self._kept.add(connection)
        return True

    def leave(self, connection: _KeptConnection) -> None:
        self._kept.discard(connection)


class _TargetPool(httpcore.AsyncConnectionPool):
    """The kept connections of one validated target: its backend dials only that target's
    addresses. No limit on concurrent connections (an attempt never queues behind
    another), at most ``max_keepalive`` kept idle (:class:`_IdleConnections`)."""

    def __init__(
        self,
        backend: _PinnedBackend,
        ssl_context: ssl.SSLContext,
        *,
        max_keepalive: int,
        expiry: float,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(
            ssl_context=ssl_context,
            max_connections=None,
            max_keepalive_connections=None,  # _IdleConnections keeps the bound (it counts idle ones only)
            keepalive_expiry=None,  # _KeptConnection expires them, on the Sender's clock
            retries=0,
            http1=True,
            http2=False,
            network_backend=backend,
        )
        self._expiry = expiry
        self._clock = clock
        self._idle = _IdleConnections(max_keepalive)

    def create_connection(self, origin: httpcore.Origin) -> httpcore.AsyncConnectionInterface:
        return _KeptConnection(super().create_connection(origin), self._expiry, self._clock, self._idle)


_Key = tuple[str, str, int, tuple[str, ...]]
"""A kept-connection key: scheme, host, port and the exact ordered validated addresses."""
_Origin = tuple[str, str, int]

#: Connect failures after which an origin fails fast for a while.
FAST_FAIL_REASONS = frozenset({"connection_refused", "unreachable"})
_MAX_FAST_FAIL_ORIGINS = 1024
_MAX_PARSED_URLS = 1024


@dataclass(eq=False)
class _Kept:
    """A target's pool in the Sender's LRU, with the attempts using it right now."""

    key: _Key
    pool: _TargetPool
    users: int = 0
    idle_since: float = 0.0
    retired: bool = False  # out of the LRU: closed when its last user leaves


@dataclass(frozen=True)
class _FastFail:
    until: float
    reason: str
    ips: frozenset[str]


async def _close_pool(pool: httpcore.AsyncConnectionPool) -> None:
    with anyio.CancelScope(shield=True):
        await pool.aclose()


def _check_header(name: str, value: str) -> tuple[bytes, bytes]:
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"invalid header name {name!r}")
    lowered = name.lower()
    if lowered in RESERVED_HEADERS:
        raise ValueError(f"header {lowered!r} is set by the Sender and may not be supplied")
    if not value.isascii() or any(c in value for c in "\r\n\0"):
        raise ValueError(f"invalid value for header {lowered!r}")  # value not echoed: may be secret
    return lowered.encode("ascii"), value.strip().encode("ascii")


def _retry_after(headers: list[tuple[bytes, bytes]]) -> float | None:
    for name, value in headers:
        if name.lower() == b"retry-after" and value.strip().isdigit():
            return float(value.strip())
    return None


class Sender:
    """Sends one attempt: validate, dial a pinned address (or reuse a kept connection to
    exactly the addresses this validation returned), POST, read a capped body.

    ``timeout`` bounds the whole attempt (lookup, connect, TLS, response headers, and
    then whatever is left for reading at most ``max_body`` bytes of the body, which is
    discarded). Redirects are never followed.

    Keep-alive (docs/push.md, "Connection reuse"): idle connections are kept per
    ``(scheme, host, port, validated IPs in order)`` for ``keepalive_expiry`` seconds
    (0: none are kept, one connection per attempt), at most ``max_keepalive_per_target``
    per key and ``max_targets`` keys (least recently used closed first).
    ``fast_fail_seconds`` (0: off) is how long an origin whose connect was refused or
    unreachable fails further attempts without dialling. ``clock`` (monotonic seconds)
    times those two windows only; tests inject one. Call :meth:`aclose` on shutdown.
    """

    def __init__(
        self,
        validator: Validator,
        *,
        timeout: float = 5.0,
        max_body: int = 65536,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float = 4.0,
        max_keepalive_per_target: int = 16,
        max_targets: int = 64,
        fast_fail_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if max_body < 0:
            raise ValueError("max_body must not be negative")
        if keepalive_expiry < 0 or fast_fail_seconds < 0:
            raise ValueError("keepalive_expiry and fast_fail_seconds must not be negative")
        if max_keepalive_per_target < 1 or max_targets < 1:
            raise ValueError("max_keepalive_per_target and max_targets must be at least 1")
        context = ssl_context if ssl_context is not None else ssl.create_default_context()
        if context.verify_mode != ssl.CERT_REQUIRED or not context.check_hostname:
            raise ValueError("the TLS context must verify certificates and host names")
        self._validator = validator
        self._timeout = timeout
        self._max_body = max_body
        self._ssl_context = context
        self._keepalive_expiry = keepalive_expiry
        self._max_keepalive = max_keepalive_per_target
        self._max_targets = max_targets
        self._fast_fail_seconds = fast_fail_seconds
        self._clock = clock
        self._kept: OrderedDict[_Key, _Kept] = OrderedDict()
        self._fast: OrderedDict[_Origin, _FastFail] = OrderedDict()
        self._origins: OrderedDict[str, _Origin | None] = OrderedDict()
        self._closed = False

    async def send(self, url: str, *, body: bytes, headers: Mapping[str, str]) -> AttemptResult:
        """POST ``body`` to ``url`` once. Returns on 2xx; raises a :class:`PushError`
        subclass otherwise, with ``duration`` set. Invalid caller headers raise
        ``ValueError`` before anything is resolved or dialled."""
        extra = [_check_header(name, value) for name, value in headers.items()]
        start = time.monotonic()
        try:
            return await self._attempt(url, bytes(body), extra, start)
        except PushError as err:
            err.duration = time.monotonic() - start
            raise

    def fast_failure(self, url: str) -> PushError | None:
        """The error :meth:`send` would fail ``url`` with right now without dialling, when
        its origin's last attempt was refused at connect (or unreachable) less than
        ``fast_fail_seconds`` ago; else ``None``. No I/O: the URL is parsed as the
        validator parses it, but not resolved, so this cannot tell that the URL would now
        be refused (``rejected_ssrf``) or resolve elsewhere; :meth:`send` validates first
        and fast-fails only for the same addresses. A caller may skip an attempt on it
        because a fast-failed attempt dials nothing either. The error has
        ``fast_fail=True`` and ``duration`` 0."""
        if not self._fast:
            return None
        origin = self._origin(url)
        if origin is None:
            return None
        err = self._fast_failed(origin, None)
        if err is not None:
            err.duration = 0.0
        return err

    async def aclose(self) -> None:
        """Close every kept connection. Attempts still running finish on their
        connections, which are then closed; later attempts keep no connection."""
        self._closed = True
        kept = list(self._kept.values())
        self._kept.clear()
        for entry in kept:
            entry.retired = True
            if entry.users == 0:
                await _close_pool(entry.pool)

    # -- fast-fail ------------------------------------------------------------------------

    def _origin(self, url: str) -> _Origin | None:
        if url in self._origins:
            self._origins.move_to_end(url)
            return self._origins[url]
        try:
            origin: _Origin | None = self._validator.origin(url)
        except TargetRejected:
            origin = None
        self._origins[url] = origin
        if len(self._origins) > _MAX_PARSED_URLS:
            self._origins.popitem(last=False)
        return origin

    def _fast_failed(self, origin: _Origin, ips: tuple[str, ...] | None) -> NetworkFailure | None:
        entry = self._fast.get(origin)
        if entry is None:
            return None
        if self._clock() >= entry.until:
            del self._fast[origin]
            return None
        if ips is not None and frozenset(ips) != entry.ips:
            return None  # resolves elsewhere now: dial it
        return NetworkFailure(stage="connect", reason=entry.reason, fast_fail=True)

    def _remember(self, target: ValidatedTarget, progress: _Progress, err: PushError | None) -> None:
        """After one request: a connection to the origin clears its fast-fail; a refused
        or unreachable connect (re)arms it."""
        origin = (target.scheme, target.host, target.port)
        if progress.connected or progress.reused:
            self._fast.pop(origin, None)
            return
        if (
            self._fast_fail_seconds > 0
            and isinstance(err, NetworkFailure)
            and err.stage == "connect"
            and err.reason in FAST_FAIL_REASONS
        ):
            self._fast[origin] = _FastFail(
                self._clock() + self._fast_fail_seconds, err.reason, frozenset(target.ips)
            )
            self._fast.move_to_end(origin)
            if len(self._fast) > _MAX_FAST_FAIL_ORIGINS:
                self._fast.popitem(last=False)

    # -- kept connections -----------------------------------------------------------------

    async def _acquire(self, key: _Key) -> _Kept:
        entry = self._kept.get(key)
        evicted: list[_Kept] = []
        if entry is None:
            backend = _PinnedBackend(key[1], key[2], key[3])
            pool = _TargetPool(
                backend,
                self._ssl_context,
                max_keepalive=self._max_keepalive,
                expiry=self._keepalive_expiry,
                clock=self._clock,
            )
            entry = self._kept[key] = _Kept(key, pool)
            while len(self._kept) > self._max_targets:
                _, old = self._kept.popitem(last=False)
                old.retired = True
                if old.users == 0:
                    evicted.append(old)
        else:
            self._kept.move_to_end(key)
        entry.users += 1
        for old in evicted:
            await _close_pool(old.pool)
        return entry

    async def _release(self, entry: _Kept) -> None:
        entry.users -= 1
        if entry.users:
            return
        entry.idle_since = self._clock()
        if entry.retired or not entry.pool.connections:
            if self._kept.get(entry.key) is entry:
                del self._kept[entry.key]
            await _close_pool(entry.pool)

    async def _sweep(self) -> None:
        """Close the pools of targets idle for longer than the expiry (oldest first), so
        a target that is never sent to again does not hold its sockets until shutdown."""
        now = self._clock()
        expired: list[_Kept] = []
        for entry in self._kept.values():
            if entry.users:
                continue
            if now - entry.idle_since < self._keepalive_expiry:
                break
            expired.append(entry)
        for entry in expired:
            del self._kept[entry.key]
            entry.retired = True
        for entry in expired:
            await _close_pool(entry.pool)

    # -- one attempt ----------------------------------------------------------------------

    async def _attempt(
        self, url: str, body: bytes, extra: list[tuple[bytes, bytes]], start: float
    ) -> AttemptResult:
        deadline = start + self._timeout
        try:
            with anyio.fail_after(self._timeout):
                target = await self._validator.check_attempt(url)
        except TimeoutError:
            raise AttemptTimeout(stage="connect", reason="dns_timeout") from None
        # Only after validation passed: a URL that would now be refused is rejected_ssrf.
        fast = self._fast_failed((target.scheme, target.host, target.port), target.ips)
        if fast is not None:
            raise fast
        progress = _Progress(deadline)
        token = _CURRENT.set(progress)
        try:
            # One request, never resent here: a kept connection that fails before any response
            # byte may still have delivered the request (the receiver read it and hung up), so a
            # resend would be a second POST of one attempt. It fails as ``connection_lost``, and
            # the caller's retry policy, which counts attempts, decides (docs/push.md).
            status, headers, read = await self._exchange(target, body, extra, progress)
        finally:
            _CURRENT.reset(token)
        failure = error_for_status(status, retry_after=_retry_after(headers))
        if failure is not None:
            raise failure
        return AttemptResult(status, time.monotonic() - start, read)

    async def _exchange(
        self,
        target: ValidatedTarget,
        body: bytes,
        extra: list[tuple[bytes, bytes]],
        progress: _Progress,
    ) -> tuple[int, list[tuple[bytes, bytes]], int]:
        """One request on a kept connection for this target (or a new one that may be
        kept), or, with keep-alive off or after ``aclose``, on a connection of its own
        that is closed afterwards."""
        if self._closed or self._keepalive_expiry == 0:
            pool = httpcore.AsyncConnectionPool(
                ssl_context=self._ssl_context,
                max_connections=1,
                max_keepalive_connections=0,
                retries=0,
                http1=True,
                http2=False,
                network_backend=_PinnedBackend(target.host, target.port, target.ips),
            )
            try:
                return await self._exchange_on(pool, target, body, extra, progress)
            finally:
                await _close_pool(pool)
        await self._sweep()
        entry = await self._acquire((target.scheme, target.host, target.port, target.ips))
        try:
            return await self._exchange_on(entry.pool, target, body, extra, progress)
        finally:
            await self._release(entry)

    async def _exchange_on(
        self,
        pool: httpcore.AsyncConnectionPool,
        target: ValidatedTarget,
        body: bytes,
        extra: list[tuple[bytes, bytes]],
        progress: _Progress,
    ) -> tuple[int, list[tuple[bytes, bytes]], int]:
        try:
            response = await self._request(pool, target, body, extra, progress)
        except PushError as err:
            self._remember(target, progress, err)
            raise
        self._remember(target, progress, None)
        try:
            read = await self._drain(response, progress.deadline)
        finally:
            # A body not read to its end leaves h11 mid-message: httpcore then closes the
            # connection instead of keeping it (as after a timeout, a protocol error or
            # "Connection: close").
            with anyio.CancelScope(shield=True):
                await response.aclose()
        return response.status, response.headers, read

    async def _request(
        self,
        pool: httpcore.AsyncConnectionPool,
        target: ValidatedTarget,
        body: bytes,
        extra: list[tuple[bytes, bytes]],
        progress: _Progress,
    ) -> httpcore.Response:
        """Everything up to the response headers, under the attempt deadline."""
        headers = [
            (b"host", target.authority.encode("ascii")),
            (b"user-agent", USER_AGENT.encode("ascii")),
            *extra,
            (b"content-length", str(len(body)).encode("ascii")),
        ]
        request = httpcore.Request(
            b"POST",
            httpcore.URL(
                scheme=target.scheme.encode("ascii"),
                host=target.host.encode("ascii"),
                port=target.port,
                target=target.path.encode("ascii"),
            ),
            headers=headers,
            content=body,
            extensions={"sni_hostname": target.host},
        )
        try:
            with anyio.fail_after(max(progress.deadline - time.monotonic(), 0.0)):
                return await pool.handle_async_request(request)
        except (TimeoutError, httpcore.TimeoutException):
            raise AttemptTimeout(stage=progress.stage) from None
        except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:
            raise self._classify(exc, progress) from None

    @staticmethod
    def _classify(exc: Exception, progress: _Progress) -> PushError:
        stage = progress.stage
        if stage == "tls":
            return TLSFailure(progress.tls_reason or _tls_reason(exc))
        if stage == "connect":
            return NetworkFailure(stage="connect", reason=progress.connect_reason or _connect_reason(exc))
        if isinstance(exc, httpcore.ProtocolError) and progress.response_bytes:
            return NetworkFailure(stage=stage, reason="protocol")  # it answered, but not in HTTP/1.1
        return NetworkFailure(stage=stage, reason="connection_lost")  # it hung up without a word

    async def _drain(self, response: httpcore.Response, deadline: float) -> int:
        """Read and discard at most ``max_body`` bytes, within what is left of the
        deadline. The status has already decided the outcome, so a body that stalls
        or breaks is only cut short: that is the documented reason errors here are
        not raised."""
        read = 0
        if self._max_body == 0:
            return 0
        chunks = typing.cast(AsyncGenerator[bytes, None], response.aiter_stream())
        with anyio.move_on_after(max(deadline - time.monotonic(), 0.0)):
            try:
                async with contextlib.aclosing(chunks):
                    async for chunk in chunks:
                        read += len(chunk)
                        if read >= self._max_body:
                            break
            except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.TimeoutException, OSError):
                pass
        return min(read, self._max_body)
