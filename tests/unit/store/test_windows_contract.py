"""The ``rate_buckets`` home's contract (store/windows.py): shared rate windows on PostgreSQL.

A window takes up to its limit and refuses past it, slides as time passes, keeps keys (and prefixes)
apart, and is one window for every instance on the database. SQLite has none (one instance: the
in-process log is the window), and says so.

Time is injected without sleeping: the window reads the database's ``clock_timestamp()``, so each test
database gets a ``fakeclock.clock_timestamp()`` that returns a time the test sets, found first on the
``search_path`` (``pg_catalog`` named after it, so the built-in is shadowed) of every new connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from switchboard.core.clock import ManualClock
from switchboard.store.db import Database
from switchboard.store.windows import SharedWindows
from tests.support.pg import PostgresServer, fresh_database
from tests.support.templates import migrated_pg_template

WINDOW = 60.0  # seconds: buckets of one second (store/windows.py BUCKETS_PER_WINDOW)

_FAKE_CLOCK = (
    "CREATE SCHEMA fakeclock",
    "CREATE TABLE fakeclock.now (t double precision NOT NULL)",
    "INSERT INTO fakeclock.now (t) VALUES (0)",
    """CREATE FUNCTION fakeclock.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE
       AS $$ SELECT pg_catalog.to_timestamp(t) FROM fakeclock.now $$""",
)


class Cluster:
    """Instances (``Database`` objects) on one PostgreSQL database whose clock is ``clock``."""

    def __init__(self, url: str, clock: ManualClock) -> None:
        self.url, self.clock = url, clock
        self.instances: list[Database] = []

    def instance(self) -> Database:
        db = Database(self.url)
        self.instances.append(db)
        return db

    async def tick(self, seconds: float = 0.0) -> None:
        """Move the database's clock (every instance reads the one clock) to ``clock`` + ``seconds``."""
        self.clock.advance(seconds)
        async with self.instances[0].begin() as conn:
            await conn.execute(text("UPDATE fakeclock.now SET t = :t"), {"t": self.clock.now()})


@pytest.fixture
async def cluster(
    pg_server: PostgresServer, request: pytest.FixtureRequest, clock: ManualClock
) -> AsyncIterator[Cluster]:
    if not pg_server.is_running:  # a fault test may have left it killed
        pg_server.start()
    with fresh_database(pg_server, request.node.name, await migrated_pg_template(pg_server)) as url:
        setup = Database(url)
        try:
            async with setup.begin() as conn:
                for statement in _FAKE_CLOCK:
                    await conn.execute(text(statement))
                name = (await conn.execute(text("SELECT current_database()"))).scalar_one()
                await conn.execute(
                    text(f'ALTER DATABASE "{name}" SET search_path TO fakeclock, pg_catalog, public')
                )
        finally:
            await setup.dispose()  # its connections predate the search_path
        c = Cluster(url, clock)
        c.instance()
        await c.tick()
        try:
            yield c
        finally:
            for db in c.instances:
                await db.dispose()


def test_sqlite_refuses_and_postgresql_accepts(db_url: str) -> None:
    db = Database(db_url)
    if db.is_sqlite:
        with pytest.raises(ValueError, match="PostgreSQL"):
            SharedWindows(db)
    else:
        assert SharedWindows(db, prefix="mcp:").prefix == "mcp:"


async def test_the_fake_clock_is_the_one_the_window_reads(cluster: Cluster) -> None:
    async with cluster.instances[0].read() as conn:
        now = (await conn.execute(text("SELECT extract(epoch FROM clock_timestamp())"))).scalar_one()
    assert float(now) == cluster.clock.now()


async def test_takes_within_the_limit_and_refuses_past_it(cluster: Cluster) -> None:
    windows = SharedWindows(cluster.instances[0])
    assert [await windows.take("k", 3, WINDOW) for _ in range(4)] == [1, 1, 1, 0]
    await cluster.tick(30)
    assert await windows.take("k", 3, WINDOW) == 0  # half a window later: still full
    assert await windows.take("k", 4, WINDOW) == 1  # a raised limit has room for one more


async def test_a_count_takes_only_what_fits(cluster: Cluster) -> None:
    windows = SharedWindows(cluster.instances[0])
    assert await windows.take("k", 5, WINDOW, count=3) == 3
    assert await windows.take("k", 5, WINDOW, count=3) == 2
    assert await windows.take("k", 5, WINDOW, count=3) == 0


async def test_the_window_slides_with_the_clock(cluster: Cluster) -> None:
    windows = SharedWindows(cluster.instances[0])
    assert await windows.take("k", 2, WINDOW) == 1
    await cluster.tick(20)
    assert await windows.take("k", 2, WINDOW) == 1
    await cluster.tick(39)  # 59 s after the first admission: both still in the window
    assert await windows.take("k", 2, WINDOW) == 0
    await cluster.tick(2.5)  # the first has left (its whole one-second bucket is a window old)
    assert await windows.take("k", 2, WINDOW) == 1
    assert await windows.take("k", 2, WINDOW) == 0  # the second is still in it
    await cluster.tick(WINDOW + 2)
    assert await windows.take("k", 2, WINDOW, count=5) == 2  # all gone: the whole limit again


async def test_a_lease_holds_its_admissions_longer(cluster: Cluster) -> None:
    windows = SharedWindows(cluster.instances[0])
    assert await windows.take("k", 2, WINDOW, count=2, hold=30.0) == 2
    await cluster.tick(WINDOW + 2)
    assert await windows.take("k", 2, WINDOW) == 0  # usable until 30 s after the take: still counted
    await cluster.tick(30)
    assert await windows.take("k", 2, WINDOW) == 1


async def test_keys_and_prefixes_are_independent(cluster: Cluster) -> None:
    db = cluster.instances[0]
    plain, mcp = SharedWindows(db), SharedWindows(db, prefix="mcp:")
    assert await plain.take("a", 1, WINDOW) == 1
    assert await plain.take("a", 1, WINDOW) == 0
    assert await plain.take("b", 1, WINDOW) == 1  # another key: its own window
    assert await mcp.take("a", 1, WINDOW) == 1  # the same key under another limit's prefix
    assert await mcp.take("a", 1, WINDOW) == 0
    async with db.read() as conn:
        keys = (await conn.execute(text("SELECT key FROM rate_buckets ORDER BY key"))).scalars().all()
    assert keys == ["a", "b", "mcp:a"]


async def test_two_instances_share_one_window(cluster: Cluster) -> None:
    one, two = SharedWindows(cluster.instances[0]), SharedWindows(cluster.instance())
    assert await one.take("hook:h1", 3, WINDOW, count=2) == 2
    assert await two.take("hook:h1", 3, WINDOW, count=2) == 1  # the other instance's two count
    assert await one.take("hook:h1", 3, WINDOW) == 0
    # at once, half through each instance: exactly the limit in all
    racing = await asyncio.gather(*((one, two)[i % 2].take("hook:h2", 10, WINDOW) for i in range(40)))
    assert sum(racing) == 10
    await cluster.tick(WINDOW + 2)  # the window slides for both: one clock, the database's
    assert await two.take("hook:h1", 3, WINDOW, count=3) == 3
    assert await one.take("hook:h1", 3, WINDOW) == 0
