"""The operator console's reads: queues by state, the backlog over time, todos with filters, a todo's
timeline. Every read is scoped to one human's endpoints (SPEC-0024 REQ-10): another tenant's todo is
not found, exactly like an id that does not exist.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from switchboard.core.clock import Clock, ms
from switchboard.core.names import AGES as AGES  # re-exported: the web console's filters use them
from switchboard.core.names import STATES as STATES
from switchboard.store.db import Database
from switchboard.store.schema import endpoints, todos
from switchboard.store.schema_console import backlog_samples, todo_events

BACKLOG_BUCKET_SECONDS = 300
BACKLOG_HOURS = 24


@dataclass(frozen=True, slots=True)
class TodoFilter:
    state: str = ""
    queue: str = ""
    source: str = ""
    endpoint: str = ""  # slug
    age: str = ""  # a key of AGES


@dataclass(slots=True)
class QueueStats:
    endpoint_slug: str
    endpoint_id: str
    queue: str
    counts: dict[str, int] = field(default_factory=dict)
    backlog: list[tuple[int, int]] = field(default_factory=list)  # (bucket ms, pending)


class ConsoleStore:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    # -- queues -------------------------------------------------------------------------------------

    async def queue_stats(self, human_id: str) -> list[QueueStats]:
        """Every queue of the human's endpoints (declared in the scope, or holding todos), with its
        counts by state and the last 24 hours of backlog samples."""
        owned = select(endpoints.c.id, endpoints.c.slug, endpoints.c.queues).where(
            endpoints.c.human_id == human_id
        )
        since = ms(self.clock.now() - BACKLOG_HOURS * 3600)
        async with self.db.read() as conn:
            eps = (await conn.execute(owned.order_by(endpoints.c.slug))).all()
            ids = [e.id for e in eps]
            if not ids:
                return []
            counts = (
                await conn.execute(
                    select(todos.c.endpoint_id, todos.c.queue, todos.c.status, func.count())
                    .where(todos.c.endpoint_id.in_(ids))
                    .group_by(todos.c.endpoint_id, todos.c.queue, todos.c.status)
                )
            ).all()
            samples = (
                await conn.execute(
                    select(
                        backlog_samples.c.endpoint_id,
                        backlog_samples.c.queue,
                        backlog_samples.c.bucket,
                        backlog_samples.c.pending,
                    )
                    .where(backlog_samples.c.endpoint_id.in_(ids), backlog_samples.c.bucket >= since)
                    .order_by(backlog_samples.c.bucket)
                )
            ).all()
        stats: dict[tuple[str, str], QueueStats] = {}
        slugs = {e.id: e.slug for e in eps}
        for e in eps:
            for q in json.loads(e.queues):
                stats[(e.id, q)] = QueueStats(e.slug, e.id, q)
        for endpoint_id, queue, status, n in counts:
            key = (endpoint_id, queue)
            stats.setdefault(key, QueueStats(slugs[endpoint_id], endpoint_id, queue)).counts[status] = int(n)
        for endpoint_id, queue, bucket, pending in samples:
            if (endpoint_id, queue) in stats:
                stats[(endpoint_id, queue)].backlog.append((int(bucket), int(pending)))
        return sorted(stats.values(), key=lambda s: (s.endpoint_slug, s.queue))

    async def sample_backlog(self) -> int:
        """Write this bucket's pending count for every (endpoint, queue), zeros included. A bucket
        another instance sampled already is left as it is. Returns the rows offered."""
        now = self.clock.now()
        bucket = ms(now - now % BACKLOG_BUCKET_SECONDS)
        async with self.db.read() as conn:
            eps = (await conn.execute(select(endpoints.c.id, endpoints.c.queues))).all()
            pending = (
                await conn.execute(
                    select(todos.c.endpoint_id, todos.c.queue, func.count())
                    .where(todos.c.status == "pending", todos.c.endpoint_id.is_not(None))
                    .group_by(todos.c.endpoint_id, todos.c.queue)
                )
            ).all()
        values: dict[tuple[str, str], int] = {}
        for e in eps:
            for q in json.loads(e.queues):
                values[(e.id, q)] = 0
        for endpoint_id, queue, n in pending:
            values[(endpoint_id, queue)] = int(n)
        if not values:
            return 0
        rows = [
            {"endpoint_id": e, "queue": q, "bucket": bucket, "pending": n} for (e, q), n in values.items()
        ]
        ins = sqlite_insert if self.db.is_sqlite else pg_insert
        stmt = ins(backlog_samples).on_conflict_do_nothing(
            index_elements=[backlog_samples.c.endpoint_id, backlog_samples.c.queue, backlog_samples.c.bucket]
        )
        async with self.db.begin() as conn:
            await conn.execute(stmt, rows)
            await conn.execute(
                delete(backlog_samples).where(backlog_samples.c.bucket < ms(now - (BACKLOG_HOURS + 1) * 3600))
            )
        return len(rows)

    # -- todos --------------------------------------------------------------------------------------

    async def list_todos(
        self, human_id: str | None, f: TodoFilter, *, limit: int = 50, before: str | None = None
    ) -> list[Row[Any]]:
        """One human's todos, newest first; ``human_id=None`` is the instance operator's admin CLI,
        which sees every tenant's (docs/cli.md: it acts as the operator, without ownership checks)."""
        stmt = select(todos, endpoints.c.slug.label("endpoint_slug")).join(
            endpoints, endpoints.c.id == todos.c.endpoint_id
        )
        if human_id is not None:
            stmt = stmt.where(endpoints.c.human_id == human_id)
        if f.state:
            stmt = stmt.where(todos.c.status == f.state)
        if f.queue:
            stmt = stmt.where(todos.c.queue == f.queue)
        if f.source:
            stmt = stmt.where(todos.c.source == f.source)
        if f.endpoint:
            stmt = stmt.where(endpoints.c.slug == f.endpoint)
        if f.age in AGES:
            stmt = stmt.where(todos.c.created_at <= ms(self.clock.now() - AGES[f.age]))
        if before:
            stmt = stmt.where(todos.c.id < before)
        stmt = stmt.order_by(todos.c.id.desc()).limit(limit)
        async with self.db.read() as conn:
            return list((await conn.execute(stmt)).all())

    async def filter_choices(self, human_id: str) -> dict[str, list[str]]:
        """The queues, sources and endpoints the human's todos use: the filter form's options."""
        owned = endpoints.c.human_id == human_id
        base = select().select_from(todos.join(endpoints, endpoints.c.id == todos.c.endpoint_id)).where(owned)
        async with self.db.read() as conn:
            queues = (await conn.execute(base.add_columns(todos.c.queue).distinct())).scalars().all()
            sources = (
                (
                    await conn.execute(
                        base.add_columns(todos.c.source).where(todos.c.source.is_not(None)).distinct()
                    )
                )
                .scalars()
                .all()
            )
            slugs = (await conn.execute(select(endpoints.c.slug).where(owned))).scalars().all()
        return {"queues": sorted(queues), "sources": sorted(sources), "endpoints": sorted(slugs)}

    async def todo(self, human_id: str | None, todo_id: str) -> Row[Any] | None:
        """The todo if it is one of the human's (any tenant's for ``human_id=None``: the admin CLI)."""
        stmt = (
            select(todos, endpoints.c.slug.label("endpoint_slug"))
            .join(endpoints, endpoints.c.id == todos.c.endpoint_id)
            .where(todos.c.id == todo_id)
        )
        if human_id is not None:
            stmt = stmt.where(endpoints.c.human_id == human_id)
        async with self.db.read() as conn:
            return (await conn.execute(stmt)).first()

    async def timeline(self, todo_id: str) -> Sequence[Row[Any]]:
        stmt = (
            select(todo_events)
            .where(todo_events.c.todo_id == todo_id)
            .order_by(todo_events.c.at, todo_events.c.id)
        )
        async with self.db.read() as conn:
            return (await conn.execute(stmt)).all()
