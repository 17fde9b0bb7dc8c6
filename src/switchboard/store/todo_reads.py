"""The read half of the todo store: one todo, an endpoint's listing, and the queue summaries the
doorbell, A2A and MCP resources show. Nothing here writes.

:class:`switchboard.store.todos.TodoStore` inherits these; split out to keep each part small (issue 16).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, func, select

from switchboard.store.db import Database
from switchboard.store.schema import todos


class TodoReads:
    """Read queries over ``todos``, scoped to one endpoint; needs only ``db``."""

    db: Database

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
