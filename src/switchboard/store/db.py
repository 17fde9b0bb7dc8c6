"""Engines for SQLite (embedded default) and PostgreSQL, migrations, and driver-error translation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
from sqlalchemy import Row, event, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.dml import UpdateBase

from switchboard.store.direct_writes import DirectWrites, _Compiled, sqlite_errors
from switchboard.store.errors import Conflict, StoreUnavailable
from switchboard.store.files import secure_sqlite
from switchboard.store.sqlite_writer import PRAGMAS, SqliteWriter

if TYPE_CHECKING:
    from alembic.config import Config

# alembic is imported where a schema is read or changed, not here: the notify worker processes and most
# CLI commands never touch the schema, and every process start pays for every import.

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration's revision. A new migration moves it (tests/unit/store/test_migration_hashes.py
# fails until it names the script directory's head).
HEAD = "a2a_push_replay"
_MIGRATION_LOCK = 0x5B0A_2D24  # pg_advisory_lock key: one instance migrates at a time


@dataclass(frozen=True)
class SchemaStatus:
    """Where a database's schema stands against the migrations this build ships."""

    current: str | None  # the database's alembic revision; None for an empty database
    head: str  # the newest revision this build knows
    known: bool  # False: the database was migrated by a newer build (or another program)

    @property
    def state(self) -> str:
        """``empty``, ``behind``, ``head`` or ``unknown``."""
        if self.current is None:
            return "empty"
        if not self.known:
            return "unknown"
        return "head" if self.current == self.head else "behind"


class SchemaMismatch(Exception):
    """The schema is one this build must not run on; the message names the command that fixes it."""


