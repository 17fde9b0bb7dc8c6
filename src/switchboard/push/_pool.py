"""Kept connections, per validated target: our own pool, no library's (docs/push.md, "Connection reuse").

A target's key is ``(scheme, host, port, ips)`` with ``ips`` the exact ordered addresses its validation
returned, and its connections were dialled only to those addresses, so a connection is reused only by an
attempt whose own validation returned the same answer. Everything here is synchronous: taking a kept
connection removes it from the idle list in the same step (two requests can never be handed the same
one), and closing one is ``transport.close()``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable

from ._connection import Connection

Key = tuple[str, str, int, tuple[str, ...]]
"""A kept-connection key: scheme, host, port and the exact ordered validated addresses."""


class TargetPool:
    """The idle connections of one key, newest last, and the attempts using the key right now."""

    def __init__(self, key: Key) -> None:
        self.key = key
        self.idle: deque[Connection] = deque()
        self.users = 0
        self.idle_since = 0.0  # when the last user left
        self.retired = False  # out of the LRU: nothing more is kept, the rest closes as users leave

    def take(self, now: float, expiry: float) -> Connection | None:
        """The most recently used idle connection that may carry a request, removed from the idle list;
        expired ones (the oldest) and ones that are not clean any more are closed on the way."""
        idle = self.idle
        while idle and now - idle[0].idle_since >= expiry:
            idle.popleft().close()
        while idle:
            connection = idle.pop()
            if connection.reusable():
                return connection
            connection.close()  # closed by the peer, or bytes nobody asked for arrived while idle
        return None

    def put(self, connection: Connection, now: float, limit: int) -> bool:
        """Keep ``connection`` idle if fewer than ``limit`` idle ones are kept (busy connections do not
        count); False when the caller must close it."""
        if self.retired or len(self.idle) >= limit:
            return False
        connection.idle_since = now
        self.idle.append(connection)
        return True

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


class KeptConnections:
    """Every key's pool, at most ``max_targets`` of them, least recently used closed first. A key whose
    users left with no idle connection kept is dropped; keys idle past ``expiry`` are closed by the next
    :meth:`acquire` of any key, so a target sent to once does not hold its socket until shutdown."""

    def __init__(self, *, max_targets: int, max_idle: int, expiry: float, clock: Callable[[], float]) -> None:
        self.max_targets = max_targets
        self.max_idle = max_idle
        self.expiry = expiry
        self.clock = clock
        self._pools: OrderedDict[Key, TargetPool] = OrderedDict()

    def acquire(self, key: Key) -> TargetPool:
        """The pool of ``key`` (new if need be), counted as in use until :meth:`release`."""
        self._sweep()
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = TargetPool(key)
            while len(self._pools) > self.max_targets:
                _, old = self._pools.popitem(last=False)
                old.retired = True
                old.close()
        else:
            self._pools.move_to_end(key)
        pool.users += 1
        return pool

    def take(self, pool: TargetPool) -> Connection | None:
        return pool.take(self.clock(), self.expiry)

    def put(self, pool: TargetPool, connection: Connection) -> None:
        """Keep ``connection`` for reuse, or close it when the bound or a retirement says so."""
        if not pool.put(connection, self.clock(), self.max_idle):
            connection.close()

    def release(self, pool: TargetPool) -> None:
        pool.users -= 1
        if pool.users:
            return
        pool.idle_since = self.clock()
        if pool.retired or not pool.idle:
            if self._pools.get(pool.key) is pool:
                del self._pools[pool.key]
            pool.retired = True
            pool.close()

    def close(self) -> None:
        """Close every idle connection; connections in use close when their attempt ends."""
        pools = list(self._pools.values())
        self._pools.clear()
        for pool in pools:
            pool.retired = True
            pool.close()

    def _sweep(self) -> None:
        """Close the pools of keys idle for longer than the expiry (oldest first)."""
        now = self.clock()
        expired: list[TargetPool] = []
        for pool in self._pools.values():
            if pool.users:
                continue
            if now - pool.idle_since < self.expiry:
                break
            expired.append(pool)
        for pool in expired:
            del self._pools[pool.key]
            pool.retired = True
            pool.close()
