"""The retention sweep's batch statements (store/todo_retention.py) on SQLite and PostgreSQL: only terminal
todos past the cutoff go, oldest first, at most a batch at a time, with their history; the rows below an
A2A task go by cascade; on PostgreSQL a locked row is skipped and a second sweeper stands aside."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text

from switchboard.core.clock import ManualClock
from switchboard.obs.metrics import Metrics
from switchboard.queue import retention
from switchboard.queue.retention import (
    HEADROOM,
    LAG_BOOST,
    PAUSE_MIN,
    PG_MAX_BATCH_FACTOR,
    Pace,
    RetentionPolicy,
    RetentionSweeper,
)
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.schema import todos
from switchboard.store.schema_a2a import a2a_task_events, a2a_tasks
from switchboard.store.schema_console import todo_events
from switchboard.store.todo_retention import VACUUM_TABLES, Pruned, TodoRetention

DAY_MS = 86_400_000
NOW_MS = 1_800_000_000_000
CUTOFF = NOW_MS - 7 * DAY_MS


async def endpoint(db: Database) -> str:
    accounts = AccountStore(db, ManualClock(NOW_MS / 1000))
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    return (await accounts.vend_endpoint(hid, "ep", ["inbox"], ["claim_next"]))[0].id


async def seed(
    db: Database, ep: str, status: str, updated_at: int, *, n: int = 1, a2a: bool = False, payload: str = "{}"
) -> list[str]:
    """``n`` todos in ``status`` last changed at ``updated_at``, each with two timeline rows (and an A2A
    task with one stream event when ``a2a``)."""
    ids = [f"t_{status}_{updated_at}_{i}" for i in range(n)]
    async with db.begin() as conn:
        for i, tid in enumerate(ids):
            await conn.execute(
                insert(todos).values(
                    id=tid,
                    endpoint_id=ep,
                    queue="inbox",
                    title="t",
                    payload=payload,
                    status=status,
                    created_at=updated_at - 1000,
                    updated_at=updated_at + i,
                )
            )
            for k, transition in enumerate(("created", status)):
                await conn.execute(
                    insert(todo_events).values(
                        id=f"te_{tid}_{k}", todo_id=tid, transition=transition, attempt=0, at=updated_at
                    )
                )
            if a2a:
                await conn.execute(
                    insert(a2a_tasks).values(
                        todo_id=tid, owner_endpoint_id=ep, context_id="c", message="{}", created_at=updated_at
                    )
                )
                await conn.execute(
                    insert(a2a_task_events).values(task_id=tid, seq=1, body="{}", created_at=updated_at)
                )
    return ids


async def pruned(store: TodoRetention, limit: int) -> int:
    """Todos one batch deleted (None would mean another sweeper held the lock: not here)."""
    batch = await store.prune_batch(CUTOFF, limit)
    assert batch is not None
    return batch.todos


async def count(db: Database, table: Any, **where: Any) -> int:
    stmt = select(func.count()).select_from(table)
    for column, value in where.items():
        stmt = stmt.where(table.c[column].in_(value) if isinstance(value, list) else table.c[column] == value)
    return int((await db.fetch(stmt))[0][0])


async def test_only_terminal_todos_past_the_cutoff_go_with_their_history(database: Database) -> None:
    ep = await endpoint(database)
    old = CUTOFF - DAY_MS
    gone = [
        *await seed(database, ep, "done", old, n=2, a2a=True),
        *await seed(database, ep, "dead", old),
        *await seed(database, ep, "canceled", old),
    ]
    live = [
        *await seed(database, ep, "pending", old),
        *await seed(database, ep, "claimed", old),
        *await seed(database, ep, "failed", old),
    ]
    recent = await seed(database, ep, "done", CUTOFF + 1)
    store = TodoRetention(database)

    assert await store.prune_batch(CUTOFF, 100) == Pruned(todos=4, todo_events=8, a2a_tasks=2)

    assert await count(database, todos, id=gone) == 0
    assert await count(database, todo_events, todo_id=gone) == 0
    assert await count(database, a2a_tasks) == 0
    assert await count(database, a2a_task_events) == 0  # by cascade: foreign keys are on
    kept = live + recent
    assert await count(database, todos, id=kept) == len(kept)
    assert await count(database, todo_events, todo_id=kept) == 2 * len(kept)
    assert await store.prune_batch(CUTOFF, 100) == Pruned()
    assert await store.oldest_terminal_ms() == CUTOFF + 1


async def test_a_batch_takes_at_most_its_limit_oldest_first(database: Database) -> None:
    ep = await endpoint(database)
    older = await seed(database, ep, "done", CUTOFF - 2 * DAY_MS, n=3)
    newer = await seed(database, ep, "dead", CUTOFF - DAY_MS, n=2)
    store = TodoRetention(database)

    assert await pruned(store, 2) == 2
    assert await count(database, todos, id=older[:2]) == 0
    assert await count(database, todos, id=[older[2], *newer]) == 3
    assert [await pruned(store, 2) for _ in range(3)] == [2, 1, 0]
    assert await store.oldest_terminal_ms() is None


async def test_the_sweep_counts_and_gauges(database: Database) -> None:
    ep = await endpoint(database)
    await seed(database, ep, "done", CUTOFF - DAY_MS, n=5)
    await seed(database, ep, "done", NOW_MS - 3_600_000)  # an hour old: kept
    metrics, clock = Metrics(), ManualClock(NOW_MS / 1000)
    sweeper = RetentionSweeper(TodoRetention(database), metrics, clock, RetentionPolicy(7 * 86400, 60, 2))

    assert await sweeper.sweep_once() == {"todos": 5, "todo_events": 10, "a2a_tasks": 0}

    rendered = metrics.render().decode()
    assert 'switchboard_retention_pruned_total{table="todos"} 5.0' in rendered
    assert 'switchboard_retention_pruned_total{table="todo_events"} 10.0' in rendered
    assert "switchboard_retention_oldest_terminal_seconds 3600.0" in rendered
    assert await sweeper.sweep_once() == {"todos": 0, "todo_events": 0, "a2a_tasks": 0}


async def test_sqlite_gives_the_pages_back_to_the_file(tmp_path: Path, sqlite_url: str) -> None:
    db = Database(sqlite_url)
    await db.migrate()  # a new file: made with auto_vacuum=INCREMENTAL
    try:
        assert (await db.sqlite_fetch("PRAGMA auto_vacuum", {}))[0][0] == 2
        ep = await endpoint(db)
        big = json.dumps({"blob": "x" * 200_000})
        await seed(db, ep, "done", CUTOFF - DAY_MS, n=40, payload=big)  # ~8 MB
        await db.sqlite_autocommit([("PRAGMA wal_checkpoint(TRUNCATE)", ())])
        path = tmp_path / "switchboard.db"
        full = path.stat().st_size
        store = TodoRetention(db)

        assert await pruned(store, 100) == 40
        freed = 0
        while step := await store.return_space():
            assert step <= 64  # one short write at a time
            freed += step
        assert freed > 1000  # pages
        await db.sqlite_autocommit([("PRAGMA wal_checkpoint(TRUNCATE)", ())])
        assert (await db.sqlite_fetch("PRAGMA freelist_count", {}))[0][0] == 0
        assert path.stat().st_size < full / 4, (full, path.stat().st_size)
    finally:
        await db.dispose()


@pytest.mark.postgres
async def test_postgresql_skips_a_locked_row_and_a_second_sweeper_stands_aside(pg_url: str) -> None:
    db = Database(pg_url)
    await db.migrate()
    try:
        ep = await endpoint(db)
        locked, free = await seed(db, ep, "dead", CUTOFF - DAY_MS, n=2)
        store = TodoRetention(db)
        async with db.begin() as other:  # an operator's requeue holding the row
            await other.execute(text("SELECT id FROM todos WHERE id = :id FOR UPDATE"), {"id": locked})
            pruned = await asyncio.wait_for(store.prune_batch(CUTOFF, 10), 5)  # never waits for it
            assert pruned == Pruned(todos=1, todo_events=2)
        assert await count(db, todos, id=[free]) == 0
        assert await count(db, todos, id=[locked]) == 1

        async with db.begin() as other:  # another instance in the middle of a batch
            await other.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": 0x5B0A_2D28})
            assert await asyncio.wait_for(store.prune_batch(CUTOFF, 10), 5) is None
        assert (await store.prune_batch(CUTOFF, 10)) == Pruned(todos=1, todo_events=2)
    finally:
        await db.dispose()


async def test_postgresql_vacuums_the_tables_beside_a_pass_that_deleted(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(pg_url)
    await db.migrate()
    try:
        ep = await endpoint(db)
        await seed(db, ep, "done", CUTOFF - DAY_MS, n=3)
        policy = RetentionPolicy(7 * 86400, 60, 2)
        sweeper = RetentionSweeper(TodoRetention(db), Metrics(), ManualClock(NOW_MS / 1000), policy)

        async def vacuums() -> dict[str, int]:
            async with db.begin() as conn:
                rows = await conn.execute(
                    text("SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE relname = ANY(:t)"),
                    {"t": list(VACUUM_TABLES)},
                )
                return {str(name): int(n) for name, n in rows}

        before = await vacuums()
        assert (await sweeper.sweep_once())["todos"] == 3
        await sweeper.settled()
        after = await vacuums()
        assert all(after[t] == before[t] + 1 for t in VACUUM_TABLES), (before, after)
        assert (await sweeper.sweep_once())["todos"] == 0  # nothing deleted: no VACUUM
        await sweeper.settled()
        assert await vacuums() == after

        # A long pass asks on the way too (every VACUUM_EVERY seconds; here after each batch of 2), and
        # what it deleted after the VACUUM it started is covered by one that follows.
        monkeypatch.setattr(retention, "VACUUM_EVERY", 0.0)
        await seed(db, ep, "dead", CUTOFF - DAY_MS, n=5)
        assert (await sweeper.sweep_once())["todos"] == 5
        await sweeper.settled()
        assert (await vacuums())["todos"] >= after["todos"] + 2
        # The session setting that paces it does not stay on the pooled connection.
        async with db.pg_statement() as pg:
            assert await pg.fetchval("SHOW vacuum_cost_delay") == "0"
    finally:
        await db.dispose()


async def test_postgresql_leaves_a_sliver_of_a_large_table_to_autovacuum(pg_url: str) -> None:
    db = Database(pg_url)
    await db.migrate()
    try:
        ep = await endpoint(db)
        await seed(db, ep, "pending", NOW_MS, n=60)  # kept: the table's estimate becomes 63 rows
        await seed(db, ep, "done", CUTOFF - DAY_MS, n=3)
        async with db.begin() as conn:
            await conn.execute(text("ANALYZE todos"))
        policy = RetentionPolicy(7 * 86400, 60, 10)
        sweeper = RetentionSweeper(TodoRetention(db), Metrics(), ManualClock(NOW_MS / 1000), policy)
        assert (await sweeper.sweep_once())["todos"] == 3  # under VACUUM_SHARE of 63
        await sweeper.settled()
        assert sweeper.vacuums == 0
        # 5 of 65 alone would not be worth one, but the count carries over from the pass before (a
        # steady load's passes are each a sliver): 8 of 65 is.
        await seed(db, ep, "dead", CUTOFF - DAY_MS, n=5)
        assert (await sweeper.sweep_once())["todos"] == 5
        await sweeper.settled()
        assert sweeper.vacuums == 1
        await seed(db, ep, "dead", CUTOFF - DAY_MS, n=1)  # counted from zero again after that one
        assert (await sweeper.sweep_once())["todos"] == 1
        await sweeper.settled()
        assert sweeper.vacuums == 1
        assert sweeper.pace.most == 10 * PG_MAX_BATCH_FACTOR  # a trailing sweep grows further here
    finally:
        await db.dispose()


async def test_sqlite_never_starts_a_vacuum_task(database: Database) -> None:
    if not database.is_sqlite:
        pytest.skip("SQLite gives its pages back through incremental_vacuum")
    ep = await endpoint(database)
    await seed(database, ep, "done", CUTOFF - DAY_MS, n=2)
    sweeper = RetentionSweeper(
        TodoRetention(database), Metrics(), ManualClock(NOW_MS / 1000), RetentionPolicy(7 * 86400, 60, 2)
    )
    assert (await sweeper.sweep_once())["todos"] == 2
    assert sweeper.vacuums == 0 and not TodoRetention(database).can_vacuum


async def test_pending_rows_stay_out_of_the_terminal_index(database: Database) -> None:
    """The sweep's pick is served by ix_todos_terminal (its predicate repeated literally)."""
    ep = await endpoint(database)
    await seed(database, ep, "done", CUTOFF - DAY_MS)
    pick = "SELECT id FROM todos WHERE status IN ('done', 'dead', 'canceled') AND updated_at < 1 ORDER BY updated_at LIMIT 5"
    explain = "EXPLAIN QUERY PLAN " if database.is_sqlite else "EXPLAIN "
    if not database.is_sqlite:
        async with database.begin() as conn:
            await conn.execute(text("SET LOCAL enable_seqscan = off"))
            plan = " ".join(str(r[0]) for r in (await conn.execute(text(explain + pick))).all())
    else:
        plan = " ".join(str(r) for r in await database.sqlite_fetch(explain + pick, {}))
    assert "ix_todos_terminal" in plan, plan