class Database(DirectWrites):
    """One engine plus the facts about its dialect that SQL needs (SKIP LOCKED, BEGIN IMMEDIATE)."""

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self.engine: AsyncEngine = create_async_engine(url, connect_args={"timeout": 30})
            _sqlite_pragmas(self.engine)
        else:
            # No pre-ping: it cost a ``BEGIN; ; ROLLBACK`` round trip on every checkout (about a fifth
            # of a claim's wall time, issue 18). A dropped connection is found when it is used instead:
            # SQLAlchemy invalidates it and every pooled connection older than the error, ``fetch``
            # retries a read once on a fresh one, and a write fails once as ``StoreUnavailable`` (503).
            self.engine = create_async_engine(
                url, pool_size=pool_size, max_overflow=pool_size, pool_timeout=10
            )

        # Same pool; the option tells the SQLite begin hook this transaction will write.
        self._writer: AsyncEngine = self.engine.execution_options(switchboard_write=True)
        # Single reads in autocommit: no BEGIN/ROLLBACK around one SELECT (asyncpg skips them in
        # AUTOCOMMIT; the SQLite begin hook skips its BEGIN for ``switchboard_plain``).
        # SQLite needs no isolation change for that (its connections are in the driver's autocommit
        # mode), and changing it costs three trips to the driver's thread per use (set, then reset
        # with a PRAGMA on the way back to the pool).
        self._plain: AsyncEngine = (
            self.engine.execution_options(switchboard_plain=True)
            if self.is_sqlite
            else self.engine.execution_options(isolation_level="AUTOCOMMIT", switchboard_plain=True)
        )
        self._compiled: dict[UpdateBase, _Compiled] = {}  # write_returning, SQLite
        # SQLite has one writer at a time: this process's sqlite_transaction callers queue here, in
        # order, instead of each holding a pooled connection asleep in SQLite's busy handler.
        self._sqlite_writer = asyncio.Lock()
        self._group_writer: SqliteWriter | None = None  # the claim path's, made on first use

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def cap_page_cache(self, kib: int) -> None:
        """SQLite: hold at most ``kib`` KiB of pages per connection from now on (SQLite's default is
        2,000 KiB per connection, filled by whatever the connection writes). For a process whose
        database work is small reads and appends, like the notify worker's. No-op on PostgreSQL."""
        if not self.is_sqlite:
            return

        @event.listens_for(self.engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA cache_size=-{int(kib)}")
            cur.close()

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction; driver errors come out as store errors."""
        with store_errors():
            async with self._writer.begin() as conn:
                yield conn

    @asynccontextmanager
    async def sqlite_transaction(self) -> AsyncIterator[tuple[AsyncConnection, Any]]:
        """SQLite only: a write transaction on the driver connection itself, for the claims and acks
        the group-commit writer declines (those whose in-transaction handlers need an AsyncConnection:
        A2A tasks) and for a database the writer cannot open a second connection to (in memory).

        Yields the SQLAlchemy connection (for in-transaction handlers, whose statements join the
        transaction) and the aiosqlite connection (one trip to its thread per statement, where an
        ``AsyncConnection.execute`` takes several). BEGIN IMMEDIATE and COMMIT are sent here; this
        process's callers take turns on an asyncio lock first, so none of them waits in SQLite's busy
        handler for another (only other processes' writers can make it wait). Errors come out as store
        errors, and anything raised inside rolls the transaction back."""
        assert self.is_sqlite
        async with self._sqlite_writer:
            with sqlite_errors():
                async with self._plain.connect() as conn:
                    raw = await conn.get_raw_connection()
                    driver: Any = raw.driver_connection  # aiosqlite, in autocommit: we BEGIN ourselves
                    await driver.execute_fetchall("BEGIN IMMEDIATE")
                    try:
                        yield conn, driver
                    except BaseException:
                        await driver.rollback()
                        raise
                    await driver.commit()

    def sqlite_writer(self) -> SqliteWriter | None:
        """SQLite on a file: the group-commit writer thread (store/sqlite_writer.py), made on first
        use and closed by :meth:`dispose`. None on PostgreSQL and for an in-memory database (another
        connection would open another database there)."""
        if self._group_writer is None:
            db_path = self.engine.url.database if self.is_sqlite else None
            if not db_path or db_path == ":memory:" or db_path.startswith("file:") or self.engine.url.query:
                return None
            self._group_writer = SqliteWriter(Path(db_path))
        return self._group_writer

    @asynccontextmanager
    async def pg_transaction(self) -> AsyncIterator[tuple[AsyncConnection, Any]]:
        """PostgreSQL only: a transaction opened on the driver connection itself, for the claim path.

        Yields the SQLAlchemy connection (in autocommit, so in-transaction handlers' statements join
        the driver's transaction) and the asyncpg connection (``fetch`` with positional parameters: no
        SQLAlchemy statement machinery per call). BEGIN and COMMIT are asyncpg's own; anything raised
        inside rolls back. Errors come out as store errors, as from :meth:`begin`; a connection found
        lost is dropped from the pool (SQLAlchemy never sees the driver's statements fail)."""
        assert not self.is_sqlite
        with store_errors():
            async with self._plain.connect() as conn:
                raw = await conn.get_raw_connection()
                driver: Any = raw.driver_connection  # asyncpg.Connection
                try:
                    async with driver.transaction():
                        yield conn, driver
                except _LOST:
                    await conn.invalidate()
                    raise

    @asynccontextmanager
    async def pg_statement(self) -> AsyncIterator[Any]:
        """PostgreSQL only: a pooled connection's asyncpg connection for one statement that is its own
        transaction (no BEGIN, no COMMIT): a claim or an ack alone. Taken from the pool as a plain DBAPI
        connection, without a SQLAlchemy ``Connection`` around it: that checkout cost about twice the
        statement's own client time (issue 18). A connection found lost is dropped from the pool."""
        assert not self.is_sqlite
        with store_errors():
            pooled = await self.engine.raw_connection()
            try:
                yield pooled.driver_connection
            except _LOST:
                pooled.invalidate()
                raise
            finally:
                pooled.close()

    async def sqlite_fetch(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """SQLite only: one read statement given as SQL text, in autocommit, its rows as tuples: one trip
        to the driver's thread (and one for the pool's reset), where :meth:`fetch` takes five or more (a
        cursor, the statement, its rows, closing the cursor, the reset) plus SQLAlchemy's execution. For
        the notify worker's reads, which run hundreds of times a second under load (issue 18)."""
        assert self.is_sqlite
        with sqlite_errors():
            async with self._plain.connect() as conn:
                raw = await conn.get_raw_connection()
                driver: Any = raw.driver_connection  # aiosqlite, in autocommit
                return list(await driver.execute_fetchall(sql, params))

    async def fetch(self, statement: Executable, params: Mapping[str, Any] | None = None) -> list[Row[Any]]:
        """One read statement outside any transaction (it needs none: one statement sees one snapshot),
        its rows. A connection found dropped when used (the server restarted, a proxy cut it) is
        invalidated with the pool's older connections, and the read is tried once more on a fresh one."""
        for attempt in (1, 2):
            try:
                async with self._plain.connect() as conn:
                    return list((await conn.execute(statement, dict(params or {}))).all())
            except DBAPIError as exc:
                if exc.connection_invalidated and attempt == 1:
                    continue
                if isinstance(exc, (OperationalError, InterfaceError)) or exc.connection_invalidated:
                    raise StoreUnavailable("database unavailable") from exc
                raise
            except (OSError, ConnectionError) as exc:
                raise StoreUnavailable("database unavailable") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self.engine.connect() as conn:
                yield conn
        except (OperationalError, InterfaceError, OSError, ConnectionError) as exc:
            raise StoreUnavailable("database unavailable") from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise StoreUnavailable("database unavailable") from exc
            raise

    async def schema_status(self) -> SchemaStatus:
        """The database's revision against this build's head (one small read). A SQLite file that does
        not exist yet is an empty database; looking does not create it (or its folder)."""
        if self.is_sqlite:
            db_path = self.engine.url.database
            if db_path and db_path != ":memory:" and not await asyncio.to_thread(Path(db_path).exists):
                return SchemaStatus(current=None, head=HEAD, known=True)
        async with self.read() as conn:
            return await conn.run_sync(_status)

    def secure_files(self) -> None:
        """Create the SQLite file 0600 and tighten it and its side files (a no-op on PostgreSQL).
        Runs at every start, whether or not a migration follows, so a loose restore is fixed too."""
        if self.is_sqlite:
            db_path = self.engine.url.database
            if db_path and db_path != ":memory:":
                secure_sqlite(Path(db_path))

    async def migrate(self) -> None:
        """Bring the schema to head. On PostgreSQL an advisory lock serialises concurrent starts.

        Refuses (``SchemaMismatch``) a database stamped with a revision this build does not ship: its
        tables are a newer build's, and running old code or old migrations on them would corrupt data."""
        self.secure_files()
        async with self._writer.begin() as conn:
            if not self.is_sqlite:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            status = await conn.run_sync(_status)
            if status.state == "unknown":
                raise SchemaMismatch(unknown_schema_message(status))
            if status.state != "head":
                await conn.run_sync(_upgrade)

    async def dispose(self) -> None:
        """Close every connection: the pool's and the writer thread's (a later use opens new ones)."""
        writer, self._group_writer = self._group_writer, None
        try:
            if writer is not None:
                await writer.close()
        finally:
            await self.engine.dispose()


def _upgrade(sync_conn: Connection) -> None:
    from alembic import command

    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")


def _stamped(sync_conn: Connection) -> list[str]:
    """The revisions ``alembic_version`` holds (none for an empty database), read as alembic reads them."""
    if not inspect(sync_conn).has_table("alembic_version"):
        return []
    return [str(r) for r in sync_conn.execute(text("SELECT version_num FROM alembic_version")).scalars()]


def _status(sync_conn: Connection) -> SchemaStatus:
    # A database at this build's head (every start and CLI command but the first) is told so without
    # loading alembic and its fourteen migration modules: about a quarter of a CLI command's CPU.
    if _stamped(sync_conn) == [HEAD]:
        return SchemaStatus(current=HEAD, head=HEAD, known=True)
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    assert head is not None
    current = MigrationContext.configure(sync_conn).get_current_revision()
    known = current is None or current in {rev.revision for rev in script.walk_revisions()}
    return SchemaStatus(current=current, head=head, known=known)


def unknown_schema_message(status: SchemaStatus) -> str:
    return (
        f"the database schema is at revision {status.current!r}, which this build of switchboard does not "
        f"know (its newest is {status.head!r}): run the newer switchboard that migrated it, or restore a backup"
    )


def behind_schema_message(status: SchemaStatus) -> str:
    return (
        f"the database schema is at revision {status.current or 'none (empty)'!r}, this build needs "
        f"{status.head!r}: run `switchboard db upgrade` (SWITCHBOARD_AUTO_UPGRADE is off)"
    )


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def _sqlite_pragmas(engine: AsyncEngine) -> None:
    """WAL, a busy timeout, and BEGIN IMMEDIATE for write transactions (``Database.begin``), so writers
    queue on the lock instead of failing to upgrade it. Reads (``Database.read``) begin DEFERRED: in WAL
    mode they never wait for a writer, and they must not hold the write lock (that starved writers)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        for pragma in PRAGMAS:
            cur.execute(pragma)
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get("switchboard_plain", False):
            return  # Database.fetch: one statement in autocommit
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get("switchboard_write", False) else "BEGIN")


# What asyncpg raises when its connection is gone or unusable: the server ended it (an administrator,
# a restart, a crash), the network dropped it, or its protocol state is broken (InternalClientError,
# raised when a connection the server ended is used). The connection is then dropped from the pool.
_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    OSError,
    ConnectionError,
)


@contextmanager
def store_errors() -> Iterator[None]:
    """Driver errors as store errors: a constraint is :class:`Conflict`, a lost or refused connection
    :class:`StoreUnavailable` (whether SQLAlchemy or asyncpg itself raised it); anything else as is."""
    try:
        yield
    except (IntegrityError, asyncpg.IntegrityConstraintViolationError) as exc:
        raise Conflict(_short(exc)) from exc
    except (OperationalError, InterfaceError, *_LOST) as exc:
        raise StoreUnavailable("database unavailable") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreUnavailable("database unavailable") from exc
        raise


def _short(exc: Exception) -> str:
    """The constraint problem in one line, without bound parameters (they can hold secrets)."""
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0][:200]
