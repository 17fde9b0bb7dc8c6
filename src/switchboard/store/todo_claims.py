"""The claim path, built for throughput (issue 18): claim up to ``n`` todos, or ack several, in one
statement and one transaction.

* PostgreSQL: one statement per claim and per ack. A CTE does the move (``UPDATE ... WHERE id IN
  (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n)``) and writes the timeline rows (``todo_events``) from
  what it returned, so nothing is read before it is written and the bookkeeping rides in the same
  statement. It runs between BEGIN and COMMIT because the hub's in-transaction handlers (the A2A push
  outbox) must commit with the move: three round trips, whatever ``n`` is. The statement and the
  transaction are asyncpg's own (:meth:`Database.pg_transaction`, positional parameters): SQLAlchemy's
  statement and transaction machinery cost more CPU than asyncpg and the database together
  (0.72 against 1.16 ms of CPU per claim + ack in the store layer, issue 18); the handlers still get a
  SQLAlchemy connection, in autocommit on the same driver connection, so their writes join it.
* SQLite: the group-commit writer (store/sqlite_writer.py). The loop queues the claim or ack and
  awaits it; one thread with its own connection runs everything queued in one transaction (BEGIN
  IMMEDIATE; per claim or ack a SAVEPOINT, the UPDATE with its RETURNING, the answer, the timeline
  insert, RELEASE; one COMMIT), so the write lock is never held across a loop turn and concurrent
  calls share a commit. One whose answer raises is rolled back to its savepoint alone. One with a
  transition the hub's in-transaction handlers want (an A2A task's: they need an ``AsyncConnection``,
  and must commit with the move) is undone there and made on the loop instead, on the driver
  connection behind this process's writer lock (:meth:`Database.sqlite_transaction`): BEGIN IMMEDIATE,
  the UPDATE, the timeline insert, the handlers, COMMIT.

The statements are SQL text written once per dialect (no SQLAlchemy Core construction or compilation
per call) and return only the columns an answer and a transition need (``MOVED``). The endpoint's scope
(its queues, read by the MCP gate for this very call) is a parameter of the claim's WHERE, so a scope
change applies to the next call. The pick is the literal ``status = 'pending'`` over
``ix_todos_claim_pending``, in claim order (tests/unit/store/test_claim_index.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

from sqlalchemy import select

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.core.text import admit
from switchboard.store.db import Database
from switchboard.store.leases import Holding
from switchboard.store.schema import todos
from switchboard.store.sqlite_writer import Declined
from switchboard.store.todo_claim_sql import (
    _ACK_ALONE_PG,
    _ACK_PG,
    _ACK_SQLITE,
    _CLAIM_ALONE_PG,
    _CLAIM_PG,
    _CLAIM_SQLITE,
    _KEY_LOCK_PG,
    _REPLAY_PG,
    _REPLAY_SQLITE,
    _UNCLAIM_PG,
    COLUMNS,
    EVENTS_SQLITE,
    events_params,
)
from switchboard.store.todo_moves import transition_of
from switchboard.store.transitions import Transition, TransitionHub

# An ack result is also an A2A task's artifact: a protobuf Struct, whose JSON parser stops at 100 message
# levels, two per JSON level. Deeper results would make every GetTask and ListTasks of that sender fail.
MAX_RESULT_DEPTH = 32
MAX_BATCH = 100  # the most todos one claim or ack statement moves (the MCP batch verbs' limit)


class Moved(NamedTuple):
    """A todo as a claim or ack returns it: what the answer (``todo_view``) and the transition read."""

    id: str
    endpoint_id: str | None
    queue: str
    kind: str | None
    source: str | None
    title: str
    payload: str | None  # None from an ack: its answer leaves the payload out
    status: str
    attempt: int
    lease_expires_at: int | None
    retry_at: int | None
    verified: bool
    via_token: bool
    self_test: bool
    quarantined: bool
    result: str | None
    last_error: str | None
    created_at: int
    lease_id: str | None  # the claim's handle (store/leases.py): holder verbs must name it


# Called on each moved row inside the transaction that moves it: raising rolls the move back. On SQLite
# it runs on the group-commit writer's thread: it must not touch the event loop (build the answer only).
Answer = Callable[[Moved], object]

_COLUMNS = Moved._fields
assert COLUMNS == _COLUMNS  # the statements return exactly these, in this order


def _moved(rows: list[Moved]) -> list[tuple[str, int]]:
    return [(r.id, r.attempt) for r in rows]


def _order(rows: list[Moved]) -> list[Moved]:
    return sorted(rows, key=lambda r: (r.created_at, r.id))


def _replay_params(claim: dict[str, Any]) -> dict[str, Any]:
    return {"endpoint_id": claim["endpoint_id"], "claim_key": claim["claim_key"], "now": claim["now"]}


class TodoClaims:
    """``claim_many`` and ``ack_many`` for :class:`switchboard.store.todos.TodoStore`, which sets these
    fields; ``claim_next`` and ``ack`` are the batches of one."""

    db: Database
    hub: TransitionHub
    clock: Clock

    async def claim_many(
        self,
        endpoint_id: str,
        queues: Sequence[str],
        lease_seconds: float,
        limit: int,
        *,
        answer: Answer | None = None,
        request_key: str | None = None,
    ) -> list[Moved]:
        """Claim up to ``limit`` of the endpoint's oldest pending todos on ``queues``, oldest first.
        ``answer`` sees each row before the commit; if it raises, nothing is claimed. With a
        ``request_key`` that a claim of this endpoint already used, the todos that claim took, while
        their lease lives, are answered again and nothing more is claimed (a retried call)."""
        if not queues or limit < 1:
            return []
        now = self.clock.now()
        lease, now_ms = ms(now + lease_seconds), ms(now)
        if self.db.is_sqlite:
            params: dict[str, Any] = {
                "endpoint_id": endpoint_id,
                "queues": json.dumps(list(queues)),
                "limit": min(limit, MAX_BATCH),
                "lease": lease,
                "now": now_ms,
                "claim_key": request_key,
            }
            rows, transitions = await self._sqlite_move(
                _CLAIM_SQLITE, params, "claimed", lease, now, answer, replay=request_key is not None
            )
        else:
            args = (
                endpoint_id,
                list(queues),
                min(limit, MAX_BATCH),
                lease,
                now_ms,
                self._instance(),
                [new_id("te") for _ in range(min(limit, MAX_BATCH))],
                request_key,
            )
            rows, transitions = await self._pg_claim(args, now, answer, request_key)
        self.hub.publish(transitions)
        return rows

    async def ack_many(self, endpoint_id: str, acks: Sequence[tuple[str, str, Any]]) -> list[Moved]:
        """Mark held todos done, each ``(id, lease, result)``, in one statement; the rows that moved (a
        todo not held by this endpoint under that lease, or whose lease ran out, is left alone and not
        returned). The first of repeated ids counts. Raises :class:`switchboard.core.text.Unstorable`
        (nothing written) for a result no reader could parse back: lone surrogates, NaN, nesting past
        :data:`MAX_RESULT_DEPTH`."""
        given: dict[str, tuple[str, str | None]] = {}
        for todo, lease_id, result in acks:
            admit(result, max_depth=MAX_RESULT_DEPTH)
            if todo not in given:
                given[todo] = (lease_id, None if result is None else json.dumps(result, allow_nan=False))
        if not given:
            return []
        now = self.clock.now()
        now_ms = ms(now)
        ordered = sorted(given)  # one lock order for every batch: concurrent acks cannot deadlock
        if self.db.is_sqlite:
            params: dict[str, Any] = {
                "endpoint_id": endpoint_id,
                "given": json.dumps([[t, given[t][1], given[t][0]] for t in ordered]),
                "now": now_ms,
            }
            rows, transitions = await self._sqlite_move(_ACK_SQLITE, params, "done", None, now, None)
        else:
            args = (
                endpoint_id,
                ordered,
                [given[t][1] for t in ordered],
                [new_id("te") for _ in ordered],
                now_ms,
                self._instance(),
                [given[t][0] for t in ordered],
            )
            rows, transitions = await self._pg_ack(args, now)
        self.hub.publish(transitions)
        return rows

    async def _pg_claim(
        self, args: tuple[Any, ...], now: float, answer: Answer | None, key: str | None
    ) -> tuple[list[Moved], list[Transition]]:
        """A claim on PostgreSQL. One todo is claimed by the statement alone, as an ack is
        (:meth:`_pg_ack`); its answer is built after that commit, and if it cannot be built the claim is
        undone (``_UNCLAIM_PG``) before the error goes up, as the rollback undoes a batch's. A claim
        with a request key runs in a transaction: the key's lock, the replay read, then the claim."""
        if key is not None:
            return await self._pg_move(_CLAIM_PG, args, "claimed", now, answer, key=key)
        if args[2] == 1 and (rows := await self._pg_alone(_CLAIM_ALONE_PG, args, "claimed")) is not None:
            try:
                self._answer(rows, answer)
            except BaseException:
                async with self.db.pg_transaction() as (_conn, driver):
                    for row in rows:
                        await driver.execute(_UNCLAIM_PG, row.id, row.attempt)
                raise
            return rows, self._transitions(rows, "claimed", now)
        return await self._pg_move(_CLAIM_PG, args, "claimed", now, answer)

    async def _pg_ack(self, args: tuple[Any, ...], now: float) -> tuple[list[Moved], list[Transition]]:
        """The ack on PostgreSQL: the statement alone (no BEGIN, no COMMIT) unless a todo in it may be
        one an in-transaction handler acts on (an A2A task's), then in a transaction with the handlers."""
        if (rows := await self._pg_alone(_ACK_ALONE_PG, args, "done")) is not None:
            return rows, self._transitions(rows, "done", now)
        return await self._pg_move(_ACK_PG, args, "done", now, None)

    async def _pg_alone(self, sql: str, args: tuple[Any, ...], move: str) -> list[Moved] | None:
        """An alone statement (``_claim_pg``/``_ack_pg(alone=True)``) as its own transaction: the rows
        it moved, or None when a handler may act on any source or the statement declined (a todo in it
        comes from a source a handler declared); the caller then makes the move in a transaction."""
        held = self.hub.transaction_sources(move)
        if held is None:
            return None
        async with self.db.pg_statement() as driver:
            result = await driver.fetch(sql, *args, sorted(held))
        if result[0][0] != 0:
            return None
        return _order([Moved(*r[1:]) for r in result if r[1] is not None])

    async def holdings(self, endpoint_id: str, ids: Sequence[str]) -> dict[str, Holding]:
        """Each of ``ids`` that is this endpoint's todo, with its latest claim (one read): why a holder
        verb did not move it (:func:`switchboard.store.leases.verdict`)."""
        stmt = select(todos.c.id, todos.c.status, todos.c.lease_id, todos.c.lease_expires_at).where(
            todos.c.endpoint_id == endpoint_id, todos.c.id.in_(list(dict.fromkeys(ids)))
        )
        return {
            str(r.id): Holding(str(r.status), r.lease_id, r.lease_expires_at)
            for r in await self.db.fetch(stmt)
        }

    async def _pg_move(
        self,
        sql: str,
        args: tuple[Any, ...],
        transition: str,
        now: float,
        answer: Answer | None,
        *,
        key: str | None = None,
    ) -> tuple[list[Moved], list[Transition]]:
        """A claim or an ack on PostgreSQL: the statement on asyncpg, in a transaction the hub's
        in-transaction handlers join (their writes commit or roll back with the move). With a claim's
        request ``key``: under the key's lock, the todos a claim with that key holds are the answer, if
        any, and nothing moves."""
        async with self.db.pg_transaction() as (conn, driver):
            if key is not None:
                await driver.execute(_KEY_LOCK_PG, f"{args[0]}|{key}")
                replayed = _order([Moved(*r) for r in await driver.fetch(_REPLAY_PG, args[0], key, args[4])])
                if replayed:
                    self._answer(replayed, answer)
                    return replayed, []
            rows = _order([Moved(*r) for r in await driver.fetch(sql, *args)])
            transitions = self._transitions(rows, transition, now)
            self._answer(rows, answer)
            if transitions:
                await self.hub.run_in_transaction(conn, transitions)
        return rows, transitions

    async def _sqlite_move(
        self,
        sql: str,
        params: dict[str, Any],
        transition: str,
        lease: int | None,
        now: float,
        answer: Answer | None,
        *,
        replay: bool = False,
    ) -> tuple[list[Moved], list[Transition]]:
        """A claim or an ack on SQLite: in the group-commit writer's next batch; on the loop, behind
        the writer lock, when the writer declines it (the hub's in-transaction handlers want one of
        its transitions) or there is no writer (an in-memory database). ``replay``: a claim with a
        request key answers the todos a claim with that key holds, if any, and moves nothing (in the
        same write transaction, so two calls with one key cannot both claim)."""
        writer = self.db.sqlite_writer()
        if writer is not None:
            move = partial(self._move_in_writer, sql, params, transition, lease, now, answer, replay)
            try:
                return await writer.run(move)
            except Declined:
                pass  # undone in the writer; made again here, where the handlers get a connection
        async with self.db.sqlite_transaction() as (conn, driver):
            if replay:
                found = await driver.execute_fetchall(_REPLAY_SQLITE, _replay_params(params))
                if replayed := _order([Moved(*r) for r in found]):
                    self._answer(replayed, answer)
                    return replayed, []
            rows = _order([Moved(*r) for r in await driver.execute_fetchall(sql, params)])
            transitions = self._transitions(rows, transition, now)
            self._answer(rows, answer)
            if rows:
                events = events_params(_moved(rows), transition, lease, self._instance(), ms(now))
                await driver.execute_fetchall(EVENTS_SQLITE, events)
                await self.hub.run_in_transaction(conn, transitions)
        return rows, transitions

    def _move_in_writer(
        self,
        sql: str,
        params: dict[str, Any],
        transition: str,
        lease: int | None,
        now: float,
        answer: Answer | None,
        replay: bool,
        conn: sqlite3.Connection,
    ) -> tuple[list[Moved], list[Transition]]:
        """The writer thread's half of :meth:`_sqlite_move`, inside its batch's transaction (and this
        move's savepoint): the replay read, the UPDATE with its RETURNING, the answers, the timeline
        insert."""
        if replay and (
            replayed := _order([Moved(*r) for r in conn.execute(_REPLAY_SQLITE, _replay_params(params))])
        ):
            self._answer(replayed, answer)
            return replayed, []
        rows = _order([Moved(*r) for r in conn.execute(sql, params)])
        transitions = self._transitions(rows, transition, now)
        if self.hub.needs_transaction(transitions):
            raise Declined  # before the answers: the loop-side path answers these rows
        self._answer(rows, answer)
        if rows:
            conn.execute(
                EVENTS_SQLITE, events_params(_moved(rows), transition, lease, self._instance(), ms(now))
            )
        return rows, transitions

    def _transitions(self, rows: list[Moved], transition: str, now: float) -> list[Transition]:
        return [transition_of(row, transition, None, now, self.hub.instance_id) for row in rows]

    @staticmethod
    def _answer(rows: list[Moved], answer: Answer | None) -> None:
        if answer is not None:
            for row in rows:
                answer(row)  # raising here rolls the move back

    def _instance(self) -> str | None:
        return self.hub.instance_id[:100] or None
