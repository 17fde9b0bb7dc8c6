"""The claim path's cost, pinned (issue 18): what one claim and one ack send to the database, counted
by the driver itself (SQLite's trace callback, asyncpg's query logger), on both databases; the batch
claim and ack; and the claim statement's plan on PostgreSQL.

On PostgreSQL both statements go to asyncpg directly, inside a transaction asyncpg opens
(``Database.pg_transaction``): its query logger sees BEGIN, the statement and COMMIT.

A claim or an ack is one statement (the move and its timeline row together) in one transaction:
PostgreSQL sees BEGIN, the statement, COMMIT. SQLite runs it on the group-commit writer's connection
(store/sqlite_writer.py): BEGIN IMMEDIATE, then per claim or ack in the batch SAVEPOINT, the UPDATE, the
timeline INSERT, RELEASE, and one COMMIT for the batch. No read comes before the write, and a batch of
ten todos costs what a batch of one does.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import event, func, select

from switchboard.core.clock import ManualClock
from switchboard.core.text import Unstorable
from switchboard.mcp.batch import Answer
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.schema import todos
from switchboard.store.schema_console import todo_events
from switchboard.store.todo_claim_sql import _CLAIM_PG
from switchboard.store.todos import NewTodo, TodoStore
from switchboard.store.transitions import Transition, TransitionHub


class Sent:
    """Every statement the driver sends, as the driver reports it."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, statement: Any) -> None:
        sql = statement if isinstance(statement, str) else statement.query
        self.statements.append(" ".join(sql.split()))

    async def reset(self) -> None:
        """Forget what has been sent so far (delivered first: see :meth:`verbs`)."""
        await asyncio.sleep(0)
        self.statements.clear()

    async def verbs(self) -> list[str]:
        """The first word of each, sorted (two observers on PostgreSQL: their order is not the wire's).
        asyncpg hands its query loggers each record with ``loop.call_soon``: one turn of the loop
        delivers every record of what has been sent."""
        await asyncio.sleep(0)
        return sorted(s.split()[0].rstrip(";").upper() for s in self.statements)


@pytest.fixture
async def traced(database: Database) -> Sent:
    """Drop the pool's connections (and SQLite's writer thread), then have every new one report what it
    sends: a claim must send nothing but its own transaction on any of them. asyncpg's query logger
    reports its simple queries (BEGIN, COMMIT) but not prepared statements, so on PostgreSQL those are
    taken from SQLAlchemy's cursor event, which sees each statement once as it is sent."""
    sent = Sent()
    await database.dispose()
    if database.is_sqlite:
        writer = database.sqlite_writer()
        assert writer is not None
        writer.on_connect(lambda conn: conn.set_trace_callback(sent))
    else:
        event.listen(
            database.engine.sync_engine,
            "before_cursor_execute",
            lambda _conn, _cursor, statement, *_: sent(statement),
        )

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        if database.is_sqlite:
            dbapi_conn.run_async(lambda conn: conn.set_trace_callback(sent))
        else:
            dbapi_conn.run_async(lambda conn: _add_logger(conn, sent))

    event.listen(database.engine.sync_engine, "connect", on_connect)
    return sent


async def _add_logger(conn: Any, sent: Sent) -> None:
    conn.add_query_logger(sent)


async def _setup(database: Database, hub: TransitionHub, clock: ManualClock) -> tuple[TodoStore, str]:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    ep, _ = await accounts.vend_endpoint(hid, "ep-a", ["inbox", "reviews"], ["claim_next"])
    return TodoStore(database, hub, clock), ep.id


def _todo(endpoint_id: str, n: int, queue: str = "inbox") -> NewTodo:
    return NewTodo(endpoint_id=endpoint_id, queue=queue, title=f"t{n}", payload={"n": n}, verified=True)


def _expected(database: Database, moves: int = 1, *, alone: bool = False) -> list[str]:
    if database.is_sqlite:
        return sorted(["BEGIN", *["SAVEPOINT", "UPDATE", "INSERT", "RELEASE"] * moves, "COMMIT"])
    if alone:  # an ack, or a claim of one: no in-transaction handler acts on these todos
        return ["WITH"]
    return sorted(["BEGIN", "WITH", "COMMIT"])


