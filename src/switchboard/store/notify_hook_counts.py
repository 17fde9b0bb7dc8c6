"""Reads of ``notify_hooks`` other parts show, in the table's home: the counts the web pages and the
endpoint delete confirmation (store/admin.py) show, and a hook's owner, which an operator event names (switchboard.operator). Each takes what its caller
has (a connection in a page's read, or the database), so no caller builds SQL of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.store.accounts import slug_of
from switchboard.store.db import Database
from switchboard.store.schema import notify_hooks

_H = notify_hooks.c


async def count_hooks(conn: AsyncConnection, *, disabled: bool = False) -> int:
    """Every hook of the instance (``disabled``: only the disabled ones)."""
    stmt = select(func.count()).select_from(notify_hooks)
    return int((await conn.execute(stmt.where(_H.enabled.is_(False)) if disabled else stmt)).scalar_one())


async def count_for_endpoint(conn: AsyncConnection, endpoint_id: str) -> int:
    """One endpoint's hooks (what its delete confirmation names)."""
    stmt = select(func.count()).select_from(notify_hooks).where(_H.endpoint_id == endpoint_id)
    return int((await conn.execute(stmt)).scalar_one())


async def hook_counts(conn: AsyncConnection, endpoint_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``{endpoint_id: (hooks, disabled hooks)}`` of the given endpoints."""
    if not endpoint_ids:
        return {}
    off = func.sum(case((_H.enabled.is_(False), 1), else_=0))
    stmt = (
        select(_H.endpoint_id, func.count(), off)
        .where(_H.endpoint_id.in_(endpoint_ids))
        .group_by(_H.endpoint_id)
    )
    return {r[0]: (int(r[1]), int(r[2] or 0)) for r in (await conn.execute(stmt)).all()}


async def hook_owner(db: Database, data: dict[str, Any]) -> dict[str, Any]:
    """``endpoint_id`` and ``endpoint_slug`` of ``data["hook_id"]``; empty once the hook is deleted."""
    stmt = select(_H.endpoint_id, slug_of(_H.endpoint_id)).where(_H.id == str(data["hook_id"]))
    rows: list[Any] = await db.fetch(stmt)
    return {"endpoint_id": rows[0][0], "endpoint_slug": rows[0][1]} if rows else {}
