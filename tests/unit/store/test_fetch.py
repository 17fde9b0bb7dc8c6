"""``Database.fetch``: one read with no transaction around it, and recovery from a dropped connection
without a pre-ping per checkout (issue 18)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, func, insert, select, text

from switchboard.core.clock import ManualClock
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.errors import StoreUnavailable
from switchboard.store.schema import humans
from switchboard.store.todos import NewTodo, TodoStore
from switchboard.store.transitions import TransitionHub


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


@pytest.mark.postgres
async def test_the_claim_path_drops_a_connection_the_server_ended_and_the_next_claim_works(
    pg_url: str, hub: TransitionHub
) -> None:
    """A claim or an ack alone runs on the pooled connection's asyncpg connection, past SQLAlchemy's
    statement machinery, so SQLAlchemy cannot see that connection die: the claim path itself must drop
    it from the pool, or every later claim that gets it fails too."""
    database = Database(pg_url, pool_size=1)
    await database.migrate()
    clock = ManualClock(1_700_000_000.0)
    try:
        accounts = AccountStore(database, clock)
        hid = await accounts.create_human("owner@example.com", "correct horse battery")
        ep, _ = await accounts.vend_endpoint(hid, "ep-a", ["inbox"], ["claim_next"])
        store = TodoStore(database, hub, clock)
        await store.create(
            [NewTodo(endpoint_id=ep.id, queue="inbox", title=f"t{n}", payload=None) for n in range(2)]
        )
        async with database.pg_statement() as driver:
            pid = await driver.fetchval("SELECT pg_backend_pid()")
        other = Database(pg_url, pool_size=1)
        try:
            (ended,) = await other.fetch(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            assert ended[0] is True
        finally:
            await other.dispose()
        with pytest.raises(StoreUnavailable):
            await store.claim_next(ep.id, ["inbox"], 60)  # a write is not retried: it fails once
        first = await store.claim_next(ep.id, ["inbox"], 60)
        second = await store.claim_next(ep.id, ["inbox"], 60)
        assert first is not None and second is not None and first.id != second.id
        async with database.pg_statement() as driver:
            assert await driver.fetchval("SELECT pg_backend_pid()") != pid
    finally:
        await database.dispose()
