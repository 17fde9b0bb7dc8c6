"""The storage contract for todos, run against SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import func, select

from switchboard.core.clock import ManualClock
from switchboard.store.db import Database
from switchboard.store.schema import todos
from switchboard.store.todos import NewTodo, RetryPolicy, TodoStore
from switchboard.store.transitions import Transition, TransitionHub


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Transition] = []

    async def __call__(self, t: Transition) -> None:
        self.seen.append(t)


@pytest.fixture
async def store(database: Database, hub: TransitionHub, clock: ManualClock) -> TodoStore:
    from switchboard.store.accounts import AccountStore

    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    for slug in ("ep-a", "ep-b"):
        ep, _ = await accounts.vend_endpoint(hid, slug, ["inbox", "reviews"], ["claim_next"])
        # Stable ids make the tests readable.
        setattr(accounts, slug.replace("-", "_"), ep.id)
    s = TodoStore(database, hub, clock, RetryPolicy(base=30, cap=3600, max_attempts=3))
    s.ep_a = accounts.ep_a  # type: ignore[attr-defined]
    s.ep_b = accounts.ep_b  # type: ignore[attr-defined]
    return s


def todo(store: Any, **kw: Any) -> NewTodo:
    base: dict[str, Any] = {
        "endpoint_id": store.ep_a,
        "queue": "inbox",
        "title": "PR 1 opened",
        "payload": {"n": 1},
        "verified": True,
    }
    base.update(kw)
    return NewTodo(**base)


async def test_create_then_claim_next_in_order(store: Any, hub: TransitionHub) -> None:
    rec = Recorder()
    hub.subscribe("rec", rec)
    first = (await store.create([todo(store, title="first")])).created[0]
    second = (await store.create([todo(store, title="second")])).created[0]
    row = await store.claim_next(store.ep_a, ["inbox"], 60)
    assert row.id == first and row.status == "claimed" and row.attempt == 1
    assert json.loads(row.payload) == {"n": 1}
    row2 = await store.claim_next(store.ep_a, ["inbox"], 60)
    assert row2.id == second
    assert await store.claim_next(store.ep_a, ["inbox"], 60) is None
    await hub.idle()
    assert [t.transition for t in rec.seen] == ["created", "created", "claimed", "claimed"]
    assert rec.seen[0].push_eligible and not rec.seen[0].push_excluded and rec.seen[0].ready


async def test_claim_next_respects_owner_and_queue(store: Any) -> None:
    await store.create([todo(store, queue="reviews"), todo(store, endpoint_id=store.ep_b)])
    assert await store.claim_next(store.ep_a, ["inbox"], 60) is None  # b's inbox todo is not a's
    assert (await store.claim_next(store.ep_a, ["reviews"], 60)).queue == "reviews"
    assert await store.claim_next(store.ep_a, [], 60) is None


async def test_claim_by_id_only_own_pending(store: Any) -> None:
    tid = (await store.create([todo(store)])).created[0]
    assert await store.claim(store.ep_b, tid, ["inbox"], 60) is None
    assert await store.claim(store.ep_a, tid, ["reviews"], 60) is None  # not in the allowed queues
    assert (await store.claim(store.ep_a, tid, ["inbox"], 60)).status == "claimed"
    assert await store.claim(store.ep_a, tid, ["inbox"], 60) is None  # already claimed


async def test_heartbeat_extends_and_ack_finishes(store: Any, clock: ManualClock) -> None:
    tid = (await store.create([todo(store)])).created[0]
    claimed = await store.claim_next(store.ep_a, ["inbox"], 60)
    clock.advance(30)
    lease = claimed.lease_id
    beat = await store.heartbeat(store.ep_a, tid, lease, 120)
    assert beat.lease_expires_at > claimed.lease_expires_at
    assert await store.heartbeat(store.ep_b, tid, lease, 120) is None
    assert await store.ack(store.ep_b, tid, lease, {"ok": True}) is None
    done = await store.ack(store.ep_a, tid, lease, {"ok": True})
    assert done.status == "done" and json.loads(done.result) == {"ok": True}
    assert await store.ack(store.ep_a, tid, lease, None) is None  # not claimed any more


async def test_fail_retries_with_backoff_then_dead(store: Any, clock: ManualClock) -> None:
    tid = (await store.create([todo(store)])).created[0]
    delays = []
    for attempt in (1, 2):
        held = await store.claim_next(store.ep_a, ["inbox"], 60)
        row = await store.fail(store.ep_a, tid, held.lease_id, "boom", retry=True)
        assert row.status == "failed" and row.attempt == attempt
        delays.append((row.retry_at - int(clock.now() * 1000)) / 1000)
        assert await store.requeue_due_retries() == []  # not yet due
        clock.advance(delays[-1])
        moved = await store.requeue_due_retries()
        assert [t.todo_id for t in moved] == [tid] and moved[0].transition == "requeued"
    assert delays == [30.0, 60.0]
    held = await store.claim_next(store.ep_a, ["inbox"], 60)
    assert (
        await store.fail(store.ep_a, tid, held.lease_id, "boom", retry=True)
    ).status == "dead"  # third attempt = max


async def test_fail_without_retry_is_dead(store: Any) -> None:
    tid = (await store.create([todo(store)])).created[0]
    held = await store.claim_next(store.ep_a, ["inbox"], 60)
    assert (await store.fail(store.ep_a, tid, held.lease_id, "bad input", retry=False)).status == "dead"


async def test_reaper_requeues_expired_lease_once(store: Any, clock: ManualClock, hub: TransitionHub) -> None:
    rec = Recorder()
    hub.subscribe("rec", rec)
    tid = (await store.create([todo(store)])).created[0]
    await store.claim_next(store.ep_a, ["inbox"], 60)
    assert await store.requeue_expired_leases() == []
    clock.advance(61)
    moved = await store.requeue_expired_leases()
    assert [(t.todo_id, t.transition, t.reason, t.attempt) for t in moved] == [
        (tid, "requeued", "lease_expired", 1)
    ]
    assert await store.requeue_expired_leases() == []
    again = await store.claim_next(store.ep_a, ["inbox"], 60)
    assert again.id == tid and again.attempt == 2
    await hub.idle()
    assert [t.transition for t in rec.seen] == ["created", "claimed", "requeued", "claimed"]


async def test_reaper_kills_after_last_attempt(store: Any, clock: ManualClock) -> None:
    tid = (await store.create([todo(store)])).created[0]
    for _ in range(3):
        await store.claim_next(store.ep_a, ["inbox"], 10)
        clock.advance(11)
        moved = await store.requeue_expired_leases()
    assert moved[0].transition == "dead" and moved[0].todo_id == tid


async def test_requeue_reapplies_sender_gate(store: Any, clock: ManualClock) -> None:
    """SPEC-0024 REQ-6: an unverified todo claimed by id and abandoned comes back not push-eligible."""
    tid = (await store.create([todo(store, verified=False)])).created[0]
    tok = (await store.create([todo(store, verified=False, via_token=True)])).created[0]
    await store.claim(store.ep_a, tid, ["inbox"], 10)
    await store.claim(store.ep_a, tok, ["inbox"], 10)
    clock.advance(11)
    moved = {t.todo_id: t for t in await store.requeue_expired_leases()}
    assert moved[tid].push_eligible is False and moved[tid].pushable is False
    assert moved[tok].push_eligible is True and moved[tok].pushable is True


async def test_push_excluded_for_self_test_and_quarantine(store: Any, hub: TransitionHub) -> None:
    rec = Recorder()
    hub.subscribe("rec", rec)
    await store.create(
        [todo(store, self_test=True), todo(store, quarantined=True), todo(store, endpoint_id=None)]
    )
    await hub.idle()
    assert [t.push_excluded for t in rec.seen] == [True, True, False]
    assert not any(t.pushable for t in rec.seen)  # the third is a system todo: no endpoint


async def test_redelivery_dedups_onto_live_todo_and_publishes_nothing(store: Any, hub: TransitionHub) -> None:
    rec = Recorder()
    hub.subscribe("rec", rec)
    item = todo(store, source_id="src_x", delivery_id="d-1")
    first = await store.create([item])
    again = await store.create([item])
    assert len(first.created) == 1 and again.created == [] and again.deduplicated == 1
    await hub.idle()
    assert len(rec.seen) == 1
    # Once the todo is done, the same delivery id is a new piece of work.
    held = await store.claim_next(store.ep_a, ["inbox"], 60)
    assert await store.ack(store.ep_a, first.created[0], held.lease_id, None) is not None
    assert len((await store.create([item])).created) == 1


async def test_cancel_only_live_and_own(store: Any) -> None:
    tid = (await store.create([todo(store)])).created[0]
    assert await store.cancel(store.ep_b, tid) is None
    assert (await store.cancel(store.ep_a, tid)).status == "canceled"
    assert await store.cancel(store.ep_a, tid) is None


async def test_failing_or_slow_subscriber_does_not_affect_others(store: Any, hub: TransitionHub) -> None:
    rec = Recorder()
    gate = asyncio.Event()

    async def boom(_: Transition) -> None:
        raise RuntimeError("subscriber bug")

    async def stuck(_: Transition) -> None:
        await gate.wait()

    hub.subscribe("boom", boom)
    hub.subscribe("stuck", stuck)
    hub.subscribe("rec", rec)
    result = await store.create([todo(store), todo(store)])
    assert len(result.created) == 2  # the transaction committed regardless
    while len(rec.seen) < 2:
        await asyncio.sleep(0)  # yield to the subscriber tasks
    assert [t.todo_id for t in rec.seen] == result.created
    gate.set()
    await hub.idle()


async def test_in_transaction_handler_failure_rolls_back(
    store: Any, hub: TransitionHub, database: Database
) -> None:
    async def refuse(_conn: Any, _ts: Any) -> None:
        raise RuntimeError("outbox write failed")

    hub.add_in_transaction(refuse)
    with pytest.raises(RuntimeError):
        await store.create([todo(store)])
    async with database.read() as conn:
        assert (await conn.execute(select(func.count()).select_from(todos))).scalar_one() == 0


async def test_list_and_pending_summary(store: Any, clock: ManualClock) -> None:
    ids = (
        await store.create([todo(store), todo(store, queue="reviews"), todo(store, verified=False)])
    ).created
    clock.advance(5)
    rows = await store.list_for_endpoint(store.ep_a)
    assert [r.id for r in rows] == list(reversed(ids))
    assert [r.id for r in await store.list_for_endpoint(store.ep_a, queues=["reviews"])] == [ids[1]]
    count, queues, oldest = await store.pending_summary(store.ep_a, ["inbox", "reviews"])
    assert count == 2 and queues == ["inbox", "reviews"] and oldest is not None
    assert await store.list_for_endpoint(store.ep_b) == []


async def test_expired_lease_cannot_heartbeat_ack_or_fail(store: Any, clock: ManualClock) -> None:
    """A late worker must not finish a claim the reaper may already have handed to someone else."""
    tid = (await store.create([todo(store)])).created[0]
    late = (await store.claim_next(store.ep_a, ["inbox"], 10)).lease_id
    clock.advance(11)
    assert await store.heartbeat(store.ep_a, tid, late, 60) is None
    assert await store.ack(store.ep_a, tid, late, {"late": True}) is None
    assert await store.fail(store.ep_a, tid, late, "late", retry=True) is None
    moved = await store.requeue_expired_leases()
    assert [t.todo_id for t in moved] == [tid]
    fresh = await store.claim_next(store.ep_a, ["inbox"], 10)
    assert fresh.attempt == 2 and fresh.lease_id != late
    # the first claim's handle moves nothing under the second claim
    assert await store.heartbeat(store.ep_a, tid, late, 60) is None
    assert await store.ack(store.ep_a, tid, late, {"late": True}) is None
    assert await store.fail(store.ep_a, tid, late, "late", retry=True) is None
    assert (await store.ack(store.ep_a, tid, fresh.lease_id, {"ok": True})).status == "done"


async def test_a_fan_out_delivery_is_one_insert_and_a_redelivery_of_part_of_it_dedups_that_part(
    store: Any, database: Database, hub: TransitionHub
) -> None:
    from sqlalchemy import event

    rec = Recorder()
    hub.subscribe("rec", rec)
    items = [
        todo(store, source_id="src_x", delivery_id="d-9", queue=q, endpoint_id=ep)
        for ep in (store.ep_a, store.ep_b)
        for q in ("inbox", "reviews")
    ]
    inserts: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO TODOS"):
            inserts.append(statement)

    writer = database.sqlite_writer()  # SQLite on a file: creates go to the group-commit writer
    works = writer.works if writer is not None else 0
    event.listen(database.engine.sync_engine, "before_cursor_execute", record)
    try:
        first = await store.create(items)
        # the same delivery again, plus one todo it did not have (no dedup key: never absorbed)
        again = await store.create([*items[1:3], todo(store, title="no delivery id")])
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", record)
    if writer is not None:  # one trip to the writer thread per create, whatever the number of todos
        assert inserts == [] and writer.works - works == 2
    else:
        assert len(inserts) == 2  # one statement per create, whatever the number of todos
    assert len(first.created) == 4 and first.deduplicated == 0
    assert len(again.created) == 1 and again.deduplicated == 2
    await hub.idle()
    assert [t.todo_id for t in rec.seen] == [*first.created, *again.created]
    async with database.read() as conn:
        assert (await conn.execute(select(func.count()).select_from(todos))).scalar_one() == 5
