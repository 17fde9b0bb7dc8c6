"""Todo statements that other parts run: steps inside another aggregate's transaction (an A2A task's
payload, queue and outcome) and the counts the web pages, the admin confirmations and the metrics show.

Part of the todos home (``store/todo*.py``, tests/unit/test_sql_homes.py): nothing outside it builds a
statement on ``todos``. Each function takes the caller's connection, so a count or a step joins the
caller's read or transaction rather than opening its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.store.schema import LIVE_STATUSES, todos

# -- steps in a caller's transaction -----------------------------------------------------------------


async def set_payload(conn: AsyncConnection, todo_id: str, payload_json: str) -> None:
    """Replace the todo's payload (an A2A task's follow-ups live in it, for the worker that claims)."""
    await conn.execute(update(todos).where(todos.c.id == todo_id).values(payload=payload_json))


async def queue_of(conn: AsyncConnection, todo_id: str) -> str:
    """The todo's queue as this transaction sees it (the todo must exist)."""
    return str((await conn.execute(select(todos.c.queue).where(todos.c.id == todo_id))).scalar_one())


async def outcome_of(conn: AsyncConnection, todo_id: str) -> tuple[str | None, str | None]:
    """(result, last_error) of the todo as this transaction sees it (the todo must exist)."""
    row = (await conn.execute(select(todos.c.result, todos.c.last_error).where(todos.c.id == todo_id))).one()
    return row.result, row.last_error


# -- counts ------------------------------------------------------------------------------------------


async def count(
    conn: AsyncConnection,
    *,
    endpoint_id: str | None = None,
    endpoint_ids: Select[Any] | None = None,
    source_id: str | None = None,
    live: bool = False,
) -> int:
    """How many todos match: of one endpoint, of the endpoints a sub-select yields, of one source;
    ``live``: only pending, claimed or failed ones."""
    stmt = select(func.count()).select_from(todos)
    if endpoint_id is not None:
        stmt = stmt.where(todos.c.endpoint_id == endpoint_id)
    if endpoint_ids is not None:
        stmt = stmt.where(todos.c.endpoint_id.in_(endpoint_ids))
    if source_id is not None:
        stmt = stmt.where(todos.c.source_id == source_id)
    if live:
        stmt = stmt.where(todos.c.status.in_(LIVE_STATUSES))
    return int((await conn.execute(stmt)).scalar_one())


async def live_counts(conn: AsyncConnection, endpoint_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{endpoint_id: {status: count}}`` for the live statuses of the given endpoints."""
    if not endpoint_ids:
        return {}
    stmt = (
        select(todos.c.endpoint_id, todos.c.status, func.count())
        .where(todos.c.endpoint_id.in_(endpoint_ids), todos.c.status.in_(LIVE_STATUSES))
        .group_by(todos.c.endpoint_id, todos.c.status)
    )
    out: dict[str, dict[str, int]] = {}
    for endpoint_id, status, n in (await conn.execute(stmt)).all():
        out.setdefault(endpoint_id, {})[status] = int(n)
    return out


async def by_status(conn: AsyncConnection) -> dict[str, int]:
    """Every todo of the instance, counted by status."""
    rows = (await conn.execute(select(todos.c.status, func.count()).group_by(todos.c.status))).all()
    return {str(r[0]): int(r[1]) for r in rows}


# Built once: the metrics scrape runs it every time.
_WAITING = (
    select(todos.c.queue, todos.c.status, func.count(), func.min(todos.c.created_at))
    .where(todos.c.status.in_(("pending", "failed")))
    .group_by(todos.c.queue, todos.c.status)
)


async def waiting_by_queue(conn: AsyncConnection) -> list[tuple[str, str, int, int | None]]:
    """(queue, status, count, oldest created_at ms) of the waiting (pending or failed) todos."""
    rows = (await conn.execute(_WAITING)).all()
    return [(str(q), str(s), int(n), None if first is None else int(first)) for q, s, n, first in rows]
