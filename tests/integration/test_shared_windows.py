"""Shared rate windows on a real PostgreSQL (store/windows.py): one window for every process and
instance on the database, exact under concurrency, and the same sliding rule as the in-process log."""

from __future__ import annotations

import asyncio
import time

import pytest

from switchboard.clock import SystemClock
from switchboard.ratelimit import WindowLimiter
from switchboard.store.db import Database
from switchboard.store.windows import SharedWindows

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
