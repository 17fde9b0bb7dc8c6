"""Engines for SQLite (embedded default) and PostgreSQL, migrations, and driver-error translation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from switchboard.store.errors import Conflict, StoreUnavailable

MIGRATIONS = Path(__file__).parent / "migrations"
_MIGRATION_LOCK = 0x5B0A_2D24  # pg_advisory_lock key: one instance migrates at a time


class Database:
    """One engine plus the facts about its dialect that SQL needs (SKIP LOCKED, BEGIN IMMEDIATE)."""

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self.engine: AsyncEngine = create_async_engine(url, connect_args={"timeout": 30})
            _sqlite_pragmas(self.engine)
        else:
            self.engine = create_async_engine(
                url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, pool_timeout=10
            )

        # Same pool; the option tells the SQLite begin hook this transaction will write.
        self._writer: AsyncEngine = self.engine.execution_options(switchboard_write=True)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction; driver errors come out as store errors."""
        try:
            async with self._writer.begin() as conn:
                yield conn
        except IntegrityError as exc:
            raise Conflict(_short(exc)) from exc
        except (OperationalError, InterfaceError, OSError, ConnectionError) as exc:
            raise StoreUnavailable("database unavailable") from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise StoreUnavailable("database unavailable") from exc
            raise

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self.engine.connect() as conn:
                yield conn
        except (OperationalError, InterfaceError, OSError, ConnectionError) as exc:
            raise StoreUnavailable("database unavailable") from exc

    async def migrate(self) -> None:
        """Bring the schema to head. On PostgreSQL an advisory lock serialises concurrent starts."""
        if self.is_sqlite:
            db_path = self.engine.url.database
            if db_path and db_path != ":memory:":
                Path(db_path).parent.mkdir(parents=True, exist_ok=True)
        async with self._writer.begin() as conn:
            if not self.is_sqlite:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            await conn.run_sync(_upgrade)

    async def dispose(self) -> None:
        await self.engine.dispose()


def _upgrade(sync_conn: Connection) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")


def alembic_config() -> Config:
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
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("switchboard_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _short(exc: Exception) -> str:
    """The constraint problem in one line, without bound parameters (they can hold secrets)."""
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0][:200]
