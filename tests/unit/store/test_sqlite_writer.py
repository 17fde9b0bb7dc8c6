"""The SQLite group-commit writer (store/sqlite_writer.py) under the claim path, on real database files:
concurrent claims share commits, nobody claims a todo twice, a failing claim undoes only itself, an A2A
task's claim still reaches the hub's in-transaction handlers, a locked file delays claims without
stalling the event loop, store errors fail one batch only, and dispose leaves no thread or file open."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.a2a.tasks import A2A_SOURCE, may_be_task
from switchboard.core.clock import ManualClock
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.errors import Conflict, StoreUnavailable
from switchboard.store.schema import humans, todos
from switchboard.store.schema_console import todo_events
from switchboard.store.sqlite_writer import SqliteWriter
from switchboard.store.todos import NewTodo, TodoStore
from switchboard.store.transitions import Transition, TransitionHub


@pytest.fixture
async def database(sqlite_url: str) -> AsyncIterator[Database]:
    db = Database(sqlite_url)
    await db.migrate()
    yield db
    await db.dispose()


def _writer(database: Database) -> SqliteWriter:
    writer = database.sqlite_writer()
    assert writer is not None
    return writer


def _path(database: Database) -> str:
    path = database.engine.url.database
    assert path is not None
    return path


async def _endpoints(database: Database, clock: ManualClock, n: int) -> list[str]:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    return [(await accounts.vend_endpoint(hid, f"ep-{i}", ["inbox"], ["claim_next"]))[0].id for i in range(n)]


def _todos(endpoint_id: str, n: int, source: str | None = None) -> list[NewTodo]:
    return [
        NewTodo(endpoint_id=endpoint_id, queue="inbox", title=f"t{i}", payload={"i": i}, source=source)
        for i in range(n)
    ]


async def _count(database: Database, statement: Any) -> int:
    return int((await database.fetch(statement))[0][0])


def _marks_tasks(handled: list[str]) -> Callable[[AsyncConnection, Any], Awaitable[None]]:
    """An in-transaction handler for A2A tasks' todos: records each one and retitles it in the
    transaction, so a test sees whether its write committed with the move."""

    async def handler(conn: AsyncConnection, transitions: Any) -> None:
        for t in transitions:
            if may_be_task(t):
                handled.append(t.todo_id)
                await conn.execute(
                    text("UPDATE todos SET title = 'seen in tx' WHERE id = :id"), {"id": t.todo_id}
                )

    return handler


async def test_concurrent_claims_and_acks_share_commits(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    ids = (await store.create(_todos(ep, 32))).created
    writer = _writer(database)
    assert (writer.works, writer.commits) == (1, 1)  # the create: one work, one commit
    rows = await asyncio.gather(*(store.claim_next(ep, ["inbox"], 60) for _ in range(32)))
    assert sorted(r.id for r in rows if r is not None) == sorted(ids)
    assert writer.works == 33 and 1 <= writer.commits - 1 < 32, (writer.works, writer.commits)
    commits = writer.commits
    leases = {r.id: r.lease_id for r in rows if r is not None}
    done = await asyncio.gather(*(store.ack(ep, i, leases[i], {"ok": True}) for i in ids))
    assert all(d is not None and d.status == "done" for d in done)
    assert writer.works == 65 and writer.commits - commits < 32
    events = select(func.count()).select_from(todo_events).where(todo_events.c.transition != "created")
    assert await _count(database, events) == 64  # each move has its timeline row


async def test_sixteen_claimers_on_one_endpoint_never_share_a_todo(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    ids = (await store.create(_todos(ep, 400))).created
    claimed: list[str] = []

    async def consumer() -> None:
        while (row := await store.claim_next(ep, ["inbox"], 60)) is not None:
            claimed.append(row.id)
            assert await store.ack(ep, row.id, row.lease_id, None) is not None

    await asyncio.gather(*(consumer() for _ in range(16)))
    assert len(claimed) == len(set(claimed)) == len(ids) and set(claimed) == set(ids)
    per_todo = (
        select(todo_events.c.todo_id, func.count())
        .where(todo_events.c.transition == "claimed")
        .group_by(todo_events.c.todo_id)
    )
    assert sorted(r[1] for r in await database.fetch(per_todo)) == [1] * len(ids)
    assert _writer(database).commits < len(ids) * 2  # claims and acks were grouped


async def test_an_answer_that_raises_undoes_only_its_own_claim(
    database: Database, hub: TransitionHub, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep_a, ep_b = await _endpoints(database, clock, 2)
    store = TodoStore(database, hub, clock)
    (todo_a,) = (await store.create(_todos(ep_a, 1))).created
    (todo_b,) = (await store.create(_todos(ep_b, 1))).created
    writer = _writer(database)
    # Both claims must share one batch, whatever the machine's load: a first work holds the writer
    # thread until both are queued behind it, so they form the next batch together.
    inside, release = threading.Event(), threading.Event()

    def hold(_conn: sqlite3.Connection) -> None:
        inside.set()
        assert release.wait(10)

    holding = asyncio.create_task(writer.run(hold))
    assert await asyncio.to_thread(inside.wait, 10)
    commits = writer.commits
    queued: list[Any] = []
    both_queued = asyncio.Event()
    run = writer.run

    async def counted(work: Any) -> Any:
        queued.append(work)
        if len(queued) == 2:
            both_queued.set()
        return await run(work)  # queues synchronously, before this task first yields

    monkeypatch.setattr(writer, "run", counted)

    def refuse(_row: Any) -> None:
        raise ValueError("cannot answer")

    answered: list[str] = []
    claims = asyncio.gather(
        store.claim_many(ep_a, ["inbox"], 60, 1, answer=refuse),
        store.claim_many(ep_b, ["inbox"], 60, 1, answer=lambda row: answered.append(row.id)),
        return_exceptions=True,
    )
    await asyncio.wait_for(both_queued.wait(), 10)
    release.set()
    await holding
    first, second = await claims
    assert isinstance(first, ValueError) and str(first) == "cannot answer"
    assert isinstance(second, list) and [r.id for r in second] == [todo_b] == answered
    assert writer.commits - commits == 2  # the holding batch, then one: the second beside the undone first
    status = dict((r[0], r[1]) for r in await database.fetch(select(todos.c.id, todos.c.status)))
    assert status[todo_a] == "pending" and status[todo_b] == "claimed"
    claimed_a = select(func.count()).where(
        todo_events.c.todo_id == todo_a, todo_events.c.transition == "claimed"
    )
    assert await _count(database, claimed_a) == 0


async def test_an_a2a_task_claim_commits_with_its_in_transaction_handler(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    """The hub's handler (registered with the A2A predicate, as a2a/component.py registers the Fanout)
    gets an ``AsyncConnection`` in the claim's transaction for the task's todo, and its write commits
    with the claim; a plain todo claimed beside it goes through the writer and the handler never sees it."""
    ep_a, ep_b = await _endpoints(database, clock, 2)
    store = TodoStore(database, hub, clock)
    (task,) = (await store.create(_todos(ep_a, 1, source=A2A_SOURCE))).created
    (plain,) = (await store.create(_todos(ep_b, 1))).created
    handled: list[str] = []
    hub.add_in_transaction(_marks_tasks(handled), wants=may_be_task)
    writer = _writer(database)
    before = writer.works  # the creates (made before the handler was added)
    got_task, got_plain = await asyncio.gather(
        store.claim_next(ep_a, ["inbox"], 60), store.claim_next(ep_b, ["inbox"], 60)
    )
    assert got_task is not None and got_task.id == task and got_plain is not None and got_plain.id == plain
    assert handled == [task]
    assert writer.works - before == 1  # the plain claim; the task's was declined and made on the loop
    titles = dict((r[0], r[1]) for r in await database.fetch(select(todos.c.id, todos.c.title)))
    assert titles[task] == "seen in tx" and titles[plain] == "t0"
    claimed = select(func.count()).where(todo_events.c.todo_id == task, todo_events.c.transition == "claimed")
    assert await _count(database, claimed) == 1  # the writer's undone attempt left no timeline row
    assert await store.ack(ep_a, task, got_task.lease_id, {"ok": 1}) is not None and handled == [task, task]


async def test_a_handler_without_a_predicate_takes_every_claim_to_the_loop(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    await store.create(_todos(ep, 2))
    seen: list[Transition] = []

    async def handler(_conn: AsyncConnection, transitions: Any) -> None:
        seen.extend(transitions)

    hub.add_in_transaction(handler)
    before = _writer(database).works  # the create (made before the handler was added)
    rows = await store.claim_many(ep, ["inbox"], 60, 2)
    assert [t.todo_id for t in seen] == [r.id for r in rows] and len(rows) == 2
    assert _writer(database).works == before


async def test_a_locked_file_delays_claims_but_not_the_loop(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    (todo_id,) = (await store.create(_todos(ep, 1))).created
    other = sqlite3.connect(_path(database), isolation_level=None)  # another process's writer, say
    try:
        other.execute("BEGIN IMMEDIATE")
        claim = asyncio.create_task(store.claim_next(ep, ["inbox"], 60))
        ticks = 0
        started = time.monotonic()
        while time.monotonic() - started < 0.5:
            await asyncio.sleep(0.01)
            ticks += 1
        assert not claim.done()  # waiting in SQLite's busy handler, in the writer thread
        assert ticks >= 10  # the loop turned all along (a blocked loop would tick once)
        pending = select(func.count()).select_from(todos).where(todos.c.status == "pending")
        assert await _count(database, pending) == 1  # readers are not held up either (WAL)
        other.execute("COMMIT")
        row = await asyncio.wait_for(claim, 10)
        assert row is not None and row.id == todo_id
    finally:
        other.close()


async def test_store_errors_fail_their_work_or_batch_and_the_writer_goes_on(database: Database) -> None:
    writer = _writer(database)

    def add(human: str, email: str) -> Any:
        def work(conn: sqlite3.Connection) -> str:
            conn.execute(
                "INSERT INTO humans (id, email, password_hash, created_at) VALUES (?, ?, 'x', 1)",
                (human, email),
            )
            return human

        return work

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("SELECT * FROM no_such_table")

    # A constraint is that work's Conflict; the rest of its batch commits.
    assert await writer.run(add("h_1", "ann@example.test")) == "h_1"
    dup, ok = await asyncio.gather(
        writer.run(add("h_2", "ann@example.test")),
        writer.run(add("h_3", "bea@example.test")),
        return_exceptions=True,
    )
    assert isinstance(dup, Conflict) and ok == "h_3"
    # Any other SQLite error fails the whole batch (its other writes undone) ...
    lost, failed = await asyncio.gather(
        writer.run(add("h_4", "cy@example.test")), writer.run(broken), return_exceptions=True
    )
    assert isinstance(lost, StoreUnavailable) and isinstance(failed, StoreUnavailable)
    # ... and the next batch is served.
    assert await writer.run(add("h_5", "di@example.test")) == "h_5"
    ids = sorted(r[0] for r in await database.fetch(select(humans.c.id)))
    assert ids == ["h_1", "h_3", "h_5"]


def _open_files(path: str) -> int:
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.path.realpath(f"/proc/self/fd/{fd}") == target:
                count += 1
        except OSError:
            continue
    return count


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sqlite-writer")]


async def test_dispose_leaves_no_thread_or_file_behind_and_a_later_claim_reopens(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    await store.create(_todos(ep, 2))
    assert await store.claim_next(ep, ["inbox"], 60) is not None
    assert len(_writer_threads()) == 1 and _open_files(_path(database)) >= 1
    await database.dispose()
    assert _writer_threads() == [] and _open_files(_path(database)) == 0
    assert await store.claim_next(ep, ["inbox"], 60) is not None  # a new writer, opened lazily
    assert len(_writer_threads()) == 1


async def test_an_in_memory_database_has_no_writer_thread() -> None:
    """Another connection to ``:memory:`` would be another database: claims stay on the loop there."""
    db = Database("sqlite+aiosqlite:///:memory:")
    try:
        assert db.sqlite_writer() is None
    finally:
        await db.dispose()


async def test_the_writer_and_the_loop_side_path_take_turns_without_deadlock(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    """Half the todos are A2A tasks (claimed and acked on the loop, under the asyncio writer lock, with
    the in-transaction handler), half plain (the writer thread), all on one endpoint and one file, while
    a loop-side ``Database.begin()`` transaction writes too: every todo is claimed once and done, within
    a bound (each side waits for the other only in SQLite's busy handler)."""
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    tasks_ = (await store.create(_todos(ep, 30, source=A2A_SOURCE))).created
    plain = (await store.create(_todos(ep, 30))).created
    handled: list[str] = []

    async def handler(_conn: AsyncConnection, transitions: Any) -> None:
        handled.extend(t.todo_id for t in transitions if may_be_task(t))

    hub.add_in_transaction(handler, wants=may_be_task)
    claimed: list[str] = []

    async def consumer() -> None:
        while (row := await store.claim_next(ep, ["inbox"], 60)) is not None:
            claimed.append(row.id)
            assert await store.ack(ep, row.id, row.lease_id, None) is not None

    async def other_writer() -> None:
        for i in range(20):
            async with database.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO humans (id, email, password_hash, created_at) VALUES (:id, :e, 'x', 1)"
                    ),
                    {"id": f"h_other_{i}", "e": f"other{i}@example.test"},
                )
                await asyncio.sleep(0.001)  # holds the write lock across loop turns, as ingest does

    await asyncio.wait_for(asyncio.gather(other_writer(), *(consumer() for _ in range(16))), 60)
    assert sorted(claimed) == sorted(tasks_ + plain)
    assert sorted(handled) == sorted(tasks_ * 2)  # each task's claim and ack, in their transactions
    # Both paths ran: the plain moves (and the empty last claims) on the writer, unless a declined
    # claim's retry on the loop picked a plain todo after another claimer took the task first.
    assert len(plain) <= _writer(database).works <= 2 * len(plain) + 16


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sqlite-checkpoint")]


