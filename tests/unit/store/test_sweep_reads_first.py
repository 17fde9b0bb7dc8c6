"""The sweeps (lease reaper, retry scheduler) read before they write: a pass with nothing due takes no
write lock, so on SQLite it never makes the claim path's writer wait (issue 18); what is due still moves."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator

import pytest

from switchboard.a2a.outbox import OutboxStore
from switchboard.core.clock import ManualClock
from switchboard.queue.sweeper import Sweeper
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.todos import NewTodo, TodoStore
from switchboard.store.transitions import TransitionHub


@pytest.fixture
async def database(sqlite_url: str) -> AsyncIterator[Database]:
    db = Database(sqlite_url)
    await db.migrate()
    yield db
    await db.dispose()


async def _store_with_claim(database: Database, hub: TransitionHub, clock: ManualClock) -> TodoStore:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    ep = (await accounts.vend_endpoint(hid, "ep", ["inbox"], ["claim_next"]))[0].id
    store = TodoStore(database, hub, clock)
    await store.create([NewTodo(endpoint_id=ep, queue="inbox", title="t", payload={})])
    assert await store.claim_next(ep, ["inbox"], 60) is not None  # leased for 60 s
    return store


async def test_a_pass_with_nothing_due_takes_no_write_lock(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    store = await _store_with_claim(database, hub, clock)
    path = database.engine.url.database
    assert path is not None
    other = sqlite3.connect(path, isolation_level=None)  # holds the write lock throughout
    try:
        other.execute("BEGIN IMMEDIATE")
        # A write would wait in SQLite's busy handler (30 s); reads do not wait for a writer (WAL).
        assert await asyncio.wait_for(Sweeper(store, 5.0).sweep_once(), 5) == 0
        other.execute("ROLLBACK")
    finally:
        other.close()


async def test_what_is_due_still_moves(database: Database, hub: TransitionHub, clock: ManualClock) -> None:
    store = await _store_with_claim(database, hub, clock)
    assert await store.requeue_expired_leases() == []
    clock.advance(61)
    (moved,) = await store.requeue_expired_leases()
    assert moved.transition == "requeued" and moved.reason == "lease_expired"
    assert await store.requeue_expired_leases() == []


async def test_an_a2a_outbox_poll_with_nothing_due_takes_no_write_lock(database: Database) -> None:
    """The A2A push outbox is polled every 2 s by every instance; an empty poll reads and returns, so
    it never holds SQLite's write lock while the claim path's writer waits."""
    path = database.engine.url.database
    assert path is not None
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        claimed = await asyncio.wait_for(OutboxStore(database).claim(now_ms=1, lease_ms=1000, limit=10), 5)
        assert claimed == []
        other.execute("ROLLBACK")
    finally:
        other.close()
