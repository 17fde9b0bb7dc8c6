"""SPEC-0022 presence: clocked state, operator override, and the conditional ``presence_seen`` update.

``announce`` is the one decision point for "this out->in transition has been announced": a single
conditional UPDATE, so exactly one caller across all instances and restarts wins it and sends the
digest (and, in SPEC-0024 REQ-9, the backlog notifications).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import select, update

from switchboard.clock import Clock, ms
from switchboard.obs.logs import get_logger
from switchboard.store.changes import EndpointChanges
from switchboard.store.db import Database
from switchboard.store.schema import endpoints

log = get_logger("switchboard.presence")

DIGEST_REASONS = ("clock_in", "operator", "shift_start", "override_end", "reconnect")


@dataclass(frozen=True, slots=True)
class PresenceReturn:
    """An endpoint whose effective presence went from out to in, announced exactly once."""

    endpoint_id: str
    reason: str
    at: float


PresenceListener = Callable[[PresenceReturn], Awaitable[None]]


class PresenceStore:
    def __init__(self, db: Database, clock: Clock, changes: EndpointChanges | None = None) -> None:
        self.db, self.clock = db, clock
        self.changes = changes or EndpointChanges()
        self._listeners: list[PresenceListener] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def on_return(self, listener: PresenceListener) -> None:
        self._listeners.append(listener)

    async def set_clocked(self, endpoint_id: str, state: str) -> str:
        """Set the clocked state; returns the effective presence afterwards."""
        return await self._set(endpoint_id, {"presence": state}, "clock_in")

    async def override(self, endpoint_id: str, state: str | None) -> str:
        """The owning human's override from the web UI (None clears it)."""
        return await self._set(
            endpoint_id, {"presence_override": state}, "operator" if state else "override_end"
        )

    async def _set(self, endpoint_id: str, values: dict[str, object], reason: str) -> str:
        if any(v not in ("in", "out", None) for v in values.values()):
            raise ValueError("presence must be in or out")
        async with self.db.begin() as conn:
            await conn.execute(
                update(endpoints)
                .where(endpoints.c.id == endpoint_id)
                .values(**values, updated_at=ms(self.clock.now()))
            )
            row = (
                await conn.execute(
                    select(endpoints.c.presence, endpoints.c.presence_override).where(
                        endpoints.c.id == endpoint_id
                    )
                )
            ).one()
        self.changes.bump(endpoint_id)
        effective = str(row.presence_override or row.presence)
        await self.announce(endpoint_id, effective, reason)
        return effective

    async def announce(self, endpoint_id: str, effective: str, reason: str) -> bool:
        """Record ``effective`` as seen. True only for the single caller that moved it, on out->in."""
        async with self.db.begin() as conn:
            moved = await conn.execute(
                update(endpoints)
                .where(endpoints.c.id == endpoint_id, endpoints.c.presence_seen != effective)
                .values(presence_seen=effective)
                .returning(endpoints.c.id)
            )
            won = moved.first() is not None
        if won:
            self.changes.bump(endpoint_id)
        if won and effective == "in":
            event = PresenceReturn(endpoint_id, reason, self.clock.now())
            for listener in self._listeners:
                task = asyncio.create_task(self._notify(listener, event))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return won and effective == "in"

    async def _notify(self, listener: PresenceListener, event: PresenceReturn) -> None:
        try:
            await listener(event)
        except Exception:
            log.error("presence listener raised", endpoint_id=event.endpoint_id, exc_info=True)
