"""The ``a2a_tasks`` home's contract (with ``a2a_task_events``), run against SQLite and a real
PostgreSQL: the task row with its todo, the sequence counter, the event log, owner-scoped reads, and
the follow-up and ask updates."""

from __future__ import annotations

import json

from switchboard.core.clock import ManualClock, ms
from switchboard.store import a2a_tasks
from switchboard.store.a2a_tasks import TaskRows
from switchboard.store.db import Database
from switchboard.store.transitions import TransitionHub
from tests.unit.store.a2a_rows import task, world

TERMINAL = frozenset({"done", "dead", "canceled"})


async def test_reads_are_the_owners_only(database: Database, hub: TransitionHub, clock: ManualClock) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w, message_id="m-1")
    rows = TaskRows(database)
    got = await rows.get(w.owner, tid)
    assert got is not None
    assert (got.id, got.owner_endpoint_id, got.endpoint_id, got.status, got.last_seq) == (
        tid,
        w.owner,
        w.worker,
        "pending",
        0,
    )
    assert await rows.get(w.worker, tid) is None  # another endpoint's task reads like an unknown one
    assert (await rows.by_message_id(w.owner, "m-1")) == got
    assert await rows.by_message_id(w.worker, "m-1") is None
    async with database.begin() as conn:
        assert await a2a_tasks.lock_owned(conn, w.owner, tid)
        assert not await a2a_tasks.lock_owned(conn, w.worker, tid)
        assert await a2a_tasks.record_in(conn, tid) == got


async def test_sequence_numbers_rise_and_terminal_time_is_set_once(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    async with database.begin() as conn:
        first = await a2a_tasks.next_seq(conn, tid, terminal=False, now_ms=10)
        done = await a2a_tasks.next_seq(conn, tid, terminal=True, now_ms=20)
        late = await a2a_tasks.next_seq(conn, tid, terminal=True, now_ms=30)
        assert await a2a_tasks.next_seq(conn, w.owner, terminal=False, now_ms=1) is None  # not a task
        for seq in (1, 2):
            await a2a_tasks.record_event(conn, tid, seq, f'{{"s": {seq}}}'.encode(), 10)
    assert (first, done, late) == (
        a2a_tasks.Bumped(1, "ctx-1"),
        a2a_tasks.Bumped(2, "ctx-1"),
        a2a_tasks.Bumped(3, "ctx-1"),
    )
    rows = TaskRows(database)
    assert await rows.events_after(tid, 0) == [(1, '{"s": 1}'), (2, '{"s": 2}')]
    assert await rows.events_after(tid, 1) == [(2, '{"s": 2}')]
    async with database.begin() as conn:
        await a2a_tasks.purge_events_in(conn, 19)  # terminal at 20: kept
    assert len(await rows.events_after(tid, 0)) == 2
    async with database.begin() as conn:
        await a2a_tasks.purge_events_in(conn, 20)
    assert await rows.events_after(tid, 0) == []


async def test_follow_ups_dedup_refuse_terminal_and_reach_the_payload(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w, message_id="m-0")
    rows = TaskRows(database)
    assert await rows.append_followup(w.worker, tid, {"messageId": "m-1"}, TERMINAL) == "missing"
    assert await rows.append_followup(w.owner, tid, {"messageId": "m-0"}, TERMINAL) == "duplicate"
    assert await rows.append_followup(w.owner, tid, {"messageId": "m-1", "role": "ROLE_USER"}, TERMINAL) == (
        "appended"
    )
    assert await rows.append_followup(w.owner, tid, {"messageId": "m-1"}, TERMINAL) == "duplicate"
    got = await rows.get(w.owner, tid)
    assert got is not None and got.followups is not None
    assert [m["messageId"] for m in json.loads(got.followups)] == ["m-1"]
    claimed = await w.todos.claim_next(w.worker, ["inbox"], 60)
    assert claimed is not None and claimed.payload is not None
    assert json.loads(claimed.payload)["a2a"]["followups"] == [{"messageId": "m-1", "role": "ROLE_USER"}]
    async with database.begin() as conn:
        await a2a_tasks.mark_claim(conn, tid)
    assert await rows.followups_since_claim(w.worker, tid) == []
    await rows.append_followup(w.owner, tid, {"messageId": "m-2", "role": "ROLE_USER"}, TERMINAL)
    assert await rows.followups_since_claim(w.worker, tid) == [{"messageId": "m-2", "role": "ROLE_USER"}]
    assert await rows.followups_since_claim(w.owner, tid) is None  # not the worker's todo
    assert (
        await rows.append_followup(w.owner, tid, {"messageId": "m-3"}, frozenset({"claimed"})) == "terminal"
    )


async def test_an_ask_needs_the_lease_and_the_answer_closes_it(
    database: Database, hub: TransitionHub, clock: ManualClock
) -> None:
    w = await world(database, hub, clock)
    tid = await task(database, w)
    rows = TaskRows(database)
    calls: list[str] = []

    async def asked(_conn: object) -> None:
        calls.append("asked")

    async def answered(_conn: object) -> None:
        calls.append("answered")

    now = ms(clock.now())
    assert await rows.ask(w.worker, tid, "no-lease", {"messageId": "q"}, now, asked) == "lease_lost"
    claimed = await w.todos.claim_next(w.worker, ["inbox"], 60)
    assert claimed is not None and claimed.lease_id is not None
    assert await rows.ask(w.owner, tid, claimed.lease_id, {"messageId": "q"}, now, asked) == "missing"
    question = {"messageId": "q", "role": "ROLE_AGENT"}
    assert await rows.ask(w.worker, tid, claimed.lease_id, question, now, asked) == "asked"
    got = await rows.get(w.owner, tid)
    assert got is not None and got.input_required and got.question is not None
    assert json.loads(got.question)["taskId"] == tid
    page, total = await rows.page(
        w.owner,
        context_id=None,
        statuses=None,
        updated_after_ms=None,
        before=None,
        limit=10,
        input_required=True,
    )
    assert ([r.id for r in page], total) == ([tid], 1)
    assert await rows.append_followup(w.owner, tid, {"messageId": "a"}, TERMINAL, answered) == "appended"
    assert calls == ["asked", "answered"]
    got = await rows.get(w.owner, tid)
    assert got is not None and not got.input_required


async def test_a_page_filters_and_counts(database: Database, hub: TransitionHub, clock: ManualClock) -> None:
    w = await world(database, hub, clock)
    ids = [await task(database, w, context_id=c) for c in ("a", "b", "a")]
    rows = TaskRows(database)

    async def page(**kw: object) -> tuple[list[str], int]:
        args: dict[str, object] = {
            "context_id": None,
            "statuses": None,
            "updated_after_ms": None,
            "before": None,
            "limit": 10,
        }
        args.update(kw)
        found, total = await rows.page(w.owner, **args)  # type: ignore[arg-type]
        return [r.id for r in found], total

    newest_first = sorted(ids, reverse=True)
    assert await page() == (newest_first, 3)
    assert await page(limit=1) == (newest_first[:1], 3)
    assert await page(before=newest_first[0]) == (newest_first[1:], 3)
    assert await page(context_id="a") == (sorted([ids[0], ids[2]], reverse=True), 2)
    assert await page(statuses=["done"]) == ([], 0)
    assert await page(input_required=False) == (newest_first, 3)
    assert (
        await rows.page(
            w.worker, context_id=None, statuses=None, updated_after_ms=None, before=None, limit=10
        )
    ) == (
        [],
        0,
    )
