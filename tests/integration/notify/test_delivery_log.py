"""The delivery log's store (issue 19): bounded by count and by age, per-endpoint reads, on SQLite and
PostgreSQL (the ``database`` fixture runs each test on both)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from sqlalchemy import select

from switchboard.store.db import Database
from switchboard.store.notify_deliveries import Attempt, DeliveryLog, DeliveryRecord
from switchboard.store.schema import notify_deliveries
from tests.integration.notify.conftest import notify_env

LIMIT = 50


def record(i: int, *, endpoint: str = "ep_a", hook: str = "nh_a", at: int = 1_000_000) -> DeliveryRecord:
    return DeliveryRecord(
        id=f"msg_{i:05d}",
        kind="notify",
        target_id=hook,
        endpoint_id=endpoint,
        subject_id=f"td_{i}",
        type="todo.ready",
        reason="created",
        outcome="delivered",
        detail=None,
        finished_at=at + i,
        attempts=[Attempt(1, at + i, 204, None, 3.5)],
    )


async def test_after_n_plus_100_notifications_with_a_limit_of_n_the_table_holds_n(database: Database) -> None:
    log = DeliveryLog(database)
    for start in range(0, LIMIT + 100, 30):  # several flushes, as the workers write them
        await log.write([record(i) for i in range(start, min(start + 30, LIMIT + 100))])
    assert await log.count() == LIMIT + 100
    gone = await log.prune(max_rows=LIMIT, older_than_ms=0)
    assert gone == 100
    assert await log.count() == LIMIT
    async with database.read() as conn:
        kept = sorted((await conn.execute(select(notify_deliveries.c.id))).scalars())
    assert kept == [f"msg_{i:05d}" for i in range(100, LIMIT + 100)]  # the newest stay


async def test_a_flush_of_more_rows_than_one_statement_holds_writes_them_all_in_order(
    database: Database,
) -> None:
    log = DeliveryLog(database)
    await log.write([record(i) for i in range(300)])  # on SQLite: 256 rows, then 44 padded to 64
    async with database.read() as conn:
        ids = (await conn.execute(select(notify_deliveries.c.id).order_by(notify_deliveries.c.seq))).scalars()
        assert list(ids) == [f"msg_{i:05d}" for i in range(300)]


async def test_age_bound_and_zero_rows(database: Database) -> None:
    log = DeliveryLog(database)
    await log.write([record(i, at=1_000) for i in range(10)] + [record(i, at=9_000) for i in range(10, 15)])
    assert await log.prune(max_rows=1000, older_than_ms=5_000) == 10
    assert await log.count() == 5
    assert await log.prune(max_rows=0, older_than_ms=0) == 5
    assert await log.count() == 0


async def test_recent_is_per_endpoint_and_carries_no_body(database: Database) -> None:
    log = DeliveryLog(database)
    await log.write([record(1), record(2, endpoint="ep_b", hook="nh_b"), record(3)])
    mine = await log.recent("ep_a", "nh_a")
    assert [d.id for d in mine] == ["msg_00003", "msg_00001"]  # newest first
    assert mine[0].attempts == ({"n": 1, "at": 1_000_003, "status": 204, "error": None, "ms": 3.5},)
    assert await log.recent("ep_b", "nh_a") == []  # another endpoint asking for this hook: nothing
    async with database.read() as conn:
        row = (await conn.execute(select(notify_deliveries))).first()
    assert row is not None
    assert set(json.loads(row.attempts)[0]) == {"n", "at", "status", "error", "ms"}


async def test_a_write_never_holds_sqlites_lock_while_the_event_loop_is_busy(tmp_path: Path) -> None:
    """SPEC-0024 REQ-7: the notify worker appends its records while the server ingests into the same
    SQLite file. Between every turn of this event loop another connection (as the server's ingest)
    asks for the write lock, blocking the loop meanwhile, as a busy worker's loop is blocked: it must
    always get it within its busy timeout. A transaction held across the loop's turns (BEGIN, INSERT
    and COMMIT as three trips to the driver's thread) would keep it waiting until the loop turned,
    which it cannot while it waits: the request would time out."""
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'switchboard.db'}")
    await database.migrate()
    path = str(tmp_path / "switchboard.db")
    try:
        log = DeliveryLog(database)
        await log.write([record(0)])  # the connections are open before the measured writes
        waits = refused = 0
        for batch in range(5):
            task = asyncio.create_task(
                log.write([record(i) for i in range(batch * 100 + 1, batch * 100 + 101)])
            )
            while not task.done():
                probe = sqlite3.connect(path, timeout=1.0, isolation_level=None)
                try:
                    probe.execute("BEGIN IMMEDIATE")
                    probe.execute("ROLLBACK")
                except sqlite3.OperationalError:
                    refused += 1
                finally:
                    probe.close()
                waits += 1
                await asyncio.sleep(0)
            await task
        assert waits >= 5  # the probe ran while the writes were under way
        assert refused == 0
        assert await log.count() == 501
        async with database.read() as conn:  # every row once, in the order written (multi-row INSERTs)
            ids = (
                await conn.execute(select(notify_deliveries.c.id).order_by(notify_deliveries.c.seq))
            ).scalars()
            assert list(ids) == [f"msg_{i:05d}" for i in range(501)]
    finally:
        await database.dispose()


async def test_the_worker_process_logs_every_notification_and_the_server_prunes_to_the_limit(
    tmp_path: Path,
) -> None:
    """N+100 notifications through the real notify worker process with a limit of N: every one of them
    is recorded (delivered, or dropped by the per-hook limit), and the server's prune leaves N."""
    async with notify_env(tmp_path, notify_process=True, delivery_log_max_rows=LIMIT) as env:
        world, a = await env.tenant("ep-a")
        hook = (await a.ok("create_notify_hook", {"url": env.hook_url()}))["hook_id"]
        todo_ids = [tid for i in range(LIMIT + 100) for tid in await env.deliver(world, title=f"Task {i}")]
        await env.settle()
        log = env.notify.deliveries
        assert await log.count() == LIMIT + 100
        async with env.services.db.read() as conn:
            rows = (await conn.execute(select(notify_deliveries))).all()
        assert {r.subject_id for r in rows} == set(todo_ids)
        assert {r.target_id for r in rows} == {hook}
        assert {r.outcome for r in rows} <= {"delivered", "dropped"}
        assert await env.notify.prune_deliveries() == 100
        assert await log.count() == LIMIT
