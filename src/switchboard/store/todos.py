"""Todo lifecycle SQL: create (with dedup), claim, heartbeat, ack, fail, cancel, and the requeue sweeps.

Every statement that moves a todo is a single conditional UPDATE (``... WHERE status = <expected>``),
so across instances each row moves exactly once: on PostgreSQL the claim and sweep sub-selects use
``FOR UPDATE SKIP LOCKED``; on SQLite writers are serialised by ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, Select, and_, case, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.clock import Clock, ms
from switchboard.delivery.backoff import Backoff
from switchboard.ids import new_id, todo_id
from switchboard.store.db import Database
from switchboard.store.schema import LIVE_DEDUP_PREDICATE, LIVE_STATUSES, PENDING_PREDICATE, todos
from switchboard.store.schema_console import todo_events
from switchboard.store.transitions import InTxHandler, Transition, TransitionHub
from switchboard.text import admit

# Called on the moved row inside the transaction that moves it (docs/mcp.md, "Answers and state"): if
# it raises, the move rolls back, so a caller is never told "failed" about a change that committed.
Answer = Callable[[Row[Any]], object]

# An ack result is also an A2A task's artifact: a protobuf Struct, whose JSON parser stops at 100 message
# levels, two per JSON level. Deeper results would make every GetTask and ListTasks of that sender fail.
MAX_RESULT_DEPTH = 32

_MOVED = (
    todos.c.id,
    todos.c.endpoint_id,
    todos.c.queue,
    todos.c.kind,
    todos.c.source,
    todos.c.title,
    todos.c.attempt,
    todos.c.status,
    todos.c.verified,
    todos.c.via_token,
    todos.c.self_test,
    todos.c.quarantined,
)


@dataclass(frozen=True, slots=True)
class NewTodo:
    endpoint_id: str | None
    queue: str
    title: str
    payload: Any
    kind: str | None = None
    source: str | None = None
    source_id: str | None = None
    delivery_id: str | None = None
    verified: bool = False
    via_token: bool = False
    self_test: bool = False
    quarantined: bool = False


@dataclass(frozen=True, slots=True)
class CreateResult:
    created: list[str]
    deduplicated: int


# What an operator may send back to pending: todos that stopped (a claimed todo belongs to its worker
# until its lease runs out; the reaper requeues it then).
REQUEUEABLE = ("failed", "dead")


RetryPolicy = Backoff
"""ADR-0007: retry_at = now + base x 2^(attempt-1), capped; dead after ``max_attempts`` claims (the
tree's one backoff schedule, :class:`switchboard.delivery.backoff.Backoff`)."""


def claim_pick(endpoint_id: str, queues: Sequence[str]) -> Select[tuple[str]]:
    """The id of the endpoint's oldest pending todo on ``queues``, locked (SKIP LOCKED on PostgreSQL).

    The pending test is written literally, not bound: only then may the planner (PostgreSQL's generic
    plan for a prepared statement; SQLite always) use ``ix_todos_claim_pending``, which yields the
    endpoint's pending rows already in claim order, so no claim sorts the backlog."""
    return (
        select(todos.c.id)
        .where(todos.c.endpoint_id == endpoint_id, PENDING_PREDICATE, todos.c.queue.in_(queues))
        .order_by(todos.c.created_at, todos.c.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )


def sender_gate(verified: bool, via_token: bool) -> bool:
    """SPEC-0011: verified under the source's trust mode, or arrived on a token-trust webhook."""
    return bool(verified or via_token)


class TodoStore:
    def __init__(
        self, db: Database, hub: TransitionHub, clock: Clock, retry: RetryPolicy | None = None
    ) -> None:
        self.db, self.hub, self.clock = db, hub, clock
        self.retry = retry or RetryPolicy()

    # -- helpers -----------------------------------------------------------------------------------

    def _transition(self, row: Row[Any], transition: str, reason: str | None, now: float) -> Transition:
        return Transition(
            todo_id=row.id,
            endpoint_id=row.endpoint_id,
            queue=row.queue,
            kind=row.kind,
            source=row.source,
            title=row.title,
            attempt=row.attempt,
            transition=transition,
            reason=reason,
            push_eligible=sender_gate(row.verified, row.via_token),
            push_excluded=bool(row.self_test or row.quarantined),
            at=now,
            instance_id=self.hub.instance_id,
        )

    @staticmethod
    def _live_lease(endpoint_id: str, todo: str, now: float) -> Any:
        """Heartbeat, ack and fail need a lease that has not run out: once it has, the reaper may hand
        the todo to another worker, and a late ack must not finish someone else's claim."""
        return and_(
            todos.c.id == todo,
            todos.c.endpoint_id == endpoint_id,
            todos.c.status == "claimed",
            todos.c.lease_expires_at >= ms(now),
        )

    async def _commit(
        self,
        conn: AsyncConnection,
        transitions: list[Transition],
        *,
        actor: str | None = None,
        leases: dict[str, int | None] | None = None,
    ) -> None:
        """Record each transition in the todo's timeline (``todo_events``) and run the in-transaction
        handlers, all in the transition's own transaction: the timeline holds exactly what committed."""
        if transitions:
            await conn.execute(
                insert(todo_events),
                [
                    {
                        "id": new_id("te"),
                        "todo_id": t.todo_id,
                        "transition": t.transition,
                        "reason": t.reason,
                        "attempt": t.attempt,
                        "lease_expires_at": (leases or {}).get(t.todo_id),
                        "actor": actor,
                        "instance_id": t.instance_id[:100] or None,
                        "at": ms(t.at),
                    }
                    for t in transitions
                ],
            )
            await self.hub.run_in_transaction(conn, transitions)

    # -- create ------------------------------------------------------------------------------------

    async def create(
        self, items: Sequence[NewTodo], *, in_transaction: InTxHandler | None = None
    ) -> CreateResult:
        """Insert todos in one transaction. A live todo with the same dedup key absorbs a redelivery
        silently: nothing is inserted and nothing is published for it. A payload that is not storable
        JSON raises :class:`switchboard.text.Unstorable` before anything is written, whichever face
        sent it. ``in_transaction`` is given the created todos in the same transaction, before the
        hub's in-transaction stage: for rows that must commit with them (an A2A task row)."""
        for item in items:
            admit(item.payload)
        now = self.clock.now()
        created: list[Transition] = []
        dedup = 0
        rows = [_insert_values(item, ms(now)) for item in items]
        async with self.db.begin() as conn:
            # One statement for the whole delivery (SQLAlchemy sends the rows as one multi-row INSERT);
            # RETURNING names the rows that went in. A row without a dedup key never conflicts.
            inserted = {r.id for r in await conn.execute(self._insert_ignore(), rows)} if rows else set()
            for item, values in zip(items, rows, strict=True):
                if values["id"] not in inserted:
                    dedup += 1
                    continue
                created.append(
                    Transition(
                        todo_id=values["id"],
                        endpoint_id=item.endpoint_id,
                        queue=item.queue,
                        kind=item.kind,
                        source=item.source,
                        title=item.title,
                        attempt=0,
                        transition="created",
                        reason=None,
                        push_eligible=sender_gate(item.verified, item.via_token),
                        push_excluded=item.self_test or item.quarantined,
                        at=now,
                        instance_id=self.hub.instance_id,
                    )
                )
            if in_transaction is not None and created:
                await in_transaction(conn, created)
            await self._commit(conn, created)
        self.hub.publish(created)
        return CreateResult([t.todo_id for t in created], dedup)

    def _insert_ignore(self) -> Any:
        """The insert that a live todo with the same dedup key absorbs, returning the ids that went
        in, built once per dialect (the rows are bound at execution): ingest runs it per delivery."""
        return _INSERT_IGNORE_SQLITE if self.db.is_sqlite else _INSERT_IGNORE_PG

    # -- claim, heartbeat, ack, fail, cancel ---------------------------------------------------------

    async def claim_next(
        self, endpoint_id: str, queues: Sequence[str], lease_seconds: float, *, answer: Answer | None = None
    ) -> Row[Any] | None:
        if not queues:
            return None
        now = self.clock.now()
        pick = claim_pick(endpoint_id, queues).scalar_subquery()
        stmt = (
            update(todos)
            .where(todos.c.id == pick, todos.c.status == "pending")
            .values(**_claimed(now, lease_seconds))
            .returning(*todos.c)
        )
        return await self._move_one(stmt, "claimed", None, now, answer)

    async def claim(
        self,
        endpoint_id: str,
        todo: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        answer: Answer | None = None,
    ) -> Row[Any] | None:
        now = self.clock.now()
        stmt = (
            update(todos)
            .where(
                todos.c.id == todo,
                todos.c.endpoint_id == endpoint_id,
                todos.c.status == "pending",
                todos.c.queue.in_(queues),
            )
            .values(**_claimed(now, lease_seconds))
            .returning(*todos.c)
        )
        return await self._move_one(stmt, "claimed", None, now, answer)

    async def bury(self, endpoint_id: str, todo: str, reason: str) -> Row[Any] | None:
        """Pending to ``dead`` with ``reason``: for a todo that no claim can ever answer (a row stored
        before the text boundary existed), so it neither blocks its queue nor is lost silently."""
        now = self.clock.now()
        stmt = (
            update(todos)
            .where(todos.c.id == todo, todos.c.endpoint_id == endpoint_id, todos.c.status == "pending")
            .values(status="dead", last_error=reason[:2000], retry_at=None, updated_at=ms(now))
            .returning(*todos.c)
        )
        return await self._move_one(stmt, "dead", "unanswerable", now)

    async def heartbeat(self, endpoint_id: str, todo: str, lease_seconds: float) -> Row[Any] | None:
        now = self.clock.now()
        stmt = (
            update(todos)
            .where(self._live_lease(endpoint_id, todo, now))
            .values(lease_expires_at=ms(now + lease_seconds), updated_at=ms(now))
            .returning(*todos.c)
        )
        async with self.db.begin() as conn:
            return (await conn.execute(stmt)).first()

    async def ack(self, endpoint_id: str, todo: str, result: Any) -> Row[Any] | None:
        """Raises :class:`switchboard.text.Unstorable` (nothing written) for a result no reader could
        parse back: lone surrogates, NaN, nesting past :data:`MAX_RESULT_DEPTH`."""
        admit(result, max_depth=MAX_RESULT_DEPTH)
        now = self.clock.now()
        stmt = (
            update(todos)
            .where(self._live_lease(endpoint_id, todo, now))
            .values(
                status="done",
                lease_expires_at=None,
                result=None if result is None else json.dumps(result, allow_nan=False),
                updated_at=ms(now),
            )
            .returning(*todos.c)
        )
        return await self._move_one(stmt, "done", None, now)

    async def fail(self, endpoint_id: str, todo: str, error: str, *, retry: bool) -> Row[Any] | None:
        """ADR-0007: back to ``failed`` with a due time, or ``dead`` when out of attempts or told not to retry."""
        now = self.clock.now()
        owned = self._live_lease(endpoint_id, todo, now)
        async with self.db.begin() as conn:
            current = (await conn.execute(select(todos.c.attempt).where(owned))).first()
            if current is None:
                return None
            attempt = int(current.attempt)
            give_up = not retry or attempt >= self.retry.max_attempts
            stmt = (
                update(todos)
                # Conditional on the attempt we read: a concurrent reclaim makes this a no-op.
                .where(owned, todos.c.attempt == attempt)
                .values(
                    status="dead" if give_up else "failed",
                    lease_expires_at=None,
                    retry_at=None if give_up else ms(now + self.retry.delay(attempt)),
                    last_error=error[:2000],
                    updated_at=ms(now),
                )
                .returning(*todos.c)
            )
            row = (await conn.execute(stmt)).first()
            transitions = [] if row is None else [self._transition(row, row.status, "worker_failed", now)]
            await self._commit(conn, transitions)
        self.hub.publish(transitions)
        return row

    async def cancel(self, endpoint_id: str, todo: str, *, actor: str | None = None) -> Row[Any] | None:
        now = self.clock.now()
        stmt = (
            update(todos)
            .where(
                todos.c.id == todo,
                todos.c.endpoint_id == endpoint_id,
                todos.c.status.in_(LIVE_STATUSES),
            )
            .values(status="canceled", lease_expires_at=None, retry_at=None, updated_at=ms(now))
            .returning(*todos.c)
        )
        return await self._move_one(stmt, "canceled", "operator" if actor else None, now, actor=actor)

    async def requeue(self, endpoint_id: str, todo: str, *, actor: str | None = None) -> Row[Any] | None:
        """An operator's requeue: a failed or dead todo goes back to pending with a fresh attempt budget.

        It is the same ``requeued`` transition the reaper and the retry scheduler publish (reason
        ``operator``), so every subscriber treats it alike: notify hooks are told with reason
        ``requeued`` (SPEC-0024 REQ-6), A2A pushes and the doorbell fire, and the sender gate is
        re-applied to the row that moved. ``None`` when the todo is not this endpoint's or not in a
        requeueable state (nothing changes then).
        """
        now = self.clock.now()
        stmt = (
            update(todos)
            .where(
                todos.c.id == todo,
                todos.c.endpoint_id == endpoint_id,
                todos.c.status.in_(REQUEUEABLE),
            )
            .values(status="pending", attempt=0, lease_expires_at=None, retry_at=None, updated_at=ms(now))
            .returning(*todos.c)
        )
        return await self._move_one(stmt, "requeued", "operator", now, actor=actor)

    async def _move_one(
        self,
        stmt: Any,
        transition: str,
        reason: str | None,
        now: float,
        answer: Answer | None = None,
        *,
        actor: str | None = None,
    ) -> Row[Any] | None:
        async with self.db.begin() as conn:
            row = (await conn.execute(stmt)).first()
            if row is not None and answer is not None:
                answer(row)  # raising here rolls the move back
            transitions = [] if row is None else [self._transition(row, transition, reason, now)]
            leases = {} if row is None else {row.id: row.lease_expires_at}
            await self._commit(conn, transitions, actor=actor, leases=leases)
        self.hub.publish(transitions)
        return row

    # -- sweeps ------------------------------------------------------------------------------------

    async def requeue_expired_leases(self, limit: int = 500) -> list[Transition]:
        """The reaper: expired leases go back to pending (or dead once out of attempts)."""
        now = self.clock.now()
        pick = (
            select(todos.c.id)
            .where(todos.c.status == "claimed", todos.c.lease_expires_at < ms(now))
            .order_by(todos.c.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        give_up = todos.c.attempt >= self.retry.max_attempts
        stmt = (
            update(todos)
            .where(todos.c.id.in_(pick), todos.c.status == "claimed", todos.c.lease_expires_at < ms(now))
            .values(
                status=case((give_up, "dead"), else_="pending"),
                lease_expires_at=None,
                last_error=case((give_up, "lease expired on the last attempt"), else_=todos.c.last_error),
                updated_at=ms(now),
            )
            .returning(*_MOVED)
        )
        return await self._sweep(stmt, now, "lease_expired")

    async def requeue_due_retries(self, limit: int = 500) -> list[Transition]:
        """The retry scheduler: failed todos whose retry is due go back to pending."""
        now = self.clock.now()
        pick = (
            select(todos.c.id)
            .where(todos.c.status == "failed", todos.c.retry_at <= ms(now))
            .order_by(todos.c.retry_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        stmt = (
            update(todos)
            .where(todos.c.id.in_(pick), todos.c.status == "failed", todos.c.retry_at <= ms(now))
            .values(status="pending", retry_at=None, updated_at=ms(now))
            .returning(*_MOVED)
        )
        return await self._sweep(stmt, now, "retry_due")

    async def _sweep(self, stmt: Any, now: float, reason: str) -> list[Transition]:
        async with self.db.begin() as conn:
            rows = (await conn.execute(stmt)).all()
            # The requeue path re-applies the sender gate to exactly the rows it moved (SPEC-0024 REQ-6):
            # _transition evaluates sender_gate() on each returned row.
            transitions = [
                self._transition(row, "requeued" if row.status == "pending" else "dead", reason, now)
                for row in rows
            ]
            await self._commit(conn, transitions)
        self.hub.publish(transitions)
        return transitions

    # -- reads -------------------------------------------------------------------------------------

    async def get(self, endpoint_id: str, todo: str) -> Row[Any] | None:
        async with self.db.read() as conn:
            stmt = select(todos).where(todos.c.id == todo, todos.c.endpoint_id == endpoint_id)
            return (await conn.execute(stmt)).first()

    async def list_for_endpoint(
        self,
        endpoint_id: str,
        *,
        statuses: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[Row[Any]]:
        stmt = select(todos).where(todos.c.endpoint_id == endpoint_id)
        if statuses:
            stmt = stmt.where(todos.c.status.in_(statuses))
        if queues is not None:
            stmt = stmt.where(todos.c.queue.in_(queues))
        if before:
            stmt = stmt.where(todos.c.id < before)
        stmt = stmt.order_by(todos.c.id.desc()).limit(limit)
        async with self.db.read() as conn:
            return list((await conn.execute(stmt)).all())

    async def pending_summary(
        self, endpoint_id: str, queues: Sequence[str]
    ) -> tuple[int, list[str], int | None]:
        """Push-eligible pending todos: (count, queues that have some, oldest created_at ms)."""
        if not queues:
            return 0, [], None
        stmt = (
            select(todos.c.queue, func.count(), func.min(todos.c.created_at))
            .where(
                todos.c.endpoint_id == endpoint_id,
                todos.c.status == "pending",
                todos.c.queue.in_(queues),
                (todos.c.verified | todos.c.via_token),
                todos.c.self_test.is_(False),
                todos.c.quarantined.is_(False),
            )
            .group_by(todos.c.queue)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        total = sum(int(r[1]) for r in rows)
        oldest = min((int(r[2]) for r in rows), default=None)
        return total, sorted(str(r[0]) for r in rows), oldest

    async def queue_overview(
        self, endpoint_id: str, queues: Sequence[str], next_limit: int = 10
    ) -> tuple[dict[str, dict[str, int]], list[str]]:
        """An endpoint's todos on ``queues``: counts by queue and status, and the ids ``claim_next``
        would take next (oldest pending first, in its order). For MCP ``resources/read``."""
        if not queues:
            return {}, []
        where = (todos.c.endpoint_id == endpoint_id, todos.c.queue.in_(queues))
        counts_stmt = (
            select(todos.c.queue, todos.c.status, func.count())
            .where(*where)
            .group_by(todos.c.queue, todos.c.status)
        )
        next_stmt = (
            select(todos.c.id)
            .where(*where, todos.c.status == "pending")
            .order_by(todos.c.created_at, todos.c.id)
            .limit(next_limit)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(counts_stmt)).all()
            next_ids = [str(r[0]) for r in (await conn.execute(next_stmt)).all()]
        counts: dict[str, dict[str, int]] = {}
        for queue, status, n in rows:
            counts.setdefault(str(queue), {})[str(status)] = int(n)
        return counts, next_ids


def _claimed(now: float, lease_seconds: float) -> dict[str, Any]:
    """What a claim writes, by claim_next and claim alike: the attempt counts claims."""
    return {
        "status": "claimed",
        "attempt": todos.c.attempt + 1,
        "lease_expires_at": ms(now + lease_seconds),
        "retry_at": None,
        "updated_at": ms(now),
    }


_INSERT_IGNORE_SQLITE = (
    sqlite_insert(todos)
    .on_conflict_do_nothing(index_elements=[todos.c.dedup_key], index_where=LIVE_DEDUP_PREDICATE)
    .returning(todos.c.id)
)
_INSERT_IGNORE_PG = (
    pg_insert(todos)
    .on_conflict_do_nothing(index_elements=[todos.c.dedup_key], index_where=LIVE_DEDUP_PREDICATE)
    .returning(todos.c.id)
)


def _insert_values(item: NewTodo, now_ms: int) -> dict[str, Any]:
    dedup_key = None
    if item.delivery_id and item.source_id:
        # Verification is part of the key (docs/ingest.md, "Deduplication"): an unverified delivery can
        # only absorb unverified redeliveries, so one sent first with a chosen delivery id never stands in
        # for the genuinely signed delivery that carries the same id.
        trusted = "" if sender_gate(item.verified, item.via_token) else "u|"
        dedup_key = f"{trusted}{item.source_id}|{item.delivery_id}|{item.queue}|{item.endpoint_id or ''}"
    return {
        "id": todo_id(),
        "endpoint_id": item.endpoint_id,
        "queue": item.queue,
        "kind": item.kind,
        "source": item.source,
        "source_id": item.source_id,
        "title": item.title,
        "payload": json.dumps(item.payload, separators=(",", ":"), allow_nan=False),
        "status": "pending",
        "attempt": 0,
        "delivery_id": item.delivery_id,
        "dedup_key": dedup_key,
        "verified": item.verified,
        "via_token": item.via_token,
        "self_test": item.self_test,
        "quarantined": item.quarantined,
        "created_at": now_ms,
        "updated_at": now_ms,
    }
