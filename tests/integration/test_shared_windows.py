"""Shared rate windows on a real PostgreSQL (store/windows.py): one window for every process and
instance on the database, exact under concurrency, and the same sliding rule as the in-process log."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from sqlalchemy import text

from switchboard.core.clock import SystemClock
from switchboard.core.ratelimit import WindowLimiter
from switchboard.store.db import Database
from switchboard.store.windows import BUCKETS_PER_WINDOW, SharedWindows

pytestmark = pytest.mark.postgres


async def test_two_instances_racing_share_one_window_exactly(pg_url: str) -> None:
    one, two = Database(pg_url), Database(pg_url)
    try:
        await one.migrate()
        limiters = [WindowLimiter(SystemClock(), 120, 60.0, shared=SharedWindows(db)) for db in (one, two)]
        # 300 admissions at once, half through each "instance", all within one window
        results = await asyncio.gather(*(limiters[i % 2].admit("hook:nh_race") for i in range(300)))
        assert sum(results) == 120
        assert not await limiters[0].admit("hook:nh_race")
        assert await limiters[1].admit("hook:nh_other")  # keys are separate
        # the in-process logs took nothing: the window lives in the database
        assert len(limiters[0]) == len(limiters[1]) == 0
    finally:
        await one.dispose()
        await two.dispose()


async def test_a_slot_frees_once_its_admission_is_a_window_old(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        await db.migrate()
        limiter = WindowLimiter(SystemClock(), 3, 0.5, shared=SharedWindows(db))
        started = time.monotonic()
        assert [await limiter.admit("k") for _ in range(4)] == [True, True, True, False]
        while not await limiter.admit("k"):
            await asyncio.sleep(0.02)
        assert time.monotonic() - started >= 0.5  # never before the first admission left the window
        # a lowered limit counts only its own slots
        lowered = WindowLimiter(SystemClock(), 1, 30.0, shared=SharedWindows(db))
        assert await lowered.admit("k2") and not await lowered.admit("k2")
    finally:
        await db.dispose()


def test_sqlite_has_no_shared_window(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        SharedWindows(Database("sqlite+aiosqlite:///:memory:"))


class Counted(SharedWindows):
    """The real store, counting its round trips (what leasing is for)."""

    calls = 0

    async def take(self, key: str, limit: int, window: float, *, count: int = 1, hold: float = 0.0) -> int:
        self.calls += 1
        return await super().take(key, limit, window, count=count, hold=hold)


async def test_leased_admissions_never_exceed_the_window_and_mostly_cost_no_round_trip(pg_url: str) -> None:
    """Two instances leasing chunks of one window (the MCP call limit): however calls race, no window
    holds more than the limit, and most calls never reach the database."""
    one, two = Database(pg_url), Database(pg_url)
    try:
        await one.migrate()
        stores = [Counted(db, prefix="mcp:") for db in (one, two)]
        limiters = [WindowLimiter(SystemClock(), 100, 1.0, shared=s, lease=0.25) for s in stores]
        admitted: list[float] = []
        calls = 0

        async def caller(limiter: WindowLimiter, stop: float) -> None:
            nonlocal calls
            while time.monotonic() < stop:
                calls += 1
                if await limiter.admit("ep_1"):
                    admitted.append(time.monotonic())
                await asyncio.sleep(0.002)

        stop = time.monotonic() + 2.5
        await asyncio.gather(*(caller(limiters[i % 2], stop) for i in range(8)))
        ordered = sorted(admitted)
        most = max(sum(1 for t in ordered if s <= t <= s + 1.0) for s in ordered)
        assert most <= 100, most
        assert len(admitted) >= 150  # 2.5 s of a 100-per-second window: the leases are not wasted away
        assert sum(s.calls for s in stores) < calls / 4, (sum(s.calls for s in stores), calls)
    finally:
        await one.dispose()
        await two.dispose()


async def test_a_steady_caller_under_the_limit_is_never_refused_by_leasing(pg_url: str) -> None:
    """What a lease leaves unused is lost, so a chunk follows demand: a caller at 60 % of the limit,
    one call at a time, gets every call through."""
    db = Database(pg_url)
    try:
        await db.migrate()
        limiter = WindowLimiter(SystemClock(), 10, 1.0, shared=SharedWindows(db, prefix="mcp:"), lease=0.3)
        results = []
        for _ in range(15):
            results.append(await limiter.admit("ep_slow"))
            await asyncio.sleep(1 / 6)
        assert all(results), results
    finally:
        await db.dispose()


async def _rows(db: Database, key: str) -> list[str]:
    return [
        row[0] for row in await db.fetch(text("SELECT buckets FROM rate_buckets WHERE key = :k"), {"k": key})
    ]


async def test_a_raised_limit_costs_no_more_storage_and_answers_at_once(pg_url: str) -> None:
    """An operator raising the MCP limit to a million a minute: the key's first call is answered at
    once, and the key stays one row of at most a window's buckets, however many are admitted."""
    db = Database(pg_url)
    try:
        await db.migrate()
        store = SharedWindows(db, prefix="mcp:")
        started = time.monotonic()
        assert await store.take("ep_big", 1_000_000, 60.0, count=1, hold=0.25) == 1
        assert time.monotonic() - started < 5.0  # the slot-per-admission table created a million rows here
        taken = 1
        for _ in range(40):
            taken += await store.take("ep_big", 1_000_000, 60.0, count=5000, hold=0.25)
        assert taken == 1 + 40 * 5000  # far under the limit: all of it
        (row,) = await _rows(db, "mcp:ep_big")
        buckets = json.loads(row)["b"]
        assert sum(n for _, _, n in buckets) == taken
        assert len(buckets) <= BUCKETS_PER_WINDOW + 3
    finally:
        await db.dispose()


