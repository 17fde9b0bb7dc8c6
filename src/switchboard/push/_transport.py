"""The outbound transport: one POST to a validated, pinned address.

Each attempt validates first, then takes a kept connection of its own validated target (scheme, host,
port and the exact addresses in order, :mod:`._pool`) or dials one of those addresses (:mod:`._connection`:
asyncio's transports, ``h11`` for HTTP/1.1). Nothing here resolves a name, and nothing reaches into a
library's private state: docs/push.md says why the connection layer is our own.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import h11

from switchboard import __version__

from ._connection import Connection, Headers, dial, failure
from ._connection import Progress as _Progress
from ._errors import (
    AttemptTimeout,
    NetworkFailure,
    PushError,
    ResponseTooLarge,
    TargetRejected,
    error_for_status,
)
from ._pool import KeptConnections, TargetPool
from ._proxy import OutboundProxy
from ._validator import ValidatedTarget, Validator

__all__ = ["USER_AGENT", "AttemptResult", "Fetched", "Sender", "ValidatedTarget"]

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
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # what an HTTP field value may not hold (tab may)
_USER_AGENT = USER_AGENT.encode("ascii")

#: Connect failures after which an origin fails fast for a while.
FAST_FAIL_REASONS = frozenset({"connection_refused", "unreachable"})
_MAX_FAST_FAIL_ORIGINS = 1024
_MAX_PARSED_URLS = 1024

_Origin = tuple[str, str, int]


def tls_context(given: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """The TLS context every outbound connection uses: ``given`` (tests, the bench), else the system
    trust store. One that does not verify certificates and host names is refused. ALPN offers only
    HTTP/1.1, the one protocol spoken."""
    context = given if given is not None else ssl.create_default_context()
    if context.verify_mode != ssl.CERT_REQUIRED or not context.check_hostname:
        raise ValueError("the TLS context must verify certificates and host names")
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass(frozen=True)
class AttemptResult:
    """A delivered attempt (2xx). ``body_bytes_read`` counts the response bytes read
    and discarded, at most ``max_body``."""

    status: int
    duration: float
    body_bytes_read: int


@dataclass(frozen=True)
class Fetched:
    """A GET answered 2xx, body and all (at most the cap the caller gave). Header names are
    lower-case; values are latin-1 text."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    duration: float

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((value for key, value in self.headers if key == wanted), None)


@dataclass(frozen=True)
class _FastFail:
    until: float
    reason: str
    ips: frozenset[str]


class _FastFails:
    """Origins whose connect was refused (or unreachable) moments ago, with the addresses that refused,
    and a bounded cache of URLs parsed to origins for the synchronous pre-check."""

    def __init__(self, validator: Validator, seconds: float, clock: Callable[[], float]) -> None:
        self._validator = validator
        self._seconds = seconds
        self._clock = clock
        self._fast: OrderedDict[_Origin, _FastFail] = OrderedDict()
        self._origins: OrderedDict[str, _Origin | None] = OrderedDict()

    def for_url(self, url: str) -> NetworkFailure | None:
        if not self._fast:
            return None
        origin = self._origin(url)
        return None if origin is None else self.check(origin, None)

    def check(self, origin: _Origin, ips: tuple[str, ...] | None) -> NetworkFailure | None:
        entry = self._fast.get(origin)
        if entry is None:
            return None
        if self._clock() >= entry.until:
            del self._fast[origin]
            return None
        if ips is not None and frozenset(ips) != entry.ips:
            return None  # resolves elsewhere now: dial it
        return NetworkFailure(stage="connect", reason=entry.reason, fast_fail=True)

    def remember(self, target: ValidatedTarget, progress: _Progress, err: PushError | None) -> None:
        """After one request: a connection to the origin clears its fast-fail; a refused or
        unreachable connect (re)arms it."""
        origin = (target.scheme, target.host, target.port)
        if progress.connected or progress.reused:
            self._fast.pop(origin, None)
            return
        if (
            self._seconds > 0
            and isinstance(err, NetworkFailure)
            and err.stage == "connect"
            and err.reason in FAST_FAIL_REASONS
        ):
            self._fast[origin] = _FastFail(self._clock() + self._seconds, err.reason, frozenset(target.ips))
            self._fast.move_to_end(origin)
            if len(self._fast) > _MAX_FAST_FAIL_ORIGINS:
                self._fast.popitem(last=False)

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


