"""The moving half of the todo store: the transaction every move runs in (timeline row, in-transaction
handlers, publish after commit) and the requeue sweeps (reaper and retry scheduler).

:class:`switchboard.store.todos.TodoStore` builds on this; it is split out only to keep each part small
(issue 16), and nothing imports it but that module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Row, and_, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.delivery.backoff import Backoff
from switchboard.store.db import Database
from switchboard.store.schema import todos
from switchboard.store.schema_console import todo_events
from switchboard.store.transitions import Transition, TransitionHub

# Called on the moved row inside the transaction that moves it (docs/mcp.md, "Answers and state"): if
# it raises, the move rolls back, so a caller is never told "failed" about a change that committed.
Answer = Callable[[Row[Any]], object]

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


def sender_gate(verified: bool, via_token: bool) -> bool:
    """SPEC-0011: verified under the source's trust mode, or arrived on a token-trust webhook."""
    return bool(verified or via_token)


def transition_of(row: Any, transition: str, reason: str | None, now: float, instance_id: str) -> Transition:
    """The transition a moved row makes (any row with the todo columns the hub needs): one place for
    every move, the batched claim path's included."""
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
        instance_id=instance_id,
    )


class TodoMoves:
    """Shared by every move of :class:`switchboard.store.todos.TodoStore`, which sets these fields."""

    db: Database
    hub: TransitionHub
    clock: Clock
    retry: Backoff

    # -- helpers -----------------------------------------------------------------------------------

    def _transition(self, row: Row[Any], transition: str, reason: str | None, now: float) -> Transition:
        return transition_of(row, transition, reason, now, self.hub.instance_id)

    @staticmethod
    def _live_lease(endpoint_id: str, todo: str, lease: str, now: float) -> Any:
        """Heartbeat and fail need the caller's own claim (``lease``, its handle) with a lease that has
        not run out: once it has, the reaper may hand the todo to another worker, and a late call must
        not touch someone else's claim (store/leases.py)."""
        return and_(
            todos.c.id == todo,
            todos.c.endpoint_id == endpoint_id,
            todos.c.status == "claimed",
            todos.c.lease_expires_at >= ms(now),
            todos.c.lease_id == lease,
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
        if not await self._any_due(todos.c.status == "claimed", todos.c.lease_expires_at < ms(now)):
            return []
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
        if not await self._any_due(todos.c.status == "failed", todos.c.retry_at <= ms(now)):
            return []
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

    async def _any_due(self, *where: Any) -> bool:
        """One indexed read, in no transaction, before a sweep's write: a pass that finds nothing to
        move takes no write lock. On SQLite a sweep's write transaction (every pass, two of them) held
        the one write lock across several turns of a busy event loop, 15-170 ms, while the claim
        path's writer thread waited for it (issue 18). A row that falls due after this read is moved by
        the next pass, as one that falls due after the write would be."""
        return bool(await self.db.fetch(select(todos.c.id).where(*where).limit(1)))

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