async def test_checkpoints_run_beside_the_writer_not_in_its_commits(database: Database) -> None:
    """The writer's COMMIT never runs SQLite's auto-checkpoint (it made a batch of claims and everything
    queued behind it wait); every ``checkpoint_commits`` commits the checkpointer thread copies the WAL
    into the database file instead."""
    path = _path(database)
    writer = SqliteWriter(Path(path), checkpoint_commits=3)

    def fill(conn: sqlite3.Connection) -> int:
        conn.execute("CREATE TABLE IF NOT EXISTS filler (b BLOB)")
        conn.execute("INSERT INTO filler VALUES (zeroblob(6000000))")  # about 1,500 pages: past 1,000
        return int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    try:
        size = os.path.getsize(path)
        assert await writer.run(fill) == 0  # no auto-checkpoint on the writer's connection
        assert await writer.run(fill) == 0
        # Two commits of 1,500 pages each: SQLite's default would have checkpointed in the first.
        assert os.path.getsize(path) == size and writer.checkpoints == 0 and _checkpoint_threads() == []
        await writer.run(fill)  # the third commit starts a checkpoint, on its own thread
        deadline = time.monotonic() + 30
        while writer.checkpoints == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert writer.checkpoints == 1 and len(_checkpoint_threads()) == 1
        assert os.path.getsize(path) > size + 12_000_000  # the WAL's pages, copied into the file
    finally:
        await writer.close()
    assert _checkpoint_threads() == [] and _writer_threads() == []


