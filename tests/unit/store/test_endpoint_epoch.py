"""Migration 0013: ``endpoint_epoch`` holds one row; on SQLite its ``n`` moves with every write to
``endpoints`` (insert, update, delete, a human's cascading delete) and with nothing else; on PostgreSQL
the table is there and never moves. Upgrading again over it (a database stamped back) changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from switchboard.core.clock import ManualClock
from switchboard.obs.metrics import Metrics
from switchboard.store.accounts import AccountStore
from switchboard.store.admin import AdminStore
from switchboard.store.changes import EndpointEpoch
from switchboard.store.db import Database
from switchboard.store.presence import PresenceStore
from switchboard.store.todos import NewTodo, TodoStore
from switchboard.store.transitions import TransitionHub

TRIGGERS = ["endpoint_epoch_after_delete", "endpoint_epoch_after_insert", "endpoint_epoch_after_update"]


async def _rows(db: Database) -> list[tuple[int, int]]:
    async with db.read() as conn:
        return [(int(r.id), int(r.n)) for r in await conn.execute(text("SELECT id, n FROM endpoint_epoch"))]


async def _triggers(db: Database) -> list[str]:
    if db.is_sqlite:
        stmt = text("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'endpoints'")
    else:
        stmt = text(
            "SELECT DISTINCT trigger_name FROM information_schema.triggers "
            "WHERE event_object_table = 'endpoints'"
        )
    async with db.read() as conn:
        return sorted(r[0] for r in await conn.execute(stmt))


async def test_only_endpoint_writes_move_the_epoch(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    todos = TodoStore(database, TransitionHub(Metrics()), clock)
    start = await _rows(database)
    assert start == [(1, 0)]
    moves = 1 if database.is_sqlite else 0  # what one endpoint write adds

    human = await accounts.create_human("owner@example.com", "correct-horse-battery")
    endpoint, _ = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim_next", "ack"])
    assert await _rows(database) == [(1, moves)]

    await todos.create([NewTodo(endpoint_id=endpoint.id, queue="inbox", title="t", payload={})])
    claimed = await todos.claim_next(endpoint.id, ["inbox"], 60)
    assert (
        claimed is not None and await todos.ack(endpoint.id, claimed.id, claimed.lease_id, None) is not None
    )
    await accounts.create_human("other@example.com", "correct-horse-battery")
    assert await _rows(database) == [(1, moves)]

    await accounts.set_scope(endpoint.id, verbs=["ack"])
    await accounts.revend_token(endpoint.id)
    await PresenceStore(database, clock).override(endpoint.id, "out")  # the override, then presence_seen
    assert await _rows(database) == [(1, 5 * moves)]

    await AdminStore(database, clock).delete_human(human)  # the endpoint goes by the cascade
    assert await _rows(database) == [(1, 6 * moves)]


async def test_triggers_on_sqlite_only(database: Database) -> None:
    assert await _triggers(database) == (TRIGGERS if database.is_sqlite else [])


async def test_upgrading_again_over_it_changes_nothing(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("owner@example.com", "correct-horse-battery")
    await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim_next"])
    before = await _rows(database)
    async with database.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = 'rate_buckets'"))
    await database.migrate()
    assert await _rows(database) == before
    assert await _triggers(database) == (TRIGGERS if database.is_sqlite else [])


async def test_the_reader_sees_each_commit_and_none_without_the_table(
    sqlite_url: str, clock: ManualClock
) -> None:
    """``EndpointEpoch`` reads the committed value on its own connection; a file without the table (or
    no file) reads as None, which the verifier takes as "trust nothing"."""
    db = Database(sqlite_url)
    try:
        await db.migrate()
        path = db.engine.url.database
        assert path is not None
        epoch = EndpointEpoch(Path(path))
        assert epoch.current() == 0
        accounts = AccountStore(db, clock)
        human = await accounts.create_human("owner@example.com", "correct-horse-battery")
        assert epoch.current() == 0
        await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim_next"])
        assert epoch.current() == 1
        async with db.begin() as conn:
            await conn.execute(text("DROP TABLE endpoint_epoch"))
        assert epoch.current() is None
        epoch.close()
        assert EndpointEpoch(Path(path + ".missing")).current() is None
    finally:
        await db.dispose()
