"""One HTTP/1.1 connection to one validated address: asyncio's transport API underneath, ``h11`` on top.

Public APIs only. ``h11`` (the protocol state machine httpcore itself is built on) turns our request into
bytes and the receiver's bytes into events, and says whether both sides finished the message cleanly and
whether bytes beyond the response are waiting (``trailing_data``). asyncio's ``loop.create_connection``
opens the socket to an IP literal (no lookup), and TLS runs on it against the URL's host with the
``ssl`` module's memory BIOs (``SSLContext.wrap_bio``). The connection's :class:`_Wire` (an
``asyncio.Protocol`` of ours) holds the bytes that arrived, so a kept connection can tell, before it
carries a request, that its server closed it or sent what nobody asked for while it was idle: asyncio's
``StreamReader`` offers no public way to ask that.

Why not ``loop.start_tls``: asyncio's TLS protocol allocates a 256 KiB read buffer per connection (a
fixed size, no public way to change it). Every attempt in flight holds one, and attempts to receivers
that accept TCP and never answer hold theirs until the attempt timeout: 16 such attempts per notify
worker process were 4 MiB of each one's memory under an overflow (docs/benchmarks.md, scenario 3).
Here a connection holds what arrived and was not yet read, and ``_TLS_READ`` bytes while decrypting.

:func:`connect_tcp` is the only place a socket is opened; :func:`dial` is the only caller, and it dials
only the addresses it is given (a ``ValidatedTarget``'s), or, with an egress proxy, the proxy, asking it
for a tunnel to one of those addresses (:mod:`._proxy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ssl
import time
from collections.abc import Iterable, Sequence
from typing import cast

import h11

from ._errors import NetworkFailure, ProxyRefused, PushError, Stage, TLSFailure
from ._proxy import OutboundProxy, ProxyError, open_tunnel

#: The most a response head may take (h11 refuses a longer one; httpcore used the same bound).
MAX_HEAD = 100 * 1024
#: Reading from the socket pauses while this much arrived and was not taken yet.
_HIGH_WATER = 256 * 1024
#: The most one decrypting read asks for: one TLS record's plaintext at most.
_TLS_READ = 16 * 1024
_X509_V_ERR_HOSTNAME_MISMATCH = 62
_X509_V_ERR_IP_ADDRESS_MISMATCH = 64

Headers = Sequence[tuple[bytes, bytes]]


class Progress:
    """One attempt's state: how far it got (so a failure is blamed on the right stage), its deadline
    (for each address's share of a dial), and whether it dialled or reused a connection."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.stage: Stage = "connect"
        self.response_bytes = 0
        self.body_read = 0  # body bytes read and discarded, counted as they arrive
        self.tls_reason: str | None = None
        self.connect_reason: str | None = None
        self.proxy_status: int | None = None  # the egress proxy's answer to CONNECT, when it refused
        self.connected = False  # this attempt opened a TCP connection
        self.reused = False  # this attempt's request went out on a connection an earlier one opened

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)


class _PeerClosed(ConnectionError):
    """The receiver closed the connection before a complete response head: ``connection_lost`` when
    nothing came back, ``protocol`` when what came back was not one."""