async def test_a_checkpoint_that_fails_is_logged_and_the_next_one_runs(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The checkpointer cannot open the file (it was moved away): the writer goes on, the failure is
    logged, and a later checkpoint, the file back, succeeds."""
    caplog.set_level(logging.WARNING)
    path = _path(database)
    writer = SqliteWriter(Path(path), checkpoint_commits=2)

    def write(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS filler (b BLOB)")
        conn.execute("INSERT INTO filler VALUES (x'00')")

    async def until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30
        while not done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def failures() -> list[str]:
        return [r.getMessage() for r in caplog.records]

    try:
        await writer.run(write)  # opens the writer's connection; no checkpoint yet
        os.rename(path, path + ".away")
        try:
            await writer.run(write)  # commits on the open connection; its checkpoint cannot open the file
            await until(lambda: bool(failures()))
        finally:
            os.rename(path + ".away", path)
        assert writer.checkpoints == 0 and writer.commits == 2
        assert failures() == ["sqlite checkpoint failed"]
        for _ in range(2):
            await writer.run(write)
        await until(lambda: writer.checkpoints > 0)
        assert writer.checkpoints == 1 and writer.commits == 4 and len(failures()) == 1
    finally:
        await writer.close()


async def test_the_writer_takes_the_next_batch_without_waiting_for_the_loop(database: Database) -> None:
    """Work queued while a batch runs starts as soon as that batch commits, even while the event loop is
    busy (a task on the loop used to start each batch: a turn of a busy loop with claims waiting)."""
    writer = _writer(database)
    started: dict[str, float] = {}

    def work(name: str, hold: float) -> Any:
        def run(conn: sqlite3.Connection) -> str:
            started[name] = time.monotonic()
            conn.execute("SELECT 1")
            time.sleep(hold)
            return name

        return run

    first = asyncio.create_task(writer.run(work("first", 0.1)))
    while "first" not in started:
        await asyncio.sleep(0.005)
    second = asyncio.create_task(writer.run(work("second", 0.0)))
    await asyncio.sleep(0)  # the second is queued behind the first's batch
    stalled = time.monotonic()
    time.sleep(1.0)  # the loop is busy (blocked) from here
    resumed = time.monotonic()
    assert await first == "first" and await second == "second"
    assert stalled < started["second"] < resumed  # its batch ran during the stall


async def test_a_create_is_one_writer_work_with_its_timeline_and_dedup(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    """Ingest's create on a file database: one work in the writer's batch, a timeline row per todo that
    went in, and a redelivery absorbed by the live todo (inside one delivery and across two)."""
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    published: list[str] = []

    async def seen(batch: Any) -> None:
        published.extend(t.todo_id for t in batch)

    hub.subscribe_batch("seen", seen)

    def delivery(queue: str) -> NewTodo:
        return NewTodo(
            endpoint_id=ep, queue=queue, title="t", payload={"a": 1}, source="gh", source_id="src_1",
            delivery_id="d-1", verified=True,
        )  # fmt: skip

    first = await store.create([delivery("inbox"), delivery("inbox"), delivery("other")])
    writer = _writer(database)
    assert (writer.works, writer.commits) == (1, 1)
    assert len(first.created) == 2 and first.deduplicated == 1  # the same key twice in one delivery
    again = await store.create([delivery("inbox"), delivery("other")])
    assert again.created == [] and again.deduplicated == 2 and writer.works == 2
    await hub.idle()
    assert published == first.created  # only what went in is published
    created = select(todo_events.c.todo_id).where(todo_events.c.transition == "created")
    assert sorted(r[0] for r in await database.fetch(created)) == sorted(first.created)
    assert await _count(database, select(func.count()).select_from(todos)) == 2


async def test_a_create_an_in_transaction_handler_wants_is_made_on_the_loop_with_it(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    """An A2A task's create must commit with the handler's rows: the writer undoes its try (no row, no
    timeline entry left from it) and the loop makes it, the handler inside the transaction."""
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    handled: list[str] = []
    hub.add_in_transaction(_marks_tasks(handled), wants=may_be_task)
    (task,) = (await store.create(_todos(ep, 1, source=A2A_SOURCE))).created
    (plain,) = (await store.create(_todos(ep, 1))).created
    assert handled == [task]
    assert _writer(database).works == 1  # the plain one; the task's try was undone (not counted)
    titles = dict((r[0], r[1]) for r in await database.fetch(select(todos.c.id, todos.c.title)))
    assert titles == {task: "seen in tx", plain: "t0"}
    events = select(todo_events.c.todo_id).where(todo_events.c.transition == "created")
    assert sorted(r[0] for r in await database.fetch(events)) == sorted([task, plain])


@pytest.mark.alone  # a bound of milliseconds after a release: measured with the machine to itself
async def test_the_writer_takes_the_lock_within_a_millisecond_or_two_of_its_release(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    """Another connection's write (a notify worker's flush) holds the lock for 60 ms: the writer's next
    batch starts within a few milliseconds of the release. SQLite's own busy handler, by then sleeping
    in steps of 15-25 ms, started it 18 ms after the release (its sleeps: 1, 2, 5, 10, 15, 20, 25 ms)."""
    (ep,) = await _endpoints(database, clock, 1)
    store = TodoStore(database, hub, clock)
    lags = []
    for _ in range(3):
        other = sqlite3.connect(_path(database), isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            create = asyncio.create_task(store.create(_todos(ep, 1)))
            await asyncio.sleep(0.06)
            assert not create.done()  # waiting for the lock, in the writer thread
            other.execute("COMMIT")
            released = time.monotonic()
            await asyncio.wait_for(create, 10)
            lags.append(time.monotonic() - released)
        finally:
            other.close()
    assert min(lags) < 0.008, lags  # (the loop's own wake-up included)