async def test_the_finishing_rate_counts_terminal_todos_since_a_time(database: Database) -> None:
    ep = await endpoint(database)
    await seed(database, ep, "done", NOW_MS - 5_000, n=3)
    await seed(database, ep, "canceled", NOW_MS - 2_000, n=2)
    await seed(database, ep, "done", NOW_MS - 60_000, n=4)  # before the window
    await seed(database, ep, "pending", NOW_MS - 1_000, n=6)  # not finished
    assert await TodoRetention(database).finished_since(NOW_MS - 10_000) == 5


async def test_a_sweep_behind_the_cutoff_asks_for_more_than_the_finishing_rate(database: Database) -> None:
    ep = await endpoint(database)
    await seed(database, ep, "done", NOW_MS - 5_000, n=30)  # 30 finished in the window (the interval)
    clock = ManualClock(NOW_MS / 1000)
    policy = RetentionPolicy(retention_seconds=60.0, interval_seconds=15.0, batch=100)
    sweeper = RetentionSweeper(TodoRetention(database), Metrics(), clock, policy)
    cutoff = NOW_MS - 60_000
    assert await sweeper.need(cutoff) == pytest.approx(2.0)  # nothing past the cutoff: 30 in 15 s
    await seed(database, ep, "done", cutoff - 30_000, n=1)  # the oldest kept, 30 s past the cutoff
    assert await sweeper.need(cutoff) == pytest.approx(2.0 * (1 + LAG_BOOST))  # 30 s is 2 intervals
    await seed(database, ep, "done", cutoff - 7 * DAY_MS, n=1)  # an old backlog: the boost is capped
    assert await sweeper.need(cutoff) == pytest.approx(2.0 * (1 + LAG_BOOST))


