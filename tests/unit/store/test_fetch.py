"""``Database.fetch``: one read with no transaction around it, and recovery from a dropped connection
without a pre-ping per checkout (issue 18)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, func, insert, select, text

from switchboard.store.db import Database
from switchboard.store.schema import humans


async def test_a_single_read_sees_committed_rows_and_holds_no_transaction(database: Database) -> None:
    async with database.begin() as conn:
        await conn.execute(
            insert(humans).values(id="h_1", email="ann@example.test", password_hash="x", created_at=1)
        )
    rows = await database.fetch(select(humans.c.id, humans.c.email))
    assert [tuple(r) for r in rows] == [("h_1", "ann@example.test")]
    seen: list[bool] = []

    def after(conn: Any, *_args: Any) -> None:  # asyncpg and sqlite3 both say if a transaction is open
        driver = conn.connection.driver_connection
        seen.append(driver.in_transaction if database.is_sqlite else driver.is_in_transaction())

    event.listen(database.engine.sync_engine, "after_cursor_execute", after)
    try:
        await database.fetch(select(humans.c.id))
        async with database.read() as conn:  # a read() block still opens one: the contrast
            await conn.execute(select(humans.c.id))
    finally:
        event.remove(database.engine.sync_engine, "after_cursor_execute", after)
    assert seen[0] is False and seen[-1] is True, seen


@pytest.mark.postgres
async def test_a_read_recovers_once_from_connections_the_server_dropped(pg_url: str) -> None:
    database = Database(pg_url, pool_size=2)
    await database.migrate()
    try:
        pids = {int((await database.fetch(text("SELECT pg_backend_pid()")))[0][0])}
        # Another session ends the pooled connection, as a server restart or a proxy would.
        other = Database(pg_url, pool_size=1)
        try:
            terminated = await other.fetch(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                {"pids": list(pids)},
            )
            assert [r[0] for r in terminated] == [True]
        finally:
            await other.dispose()
        # No pre-ping: the dead connection is found when used, invalidated, and the read retried once.
        (row,) = await database.fetch(select(func.count()).select_from(humans))
        assert row[0] == 0
        (fresh,) = await database.fetch(text("SELECT pg_backend_pid()"))
        assert int(fresh[0]) not in pids
    finally:
        await database.dispose()
