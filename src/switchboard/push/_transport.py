"""The outbound transport: one POST to a validated, pinned address.

Built on httpcore's ``AsyncConnectionPool`` with a custom ``AsyncNetworkBackend``
(docs/push.md says why). The backend is the single place a socket is opened: it
dials only the IP strings of the ``ValidatedTarget`` from this attempt's own
validation and refuses any other origin, so no second DNS lookup can happen. TLS is
verified, with SNI, against the URL's host because httpcore passes the origin host
(or our ``sni_hostname``) to ``start_tls``. This module is the only one that imports
httpcore.
"""

from __future__ import annotations

import contextlib
import errno
import re
import ssl
import time
import typing
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass

import anyio
import httpcore

from switchboard import __version__

from ._errors import (
    AttemptTimeout,
    NetworkFailure,
    PushError,
    Stage,
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
    """How far the attempt got, so a failure can be blamed on the right stage."""

    def __init__(self) -> None:
        self.stage: Stage = "connect"
        self.response_bytes = 0
        self.tls_reason: str | None = None
        self.connect_reason: str | None = None


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
    """Wraps the real stream to record the stage and classify TLS failures."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, progress: _Progress) -> None:
        self._inner = inner
        self._progress = progress

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._progress.stage = "response"
        data = await self._inner.read(max_bytes, timeout)
        self._progress.response_bytes += len(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._progress.stage = "send"
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self._progress.stage = "tls"
        try:
            inner = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except Exception as exc:
            self._progress.tls_reason = _tls_reason(exc)
            raise
        return _PinnedStream(inner, self._progress)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials only the validated IPs of one target; refuses every other origin.

    The addresses are tried in resolver order, each with a fair share of what is
    left of the attempt's deadline, so one black-holed address cannot use it all.
    """

    def __init__(self, target: ValidatedTarget, progress: _Progress, deadline: float) -> None:
        self._target = target
        self._progress = progress
        self._deadline = deadline
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if (host, port) != (self._target.host, self._target.port):
            raise httpcore.ConnectError("refusing to dial an origin that was not validated")
        ips = self._target.ips
        last: Exception | None = None
        for index, ip in enumerate(ips):
            share = max(self._deadline - time.monotonic(), 0.0) / (len(ips) - index)
            try:
                stream = await self._inner.connect_tcp(
                    ip, port, timeout=share, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
                continue
            return _PinnedStream(stream, self._progress)
        if last is None:  # pragma: no cover - a ValidatedTarget always has an address
            raise httpcore.ConnectError("no validated address")
        if isinstance(last, httpcore.ConnectError):
            self._progress.connect_reason = _connect_reason(last)
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are never dialled")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


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
    """Sends one attempt: validate, dial a pinned address, POST, read a capped body.

    ``timeout`` bounds the whole attempt (lookup, connect, TLS, response headers, and
    then whatever is left for reading at most ``max_body`` bytes of the body, which is
    discarded). Each attempt gets its own pool, so no connection outlives the
    validation it was dialled under. Redirects are never followed.
    """

    def __init__(
        self,
        validator: Validator,
        *,
        timeout: float = 5.0,
        max_body: int = 65536,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if max_body < 0:
            raise ValueError("max_body must not be negative")
        context = ssl_context if ssl_context is not None else ssl.create_default_context()
        if context.verify_mode != ssl.CERT_REQUIRED or not context.check_hostname:
            raise ValueError("the TLS context must verify certificates and host names")
        self._validator = validator
        self._timeout = timeout
        self._max_body = max_body
        self._ssl_context = context

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

    async def _attempt(
        self, url: str, body: bytes, extra: list[tuple[bytes, bytes]], start: float
    ) -> AttemptResult:
        deadline = start + self._timeout
        progress = _Progress()
        try:
            with anyio.fail_after(self._timeout):
                target = await self._validator.check_attempt(url)
        except TimeoutError:
            raise AttemptTimeout(stage="connect", reason="dns_timeout") from None
        pool = httpcore.AsyncConnectionPool(
            ssl_context=self._ssl_context,
            max_connections=1,
            max_keepalive_connections=0,
            retries=0,
            http1=True,
            http2=False,
            network_backend=_PinnedBackend(target, progress, deadline),
        )
        try:
            response = await self._request(pool, target, body, extra, progress, deadline)
            try:
                read = await self._drain(response, deadline)
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
        finally:
            with anyio.CancelScope(shield=True):
                await pool.aclose()
        failure = error_for_status(response.status, retry_after=_retry_after(response.headers))
        if failure is not None:
            raise failure
        return AttemptResult(response.status, time.monotonic() - start, read)

    async def _request(
        self,
        pool: httpcore.AsyncConnectionPool,
        target: ValidatedTarget,
        body: bytes,
        extra: list[tuple[bytes, bytes]],
        progress: _Progress,
        deadline: float,
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
            with anyio.fail_after(max(deadline - time.monotonic(), 0.0)):
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