def test_a_pace_that_trails_on_a_busy_loop_grows_its_batch() -> None:
    pace = Pace(100, need=600.0)
    # judged on the batch's own time the pause keeps up: 100 rows in 5 ms, a 45 ms pause is 2,000/s
    assert pace.after(100, 0.005) == pytest.approx(0.045)
    assert pace.batch == 100
    # but the cycle really took 200 ms (the loop was busy): 500 rows/s against 1.5 x 600 wanted
    pace.after(100, 0.005, achieved=500.0)
    assert pace.batch == 200
    pace.after(200, 0.005, achieved=1000.0)  # 1,000 rows/s: at least the 900 wanted
    assert pace.batch == 100  # the pause was more than enough and the rate held: back down


def test_a_backlog_drains_gently_when_little_is_finishing() -> None:
    pace = Pace(100, need=40.0)
    # 100 rows in 30 ms: the gentle pause (270 ms) still deletes 333 rows/s, more than 1.5 x 40
    assert pace.after(100, 0.03) == pytest.approx(0.27)
    assert pace.batch == 100
    assert Pace(100).after(100, 0.001) == PAUSE_MIN  # never less than the floor


def test_the_sweep_keeps_up_with_what_is_finishing_now() -> None:
    pace = Pace(100, need=1500.0)
    pauses = []
    for _ in range(6):
        took = 0.0003 * pace.batch  # 0.3 ms a row
        rows = pace.batch
        pauses.append(pace.after(rows, took))
        rate = rows / (took + pauses[-1])
        assert pauses[-1] >= PAUSE_MIN
    assert pace.batch > 100  # grown: fewer statements per row
    assert pace.batch <= pace.most == 800
    assert rate >= 1500 * HEADROOM * 0.999  # once grown, it keeps up with headroom
    pace.need = 10.0  # the load went away: the batch shrinks back step by step
    for _ in range(4):
        pace.after(pace.batch, 0.0003 * pace.batch)
    assert pace.batch == 100
