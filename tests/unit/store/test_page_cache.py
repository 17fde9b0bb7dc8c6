"""``Database.cap_page_cache``: the notify worker process holds at most a few hundred KiB of SQLite pages
per connection (a flood of dropped notifications, each a delivery-log row, filled SQLite's default 2,000
KiB on every pooled connection: scenario 3 of docs/benchmarks.md). PostgreSQL has no such cache."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from switchboard.store.db import Database


async def _cache_sizes(database: Database, connections: int) -> list[int]:
    """``PRAGMA cache_size`` as several pooled connections at once report it."""
    opened = [await database.engine.connect() for _ in range(connections)]
    try:
        return [int((await c.execute(text("PRAGMA cache_size"))).scalar_one()) for c in opened]
    finally:
        for c in opened:
            await c.close()


async def test_every_new_sqlite_connection_is_capped(tmp_path: Path) -> None:
    capped = Database(f"sqlite+aiosqlite:///{tmp_path / 'capped.db'}")
    plain = Database(f"sqlite+aiosqlite:///{tmp_path / 'plain.db'}")
    capped.cap_page_cache(256)
    try:
        assert await _cache_sizes(capped, 3) == [-256, -256, -256]  # negative: KiB, not pages
        assert await _cache_sizes(plain, 1) != [-256]  # SQLite's default stays elsewhere
    finally:
        await capped.dispose()
        await plain.dispose()


async def test_a_capped_database_still_reads_and_writes(database: Database) -> None:
    """On both engines (a no-op on PostgreSQL); on SQLite the pool's next connections are capped."""
    database.cap_page_cache(256)
    await database.dispose()  # the pool opens new connections from here on
    async with database.begin() as conn:
        await conn.execute(text("CREATE TABLE cache_probe (n INTEGER)"))
        await conn.execute(text("INSERT INTO cache_probe VALUES (1)"))
    async with database.read() as conn:
        assert (await conn.execute(text("SELECT n FROM cache_probe"))).scalar_one() == 1
        if database.is_sqlite:
            assert (await conn.execute(text("PRAGMA cache_size"))).scalar_one() == -256


async def test_the_servers_connections_are_capped_too(tmp_path: Path) -> None:
    """The server's pooled connections keep at most ``SERVER_PAGE_CACHE_KIB`` each: under ingest each
    filled SQLite's default 2,000 KiB (issue 18, scenario 3)."""
    from switchboard.app import SERVER_PAGE_CACHE_KIB, create_app
    from switchboard.services import build_services
    from tests.support.server import make_settings

    services = build_services(make_settings(tmp_path))
    create_app(services)
    try:
        assert await _cache_sizes(services.db, 3) == [-SERVER_PAGE_CACHE_KIB] * 3
    finally:
        await services.close()
