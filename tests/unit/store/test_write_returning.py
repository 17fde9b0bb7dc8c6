"""``Database.write_returning``: one writing statement as its own short transaction, on both databases.

On SQLite it bypasses ``begin()`` (one trip to the driver's thread, autocommit), so what ``begin()``
guarantees is checked here again: the change is committed and visible to other connections, the write
lock is free once it returns, and driver errors come out as store errors.
"""

from __future__ import annotations

import pytest
from sqlalchemy import bindparam, insert, select, update

from switchboard.store.db import Database
from switchboard.store.errors import Conflict
from switchboard.store.schema import humans


async def add(database: Database, human_id: str, email: str) -> None:
    async with database.begin() as conn:
        await conn.execute(insert(humans).values(id=human_id, email=email, password_hash="x", created_at=1))


async def test_the_change_is_committed_and_its_rows_returned(database: Database) -> None:
    await add(database, "h_1", "ann@example.test")
    statement = (
        update(humans)
        .where(humans.c.id == bindparam("p_id"))
        .values(email=bindparam("p_email"))
        .returning(humans.c.id, humans.c.email)
    )
    rows = await database.write_returning(statement, {"p_id": "h_1", "p_email": "bea@example.test"})
    assert rows == [("h_1", "bea@example.test")]
    async with database.read() as conn:  # another connection sees it: committed, not pending
        assert (await conn.execute(select(humans.c.email))).scalar_one() == "bea@example.test"
    # the write lock is free again: a write transaction starts at once (BEGIN IMMEDIATE on SQLite)
    async with database.begin() as conn:
        await conn.execute(update(humans).values(email="cy@example.test"))


async def test_a_prepared_write_runs_as_its_statement_and_keeps_only_its_text_on_sqlite(
    database: Database,
) -> None:
    """``prepare_write``: the statement's SQL is kept (on SQLite without the statement, whose tree the
    caller can let go), literals in it keep their values, and each run binds that run's parameters."""
    await add(database, "h_1", "ann@example.test")
    await add(database, "h_2", "bea@example.test")
    statement = (
        update(humans)
        .where(humans.c.id == bindparam("p_id"))
        .values(email=bindparam("p_email"), created_at=7)  # 7: a literal, bound by the statement itself
        .returning(humans.c.id, humans.c.email, humans.c.created_at)
    )
    prepared = database.prepare_write(statement)
    assert (prepared.statement is None) == database.is_sqlite
    if database.is_sqlite:
        assert prepared.sql == str(statement.compile(dialect=database.engine.dialect))
    assert await database.write_returning(prepared, {"p_id": "h_1", "p_email": "cy@example.test"}) == [
        ("h_1", "cy@example.test", 7)
    ]
    assert await database.write_returning(prepared, {"p_id": "h_2", "p_email": "di@example.test"}) == [
        ("h_2", "di@example.test", 7)
    ]
    assert await database.write_returning(prepared, {"p_id": "nope", "p_email": "x"}) == []
    async with database.read() as conn:
        emails = (await conn.execute(select(humans.c.email).order_by(humans.c.id))).scalars().all()
    assert emails == ["cy@example.test", "di@example.test"]


async def test_no_matching_row_returns_nothing(database: Database) -> None:
    statement = (
        update(humans).where(humans.c.id == bindparam("p_id")).values(email="x").returning(humans.c.id)
    )
    assert await database.write_returning(statement, {"p_id": "nope"}) == []


async def test_a_constraint_violation_is_a_conflict_and_changes_nothing(database: Database) -> None:
    await add(database, "h_1", "ann@example.test")
    await add(database, "h_2", "bea@example.test")
    statement = update(humans).where(humans.c.id == bindparam("p_id")).values(email="ann@example.test")
    with pytest.raises(Conflict):
        await database.write_returning(statement.returning(humans.c.id), {"p_id": "h_2"})
    async with database.read() as conn:
        emails = (await conn.execute(select(humans.c.email).order_by(humans.c.id))).scalars().all()
    assert emails == ["ann@example.test", "bea@example.test"]


async def test_a_write_after_a_plain_read_on_the_same_connection_is_committed(database: Database) -> None:
    """SQLite: a single read (``Database.fetch``) used to switch its connection to AUTOCOMMIT and back,
    and the way back left the driver in its implicit-transaction mode; the next ``write_returning`` on
    that connection then ran inside a transaction nobody committed, and the pool rolled it back."""
    await add(database, "h_1", "ann@example.test")
    await database.engine.dispose()  # from here on one connection, reused by each call in turn
    assert [r.id for r in await database.fetch(select(humans.c.id))] == ["h_1"]
    statement = (
        update(humans)
        .where(humans.c.id == bindparam("p_id"))
        .values(email=bindparam("p_email"))
        .returning(humans.c.id)
    )
    assert await database.write_returning(statement, {"p_id": "h_1", "p_email": "bea@example.test"}) == [
        ("h_1",)
    ]
    await database.engine.dispose()  # a fresh connection reads what was committed
    assert [r.email for r in await database.fetch(select(humans.c.email))] == ["bea@example.test"]
