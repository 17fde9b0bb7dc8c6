"""What the web UI reads and keeps: browser sessions and the read-only summaries the pages show. The
statements are in their tables' homes under ``store/`` (``web_sessions``, ``oauth``, ``accounts``, ...).

Every summary is scoped to one human's own rows, except :meth:`WebStore.instance_counts`, which is
counts only: the instance operator sees how big the instance is, never another tenant's rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from switchboard.core.clock import Clock, ms
from switchboard.store import accounts, oauth, oauth_clients, todo_queries, web_sessions
from switchboard.store import notify_hook_counts as hook_store
from switchboard.store import sources as source_store
from switchboard.store.db import Database
from switchboard.store.oauth import GrantView
from switchboard.store.web_sessions import Human

__all__ = ["GrantView", "Human", "WebStore", "hash_id"]


def hash_id(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class WebStore:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    # -- sessions ---------------------------------------------------------------------------------

    async def start_session(self, session_id: str, human_id: str, lifetime_seconds: float) -> None:
        now = self.clock.now()
        await web_sessions.start(self.db, hash_id(session_id), human_id, ms(now), ms(now + lifetime_seconds))

    async def session_human(self, session_id: str) -> Human | None:
        return await web_sessions.human_of(self.db, hash_id(session_id), ms(self.clock.now()))

    async def end_session(self, session_id: str) -> None:
        await web_sessions.end(self.db, hash_id(session_id))

    async def sweep_sessions(self) -> int:
        return await web_sessions.sweep(self.db, ms(self.clock.now()))

    async def human_count(self) -> int:
        async with self.db.read() as conn:
            return await accounts.count_humans(conn)

    # -- one human's summaries --------------------------------------------------------------------

    async def todo_counts(self, endpoint_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """``{endpoint_id: {status: count}}`` for the live statuses of the given endpoints."""
        async with self.db.read() as conn:
            return await todo_queries.live_counts(conn, endpoint_ids)

    async def hook_counts(self, endpoint_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``{endpoint_id: (hooks, disabled hooks)}``."""
        async with self.db.read() as conn:
            return await hook_store.hook_counts(conn, endpoint_ids)

    async def route_for_human(self, route_id: str, human_id: str) -> bool:
        """True when the route's source belongs to this human (routes are managed by the source owner)."""
        async with self.db.read() as conn:
            return await source_store.route_of_human(conn, route_id, human_id)

    async def grants_for_endpoint(self, endpoint_id: str) -> list[GrantView]:
        return await oauth.grants_for_endpoint(self.db, endpoint_id)

    # -- the instance operator ------------------------------------------------------------------

    async def instance_counts(self) -> dict[str, Any]:
        """Instance-wide health as counts only: nothing names a tenant, an endpoint or a hook."""
        async with self.db.read() as conn:
            by_status = await todo_queries.by_status(conn)
            return {
                "humans": await accounts.count_humans(conn),
                "endpoints": await accounts.count_endpoints(conn),
                "sources": await source_store.count_sources(conn),
                "quarantined_sources": await source_store.count_sources(conn, quarantined=True),
                "routes": await source_store.count_routes(conn),
                "todos": {s: by_status.get(s, 0) for s in ("pending", "claimed", "failed", "done", "dead")},
                "hooks": await hook_store.count_hooks(conn),
                "hooks_disabled": await hook_store.count_hooks(conn, disabled=True),
                "oauth_clients": await oauth_clients.count_clients(conn),
                "oauth_grants": await oauth.count_grants(conn),
                "sessions": await web_sessions.count_live(conn, ms(self.clock.now())),
            }
