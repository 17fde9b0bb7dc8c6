"""The identifiers an operator event names, read once before its first attempt: which endpoint (id and
slug) owns the hook or the push config. Identifiers only: never a URL, a secret or a payload. A read
that fails (the row was deleted meanwhile, the database is away) leaves the event with the ids it has."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from switchboard.obs.logs import get_logger
from switchboard.store.db import Database
from switchboard.store.schema import endpoints, notify_hooks
from switchboard.store.schema_a2a import push_notification_configs as configs

log = get_logger("switchboard.operator")


async def hook_owner(db: Database, hook_id: str) -> dict[str, Any]:
    stmt = (
        select(notify_hooks.c.endpoint_id, endpoints.c.slug)
        .join(endpoints, endpoints.c.id == notify_hooks.c.endpoint_id)
        .where(notify_hooks.c.id == hook_id)
    )
    rows = await _fetch(db, stmt)
    return {"endpoint_id": rows[0][0], "endpoint_slug": rows[0][1]} if rows else {}


async def push_config_owner(db: Database, row_id: str) -> dict[str, Any]:
    stmt = (
        select(configs.c.config_id, configs.c.owner_endpoint_id, endpoints.c.slug)
        .join(endpoints, endpoints.c.id == configs.c.owner_endpoint_id)
        .where(configs.c.id == row_id)
    )
    rows = await _fetch(db, stmt)
    if not rows:
        return {}
    return {"config_id": rows[0][0], "endpoint_id": rows[0][1], "endpoint_slug": rows[0][2]}


async def _fetch(db: Database, stmt: Any) -> list[Any]:
    try:
        return await db.fetch(stmt)
    except Exception:  # the event still goes out, with the ids it has
        log.warning("operator event: owner lookup failed", exc_info=True)
        return []
