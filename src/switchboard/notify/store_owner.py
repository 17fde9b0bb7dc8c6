"""Which endpoint owns a hook, by id and slug: what an operator event names (switchboard.operator). A
module of the ``notify_hooks`` home of its own, so the hook store stays under the module-size bound."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from switchboard.store.accounts import slug_of
from switchboard.store.db import Database
from switchboard.store.schema import notify_hooks


async def hook_owner(db: Database, data: dict[str, Any]) -> dict[str, Any]:
    """``endpoint_id`` and ``endpoint_slug`` of ``data["hook_id"]``; empty once the hook is deleted."""
    hooks = notify_hooks.c
    stmt = select(hooks.endpoint_id, slug_of(hooks.endpoint_id)).where(hooks.id == str(data["hook_id"]))
    rows: list[Any] = await db.fetch(stmt)
    return {"endpoint_id": rows[0][0], "endpoint_slug": rows[0][1]} if rows else {}
