"""The ``a2a_push_outbox`` home's contract, run against SQLite and a real PostgreSQL."""

from __future__ import annotations

from switchboard.core.clock import ManualClock
from switchboard.store import push_outbox
from switchboard.store.db import Database
from switchboard.store.push_outbox import OutboxStore
from switchboard.store.transitions import TransitionHub
from tests.unit.store.a2a_rows import config, task, world


async def _enqueue(
    database: Database, task_id: str, seq: int, targets: list[tuple[str, str]], now: int
) -> None:
    async with database.begin() as conn:
        await push_outbox.enqueue(
            conn,
            task_id=task_id,
            seq=seq,
            body=f'{{"seq": {seq}}}'.encode(),
            targets=[(cfg, host, f"msg_{seq}_{host}") for cfg, host in targets],
            now_ms=now,
        )


async def test_a_claim_takes_due_rows_once_in_sequence_order(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    cfg = await config(database, w, tid, "c1")
    await _enqueue(database, tid, 1, [(cfg, "h.test")], 100)
    await _enqueue(database, tid, 2, [(cfg, "h.test")], 100)
    box = OutboxStore(database)
    assert await box.claim(now_ms=99, lease_ms=1000, limit=10) == []  # not due yet
    (first,) = await box.claim(now_ms=100, lease_ms=1000, limit=10)  # seq 2 waits behind seq 1
    assert (first.seq, first.body, first.msg_id, first.attempts) == (1, b'{"seq": 1}', "msg_1_h.test", 0)
    assert await box.claim(now_ms=100, lease_ms=1000, limit=10) == []  # leased: not claimed twice
    assert await box.delivered(first, status=200, now_ms=150)
    (second,) = await box.claim(now_ms=150, lease_ms=1000, limit=10)
    assert second.seq == 2 and second.created_ms == 100


async def test_a_late_row_overtakes_after_the_order_wait(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    cfg = await config(database, w, tid, "c1")
    await _enqueue(database, tid, 1, [(cfg, "h.test")], 100)
    await _enqueue(database, tid, 2, [(cfg, "h.test")], 100)
    box = OutboxStore(database)
    held = await box.claim(now_ms=100, lease_ms=10_000, limit=1)
    assert [c.seq for c in held] == [1]
    assert await box.claim(now_ms=200, lease_ms=1000, limit=10, order_wait_ms=500) == []
    assert [c.seq for c in await box.claim(now_ms=600, lease_ms=1000, limit=10, order_wait_ms=500)] == [2]


async def test_finishing_needs_the_claim_and_excluded_hosts_wait(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    a = await config(database, w, tid, "a", host="a.test")
    b = await config(database, w, tid, "b", host="b.test")
    await _enqueue(database, tid, 1, [(a, "a.test"), (b, "b.test")], 100)
    box = OutboxStore(database)
    (only_b,) = await box.claim(now_ms=100, lease_ms=50, limit=10, exclude_hosts=["a.test"])
    assert only_b.host == "b.test"
    (again,) = await box.claim(now_ms=200, lease_ms=50, limit=10, exclude_hosts=["a.test"])  # lease ran out
    assert again.id == only_b.id and again.claim_token != only_b.claim_token
    assert not await box.failed(only_b, status=500, error="http_500", now_ms=200)  # an old claim: no-op
    assert await box.retry(again, status=503, error="http_503", due_ms=300)
    (retried,) = await box.claim(now_ms=300, lease_ms=50, limit=10, exclude_hosts=["a.test"])
    assert (retried.attempts, retried.last_error) == (1, "http_503")
    assert await box.release(retried, due_ms=400)
    (released,) = await box.claim(now_ms=400, lease_ms=50, limit=10, exclude_hosts=["a.test"])
    assert released.attempts == 1  # a release is no attempt
    assert await box.failed(released, status=None, error="gave_up", now_ms=410)
    backlog = await box.backlog()
    assert (backlog.pending, backlog.oldest_created_ms) == (1, 100)  # a's row
    assert await box.purge_finished(409) == 0
    assert await box.purge_finished(410) == 1
    assert (await box.backlog()).pending == 1
