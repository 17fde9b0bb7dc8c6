"""SPEC-0022 presence: clocked state, operator override, and the conditional ``presence_seen`` update.

``announce`` is the one decision point for "this out->in transition has been announced": a single
conditional UPDATE, so exactly one caller across all instances and restarts wins it and sends the
digest (and, in SPEC-0024 REQ-9, the backlog notifications).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from switchboard.core.clock import Clock, ms
from switchboard.obs.logs import get_logger
from switchboard.store import accounts
from switchboard.store.changes import EndpointChanges, announce
from switchboard.store.db import Database

log = get_logger("switchboard.presence")


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
            effective = await accounts.write_presence(conn, endpoint_id, values, ms(self.clock.now()))
            await announce(conn, endpoint_id)
        self.changes.bump(endpoint_id)
        await self.announce(endpoint_id, effective, reason)
        return effective

    async def announce(self, endpoint_id: str, effective: str, reason: str) -> bool:
        """Record ``effective`` as seen. True only for the single caller that moved it, on out->in."""
        async with self.db.begin() as conn:
            won = await accounts.mark_presence_seen(conn, endpoint_id, effective)
            if won:
                await announce(conn, endpoint_id)
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
