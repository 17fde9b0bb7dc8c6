"""``Database.sqlite_autocommit``: raw statements, each its own transaction, in order (the delivery log's
appends, SPEC-0024 REQ-7): what one statement wrote stays when a later one fails, and a constraint
comes out as ``Conflict``, like every other write."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from switchboard.store.db import Database
from switchboard.store.errors import Conflict


async def test_each_statement_commits_on_its_own(tmp_path: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    try:
        async with database.begin() as conn:
            await conn.execute(text("CREATE TABLE t (n INTEGER PRIMARY KEY)"))
        await database.sqlite_autocommit([("INSERT INTO t (n) VALUES (?), (?)", [1, 2])])
        with pytest.raises(Conflict):
            await database.sqlite_autocommit(
                [("INSERT INTO t (n) VALUES (?)", [3]), ("INSERT INTO t (n) VALUES (?)", [1])]
            )
        async with database.read() as conn:
            assert list((await conn.execute(text("SELECT n FROM t ORDER BY n"))).scalars()) == [1, 2, 3]
        probe = sqlite3.connect(tmp_path / "a.db", timeout=0)  # nothing left holding the write lock
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
        finally:
            probe.close()
    finally:
        await database.dispose()