class _Wire(asyncio.Protocol):
    """The bytes a connection received and not yet handed to h11, whether it ended, and write
    back-pressure. Reading pauses above ``_HIGH_WATER`` so a receiver cannot fill our memory."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._ended = False  # EOF or connection lost
        self._lost: BaseException | None = None
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        # TLS (start_tls): the session and its two memory BIOs, and the handshake's end
        self._tls: ssl.SSLObject | None = None
        self._tls_in = ssl.MemoryBIO()
        self._tls_out = ssl.MemoryBIO()
        self._handshake: asyncio.Future[None] | None = None

    # -- asyncio's callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._tls is None:
            self._buffer += data
        else:
            self._tls_in.write(data)
            self._tls_received()
        if len(self._buffer) > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._ended = True
        self._handshake_failed(ConnectionResetError("closed during the TLS handshake"))
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._lost = exc
        self._handshake_failed(ConnectionResetError("connection lost during the TLS handshake"))
        self._wake()
        self.resume_writing()  # a writer waiting for room goes on; its next read finds the loss

    # -- TLS
    async def start_tls(self, context: ssl.SSLContext, host: str) -> None:
        """Run the TLS handshake (certificate and host name checked by ``context``) on this connection;
        from here on what it sends and receives is encrypted. Raises what the handshake raised."""
        self._tls = context.wrap_bio(self._tls_in, self._tls_out, server_hostname=host)
        self._handshake = asyncio.get_running_loop().create_future()
        self._tls_received()  # sends the ClientHello
        await self._handshake

    def _tls_received(self) -> None:
        """Feed what arrived through the TLS session: the handshake while it runs, then the plaintext
        into the buffer; send whatever the session wants sent."""
        tls = self._tls
        assert tls is not None
        try:
            if self._handshake is not None and not self._handshake.done():
                try:
                    tls.do_handshake()
                except ssl.SSLWantReadError:
                    return
                finally:
                    self._tls_flush()
                self._handshake.set_result(None)
            while True:
                try:
                    chunk = tls.read(_TLS_READ)
                except ssl.SSLWantReadError:
                    break
                if not chunk:  # close_notify: answer it and close (a server may wait for ours)
                    self._ended = True
                    self._answer_close()
                    break
                self._buffer += chunk
        except (ssl.SSLError, ssl.CertificateError) as exc:
            self._tls_failed(exc)
        finally:
            self._tls_flush()

    def _tls_failed(self, exc: Exception) -> None:
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(exc)
        else:  # a broken record after the handshake: the connection is lost
            self._ended = True
            self._lost = exc
        if self.transport is not None:
            self.transport.abort()

    def _handshake_failed(self, exc: Exception) -> None:
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(exc)

    def _tls_flush(self) -> None:
        data = self._tls_out.read()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- ours
    def untouched(self) -> bool:
        """Nothing arrived, nothing ended: what an idle connection must be before it is reused."""
        return (
            not self._buffer
            and not self._ended
            and self.transport is not None
            and not self.transport.is_closing()
        )

    async def read(self) -> bytes:
        """What arrived (waiting for something), or ``b""`` at EOF."""
        while not self._buffer:
            if self._ended:
                if self._lost is not None:
                    raise ConnectionResetError("connection lost") from self._lost
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = bytes(self._buffer)
        self._buffer.clear()
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def write(self, data: bytes) -> None:
        if self._ended or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection closed")
        if self._tls is None:
            self.transport.write(data)
        else:
            self._tls.write(data)  # a memory BIO takes it all (TLS 1.3 and 1.2 clients never renegotiate)
            self._tls_flush()
        if self._writable is not None:
            await self._writable

    def close(self) -> None:
        """Close the connection; over TLS, a close_notify goes out first (not waited for)."""
        if self.transport is None:
            return
        if self._tls is not None and not self._ended and not self.transport.is_closing():
            with contextlib.suppress(ssl.SSLError, ValueError):  # the peer's close_notify: not waited for
                self._tls.unwrap()
            self._tls_flush()
        self.transport.close()

    def _answer_close(self) -> None:
        """The server closed the TLS session: send our close_notify and close the socket, as asyncio's
        TLS layer did. A server shutting down gracefully (uvicorn, for one) waits for it, up to its TLS
        shutdown timeout, before it closes a kept connection and exits."""
        if self._tls is None or self.transport is None or self.transport.is_closing():
            return
        with contextlib.suppress(ssl.SSLError, ValueError):
            self._tls.unwrap()
        self._tls_flush()
        self.transport.close()


async def connect_tcp(ip: str, port: int) -> tuple[asyncio.Transport, _Wire]:
    """Open a TCP connection to an IP literal (asyncio does no lookup for one). The only place a socket
    is opened; tests count dials here."""
    return await asyncio.get_running_loop().create_connection(_Wire, ip, port)


async def dial(
    ips: Sequence[str],
    port: int,
    host: str,
    ssl_context: ssl.SSLContext | None,
    progress: Progress,
    proxy: OutboundProxy | None = None,
) -> Connection:
    """Connect to the first of ``ips`` that answers, each given a fair share of the time left (one
    black-holed address cannot use it all), then TLS verified against ``host``. With a ``proxy``, each
    address is reached through a CONNECT tunnel naming it, and its share of the time covers the
    connection to the proxy and the proxy's answer. Raises ``TimeoutError`` or ``OSError`` (with
    ``progress`` saying the stage and reason)."""
    last: BaseException | None = None
    for index, ip in enumerate(ips):
        try:
            async with asyncio.timeout(progress.remaining() / (len(ips) - index)):
                if proxy is None:
                    transport, wire = await connect_tcp(ip, port)
                else:
                    transport, wire = await _tunnel(proxy, ip, port)
        except (TimeoutError, OSError) as exc:
            last = exc
            continue
        break
    else:
        if isinstance(last, OSError):
            progress.connect_reason = _connect_reason(last)
            if isinstance(last, ProxyError):
                progress.proxy_status = last.status
        raise last if last is not None else OSError("no validated address")
    progress.connected = True
    if ssl_context is not None:
        progress.stage = "tls"
        try:
            await wire.start_tls(ssl_context, host)
        except BaseException as exc:
            transport.abort()
            progress.tls_reason = _tls_reason(exc)
            raise
    return Connection(wire)


async def _tunnel(proxy: OutboundProxy, ip: str, port: int) -> tuple[asyncio.Transport, _Wire]:
    """A connection to the proxy, turned into a tunnel to ``ip``:``port``; the proxy's own connect
    failure is ``proxy_unreachable``, whatever the errno (the target's reasons would mislead)."""
    try:
        transport, wire = await connect_tcp(proxy.ip, proxy.port)
    except OSError as exc:
        raise ProxyError("proxy_unreachable") from exc
    try:
        await open_tunnel(wire, proxy, ip, port)
    except BaseException:
        transport.abort()
        raise
    return transport, wire


class Connection:
    """One HTTP/1.1 connection: one request at a time, kept only when both sides finished cleanly."""

    def __init__(self, wire: _Wire) -> None:
        self._wire = wire
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.idle_since = 0.0

    def reusable(self) -> bool:
        """Idle, and nothing arrived or ended while it was: the server neither closed it nor sent what
        nobody asked for (either would be read as the next answer)."""
        return (
            self._h11.our_state is h11.IDLE and self._h11.their_state is h11.IDLE and self._wire.untouched()
        )

    async def request(self, head: h11.Request, body: bytes, progress: Progress) -> tuple[int, Headers]:
        """Send the request and return the response status and headers (1xx skipped, as httpcore does;
        a 101 is returned, since nothing asked to switch protocols)."""
        progress.stage = "send"
        out = self._h11.send(head) or b""
        out += self._h11.send(h11.Data(data=body)) or b""
        out += self._h11.send(h11.EndOfMessage()) or b""
        await self._wire.write(out)
        progress.stage = "response"
        while True:
            event = await self._next_event(progress)
            if isinstance(event, h11.Response) or (
                isinstance(event, h11.InformationalResponse) and event.status_code == 101
            ):
                return event.status_code, event.headers

    async def read_body(self, limit: int, progress: Progress, sink: bytearray | None = None) -> bool:
        """Read and count (in ``progress.body_read``) the body until it ends or ``limit`` bytes came,
        keeping it in ``sink`` when one is given (a GET's answer). True when the message ended; a body
        cut short leaves the connection mid-message, so it is closed, not kept."""
        while progress.body_read < limit:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                data = await self._wire.read()
                progress.response_bytes += len(data)
                self._h11.receive_data(data)
            elif isinstance(event, h11.Data):
                progress.body_read += len(event.data)
                if sink is not None:
                    sink += event.data
            elif isinstance(event, h11.EndOfMessage):
                return True
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return False
        return False

    def finish(self) -> bool:
        """Ready the connection for another request if both sides finished the message cleanly and
        nothing beyond the response arrived; False when it must be closed instead."""
        if self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            return False
        if self._h11.trailing_data != (b"", False):
            return False
        self._h11.start_next_cycle()
        return self._wire.untouched()

    def close(self) -> None:
        self._wire.close()

    async def _next_event(self, progress: Progress) -> h11.Event:
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                data = await self._wire.read()
                if not data and self._h11.their_state is h11.SEND_RESPONSE:
                    raise _PeerClosed("closed before a response")
                progress.response_bytes += len(data)
                self._h11.receive_data(data)
                continue
            if event is h11.PAUSED:  # pragma: no cover - only after a complete response
                raise h11.RemoteProtocolError("unexpected data")
            return cast(h11.Event, event)


# --- classifying failures -------------------------------------------------------------------------


def failure(exc: BaseException, progress: Progress) -> PushError:
    """The push error for a failed dial or exchange (not a timeout), by the stage it reached."""
    stage = progress.stage
    if stage == "tls":
        return TLSFailure(progress.tls_reason or _tls_reason(exc))
    if stage == "connect":
        reason = progress.connect_reason or _connect_reason(exc)
        if reason == "proxy_refused" and progress.proxy_status is not None:
            return ProxyRefused(progress.proxy_status)
        return NetworkFailure(stage="connect", reason=reason)
    if isinstance(exc, h11.ProtocolError | _PeerClosed) and progress.response_bytes:
        return NetworkFailure(stage=stage, reason="protocol")  # it answered, but not in HTTP/1.1
    return NetworkFailure(stage=stage, reason="connection_lost")  # it hung up without a word


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
        if isinstance(cause, ProxyError):  # before its cause: the proxy's refusal is not the target's
            return cause.reason
        if isinstance(cause, ConnectionRefusedError):
            return "connection_refused"
        if isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "unreachable"
    return "connect_failed"