async def test_one_claim_and_one_ack_are_one_statement_each(
    database: Database, hub: TransitionHub, clock: ManualClock, traced: Sent
) -> None:
    store, ep = await _setup(database, hub, clock)
    ids = (await store.create([_todo(ep, n) for n in range(3)])).created
    await store.claim_next(ep, ["inbox"], 60)  # the connection's first use (asyncpg prepares then)
    await traced.reset()
    row = await store.claim_next(ep, ["inbox"], 60)
    assert row is not None and row.id == ids[1] and row.attempt == 1
    assert json.loads(row.payload or "null") == {"n": 1}
    assert await traced.verbs() == _expected(database, alone=True), traced.statements
    await traced.reset()
    done = await store.ack(ep, ids[1], row.lease_id, {"ok": True})
    assert done is not None and done.status == "done" and json.loads(done.result or "null") == {"ok": True}
    assert await traced.verbs() == _expected(database, alone=True), traced.statements


async def test_a_batch_costs_what_one_does_and_the_timeline_has_every_move(
    database: Database, hub: TransitionHub, clock: ManualClock, traced: Sent
) -> None:
    seen: list[Transition] = []

    async def record(t: Transition) -> None:
        seen.append(t)

    hub.subscribe("rec", record)
    store, ep = await _setup(database, hub, clock)
    ids = (await store.create([_todo(ep, n, "inbox" if n % 2 else "reviews") for n in range(12)])).created
    first = await store.claim_next(ep, ["inbox"], 60)  # warm the connection
    assert first is not None and first.id == ids[1]  # ids[0] is on reviews
    assert await store.ack(ep, ids[1], first.lease_id, None) is not None
    await traced.reset()
    rows = await store.claim_many(ep, ["inbox", "reviews"], 60, 10)
    assert [r.id for r in rows] == [i for i in ids if i != ids[1]][:10]  # oldest first, across queues
    assert all(r.status == "claimed" and r.attempt == 1 for r in rows)
    assert await traced.verbs() == _expected(database), traced.statements
    await traced.reset()
    acked = await store.ack_many(
        ep, [(r.id, r.lease_id, {"n": i}) for i, r in enumerate(rows[:5])] + [(ids[1], first.lease_id, None)]
    )
    assert sorted(r.id for r in acked) == sorted(r.id for r in rows[:5])  # ids[1] is done already
    assert await traced.verbs() == _expected(database, alone=True), traced.statements
    await hub.idle()
    moved = [(t.todo_id, t.transition) for t in seen if t.transition != "created"]
    assert moved == [
        (ids[1], "claimed"),
        (ids[1], "done"),
        *[(r.id, "claimed") for r in rows],
        *[(r.id, "done") for r in sorted(rows[:5], key=lambda r: (r.created_at, r.id))],
    ]
    async with database.read() as conn:
        events = (
            await conn.execute(
                select(todo_events.c.todo_id, todo_events.c.transition, todo_events.c.attempt).where(
                    todo_events.c.transition != "created"
                )
            )
        ).all()
        leases = dict(
            (
                await conn.execute(
                    select(todo_events.c.todo_id, todo_events.c.lease_expires_at).where(
                        todo_events.c.transition == "claimed"
                    )
                )
            ).all()
        )
        claimed = (
            await conn.execute(select(func.count()).select_from(todos).where(todos.c.status == "claimed"))
        ).scalar_one()
    assert sorted((e.todo_id, e.transition) for e in events) == sorted(moved)
    assert all(e.attempt == 1 for e in events)
    assert leases[rows[0].id] == rows[0].lease_expires_at  # the timeline carries the lease it granted
    assert claimed == 5


async def test_the_claim_statement_walks_the_partial_index(database: Database) -> None:
    """PostgreSQL: the claim's pick reads ``ix_todos_claim_pending`` in claim order, no sort."""
    if database.is_sqlite:
        pytest.skip("the SQLite pick is the same SELECT as claim_pick (test_claim_index.py)")
    async with database.pg_transaction() as (_conn, driver):
        await driver.execute("SET LOCAL enable_seqscan = off")
        await driver.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        args = ("ep_x", ["q1", "q2"], 10, 1, 1, "i", ["te_1"], None)
        plan = "\n".join(r[0] for r in await driver.fetch(f"EXPLAIN {_CLAIM_PG}", *args))
    pick = plan.split("CTE moved")[0]
    assert "ix_todos_claim_pending" in pick and "Sort" not in pick, plan


