"""Web UI SQL, in one place: browser sessions and the read-only summaries the pages show.

Every summary is scoped to one human's own rows, except :meth:`WebStore.instance_counts`, which is
counts only: the instance operator sees how big the instance is, never another tenant's rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select

from switchboard.core.clock import Clock, ms
from switchboard.notify import store as hook_store
from switchboard.store import accounts, todo_queries
from switchboard.store import sources as source_store
from switchboard.store.db import Database
from switchboard.store.schema import humans
from switchboard.store.schema_web import oauth_clients, oauth_grants, web_sessions


def hash_id(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Human:
    id: str
    email: str
    is_operator: bool


@dataclass(frozen=True, slots=True)
class GrantView:
    id: str
    client_name: str
    verbs: tuple[str, ...]
    created_at: int
    last_used_at: int | None


class WebStore:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    # -- sessions ---------------------------------------------------------------------------------

    async def start_session(self, session_id: str, human_id: str, lifetime_seconds: float) -> None:
        now = self.clock.now()
        async with self.db.begin() as conn:
            await conn.execute(
                insert(web_sessions).values(
                    id_hash=hash_id(session_id),
                    human_id=human_id,
                    created_at=ms(now),
                    expires_at=ms(now + lifetime_seconds),
                )
            )

    async def session_human(self, session_id: str) -> Human | None:
        stmt = (
            select(humans.c.id, humans.c.email, humans.c.is_operator)
            .join(web_sessions, web_sessions.c.human_id == humans.c.id)
            .where(
                web_sessions.c.id_hash == hash_id(session_id),
                web_sessions.c.expires_at > ms(self.clock.now()),
            )
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return Human(row.id, row.email, bool(row.is_operator)) if row else None

    async def end_session(self, session_id: str) -> None:
        async with self.db.begin() as conn:
            await conn.execute(delete(web_sessions).where(web_sessions.c.id_hash == hash_id(session_id)))

    async def sweep_sessions(self) -> int:
        async with self.db.begin() as conn:
            gone = await conn.execute(
                delete(web_sessions).where(web_sessions.c.expires_at <= ms(self.clock.now()))
            )
        return int(gone.rowcount or 0)

    async def human_count(self) -> int:
        async with self.db.read() as conn:
            return int((await conn.execute(select(func.count()).select_from(humans))).scalar_one())

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
        stmt = (
            select(
                oauth_grants.c.id,
                oauth_grants.c.verbs,
                oauth_grants.c.created_at,
                oauth_grants.c.last_used_at,
                oauth_clients.c.client_name,
                oauth_clients.c.id.label("client_id"),
            )
            .join(oauth_clients, oauth_clients.c.id == oauth_grants.c.client_id)
            .where(oauth_grants.c.endpoint_id == endpoint_id)
            .order_by(oauth_grants.c.created_at.desc())
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            GrantView(
                id=r.id,
                client_name=r.client_name or f"client {r.client_id[:8]}",
                verbs=tuple(json.loads(r.verbs)),
                created_at=r.created_at,
                last_used_at=r.last_used_at,
            )
            for r in rows
        ]

    # -- the instance operator ------------------------------------------------------------------

    async def instance_counts(self) -> dict[str, Any]:
        """Instance-wide health as counts only: nothing names a tenant, an endpoint or a hook."""
        async with self.db.read() as conn:

            async def count(table: Any, *where: Any) -> int:
                stmt = select(func.count()).select_from(table)
                for cond in where:
                    stmt = stmt.where(cond)
                return int((await conn.execute(stmt)).scalar_one())

            by_status = await todo_queries.by_status(conn)
            return {
                "humans": await count(humans),
                "endpoints": await accounts.count_endpoints(conn),
                "sources": await source_store.count_sources(conn),
                "quarantined_sources": await source_store.count_sources(conn, quarantined=True),
                "routes": await source_store.count_routes(conn),
                "todos": {s: by_status.get(s, 0) for s in ("pending", "claimed", "failed", "done", "dead")},
                "hooks": await hook_store.count_hooks(conn),
                "hooks_disabled": await hook_store.count_hooks(conn, disabled=True),
                "oauth_clients": await count(oauth_clients),
                "oauth_grants": await count(oauth_grants),
                "sessions": await count(web_sessions, web_sessions.c.expires_at > ms(self.clock.now())),
            }
