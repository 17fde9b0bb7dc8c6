"""Todo lifecycle SQL: create (with dedup), claim, heartbeat, ack, fail, cancel, requeue; the requeue
sweeps and the reads are in :mod:`switchboard.store.todo_moves` and :mod:`switchboard.store.todo_reads`.

Every statement that moves a todo is a single conditional UPDATE (``... WHERE status = <expected>``),
so across instances each row moves exactly once: on PostgreSQL the claim and sweep sub-selects use
``FOR UPDATE SKIP LOCKED``; on SQLite writers are serialised by ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, Select, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import todo_id
from switchboard.core.text import admit
from switchboard.delivery.backoff import Backoff
from switchboard.store.db import Database
from switchboard.store.leases import new_lease
from switchboard.store.schema import LIVE_DEDUP_PREDICATE, LIVE_STATUSES, PENDING_PREDICATE, todos
from switchboard.store.sqlite_writer import Declined
from switchboard.store.todo_claim_sql import EVENTS_SQLITE, events_params
from switchboard.store.todo_claims import MAX_RESULT_DEPTH, Moved, TodoClaims
from switchboard.store.todo_claims import Answer as ClaimAnswer
from switchboard.store.todo_moves import Answer, TodoMoves, sender_gate
from switchboard.store.todo_reads import TodoReads
from switchboard.store.transitions import InTxHandler, Transition, TransitionHub

__all__ = ["MAX_RESULT_DEPTH", "CreateResult", "NewTodo", "RetryPolicy", "TodoStore", "claim_pick"]


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


class TodoStore(TodoClaims, TodoMoves, TodoReads):
    """Every move of a todo (here; the claim path in :class:`TodoClaims`, the shared transaction and
    the sweeps in :class:`TodoMoves`) and the reads (:class:`TodoReads`): one object, so every face
    calls the same store."""

    def __init__(
        self, db: Database, hub: TransitionHub, clock: Clock, retry: RetryPolicy | None = None
    ) -> None:
        self.db, self.hub, self.clock = db, hub, clock
        self.retry = retry or RetryPolicy()

    # -- create ------------------------------------------------------------------------------------

    async def create(
        self, items: Sequence[NewTodo], *, in_transaction: InTxHandler | None = None
    ) -> CreateResult:
        """Insert todos in one transaction. A live todo with the same dedup key absorbs a redelivery
        silently: nothing is inserted and nothing is published for it. A payload that is not storable
        JSON raises :class:`switchboard.core.text.Unstorable` before anything is written, whichever face
        sent it. ``in_transaction`` is given the created todos in the same transaction, before the
        hub's in-transaction stage: for rows that must commit with them (an A2A task row)."""
        # A fan-out delivery hands every todo the same payload object: it is checked and encoded once.
        encoded: dict[int, str] = {}
        for item in items:
            if id(item.payload) not in encoded:
                admit(item.payload)
                encoded[id(item.payload)] = _encode_payload(item.payload)
        now = self.clock.now()
        rows = [_insert_values(item, ms(now), encoded[id(item.payload)]) for item in items]
        writer = self.db.sqlite_writer() if in_transaction is None and rows else None
        if writer is not None:
            try:
                created = await writer.run(functools.partial(self._create_in_writer, items, rows, now))
            except Declined:
                pass  # undone in the writer; made again below, where the handlers get a connection
            else:
                self.hub.publish(created)
                return CreateResult([t.todo_id for t in created], len(rows) - len(created))
        async with self.db.begin() as conn:
            # One statement for the whole delivery (SQLAlchemy sends the rows as one multi-row INSERT);
            # RETURNING names the rows that went in. A row without a dedup key never conflicts.
            inserted = {r.id for r in await conn.execute(self._insert_ignore(), rows)} if rows else set()
            created = self._created(items, rows, inserted, now)
            dedup = len(rows) - len(created)
            if in_transaction is not None and created:
                await in_transaction(conn, created)
            await self._commit(conn, created)
        self.hub.publish(created)
        return CreateResult([t.todo_id for t in created], dedup)

    def _create_in_writer(
        self, items: Sequence[NewTodo], rows: list[dict[str, Any]], now: float, conn: sqlite3.Connection
    ) -> list[Transition]:
        """SQLite: a create in the group-commit writer's next batch (store/sqlite_writer.py), as the claim
        path's moves are: one trip from the loop, no write lock held across a loop turn, and concurrent
        deliveries share a commit. The inserts, then the timeline rows, in the work's savepoint; a create
        whose transitions an in-transaction handler wants (an A2A task's) is undone and made on the loop."""
        sql = _insert_one_sqlite(tuple(rows[0]))
        inserted = {row["id"] for row in rows if conn.execute(sql, row).fetchone() is not None}
        created = self._created(items, rows, inserted, now)
        if self.hub.needs_transaction(created):
            raise Declined
        if created:
            moved = [(t.todo_id, t.attempt) for t in created]
            conn.execute(EVENTS_SQLITE, events_params(moved, "created", None, self._instance(), ms(now)))
        return created

    def _created(
        self, items: Sequence[NewTodo], rows: list[dict[str, Any]], inserted: set[str], now: float
    ) -> list[Transition]:
        """The created transitions of the rows that went in (the others a live todo absorbed)."""
        return [
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
            for item, values in zip(items, rows, strict=True)
            if values["id"] in inserted
        ]

    def _insert_ignore(self) -> Any:
        """The insert that a live todo with the same dedup key absorbs, returning the ids that went
        in, built once per dialect (the rows are bound at execution): ingest runs it per delivery."""
        return _INSERT_IGNORE_SQLITE if self.db.is_sqlite else _INSERT_IGNORE_PG

    # -- claim, heartbeat, ack, fail, cancel ---------------------------------------------------------

    async def claim_next(
        self,
        endpoint_id: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        answer: ClaimAnswer | None = None,
        request_key: str | None = None,
    ) -> Moved | None:
        """The endpoint's oldest pending todo on ``queues``, claimed: a :meth:`claim_many` of one."""
        rows = await self.claim_many(
            endpoint_id, queues, lease_seconds, 1, answer=answer, request_key=request_key
        )
        return rows[0] if rows else None

    async def claim(
        self,
        endpoint_id: str,
        todo: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        answer: Answer | None = None,
        request_key: str | None = None,
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
            .values(**_claimed(now, lease_seconds, request_key))
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

    async def heartbeat(
        self, endpoint_id: str, todo: str, lease: str, lease_seconds: float
    ) -> Row[Any] | None:
        """Extend the lease the caller holds (``lease``, its claim's handle); None when it does not."""
        now = self.clock.now()
        stmt = (
            update(todos)
            .where(self._live_lease(endpoint_id, todo, lease, now))
            .values(lease_expires_at=ms(now + lease_seconds), updated_at=ms(now))
            .returning(*todos.c)
        )
        async with self.db.begin() as conn:
            return (await conn.execute(stmt)).first()

    async def ack(self, endpoint_id: str, todo: str, lease: str, result: Any) -> Moved | None:
        """Raises :class:`switchboard.core.text.Unstorable` (nothing written) for a result no reader could
        parse back: lone surrogates, NaN, nesting past :data:`MAX_RESULT_DEPTH`. An :meth:`ack_many`
        of one."""
        rows = await self.ack_many(endpoint_id, [(todo, lease, result)])
        return rows[0] if rows else None

    async def fail(
        self, endpoint_id: str, todo: str, lease: str, error: str, *, retry: bool
    ) -> Row[Any] | None:
        """ADR-0007: back to ``failed`` with a due time, or ``dead`` when out of attempts or told not to
        retry; only under the caller's ``lease``."""
        now = self.clock.now()
        owned = self._live_lease(endpoint_id, todo, lease, now)
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


def _claimed(now: float, lease_seconds: float, request_key: str | None) -> dict[str, Any]:
    """What ``claim`` writes, as the claim path's statements do: the attempt counts claims, and the
    claim gets a fresh lease handle (store/leases.py)."""
    return {
        "status": "claimed",
        "attempt": todos.c.attempt + 1,
        "lease_expires_at": ms(now + lease_seconds),
        "retry_at": None,
        "updated_at": ms(now),
        "lease_id": new_lease(),
        "claim_key": request_key,
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


@functools.cache
def _insert_one_sqlite(columns: tuple[str, ...]) -> str:
    """The writer's create (``TodoStore._create_in_writer``): ``_INSERT_IGNORE_SQLITE`` for one row of
    ``columns`` (``_insert_values``' keys, the same for every row), as SQL text with named parameters,
    compiled once."""
    return str(
        _INSERT_IGNORE_SQLITE.compile(dialect=sqlite_dialect(paramstyle="named"), column_keys=list(columns))
    )


def _encode_payload(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), allow_nan=False)


def _insert_values(item: NewTodo, now_ms: int, payload: str) -> dict[str, Any]:
    """The row of one new todo; ``payload`` is ``item.payload`` encoded (:func:`_encode_payload`)."""
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
        "payload": payload,
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
