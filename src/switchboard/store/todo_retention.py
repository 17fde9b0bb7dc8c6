"""The retention sweep's statements (issue 28): terminal todos past retention deleted with their
history, one bounded batch per short transaction; docs/reliability.md, "Retention".

A batch picks at most ``limit`` terminal todos last changed before the cutoff, oldest first, through
``ix_todos_terminal`` (its predicate repeated literally, so PostgreSQL matches the partial index from a
prepared statement), deletes their ``todo_events`` and ``a2a_tasks`` rows (counted per table for the
metrics), then the todos. What hangs below an A2A task (push configs, their outbox rows, the stream's
event log) goes by ON DELETE CASCADE; every SQLite connection runs ``PRAGMA foreign_keys=ON``.

* PostgreSQL: the rows are locked ``FOR UPDATE SKIP LOCKED`` (a row another transaction holds, such as
  an operator's requeue, is left for the next sweep, never waited for) under a transaction-level
  advisory lock taken with ``try``: while one instance runs a batch, another's sweep ends at once, so
  instances on one database never fight over the same rows. ``lock_timeout`` bounds any other wait.
  Each batch commits on its own: no long transaction holds back autovacuum. While a sweep deletes,
  :meth:`TodoRetention.vacuum` runs ``VACUUM (SKIP_LOCKED)`` on the tables it deletes from, beside the
  batches (queue/retention.py): the space is reusable within seconds rather than at autovacuum's
  next visit (its launcher comes to a database once a minute, and a minute of deletions and claim
  updates was 30% of the soak's size). It is throttled as autovacuum is (``vacuum_cost_delay``).
* SQLite: the batch is one work of the group-commit writer (store/sqlite_writer.py) when there is one,
  so it queues behind this process's claims and acks like any other write and holds the write lock
  only while SQLite deletes; otherwise (a database in memory) ``sqlite_transaction``. Pages freed go
  back to the file with ``PRAGMA incremental_vacuum`` in small autocommit steps, paused between.

Ingest and claim never touch a terminal row (ingest's dedup index covers live rows only, claim takes
pending ones), so no batch holds a lock they wait on; a batch only shares SQLite's one write lock.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from typing import Any

from switchboard.store.db import Database
from switchboard.store.direct_writes import sqlite_errors

TERMINAL = "status IN ('done', 'dead', 'canceled')"  # ix_todos_terminal's predicate, literally
# pg_try_advisory_xact_lock key: one instance runs a retention batch at a time.
RETENTION_LOCK = 0x5B0A_2D28
VACUUM_PAGES = 64  # pages one incremental_vacuum step gives back (256 KiB at 4 KiB pages)
PG_LOCK_TIMEOUT = "1s"

_PICK_PG = (
    f"SELECT id FROM todos WHERE {TERMINAL} AND updated_at < $1 "
    "ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED"
)
_PICK_SQLITE = f"SELECT id FROM todos WHERE {TERMINAL} AND updated_at < ? ORDER BY updated_at LIMIT ?"
_OLDEST = f"SELECT min(updated_at) FROM todos WHERE {TERMINAL}"
_FINISHED_PG = f"SELECT count(*) FROM todos WHERE {TERMINAL} AND updated_at >= $1"
_FINISHED_SQLITE = f"SELECT count(*) FROM todos WHERE {TERMINAL} AND updated_at >= :since"
TABLES = ("todo_events", "a2a_tasks", "todos")  # deleted in this order; the metrics' table label
_DELETE_BY = {"todo_events": "todo_id", "a2a_tasks": "todo_id", "todos": "id"}
VACUUM_TABLES = ("todo_events", "a2a_task_events", "a2a_tasks", "todos")  # what a batch deletes from
PG_VACUUM_COST_DELAY = "2ms"


@dataclass(frozen=True, slots=True)
class Pruned:
    """Rows one batch deleted, per table (cascaded rows below an A2A task are not counted)."""

    todos: int = 0
    todo_events: int = 0
    a2a_tasks: int = 0

    def by_table(self) -> dict[str, int]:
        return {"todos": self.todos, "todo_events": self.todo_events, "a2a_tasks": self.a2a_tasks}


class TodoRetention:
    """The sweep's statements on one database; the loop that runs them is queue/retention.py."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def prune_batch(self, before_ms: int, limit: int) -> Pruned | None:
        """Delete at most ``limit`` terminal todos last changed before ``before_ms``, with their history.
        None on PostgreSQL when another instance is running a batch (this sweep should stop)."""
        if self.db.is_sqlite:
            return await self._prune_sqlite(before_ms, limit)
        return await self._prune_pg(before_ms, limit)

    async def oldest_terminal_ms(self) -> int | None:
        """``updated_at`` of the oldest terminal todo kept (one index probe), None when there is none."""
        if self.db.is_sqlite:
            rows = await self.db.sqlite_fetch(_OLDEST, {})
            return None if not rows or rows[0][0] is None else int(rows[0][0])
        async with self.db.pg_statement() as pg:
            value = await pg.fetchval(_OLDEST)
        return None if value is None else int(value)

    async def finished_since(self, since_ms: int) -> int:
        """Todos that became terminal since ``since_ms`` on every instance (one range of
        ``ix_todos_terminal``): the rate the sweep must keep up with once they are due."""
        if self.db.is_sqlite:
            rows = await self.db.sqlite_fetch(_FINISHED_SQLITE, {"since": since_ms})
            return int(rows[0][0]) if rows else 0
        async with self.db.pg_statement() as pg:
            return int(await pg.fetchval(_FINISHED_PG, since_ms))

    async def return_space(self) -> int | None:
        """SQLite: one short step giving up to ``VACUUM_PAGES`` free pages back to the file (a write of
        its own); the pages freed, 0 when none was free, None when the file cannot (PostgreSQL, whose
        autovacuum makes the space reusable in place, or a SQLite file made before auto_vacuum was
        INCREMENTAL). The sweep repeats it, pausing between steps."""
        if not self.db.is_sqlite:
            return None
        mode = await self.db.sqlite_fetch("PRAGMA auto_vacuum", {})
        if not mode or int(mode[0][0]) != 2:  # 2: INCREMENTAL; a file made before it keeps NONE
            return None
        before = await self._freelist()
        if before == 0:
            return 0
        await self._vacuum_step()
        return max(0, before - await self._freelist())

    @property
    def can_vacuum(self) -> bool:
        """Whether :meth:`vacuum` does anything: PostgreSQL only (SQLite gives pages back through
        :meth:`return_space`)."""
        return not self.db.is_sqlite

    async def kept_estimate(self) -> float:
        """PostgreSQL: the planner's estimate of the todos kept (``pg_class.reltuples``, one catalog
        read; 0 before the table's first ANALYZE); 0 on SQLite."""
        if self.db.is_sqlite:
            return 0.0
        async with self.db.pg_statement() as pg:
            value = await pg.fetchval("SELECT reltuples FROM pg_class WHERE oid = 'todos'::regclass")
        return max(0.0, float(value or 0.0))

    async def vacuum(self) -> None:
        """PostgreSQL: ``VACUUM (SKIP_LOCKED)`` the tables a batch deletes from (and the A2A stream's
        event log below a task), so their dead rows (the deletions and the old versions claims and
        acks leave) are reusable at once. Not in a transaction (asyncpg sends a statement without
        arguments as a simple query); paced as autovacuum is (``vacuum_cost_delay`` 2 ms, the
        PostgreSQL default for autovacuum; a manual VACUUM is otherwise unthrottled), so a large table
        is vacuumed gently; it takes no lock ingest, claims or acks wait on, skips a table autovacuum
        is busy with, and a role that does not own the tables gets PostgreSQL's warning and a skip."""
        assert self.can_vacuum
        async with self.db.pg_statement() as pg:
            await pg.execute(f"SET vacuum_cost_delay = '{PG_VACUUM_COST_DELAY}'")
            try:
                await pg.execute(f"VACUUM (SKIP_LOCKED) {', '.join(VACUUM_TABLES)}")
            finally:
                with contextlib.suppress(Exception):  # a connection broken meanwhile is dropped anyway
                    await pg.execute("RESET vacuum_cost_delay")

    async def _vacuum_step(self) -> None:
        """One ``incremental_vacuum`` in autocommit, run to its end: the driver's ``execute`` steps a
        statement without result columns once, and each step frees one page; ``executescript`` runs it
        through (sqlite3_exec)."""
        with sqlite_errors():
            async with self.db.engine.connect() as conn:
                raw = await conn.get_raw_connection()
                driver: Any = raw.driver_connection  # aiosqlite, in autocommit
                await driver.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES})")

    async def _freelist(self) -> int:
        rows = await self.db.sqlite_fetch("PRAGMA freelist_count", {})
        return int(rows[0][0]) if rows else 0

    async def _prune_pg(self, before_ms: int, limit: int) -> Pruned | None:
        async with self.db.pg_transaction() as (_, pg):
            if not await pg.fetchval("SELECT pg_try_advisory_xact_lock($1)", RETENTION_LOCK):
                return None
            await pg.execute(f"SET LOCAL lock_timeout = '{PG_LOCK_TIMEOUT}'")
            ids = [row[0] for row in await pg.fetch(_PICK_PG, before_ms, limit)]
            if not ids:
                return Pruned()
            counts: dict[str, int] = {}
            for table in TABLES:
                status = await pg.execute(
                    f"DELETE FROM {table} WHERE {_DELETE_BY[table]} = ANY($1::varchar[])", ids
                )
                counts[table] = int(status.rsplit(" ", 1)[-1])  # "DELETE <n>"
        return Pruned(**counts)

    async def _prune_sqlite(self, before_ms: int, limit: int) -> Pruned:
        writer = self.db.sqlite_writer()
        if writer is not None:
            return await writer.run(lambda conn: _prune_in(conn, before_ms, limit))
        async with self.db.sqlite_transaction() as (_, driver):
            ids = [row[0] for row in await driver.execute_fetchall(_PICK_SQLITE, (before_ms, limit))]
            counts: dict[str, int] = {}
            for table in TABLES:
                cursor = await driver.execute(_delete_sqlite(table, len(ids)), ids) if ids else None
                counts[table] = 0 if cursor is None else int(cursor.rowcount)
            return Pruned(**counts)


def _delete_sqlite(table: str, n: int) -> str:
    return f"DELETE FROM {table} WHERE {_DELETE_BY[table]} IN ({','.join('?' * n)})"


def _prune_in(conn: sqlite3.Connection, before_ms: int, limit: int) -> Pruned:
    """The SQLite batch, in the writer thread inside its transaction (the pick and the deletes see
    the same rows: nothing else writes while the write lock is held)."""
    ids: list[Any] = [row[0] for row in conn.execute(_PICK_SQLITE, (before_ms, limit))]
    if not ids:
        return Pruned()
    counts = {table: int(conn.execute(_delete_sqlite(table, len(ids)), ids).rowcount) for table in TABLES}
    return Pruned(**counts)