async def test_concurrent_takers_far_under_the_limit_are_never_refused(pg_url: str) -> None:
    """Many takers at once, on two "instances", on a key none of them has used (its row is created in
    the race): a busy window is never read as a full one, so nobody under the limit is refused."""
    one, two = Database(pg_url), Database(pg_url)
    try:
        await one.migrate()
        stores = [SharedWindows(db, prefix="mcp:") for db in (one, two)]
        asked = [1 + i % 7 for i in range(200)]
        got = await asyncio.gather(
            *(stores[i % 2].take("ep_busy", 120_000, 60.0, count=n, hold=0.25) for i, n in enumerate(asked))
        )
        assert got == asked
        # the same through the leasing limiters MCP uses: every call admitted
        limiters = [WindowLimiter(SystemClock(), 120_000, 60.0, shared=s, lease=0.25) for s in stores]
        results = await asyncio.gather(*(limiters[i % 2].admit(f"ep_{i % 5}") for i in range(300)))
        assert all(results), results.count(False)
    finally:
        await one.dispose()
        await two.dispose()


async def test_racing_takers_never_put_more_than_the_limit_in_a_window(pg_url: str) -> None:
    """Exactness under concurrency, on the database's clock: each admission is bracketed by
    ``clock_timestamp()`` read just before and just after it; no ``window``-long interval certainly
    holds more than ``limit`` of them."""
    limit, window = 5, 0.3
    one, two = Database(pg_url), Database(pg_url)
    try:
        await one.migrate()
        stores = [SharedWindows(db) for db in (one, two)]
        now = text("SELECT extract(epoch FROM clock_timestamp())::float8")
        admitted: list[tuple[float, float]] = []

        async def taker(i: int, stop: float) -> None:
            db, store = (one, two)[i % 2], stores[i % 2]
            while time.monotonic() < stop:
                (before,) = (await db.fetch(now))[0]
                if await store.take("hook:nh_exact", limit, window):
                    (after,) = (await db.fetch(now))[0]
                    admitted.append((before, after))

        stop = time.monotonic() + 1.5
        await asyncio.gather(*(taker(i, stop) for i in range(16)))
        assert len(admitted) >= 10  # the window kept admitting as it slid
        for start, _ in admitted:
            inside = sum(1 for b, a in admitted if b >= start and a <= start + window)
            assert inside <= limit, (inside, start)
    finally:
        await one.dispose()
        await two.dispose()
