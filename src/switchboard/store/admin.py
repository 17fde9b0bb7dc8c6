"""Account administration, once for every face (the web console and the CLI call these, nothing else):
passwords, signing out everywhere, the operator role, invitations, and deleting humans, endpoints and
sources together with what goes with them.

The instance keeps at least one operator: revoking or deleting the last one is refused, so the console's
operator pages (and the recovery path they are) can never become unreachable.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from argon2 import PasswordHasher
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.store import accounts, notify_hook_counts, oauth, todo_queries, web_sessions
from switchboard.store import sources as source_store
from switchboard.store.accounts import EMAIL
from switchboard.store.changes import EndpointChanges, announce
from switchboard.store.db import Database
from switchboard.store.errors import Conflict, NotFound
from switchboard.store.schema import humans
from switchboard.store.schema_console import human_invites

PASSWORD_MIN = 10
INVITE_PREFIX = "sbi_"
_hasher = PasswordHasher()


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def check_new_password(password: str) -> None:
    if len(password) < PASSWORD_MIN:
        raise ValueError(f"the password must be at least {PASSWORD_MIN} characters")


@dataclass(frozen=True, slots=True)
class Invite:
    email: str
    is_operator: bool
    invited_by: str
    created_at: int
    expires_at: int


class AdminStore:
    def __init__(self, db: Database, clock: Clock, changes: EndpointChanges | None = None) -> None:
        self.db, self.clock = db, clock
        self.changes = changes or EndpointChanges()

    # -- passwords and sessions ---------------------------------------------------------------------

    async def set_password(self, human_id: str, password: str, *, keep_session: str | None = None) -> None:
        """Set a new password and end every other browser session of the human (a stolen session
        does not survive a password change). ``keep_session`` is the SHA-256 of the session to keep."""
        check_new_password(password)
        hashed = await asyncio.to_thread(_hasher.hash, password)
        async with self.db.begin() as conn:
            done = await conn.execute(
                update(humans).where(humans.c.id == human_id).values(password_hash=hashed)
            )
            if done.rowcount != 1:
                raise NotFound("no such human")
            await self._end_sessions(conn, human_id, keep_session)

    async def end_sessions(self, human_id: str, *, keep_session: str | None = None) -> int:
        """Sign the human out everywhere (every instance: sessions are rows). Returns how many ended."""
        async with self.db.begin() as conn:
            return await self._end_sessions(conn, human_id, keep_session)

    @staticmethod
    async def _end_sessions(conn: AsyncConnection, human_id: str, keep: str | None) -> int:
        return await web_sessions.end_all_in(conn, human_id, keep)

    # -- the operator role --------------------------------------------------------------------------

    async def set_operator(self, human_id: str, operator: bool) -> bool:
        """Grant or revoke the operator role. Returns whether it changed; refuses the last operator."""
        async with self.db.begin() as conn:
            row = (await conn.execute(select(humans.c.is_operator).where(humans.c.id == human_id))).first()
            if row is None:
                raise NotFound("no such human")
            if bool(row.is_operator) == operator:
                return False
            if not operator and await self._operators(conn) <= 1:
                raise Conflict("this is the last operator: grant the role to someone else first")
            await conn.execute(update(humans).where(humans.c.id == human_id).values(is_operator=operator))
        return True

    @staticmethod
    async def _operators(conn: AsyncConnection) -> int:
        stmt = select(func.count()).select_from(humans).where(humans.c.is_operator.is_(True))
        return int((await conn.execute(stmt)).scalar_one())

    # -- deleting -----------------------------------------------------------------------------------

    async def human_dependents(self, human_id: str) -> dict[str, int]:
        async with self.db.read() as conn:
            return {
                "endpoints": await accounts.count_endpoints(conn, human_id=human_id),
                "sources": await source_store.count_sources(conn, human_id=human_id),
                "todos": await todo_queries.count(conn, endpoint_ids=accounts.owned_ids(human_id)),
            }

    async def delete_human(self, human_id: str) -> dict[str, int]:
        """Delete a human with their endpoints (and those endpoints' todos, hooks, routes and OAuth
        connections), their sources (and routes) and their sessions. Refuses the last operator."""
        gone = await self.human_dependents(human_id)
        async with self.db.begin() as conn:
            row = (await conn.execute(select(humans.c.is_operator).where(humans.c.id == human_id))).first()
            if row is None:
                raise NotFound("no such human")
            if row.is_operator and await self._operators(conn) <= 1:
                raise Conflict("this is the last operator: grant the role to someone else first")
            await conn.execute(delete(humans).where(humans.c.id == human_id))
            await announce(conn, None)
        self.changes.bump_all()  # their endpoints went with them
        return gone

    async def endpoint_dependents(self, endpoint_id: str) -> dict[str, int]:
        """What deleting the endpoint takes with it (the confirmation says this)."""
        async with self.db.read() as conn:
            return {
                "todos": await todo_queries.count(conn, endpoint_id=endpoint_id),
                "live_todos": await todo_queries.count(conn, endpoint_id=endpoint_id, live=True),
                "hooks": await notify_hook_counts.count_for_endpoint(conn, endpoint_id),
                "routes": await source_store.count_routes(conn, endpoint_id=endpoint_id),
                "connections": await oauth.count_grants(conn, endpoint_id=endpoint_id),
            }

    async def delete_endpoint(self, endpoint_id: str) -> dict[str, int]:
        """Delete an endpoint; its todos, notify hooks, routes, A2A tasks and OAuth connections go with
        it (foreign keys cascade), and its credentials stop working at once."""
        gone = await self.endpoint_dependents(endpoint_id)
        async with self.db.begin() as conn:
            if not await accounts.delete_endpoint(conn, endpoint_id):
                raise NotFound("no such endpoint")
            await announce(conn, endpoint_id)
        self.changes.bump(endpoint_id)
        return gone

    async def source_dependents(self, source_id: str) -> dict[str, int]:
        async with self.db.read() as conn:
            return {
                "routes": await source_store.count_routes(conn, source_id=source_id),
                "todos": await todo_queries.count(conn, source_id=source_id),
            }

    async def delete_source(self, source_id: str) -> dict[str, int]:
        """Delete a source and its routes. Its todos stay (they belong to the endpoints they were
        routed to); deliveries to its URL are answered 404 from now on."""
        gone = await self.source_dependents(source_id)
        async with self.db.begin() as conn:
            if not await source_store.delete_source(conn, source_id):
                raise NotFound("no such source")
        return gone

    # -- invitations --------------------------------------------------------------------------------

    async def invite(self, email: str, *, operator: bool, invited_by: str, lifetime_seconds: float) -> str:
        """Invite a human by email: returns the link token (shown once; stored as SHA-256). A newer
        invitation for the same email replaces an older one."""
        email = email.strip().lower()
        if not EMAIL.match(email):
            raise ValueError("enter a valid email address")
        token = INVITE_PREFIX + secrets.token_urlsafe(32)
        now = self.clock.now()
        async with self.db.begin() as conn:
            if (await conn.execute(select(humans.c.id).where(humans.c.email == email))).first():
                raise Conflict("a human with that email exists")
            await conn.execute(delete(human_invites).where(human_invites.c.email == email))
            await conn.execute(
                insert(human_invites).values(
                    id_hash=_sha(token),
                    email=email,
                    is_operator=operator,
                    invited_by=invited_by,
                    created_at=ms(now),
                    expires_at=ms(now + lifetime_seconds),
                )
            )
        return token

    async def open_invite(self, token: str) -> Invite | None:
        if not token.startswith(INVITE_PREFIX) or len(token) > 100:
            return None
        stmt = select(human_invites).where(
            human_invites.c.id_hash == _sha(token), human_invites.c.expires_at > ms(self.clock.now())
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return _invite(row) if row else None

    async def list_invites(self) -> list[Invite]:
        stmt = select(human_invites).where(human_invites.c.expires_at > ms(self.clock.now()))
        async with self.db.read() as conn:
            rows = (await conn.execute(stmt.order_by(human_invites.c.created_at))).all()
        return [_invite(r) for r in rows]

    async def sweep_invites(self) -> int:
        """Drop invitations past their expiry (the web sweeper calls this)."""
        async with self.db.begin() as conn:
            gone = await conn.execute(
                delete(human_invites).where(human_invites.c.expires_at <= ms(self.clock.now()))
            )
        return int(gone.rowcount or 0)

    async def revoke_invite(self, email: str) -> bool:
        async with self.db.begin() as conn:
            done = await conn.execute(delete(human_invites).where(human_invites.c.email == email))
        return bool(done.rowcount)

    async def accept_invite(self, token: str, password: str) -> str:
        """Create the invited human with the password they chose; the invitation is spent (one
        conditional DELETE, so of two racing acceptances one wins). Returns the new human's id."""
        check_new_password(password)
        invite = await self.open_invite(token)
        if invite is None:
            raise NotFound("this invitation is not valid")
        hashed = await asyncio.to_thread(_hasher.hash, password)
        hid = new_id("hu")
        async with self.db.begin() as conn:
            spent = await conn.execute(delete(human_invites).where(human_invites.c.id_hash == _sha(token)))
            if spent.rowcount != 1:
                raise NotFound("this invitation is not valid")
            if (await conn.execute(select(humans.c.id).where(humans.c.email == invite.email))).first():
                raise Conflict("a human with that email exists")
            await conn.execute(
                insert(humans).values(
                    id=hid,
                    email=invite.email,
                    password_hash=hashed,
                    is_operator=invite.is_operator,
                    created_at=ms(self.clock.now()),
                )
            )
        return hid


def _invite(row: Any) -> Invite:
    return Invite(row.email, bool(row.is_operator), row.invited_by, row.created_at, row.expires_at)
