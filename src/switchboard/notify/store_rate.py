"""The one write of a hook's own per-minute limit (issue 29), beside the rest of ``notify_hooks``'s SQL."""

from __future__ import annotations

from sqlalchemy import select, update

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import looks_like
from switchboard.notify.errors import HookNotFound
from switchboard.notify.hook_model import Hook
from switchboard.store.db import Database
from switchboard.store.schema import notify_hooks


async def set_rate(db: Database, clock: Clock, endpoint_id: str, hook_id: str, rate: int | None) -> Hook:
    """Store the hook's own limit (None: back to the server's); another endpoint's hook is not found."""
    if not looks_like("nh", hook_id):
        raise HookNotFound("no such notify hook")
    mine = (notify_hooks.c.id == hook_id) & (notify_hooks.c.endpoint_id == endpoint_id)
    async with db.begin() as conn:
        moved = await conn.execute(
            update(notify_hooks).where(mine).values(rate_per_minute=rate, updated_at=ms(clock.now()))
        )
        if moved.rowcount != 1:
            raise HookNotFound("no such notify hook")
        row = (await conn.execute(select(notify_hooks).where(mine))).one()
    return Hook.from_row(row)
