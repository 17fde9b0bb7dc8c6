"""Connection limits in front of uvicorn's HTTP protocol (docs/configuration.md, "Connections").

uvicorn has no header-read timeout and no cap on open connections: a client that opens sockets and
sends nothing (or one byte a second) held them for ever, until the process ran out of file
descriptors and asyncio logged every failed ``accept()``. :func:`guarded_protocol` wraps uvicorn's own
protocol class (passed as ``uvicorn.Config(http=...)``, its public hook) and adds, per connection:

- a header deadline: the request line and headers of the first request must be complete within
  ``header_timeout`` seconds of the connection opening, or the connection is closed (later requests
  on a kept-alive connection fall under uvicorn's ``timeout_keep_alive`` until their first byte);
- a cap of ``max_connections`` open connections, kept by a sweep: past the cap a new connection is
  admitted, and ``SWEEP_SECONDS`` later the oldest connections that have still not finished their
  headers are closed until the cap holds again, so a flood of silent sockets cannot lock out a real
  client. The sweep only closes connections that were open before it was scheduled: the loop has read
  whatever they sent by then. Evicting at admission instead killed a real client that arrived in the
  same accept burst as a flood (its request unread when ``max_connections`` newer sockets came in:
  a reset, seen in CI). At twice the cap (``HARD_FACTOR``) a new connection evicts the oldest one a
  sweep already saw without headers, or is closed at once if there is none; at the cap with every open
  connection serving a request, the new one is closed at once.

It speaks only the public ``asyncio.Protocol`` interface to both sides. uvicorn's protocol is given the
real transport: holding a response's head until its body (one write instead of two) delayed heads by a
loop turn and pushed ingest's p99 with dead hooks to 1.18-1.19x of no hooks (REQ-7's limit is 1.10x;
0.94x without it), for no claim throughput the benchmark could measure (docs/benchmarks.md in git history, eighth round).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from switchboard.obs.logs import get_logger

log = get_logger("switchboard.conn")

HEADER_END = b"\r\n\r\n"
SUMMARY_SECONDS = 60.0
ACCEPT_ERROR = "socket.accept() out of system resource"
SWEEP_SECONDS = 0.05
HARD_FACTOR = 2


class Coalesced:
    """At most one log line per ``period`` for a repeating event, carrying how many were folded in."""

    def __init__(self, period: float = SUMMARY_SECONDS, now: Callable[[], float] = time.monotonic) -> None:
        self.period, self.now = period, now
        self.count = 0
        self._last: float | None = None

    def hit(self) -> int | None:
        """Count one event; returns the count to report when a line is due, else None."""
        self.count += 1
        moment = self.now()
        if self._last is not None and moment - self._last < self.period:
            return None
        self._last = moment
        count, self.count = self.count, 0
        return count


class ConnectionGuard:
    """The open connections of one server, oldest first, and which have finished their headers."""

    def __init__(self, *, max_connections: int, header_timeout: float) -> None:
        self.max_connections = max_connections
        self.hard_cap = HARD_FACTOR * max_connections
        self.header_timeout = header_timeout
        self.open: dict[GuardedProtocol, None] = {}  # insertion order = age
        self.waiting: dict[GuardedProtocol, int] = {}  # still in the first request's headers -> admission no.
        self.admitted = 0  # admission numbers handed out
        self.settled = 0  # connections up to this admission number have had their bytes read
        self.sweep: asyncio.TimerHandle | None = None
        self.timeouts = Coalesced()
        self.evictions = Coalesced()
        self.refusals = Coalesced()

    def admit(self, conn: GuardedProtocol) -> bool:
        if len(self.open) >= self.max_connections and not self.waiting:
            return self._refuse()
        if len(self.open) >= self.hard_cap:
            oldest, number = next(iter(self.waiting.items()))
            if number > self.settled:
                return self._refuse()
            self._evict(oldest)
        self.admitted += 1
        self.open[conn] = None
        self.waiting[conn] = self.admitted
        if len(self.open) > self.max_connections and self.sweep is None:
            self._schedule_sweep()
        return True

    def _refuse(self) -> bool:
        if (n := self.refusals.hit()) is not None:
            log.warning(
                "connection cap reached: refusing new connections",
                max_connections=self.max_connections,
                refused=n,
            )
        return False

    def _evict(self, conn: GuardedProtocol) -> None:
        conn.close()
        if (n := self.evictions.hit()) is not None:
            log.warning(
                "connection cap reached: closing the oldest connections that sent no request yet",
                max_connections=self.max_connections,
                closed=n,
            )

    def _schedule_sweep(self) -> None:
        cutoff = self.admitted
        self.sweep = asyncio.get_running_loop().call_later(SWEEP_SECONDS, self._run_sweep, cutoff)

    def _run_sweep(self, cutoff: int) -> None:
        """Close the oldest connections still in their headers (admitted up to ``cutoff``, so read at
        least once) until the cap holds; schedule another sweep for newer ones if it still does not."""
        self.sweep = None
        self.settled = max(self.settled, cutoff)
        while len(self.open) > self.max_connections and self.waiting:
            oldest, number = next(iter(self.waiting.items()))
            if number > cutoff:
                break
            self._evict(oldest)
        if len(self.open) > self.max_connections and self.waiting:
            self._schedule_sweep()

    def headers_done(self, conn: GuardedProtocol) -> None:
        self.waiting.pop(conn, None)

    def timed_out(self, conn: GuardedProtocol) -> None:
        conn.close()
        if (n := self.timeouts.hit()) is not None:
            log.info(
                "closed connections that did not send request headers in time",
                header_timeout=self.header_timeout,
                closed=n,
            )

    def gone(self, conn: GuardedProtocol) -> None:
        self.open.pop(conn, None)
        self.waiting.pop(conn, None)


class GuardedProtocol(asyncio.Protocol):
    """One connection: uvicorn's protocol inside, the guard's rules around it."""

    guard: ConnectionGuard
    inner_class: type[asyncio.Protocol]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.inner = self.inner_class(*args, **kwargs)
        self.transport: asyncio.BaseTransport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""
        self.started = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if not self.guard.admit(self):
            cast(asyncio.Transport, transport).abort()
            return
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.guard.header_timeout, self.guard.timed_out, self)
        self.started = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.timer is not None:
            seen = self.tail + data
            if HEADER_END in seen:
                self.timer.cancel()
                self.timer = None
                self.tail = b""
                self.guard.headers_done(self)
            else:
                self.tail = seen[-3:]
        cast(Any, self.inner).data_received(data)

    def eof_received(self) -> bool | None:
        keep_open: bool | None = cast(Any, self.inner).eof_received()
        return keep_open

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.guard.gone(self)
        if self.started:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def close(self) -> None:
        """Drop the connection now (no response: the client never finished asking)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.guard.gone(self)
        if self.transport is not None:
            cast(asyncio.Transport, self.transport).abort()

    def __hash__(self) -> int:
        return id(self)


def guarded_protocol(
    inner: type[asyncio.Protocol], *, max_connections: int, header_timeout: float
) -> type[GuardedProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` that wraps ``inner`` with one shared guard."""
    guard = ConnectionGuard(max_connections=max_connections, header_timeout=header_timeout)
    return type("SwitchboardHTTP", (GuardedProtocol,), {"guard": guard, "inner_class": inner})


class AcceptErrorFilter(logging.Filter):
    """asyncio logs every failed ``accept()`` when descriptors run out (385,023 lines in 25 s were
    measured); this lets one through per minute, with the count folded into it."""

    def __init__(self) -> None:
        super().__init__()
        self.coalesced = Coalesced()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(ACCEPT_ERROR):
            return True
        count = self.coalesced.hit()
        if count is None:
            return False
        record.msg = f"{ACCEPT_ERROR} ({count} since the last such line; see SWITCHBOARD_MAX_CONNECTIONS)"
        record.args = None
        record.exc_info = None
        return True


def install_accept_error_filter() -> AcceptErrorFilter:
    log_filter = AcceptErrorFilter()
    logging.getLogger("asyncio").addFilter(log_filter)
    return log_filter
