"""Notify-hook store and dispatcher on a real database (SQLite and PostgreSQL, via ``database``), with
endpoints and hooks made through the real stores and every SQL statement countable."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import event, select, update

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import NOTIFY_HOOKS
from switchboard.cred import Envelope
from switchboard.notify.store import Hook, HookStore
from switchboard.obs.metrics import Metrics
from switchboard.store.accounts import AccountStore, Endpoint
from switchboard.store.db import Database
from switchboard.store.direct_writes import PreparedWrite
from switchboard.store.schema import endpoints, notify_hooks


@dataclass
class NotifyDB:
    db: Database
    clock: ManualClock
    metrics: Metrics
    accounts: AccountStore
    hooks: HookStore
    humans: int = 0

    async def endpoint(
        self, slug: str, queues: Sequence[str] = ("inbox",), *, human: str | None = None
    ) -> Endpoint:
        if human is None:
            self.humans += 1
            human = await self.accounts.create_human(
                f"h{self.humans}-{slug}@example.com", "a long passphrase"
            )
        # The notify-hook verbs: hooks fire only while the endpoint holds one (docs/notify-hooks.md).
        endpoint, _ = await self.accounts.vend_endpoint(human, slug, list(queues), list(NOTIFY_HOOKS.verbs))
        return endpoint

    async def hook(
        self,
        endpoint: Endpoint,
        queues: Sequence[str] = (),
        *,
        ignore_presence: bool = False,
        path: str = "/h",
    ) -> Hook:
        hook, _ = await self.hooks.create(
            endpoint.id, f"https://hooks.test{path}?key=QUERYCANARY", queues, ignore_presence, ceiling=5
        )
        return hook

    async def set_hook(self, hook_id: str, **values: Any) -> None:
        async with self.db.begin() as conn:
            await conn.execute(update(notify_hooks).where(notify_hooks.c.id == hook_id).values(**values))

    async def set_endpoint(self, endpoint_id: str, **values: Any) -> None:
        async with self.db.begin() as conn:
            await conn.execute(update(endpoints).where(endpoints.c.id == endpoint_id).values(**values))

    async def row(self, hook_id: str) -> Any:
        async with self.db.read() as conn:
            return (await conn.execute(select(notify_hooks).where(notify_hooks.c.id == hook_id))).one()

    @contextmanager
    def statements(self) -> Iterator[list[str]]:
        """Every statement sent to the database meanwhile: SQLAlchemy's engine event, plus on SQLite the
        statements ``Database.write_returning`` hands to the driver directly (one trip, no events)."""
        seen: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            seen.append(" ".join(statement.split()))

        real = self.db.write_returning

        async def direct(statement: Any, params: Any) -> Any:
            if self.db.is_sqlite:
                sql = statement.sql if isinstance(statement, PreparedWrite) else None
                record(None, None, sql or str(statement.compile(dialect=self.db.engine.dialect)))
            return await real(statement, params)

        fetch = self.db.sqlite_fetch

        async def text_read(sql: str, params: Any) -> Any:  # SQLite's hot reads: SQL text, one trip
            record(None, None, sql)
            return await fetch(sql, params)

        engine = self.db.engine.sync_engine
        event.listen(engine, "before_cursor_execute", record)
        self.db.write_returning = direct  # type: ignore[method-assign]
        self.db.sqlite_fetch = text_read  # type: ignore[method-assign]
        try:
            yield seen
        finally:
            event.remove(engine, "before_cursor_execute", record)
            del self.db.write_returning
            del self.db.sqlite_fetch


def queries(statements: Sequence[str]) -> list[str]:
    """Without SQLite's explicit BEGIN (the engine's begin listener)."""
    return [s for s in statements if s.upper() not in ("BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")]


def selects_on_hooks(statements: Sequence[str]) -> list[str]:
    return [s for s in statements if s.upper().startswith("SELECT") and "notify_hooks" in s]


def updates_on_hooks(statements: Sequence[str]) -> list[str]:
    """UPDATEs of notify_hooks, also in the ``WITH folds AS (...) UPDATE notify_hooks`` form."""
    return [
        s
        for s in statements
        if s.upper().startswith("UPDATE NOTIFY_HOOKS")
        or (s.upper().startswith("WITH ") and "UPDATE NOTIFY_HOOKS" in s.upper())
    ]


@pytest.fixture
async def ndb(database: Database, clock: ManualClock, metrics: Metrics) -> NotifyDB:
    hooks = HookStore(database, Envelope(os.urandom(32)), clock, grace_seconds=24 * 3600)
    return NotifyDB(database, clock, metrics, AccountStore(database, clock), hooks)