async def test_in_transaction_handlers_commit_and_roll_back_with_the_claim(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    """The hub's in-transaction handlers (the A2A outbox, the cluster relay's NOTIFY) write through the
    SQLAlchemy connection the claim path hands them: those writes are the claim's own transaction, so
    a handler that fails after writing takes its write and the claim back with it."""
    fail_next_claim = True
    marks = 0

    async def mark(conn: Any, transitions: Any) -> None:
        nonlocal fail_next_claim, marks
        for t in transitions:
            marks += 1
            await conn.execute(
                todo_events.insert().values(
                    id=f"te_mark_{marks}", todo_id=t.todo_id, transition="marked", attempt=0, at=1
                )
            )
            if t.transition == "claimed" and fail_next_claim:
                fail_next_claim = False
                raise RuntimeError("the handler failed after writing")

    hub.add_in_transaction(mark)
    store, ep = await _setup(database, hub, clock)
    ids = (await store.create([_todo(ep, n) for n in range(2)])).created
    with pytest.raises(RuntimeError):
        await store.claim_next(ep, ["inbox"], 60)
    row = await store.claim_next(ep, ["inbox"], 60)
    assert row is not None and row.id == ids[0] and row.attempt == 1  # the failed claim rolled back
    assert await store.ack(ep, ids[0], row.lease_id, None) is not None
    async with database.read() as conn:
        marked = (
            (await conn.execute(select(todo_events.c.todo_id).where(todo_events.c.transition == "marked")))
            .scalars()
            .all()
        )
    # both creations, the claim that committed and the ack; the failed claim's mark rolled back with it
    assert sorted(marked) == sorted([ids[0], ids[1], ids[0], ids[0]])


async def test_an_ack_runs_in_a_transaction_only_when_a_handler_may_act_on_its_todos(
    database: Database, hub: TransitionHub, clock: ManualClock, traced: Sent
) -> None:
    """PostgreSQL: an ack is its statement alone unless a todo in it comes from a source an
    in-transaction handler declared (the A2A outbox: ``a2a``); then it is made in a transaction with the
    handler, which sees it, and nothing is moved twice."""
    if database.is_sqlite:
        pytest.skip("SQLite's acks go through the group-commit writer (test_sqlite_writer.py)")
    seen: list[tuple[str, str]] = []

    async def outbox(_conn: Any, transitions: Any) -> None:
        seen.extend(
            (t.todo_id, t.transition) for t in transitions if t.source == "a2a" and t.transition != "created"
        )

    hub.add_in_transaction(outbox, wants=lambda t: t.source == "a2a", sources=frozenset({"a2a"}))
    store, ep = await _setup(database, hub, clock)
    plain, task = (
        await store.create(
            [_todo(ep, 0), NewTodo(endpoint_id=ep, queue="inbox", title="t", payload={}, source="a2a")]
        )
    ).created
    claimed = await store.claim_many(ep, ["inbox"], 60, 2)
    assert sorted(r.id for r in claimed) == sorted([plain, task])
    lease = {r.id: r.lease_id for r in claimed}
    await traced.reset()
    assert [r.id for r in await store.ack_many(ep, [(plain, lease[plain], None)])] == [plain]
    assert await traced.verbs() == ["WITH"] and seen == [(task, "claimed")], traced.statements
    await traced.reset()
    assert sorted(
        r.id for r in await store.ack_many(ep, [(plain, lease[plain], None), (task, lease[task], None)])
    ) == [task]
    # declined alone (a task is in it), then made in a transaction, where the handler saw it
    assert await traced.verbs() == sorted(["WITH", "BEGIN", "WITH", "COMMIT"]), traced.statements
    assert seen == [(task, "claimed"), (task, "done")]
    assert hub.transaction_sources("claimed") == frozenset({"a2a"})


async def test_a_claim_made_alone_whose_answer_fails_is_undone_and_buried(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    """PostgreSQL: ``claim_next`` commits with its statement, so an answer that cannot be built (a row
    stored before the text boundary) undoes the claim, timeline row included, before the claimer buries
    it; the queue goes on with the next todo."""
    if database.is_sqlite:
        pytest.skip("SQLite's claim and its answer share the writer's transaction")
    store, ep = await _setup(database, hub, clock)
    poisoned, fine = (await store.create([_todo(ep, 0), _todo(ep, 1)])).created
    async with database.begin() as conn:
        await conn.execute(todos.update().where(todos.c.id == poisoned).values(payload='{"x":"\\ud800"}'))
    answer = Answer()
    with pytest.raises(Unstorable):
        await store.claim_many(ep, ["inbox"], 60, 1, answer=answer)
    assert answer.todo_id == poisoned
    async with database.read() as conn:
        row = (
            await conn.execute(select(todos.c.status, todos.c.attempt).where(todos.c.id == poisoned))
        ).one()
        claimed_events = (
            await conn.execute(
                select(func.count()).where(
                    todo_events.c.todo_id == poisoned, todo_events.c.transition == "claimed"
                )
            )
        ).scalar_one()
    assert (row.status, row.attempt, claimed_events) == ("pending", 0, 0)
    buried = await store.bury(ep, poisoned, "unanswerable")
    assert buried is not None
    nxt = await store.claim_many(ep, ["inbox"], 60, 1, answer=Answer())
    assert [r.id for r in nxt] == [fine]