def _check_header(name: str, value: str) -> tuple[bytes, bytes]:
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"invalid header name {name!r}")
    lowered = name.lower()
    if lowered in RESERVED_HEADERS:
        raise ValueError(f"header {lowered!r} is set by the Sender and may not be supplied")
    if not value.isascii() or _CONTROL.search(value):
        raise ValueError(f"invalid value for header {lowered!r}")  # value not echoed: may be secret
    return lowered.encode("ascii"), value.strip().encode("ascii")


def _retry_after(headers: Headers) -> float | None:
    for name, value in headers:
        if name.lower() == b"retry-after" and value.strip().isdigit():
            return float(value.strip())
    return None


def _head(
    method: bytes, target: ValidatedTarget, extra: list[tuple[bytes, bytes]], body: bytes | None
) -> h11.Request:
    length = [] if body is None else [(b"content-length", str(len(body)).encode("ascii"))]
    return h11.Request(
        method=method,
        target=target.path.encode("ascii"),
        headers=[
            (b"host", target.authority.encode("ascii")),
            (b"user-agent", _USER_AGENT),
            *extra,
            *length,
        ],
    )


async def _keep(
    connection: Connection, headers: Headers, progress: _Progress, cap: int, sink: bytearray
) -> int:
    """Read the whole body into ``sink``: more than ``cap`` bytes (announced or read) is
    :class:`ResponseTooLarge`, and the rest is never read."""
    for name, value in headers:
        if name.lower() == b"content-length" and value.strip().isdigit() and int(value) > cap:
            raise ResponseTooLarge(cap)
    try:
        async with asyncio.timeout(progress.remaining()):
            complete = await connection.read_body(cap + 1, progress, sink)
    except TimeoutError:
        raise AttemptTimeout(stage="response") from None
    except (OSError, h11.ProtocolError) as exc:
        raise failure(exc, progress) from None
    if len(sink) > cap:
        raise ResponseTooLarge(cap)
    if not complete:
        raise NetworkFailure(stage="response", reason="connection_lost")
    return len(sink)


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
    times those two windows only; tests inject one. With ``proxy`` (docs/push.md, "Egress
    proxy") every connection is a CONNECT tunnel through it to a validated address; the
    proxy is the Sender's for its life, so kept tunnels are per (proxy, target) by
    construction. Call :meth:`aclose` on shutdown.
    A Sender belongs to one event loop.
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
        proxy: OutboundProxy | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if max_body < 0:
            raise ValueError("max_body must not be negative")
        if keepalive_expiry < 0 or fast_fail_seconds < 0:
            raise ValueError("keepalive_expiry and fast_fail_seconds must not be negative")
        if max_keepalive_per_target < 1 or max_targets < 1:
            raise ValueError("max_keepalive_per_target and max_targets must be at least 1")
        self._validator = validator
        self._timeout = timeout
        self._max_body = max_body
        self._ssl_context = tls_context(ssl_context)
        self._keepalive = keepalive_expiry > 0
        self._kept = KeptConnections(
            max_targets=max_targets, max_idle=max_keepalive_per_target, expiry=keepalive_expiry, clock=clock
        )
        self._fast = _FastFails(validator, fast_fail_seconds, clock)
        self._proxy = proxy

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

    async def get(self, url: str, *, max_body: int, headers: Mapping[str, str]) -> Fetched:
        """GET ``url`` once, through the same guard, pinning, timeout and no-redirect rule as
        :meth:`send`, and return the whole body. A ``Content-Length`` or a body over ``max_body``
        raises :class:`ResponseTooLarge` (the rest is never read); a body cut short is a
        :class:`NetworkFailure`. For small documents a feature must read from a URL someone else
        named (OAuth client metadata documents): no second HTTP client."""
        extra = [_check_header(name, value) for name, value in headers.items()]
        start = time.monotonic()
        try:
            target = await self._validated(url, start + self._timeout)
            head = _head(b"GET", target, extra, None)
            progress = _Progress(start + self._timeout)
            sink = bytearray()
            status, got, _ = await self._exchange(target, head, b"", progress, (max_body, sink))
            failure_ = error_for_status(status)
            if failure_ is not None:
                raise failure_
            named = tuple((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in got)
            return Fetched(status, named, bytes(sink), time.monotonic() - start)
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
        err = self._fast.for_url(url)
        if err is not None:
            err.duration = 0.0
        return err

    async def aclose(self) -> None:
        """Close every kept connection. Attempts still running finish on their
        connections, which are then closed; later attempts keep no connection."""
        self._keepalive = False
        self._kept.close()

    def _remember(self, target: ValidatedTarget, progress: _Progress, err: PushError | None) -> None:
        self._fast.remember(target, progress, err)

    # -- one attempt ----------------------------------------------------------------------

    async def _validated(self, url: str, deadline: float) -> ValidatedTarget:
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                target = await self._validator.check_attempt(url)
        except TimeoutError:
            raise AttemptTimeout(stage="connect", reason="dns_timeout") from None
        # Only after validation passed: a URL that would now be refused is rejected_ssrf.
        fast = self._fast.check((target.scheme, target.host, target.port), target.ips)
        if fast is not None:
            raise fast
        return target

    async def _attempt(
        self, url: str, body: bytes, extra: list[tuple[bytes, bytes]], start: float
    ) -> AttemptResult:
        deadline = start + self._timeout
        target = await self._validated(url, deadline)
        head = _head(b"POST", target, extra, body)
        progress = _Progress(deadline)
        # One request, never resent here: a kept connection that fails before any response byte may
        # still have delivered the request (the receiver read it and hung up), so a resend would be a
        # second POST of one attempt (SPEC-0024 REQ-7's cap counts POSTs). It fails as
        # ``connection_lost`` and the caller's retry policy, which counts attempts, decides. A
        # connection the peer closed while idle is never reused (``_connection``'s own buffer sees
        # the EOF), so this costs an attempt only in the race where the close is still in flight.
        status, headers, read = await self._exchange(target, head, body, progress)
        failure_ = error_for_status(status, retry_after=_retry_after(headers))
        if failure_ is not None:
            raise failure_
        return AttemptResult(status, time.monotonic() - start, read)

    async def _exchange(
        self,
        target: ValidatedTarget,
        head: h11.Request,
        body: bytes,
        progress: _Progress,
        keep: tuple[int, bytearray] | None = None,
    ) -> tuple[int, Headers, int]:
        """One request on a kept connection of this target (or a new one that may be kept), or, with
        keep-alive off or after ``aclose``, on a connection of its own closed afterwards. ``keep``
        (a GET's cap and buffer) keeps the body instead of discarding it, and fails what
        :meth:`get` must not return: a body over the cap, cut short or out of time."""
        pool: TargetPool | None = None
        if self._keepalive:
            pool = self._kept.acquire((target.scheme, target.host, target.port, target.ips))
        try:
            connection = self._kept.take(pool) if pool is not None else None
            progress.reused = connection is not None
            connection, status, headers = await self._request(connection, target, head, body, progress)
            try:
                if keep is None:
                    read = await self._drain(connection, progress)
                else:
                    read = await _keep(connection, headers, progress, *keep)
            except BaseException:
                connection.close()
                raise
            if pool is not None and connection.finish():
                self._kept.put(pool, connection)
            else:
                # A body not read to its end, a timeout, "Connection: close" or bytes beyond the
                # response: the connection is in doubt, so it is closed instead of kept.
                connection.close()
            return status, headers, read
        finally:
            if pool is not None:
                self._kept.release(pool)

    async def _request(
        self,
        connection: Connection | None,
        target: ValidatedTarget,
        head: h11.Request,
        body: bytes,
        progress: _Progress,
    ) -> tuple[Connection, int, Headers]:
        """Everything up to the response headers (dialling first when no connection was kept), under
        the attempt deadline. On any failure the connection is closed."""
        err: PushError
        try:
            async with asyncio.timeout(progress.remaining()):
                if connection is None:
                    connection = await dial(
                        target.ips,
                        target.port,
                        target.host,
                        self._ssl_context if target.scheme == "https" else None,
                        progress,
                        self._proxy,
                    )
                status, headers = await connection.request(head, body, progress)
        except TimeoutError:
            err = AttemptTimeout(stage=progress.stage)
        except (OSError, h11.ProtocolError) as exc:
            err = failure(exc, progress)
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        else:
            self._fast.remember(target, progress, None)
            return connection, status, headers
        if connection is not None:
            connection.close()
        self._fast.remember(target, progress, err)
        raise err from None

    async def _drain(self, connection: Connection, progress: _Progress) -> int:
        """Read and discard at most ``max_body`` bytes, within what is left of the
        deadline. The status has already decided the outcome, so a body that stalls
        or breaks is only cut short: that is the documented reason errors here are
        not raised."""
        try:
            async with asyncio.timeout(progress.remaining()):
                await connection.read_body(self._max_body, progress)
        except (TimeoutError, OSError, h11.ProtocolError):
            pass
        return min(progress.body_read, self._max_body)
