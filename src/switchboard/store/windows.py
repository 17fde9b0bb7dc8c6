"""Rate windows held in the database, shared by every process and instance on it (issue 18).

:class:`switchboard.ratelimit.WindowLimiter` is the tree's one limiter; given a :class:`SharedWindows`
(PostgreSQL), its :meth:`~switchboard.ratelimit.WindowLimiter.admit` takes from here instead of from
its in-process log, so "at most ``limit`` in any ``window`` seconds" holds for the cluster: N instances
no longer allow N times the limit, and neither do the notify worker processes of one instance.

The same sliding window, kept as ``limit`` slots per key (table ``rate_slots``), each holding the time
of one admission. An admission is one statement: it takes a slot whose time is more than ``window`` old
(``FOR UPDATE SKIP LOCKED``, so concurrent admissions take different slots and never wait on each
other) and writes the statement's time into it. With ``limit`` slots, a window holding ``limit + 1``
admissions would need two in one slot less than ``window`` apart, which the statement refuses: exact,
with no lock held across round trips. Times come from the database's clock, one clock for every
instance, so skew between hosts cannot widen a window. A key's slots are created on its first use.
"""

from __future__ import annotations

from sqlalchemy import text

from switchboard.store.db import Database

_TAKE = text(
    """
    WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us),
    free AS (
        SELECT s.key, s.slot FROM rate_slots s, now
        WHERE s.key = :key AND s.slot < :limit AND s.at < now.us - :window_us
        ORDER BY s.at
        LIMIT :count
        FOR UPDATE OF s SKIP LOCKED
    )
    UPDATE rate_slots r SET at = now.us + :hold_us
    FROM free, now
    WHERE r.key = free.key AND r.slot = free.slot AND r.at < now.us - :window_us
    RETURNING r.slot
    """
)
_CREATE = text(
    """
    INSERT INTO rate_slots (key, slot, at)
    SELECT :key, g, 0 FROM generate_series(0, :limit - 1) AS g
    ON CONFLICT DO NOTHING
    RETURNING slot
    """
)


class SharedWindows:
    """The database side of a shared :class:`~switchboard.ratelimit.WindowLimiter` (PostgreSQL)."""

    def __init__(self, db: Database, *, prefix: str = "") -> None:
        """``prefix`` names the limit in the keys (``mcp:``), so limits sharing the table never mix."""
        if db.is_sqlite:
            raise ValueError("shared rate windows need PostgreSQL (SQLite is one instance)")
        self.db = db
        self.prefix = prefix

    async def take(self, key: str, limit: int, window: float, *, count: int = 1, hold: float = 0.0) -> int:
        """Admit up to ``count`` for ``key``, as many as keep every ``window`` seconds within ``limit``;
        how many. Each is recorded as made ``hold`` seconds from now (a lease, ratelimit.Leases).

        One round trip when the key exists; its first use (or a raised limit) adds one that creates the
        missing slots. A refusal takes nothing."""
        params = {
            "key": (self.prefix + key)[:100],
            "limit": limit,
            "window_us": int(window * 1_000_000),
            "count": max(1, count),
            "hold_us": int(hold * 1_000_000),
        }
        # Each statement alone in autocommit: one round trip, no BEGIN/COMMIT. ``fetch`` retries once on
        # a connection found dropped; a retried admission can only be counted twice, never let through.
        taken = len(await self.db.fetch(_TAKE, params))
        if taken:
            return taken
        if not await self.db.fetch(_CREATE, params):
            return 0  # every slot exists and none is free: the window is full
        return len(await self.db.fetch(_TAKE, params))
