"""Single writing statements on SQLite without a transaction around them (:class:`DirectWrites`, a part of
:class:`switchboard.store.db.Database`): the notify worker's health folds and delivery log, whose writes
must never hold SQLite's one write lock across the event loop's turns (SPEC-0024 REQ-7)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase

from switchboard.store.errors import Conflict, StoreUnavailable

_Compiled = tuple[str, tuple[str, ...], dict[str, Any]]
COMPILED_KEPT = 256  # statements write_returning keeps compiled (SQLite); callers reuse a few


@contextmanager
def sqlite_errors() -> Iterator[None]:
    """SQLite's driver errors as store errors, for the paths that use the aiosqlite connection itself
    (these writes, ``Database.sqlite_transaction``): a constraint is :class:`Conflict`, anything else
    from the database or the connection :class:`StoreUnavailable`."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise Conflict(str(exc).splitlines()[0][:200]) from exc
    except (sqlite3.Error, OperationalError, InterfaceError, OSError) as exc:
        raise StoreUnavailable("database unavailable") from exc


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """A writing statement ready for :meth:`Database.write_returning`, without its SQLAlchemy tree on
    SQLite: there only the SQL text, its parameter order and its literals' values are kept. A long
    statement's tree is large (the notify worker's health statements, 227 rows of nine bound columns
    in all, held about 4.5 MiB of Python objects per worker process once compiled), and SQLite needs
    none of it to run the text. On PostgreSQL it holds the statement (SQLAlchemy executes it)."""

    statement: UpdateBase | None
    sql: str = ""
    names: tuple[str, ...] = ()
    defaults: dict[str, Any] = field(default_factory=dict)


class DirectWrites:
    """What :class:`switchboard.store.db.Database` writes on SQLite one statement at a time."""

    engine: AsyncEngine
    is_sqlite: bool
    _compiled: dict[UpdateBase, _Compiled]

    def begin(self) -> AbstractAsyncContextManager[AsyncConnection]:
        raise NotImplementedError  # Database's

    def prepare_write(self, statement: UpdateBase) -> PreparedWrite:
        """``statement`` for repeated :meth:`write_returning` calls; on SQLite compiled now, and the
        statement itself not kept (so the caller can let it go)."""
        if not self.is_sqlite:
            return PreparedWrite(statement)
        sql, names, defaults = self._compile(statement)
        return PreparedWrite(None, sql, names, defaults)

    async def write_returning(
        self, statement: UpdateBase | PreparedWrite, params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One writing statement as its own transaction; its RETURNING rows as plain tuples.

        On SQLite it runs in autocommit, with one trip to the driver's thread that executes it and
        fetches its rows. A transaction from ``begin()`` takes three trips (BEGIN IMMEDIATE, the
        statement, COMMIT), each waiting for the event loop's next turn, and SQLite's write lock is held
        across all of them. In a busy process that held the lock for tens of milliseconds, while writers
        in the other process (ingest, with ``SWITCHBOARD_NOTIFY_PROCESS``) slept in SQLite's busy
        handler. Here the lock is held only while SQLite executes the statement.

        For statements built once and reused, with bound ``params`` that need no type conversion
        (strings, numbers, booleans, NULL): on SQLite each statement is compiled once and kept."""
        if isinstance(statement, PreparedWrite) and statement.statement is not None:
            statement = statement.statement
        if not self.is_sqlite:
            assert not isinstance(statement, PreparedWrite)
            async with self.begin() as conn:
                return [tuple(row) for row in (await conn.execute(statement, dict(params))).all()]
        if isinstance(statement, PreparedWrite):
            sql, names, defaults = statement.sql, statement.names, statement.defaults
        else:
            sql, names, defaults = self._compiled_sql(statement)
        args = tuple(params[name] if name in params else defaults[name] for name in names)
        with sqlite_errors():
            async with self.engine.connect() as conn:
                raw = await conn.get_raw_connection()
                driver: Any = raw.driver_connection  # the aiosqlite connection, in autocommit
                rows = await driver.execute_fetchall(sql, args)
        return [tuple(row) for row in rows]

    async def sqlite_autocommit(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """SQLite only: raw statements (no RETURNING), each in autocommit as its own transaction, in
        order, on one pooled connection: one trip to the driver's thread per statement.

        Such a statement is one ``sqlite3_step``, and SQLite takes and releases its write lock inside
        that one call, while the GIL is released: the lock is never held while a thread of this process
        waits for the GIL or for the event loop's next turn. A transaction from ``begin()`` holds it
        across both (three trips), and every step of a longer transaction or of a RETURNING fetch waits
        for the GIL with the lock held (up to the switch interval, 5 ms, in a busy process). For rows
        that need no atomicity with each other, like the delivery log's."""
        assert self.is_sqlite
        with sqlite_errors():
            async with self.engine.connect() as conn:
                raw = await conn.get_raw_connection()
                driver: Any = raw.driver_connection  # the aiosqlite connection, in autocommit
                for sql, args in statements:
                    await driver.execute_fetchall(sql, tuple(args))

    def _compiled_sql(self, statement: UpdateBase) -> _Compiled:
        """SQL text, parameter order and the values of the statement's own literals (its defaults)."""
        found = self._compiled.get(statement)
        if found is None:
            if len(self._compiled) >= COMPILED_KEPT:
                self._compiled.clear()
            found = self._compiled[statement] = self._compile(statement)
        return found

    def _compile(self, statement: UpdateBase) -> _Compiled:
        compiled = statement.compile(dialect=self.engine.dialect)
        assert isinstance(compiled, SQLCompiler)
        defaults = {name: bind.effective_value for name, bind in compiled.binds.items()}
        return compiled.string, tuple(compiled.positiontup or ()), defaults
