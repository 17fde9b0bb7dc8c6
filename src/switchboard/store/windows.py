"""Rate windows held in the database, shared by every process and instance on it (issue 18).

:class:`switchboard.core.ratelimit.WindowLimiter` is the tree's one limiter; given a :class:`SharedWindows`
(PostgreSQL), its :meth:`~switchboard.core.ratelimit.WindowLimiter.admit` takes from here instead of from
its in-process log, so "at most ``limit`` in any ``window`` seconds" holds for the cluster: N instances
no longer allow N times the limit, and neither do the notify worker processes of one instance.

A key is one row of table ``rate_buckets``: counts of admissions per bucket, a bucket a sixtieth of
the window wide, each ``[start, end, count]`` saying its admissions' calls fall in ``[start, end)``
(an admission leased for ``hold`` seconds may be used until then, so its bucket reaches ``hold``
further). Only buckets that some window reaching now can touch are kept: at most about
``60 + 60 x hold / window + 2`` per key, whatever the limit (a million per minute is one small row).

An admission is one short transaction on the key's row: ``SELECT ... FOR UPDATE`` serializes the
key's admissions across the cluster, then one ``UPDATE`` computes from the row as the admission before
it left it, so every answer comes from the whole window, never from part of it (the slot-per-admission
design skipped rows other admissions held and could read a busy window as a full one). It admits what keeps, for every
``window``-long interval that can hold one of its calls, the buckets touching that interval plus the
new ones within ``limit``: never more than ``limit`` in any window (exact as a bound). Counting whole
buckets makes it stricter by at most one bucket: the limit holds over ``window + window/60 + hold``
seconds rather than ``window + hold`` (1.7 % for the minute windows), and a refusal (0) always means
the window was at its limit. Times come from the database's clock, one clock for every instance, so
skew between hosts cannot widen a window.
"""

from __future__ import annotations

from sqlalchemy import text

from switchboard.store.db import Database

BUCKETS_PER_WINDOW = 60

# Run after _LOCK in the same transaction: this statement's snapshot is taken once the key's row is
# locked, so it computes from what the admission before it wrote. (Not one self-locking UPDATE: when an
# UPDATE waits for a row, PostgreSQL rechecks the row but a subquery in its SET may still read the
# version from before the wait, and admissions racing that way were measured to overrun the limit.)
_TAKE = text(
    """
    UPDATE rate_buckets r SET buckets = (
        WITH p AS (
            SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now,
                   CAST(:window_us AS bigint) AS w, CAST(:hold_us AS bigint) AS h,
                   greatest(1, CAST(:window_us AS bigint) / CAST(:per_window AS bigint))::bigint AS g
        ),
        kept AS (
            SELECT (b->>0)::bigint AS s, (b->>1)::bigint AS e, (b->>2)::bigint AS n
            FROM p, jsonb_array_elements(r.buckets::jsonb -> 'b') AS b
            WHERE (b->>1)::bigint > p.now - p.w
        ),
        -- the windows [x, x + w] that can hold a call made in [now, now + h], in slices of a bucket
        cand AS (
            SELECT greatest(j * p.g, p.now - p.w) AS lo, least((j + 1) * p.g, p.now + p.h) AS hi
            FROM p, generate_series((p.now - p.w) / p.g, (p.now + p.h) / p.g) AS j
        ),
        most AS (
            SELECT coalesce(max(
                (SELECT coalesce(sum(k.n), 0) FROM kept k WHERE k.e > c.lo AND k.s <= c.hi + p.w)
            ), 0) AS used
            FROM cand c, p
        ),
        t AS (
            SELECT greatest(0, least(CAST(:count AS bigint), CAST(:limit AS bigint) - most.used)) AS n,
                   (p.now / p.g) * p.g AS s, (p.now / p.g + 1) * p.g + p.h AS e
            FROM most, p
        ),
        merged AS (
            SELECT k.s, k.e, k.n FROM kept k, t WHERE k.s <> t.s
            UNION ALL
            SELECT t.s,
                   CASE WHEN t.n > 0 THEN greatest(max(k.e), t.e) ELSE max(k.e) END,
                   coalesce(sum(k.n), 0) + t.n
            FROM t LEFT JOIN kept k ON k.s = t.s
            GROUP BY t.s, t.e, t.n
        )
        SELECT jsonb_build_object(
                   't', (SELECT t.n FROM t),
                   'b', coalesce(
                       (SELECT jsonb_agg(jsonb_build_array(m.s, m.e, m.n) ORDER BY m.s) FROM merged m
                        WHERE m.n > 0),
                       '[]'::jsonb))::text
    )
    WHERE r.key = :key
    RETURNING (r.buckets::jsonb ->> 't')::integer
    """
)
_LOCK = text("SELECT 1 FROM rate_buckets WHERE key = :key FOR UPDATE")
_CREATE = text(
    """INSERT INTO rate_buckets (key, buckets) VALUES (:key, '{"t": 0, "b": []}')
    ON CONFLICT DO NOTHING"""
)


class SharedWindows:
    """The database side of a shared :class:`~switchboard.core.ratelimit.WindowLimiter` (PostgreSQL)."""

    def __init__(self, db: Database, *, prefix: str = "") -> None:
        """``prefix`` names the limit in the keys (``mcp:``), so limits sharing the table never mix."""
        if db.is_sqlite:
            raise ValueError("shared rate windows need PostgreSQL (SQLite is one instance)")
        self.db = db
        self.prefix = prefix

    async def take(self, key: str, limit: int, window: float, *, count: int = 1, hold: float = 0.0) -> int:
        """Admit up to ``count`` for ``key``, as many as keep every ``window`` seconds within ``limit``;
        how many. Each is recorded as used from now until ``hold`` seconds from now (a lease,
        ratelimit.Leases). 0 only when the whole window was at its limit.

        One short transaction (lock the key's row, update it); the key's first use also creates the row.
        Admissions for one key queue on its row; other keys never wait."""
        params = {
            "key": (self.prefix + key)[:100],
            "limit": limit,
            "window_us": max(1, int(window * 1_000_000)),
            "count": max(1, count),
            "hold_us": max(0, int(hold * 1_000_000)),
            "per_window": BUCKETS_PER_WINDOW,
        }
        async with self.db.begin() as conn:
            if (await conn.execute(_LOCK, params)).first() is None:
                await conn.execute(_CREATE, params)  # the key's first use (waits for a racing creator)
                await conn.execute(_LOCK, params)
            taken = (await conn.execute(_TAKE, params)).scalar_one()
        return int(taken)
