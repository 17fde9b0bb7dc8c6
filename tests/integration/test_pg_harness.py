"""Checks of the PostgreSQL test harness itself: if these fail, every postgres test will."""

from __future__ import annotations

import asyncpg
import pytest

from tests.support.pg import PostgresServer, find_pg_bin, to_asyncpg_dsn

# pg_server / pg_url come from tests.support.pg_fixtures, registered by tests/conftest.py.

pytestmark = pytest.mark.postgres


async def _connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(to_asyncpg_dsn(url), timeout=10)


def test_binaries_are_found(pg_server: PostgresServer) -> None:
    for name in ("initdb", "pg_ctl", "postgres"):
        assert find_pg_bin(name) is not None, name


async def test_select_one_and_test_settings(pg_url: str) -> None:
    conn = await _connect(pg_url)
    try:
        assert await conn.fetchval("select 1") == 1
        assert await conn.fetchval("show fsync") == "off"
        assert await conn.fetchval("show synchronous_commit") == "off"
        assert await conn.fetchval("show max_connections") == "200"
        assert await conn.fetchval("show listen_addresses") == "127.0.0.1"
    finally:
        await conn.close()


async def test_each_test_gets_a_fresh_database(pg_url: str, pg_server: PostgresServer) -> None:
    assert pg_url.startswith(f"postgresql+asyncpg://postgres@127.0.0.1:{pg_server.port}/t_")
    conn = await _connect(pg_url)
    try:
        assert await conn.fetchval("select count(*) from pg_tables where schemaname = 'public'") == 0
    finally:
        await conn.close()


async def test_for_update_skip_locked(pg_url: str) -> None:
    first, second = await _connect(pg_url), await _connect(pg_url)
    claim = "select id from jobs order by id limit 1 for update skip locked"
    try:
        await first.execute("create table jobs (id int primary key); insert into jobs values (1), (2), (3)")
        tx1, tx2 = first.transaction(), second.transaction()
        await tx1.start()
        await tx2.start()
        assert await first.fetchval(claim) == 1
        assert await second.fetchval(claim) == 2  # row 1 is locked by the first claimer: skipped
        with pytest.raises(asyncpg.LockNotAvailableError):
            await second.fetchval("select id from jobs where id = 1 for update nowait")
        await tx2.rollback()
        await tx1.rollback()
        assert await second.fetchval(claim) == 1  # locks released
    finally:
        await first.close()
        await second.close()


async def test_kill_then_start_recovers_committed_data(pg_server: PostgresServer, pg_url: str) -> None:
    port = pg_server.port
    conn = await _connect(pg_url)
    try:
        await conn.execute("create table t (v text); insert into t values ('survives')")
    finally:
        await conn.close()

    pg_server.kill()
    assert not pg_server.is_running
    with pytest.raises(ConnectionRefusedError):
        await _connect(pg_url)

    pg_server.start()
    assert pg_server.port == port  # URLs handed out before the crash stay valid
    conn = await _connect(pg_url)
    try:
        assert await conn.fetchval("select v from t") == "survives"
    finally:
        await conn.close()


def test_standalone_server_cleans_up(pg_server: PostgresServer) -> None:
    """A second, independent server; pg_server is requested only for its skip/fail gate."""
    # Default base dir on purpose: as root the server user must be able to reach it, and
    # pytest's tmp_path sits under a root-only 0700 folder.
    with PostgresServer() as server:
        root = server.root
        assert (root / "data" / "PG_VERSION").exists()
        url = server.create_database("standalone_check")
        assert url == f"postgresql+asyncpg://postgres@127.0.0.1:{server.port}/standalone_check"
        server.drop_database("standalone_check")
    assert not root.exists()
