"""Humans and endpoints: passwords (argon2), bearer credentials (shown once, stored as sha256), scopes."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Row, Select, bindparam, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.core.names import EMAIL as EMAIL  # re-exported: the stores and web forms check with them
from switchboard.core.names import QUEUE as QUEUE
from switchboard.core.names import SLUG as SLUG
from switchboard.obs.audit import audit
from switchboard.store.changes import EndpointChanges, announce
from switchboard.store.db import Database
from switchboard.store.errors import Conflict, NotFound
from switchboard.store.schema import endpoints, humans

TOKEN_PREFIX = "sbt_"

# Built once: the endpoints of a batch (``AccountStore.endpoints_by_id``), one expanding IN.
_BY_IDS = select(endpoints).where(endpoints.c.id.in_(bindparam("p_endpoint_ids", expanding=True)))

_hasher = PasswordHasher()
# A valid hash to verify against when the email is unknown, so timing does not reveal which part was wrong.


def _verify_or_dummy(stored: str | None, password: str) -> bool:
    return _verify(stored or _dummy_hash(), password)


@functools.cache
def _dummy_hash() -> str:
    """Verified against when the email is unknown, so timing does not tell. Made on first use: an argon2
    hash costs ~0.5 s, which every CLI command and a refused ``serve`` paid at import."""
    return _hasher.hash("switchboard-dummy-password")


def _verify(stored: str, password: str) -> bool:
    try:
        return bool(_hasher.verify(stored, password))
    except (VerificationError, InvalidHashError):
        return False


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    slug: str
    human_id: str
    verbs: tuple[str, ...]
    queues: tuple[str, ...]
    presence: str
    presence_override: str | None
    presence_seen: str
    token_hint: str | None
    created_at: int

    @property
    def effective_presence(self) -> str:
        """SPEC-0022: the operator override when set, else the clocked state."""
        return self.presence_override or self.presence

    @classmethod
    def from_row(cls, row: Row[Any]) -> Endpoint:
        return cls(
            id=row.id,
            slug=row.slug,
            human_id=row.human_id,
            verbs=tuple(json.loads(row.verbs)),
            queues=tuple(json.loads(row.queues)),
            presence=row.presence,
            presence_override=row.presence_override,
            presence_seen=row.presence_seen,
            token_hint=row.token_hint,
            created_at=row.created_at,
        )


class AccountStore:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        endpoints_per_human: int = 50,
        changes: EndpointChanges | None = None,
    ) -> None:
        self.db, self.clock = db, clock
        self.changes = changes or EndpointChanges()  # cached rows go stale on these (mcp/auth.py)
        self.endpoints_per_human = endpoints_per_human

    # -- humans ------------------------------------------------------------------------------------

    async def create_human(
        self, email: str, password: str, *, operator: bool = False, actor: str | None = None
    ) -> str:
        email = email.strip().lower()
        if not EMAIL.match(email):
            raise ValueError("email is not a valid address")
        if len(password) < 10:
            raise ValueError("password must be at least 10 characters")
        hid = new_id("hu")
        # Hashed before the transaction: on SQLite a write transaction holds the database's write lock,
        # and an argon2 hash inside it kept every other writer (ingest, claims) waiting for it.
        password_hash = await asyncio.to_thread(_hasher.hash, password)
        async with self.db.begin() as conn:
            await conn.execute(
                insert(humans).values(
                    id=hid,
                    email=email,
                    password_hash=password_hash,
                    is_operator=operator,
                    created_at=ms(self.clock.now()),
                )
            )
        audit("human.create", actor=actor, human_id=hid, operator=operator)
        return hid

    async def human_by_email(self, email: str) -> Row[Any] | None:
        async with self.db.read() as conn:
            stmt = select(humans).where(humans.c.email == email.strip().lower())
            return (await conn.execute(stmt)).first()

    async def human_by_id(self, human_id: str) -> Row[Any] | None:
        async with self.db.read() as conn:
            return (await conn.execute(select(humans).where(humans.c.id == human_id))).first()

    async def list_humans(self) -> list[Row[Any]]:
        async with self.db.read() as conn:
            return list((await conn.execute(select(humans).order_by(humans.c.created_at))).all())

    async def check_password(self, email: str, password: str) -> Row[Any] | None:
        """argon2 is deliberately slow (~100 ms): it runs in a worker thread, never on the event loop."""
        row = await self.human_by_email(email)
        stored = row.password_hash if row else None
        ok = await asyncio.to_thread(_verify_or_dummy, stored, password)
        human_id = row.id if row is not None else None
        audit("login" if ok and row is not None else "login_failed", actor=human_id, human_id=human_id)
        return row if ok and row is not None else None

    # -- endpoints ---------------------------------------------------------------------------------

    async def vend_endpoint(
        self,
        human_id: str,
        slug: str,
        queues: Sequence[str],
        verbs: Sequence[str],
        *,
        actor: str | None = None,
    ) -> tuple[Endpoint, str]:
        """Create an endpoint and return its bearer token. The token is never stored or shown again."""
        if not SLUG.match(slug):
            raise ValueError("slug must be 1-64 lower-case letters, digits or dashes")
        _check_scope(queues, verbs)
        token = mint_token()
        now = ms(self.clock.now())
        eid = new_id("ep")
        async with self.db.begin() as conn:
            taken = (await conn.execute(select(endpoints.c.id).where(endpoints.c.slug == slug))).first()
            if taken:
                raise Conflict("an endpoint with that slug exists already")
            # The human's row locked (PostgreSQL; SQLite writers are serial): concurrent vends count once.
            await conn.execute(select(humans.c.id).where(humans.c.id == human_id).with_for_update())
            held = (
                await conn.execute(
                    select(func.count()).select_from(endpoints).where(endpoints.c.human_id == human_id)
                )
            ).scalar_one()
            if held >= self.endpoints_per_human:
                # Every per-endpoint quota (rate, hooks, sessions) multiplies by this number.
                raise Conflict(
                    f"this human holds {held} endpoints, the most allowed (SWITCHBOARD_ENDPOINTS_PER_HUMAN)"
                )
            await conn.execute(
                insert(endpoints).values(
                    id=eid,
                    slug=slug,
                    human_id=human_id,
                    token_hash=hash_token(token),
                    token_hint=token[:8],
                    verbs=json.dumps(sorted(set(verbs))),
                    queues=json.dumps(sorted(set(queues))),
                    presence="in",
                    presence_seen="in",
                    created_at=now,
                    updated_at=now,
                )
            )
            row = (await conn.execute(select(endpoints).where(endpoints.c.id == eid))).one()
        audit(
            "token.vend", actor=actor or human_id, endpoint_id=eid, human_id=human_id, verbs=",".join(verbs)
        )
        return Endpoint.from_row(row), token

    async def endpoint_by_token(self, token: str) -> Endpoint | None:
        if not token.startswith(TOKEN_PREFIX) or len(token) > 100:
            return None
        rows = await self.db.fetch(select(endpoints).where(endpoints.c.token_hash == hash_token(token)))
        return Endpoint.from_row(rows[0]) if rows else None

    async def endpoint(self, endpoint_id: str) -> Endpoint | None:
        rows = await self.db.fetch(select(endpoints).where(endpoints.c.id == endpoint_id))
        return Endpoint.from_row(rows[0]) if rows else None

    async def endpoints_by_id(self, endpoint_ids: Iterable[str]) -> dict[str, Endpoint]:
        """Several endpoints with one statement, keyed by id; an id with no endpoint is absent. For a
        caller that handles a batch of transitions (the doorbell) and needs each endpoint once."""
        ids = sorted(set(endpoint_ids))
        if not ids:
            return {}
        rows = await self.db.fetch(_BY_IDS, {"p_endpoint_ids": ids})
        return {row.id: Endpoint.from_row(row) for row in rows}

    async def endpoint_by_slug(self, slug: str) -> Endpoint | None:
        async with self.db.read() as conn:
            row = (await conn.execute(select(endpoints).where(endpoints.c.slug == slug))).first()
        return Endpoint.from_row(row) if row else None

    async def list_endpoints(self, human_id: str | None = None) -> list[Endpoint]:
        stmt = select(endpoints).order_by(endpoints.c.created_at)
        if human_id is not None:
            stmt = stmt.where(endpoints.c.human_id == human_id)
        async with self.db.read() as conn:
            return [Endpoint.from_row(r) for r in (await conn.execute(stmt)).all()]

    async def set_scope(
        self,
        endpoint_id: str,
        *,
        verbs: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
        actor: str | None = None,
    ) -> None:
        """Replace the endpoint's verbs, queues or both. Checked here, whichever face calls: unknown
        verbs, bad or no queues, or an unknown endpoint are refused (ValueError, NotFound) and nothing
        changes."""
        _check_scope(queues, verbs)
        values: dict[str, Any] = {"updated_at": ms(self.clock.now())}
        if verbs is not None:
            values["verbs"] = json.dumps(sorted(set(verbs)))
        if queues is not None:
            values["queues"] = json.dumps(sorted(set(queues)))
        async with self.db.begin() as conn:
            await _one_updated(conn, endpoint_id, values)
            await announce(conn, endpoint_id)
        self.changes.bump(endpoint_id)
        audit(
            "endpoint.scope",
            actor=actor,
            endpoint_id=endpoint_id,
            verbs=None if verbs is None else ",".join(sorted(set(verbs))),
            queues=None if queues is None else ",".join(sorted(set(queues))),
        )

    async def revend_token(self, endpoint_id: str, *, actor: str | None = None) -> str:
        """A new token for the endpoint; the old one stops at once. NotFound for an unknown endpoint."""
        token = mint_token()
        values = {
            "token_hash": hash_token(token),
            "token_hint": token[:8],
            "updated_at": ms(self.clock.now()),
        }
        async with self.db.begin() as conn:
            await _one_updated(conn, endpoint_id, values)
            await announce(conn, endpoint_id)
        self.changes.bump(endpoint_id)
        audit("token.revend", actor=actor, endpoint_id=endpoint_id)
        return token

    async def revoke_token(self, endpoint_id: str, *, actor: str | None = None) -> None:
        """The endpoint's token stops at once (OAuth grants are apart). NotFound for an unknown endpoint."""
        values = {"token_hash": None, "token_hint": None, "updated_at": ms(self.clock.now())}
        async with self.db.begin() as conn:
            await _one_updated(conn, endpoint_id, values)
            await announce(conn, endpoint_id)
        self.changes.bump(endpoint_id)
        audit("token.revoke", actor=actor, endpoint_id=endpoint_id)


def _check_scope(queues: Sequence[str] | None, verbs: Sequence[str] | None) -> None:
    """What a vend or a scope change may store (None: not being changed)."""
    from switchboard.core.verbs import unknown_verbs

    if queues is not None and (not queues or any(not QUEUE.match(q) for q in queues)):
        raise ValueError("queues must be one or more names of lower-case letters, digits, '.', '_' or '-'")
    bad = unknown_verbs(list(verbs)) if verbs is not None else []
    if bad:
        raise ValueError(f"unknown verbs: {', '.join(sorted(bad))}")


async def _one_updated(conn: AsyncConnection, endpoint_id: str, values: dict[str, Any]) -> None:
    """Update one endpoint's row; NotFound (the transaction rolls back) when there is none."""
    result = await conn.execute(update(endpoints).where(endpoints.c.id == endpoint_id).values(**values))
    if result.rowcount != 1:
        raise NotFound(f"no endpoint {endpoint_id!r}")


# -- statements other parts run on ``endpoints`` -----------------------------------------------------
# The endpoints home (tests/unit/test_sql_homes.py): these take the caller's connection, so each runs in
# the caller's read or transaction (a presence move, a hook create, a route, an OAuth code exchange).


def owned_ids(human_id: str) -> Select[tuple[str]]:
    """The ids of a human's endpoints, as a sub-select (another aggregate's count by owner)."""
    return select(endpoints.c.id).where(endpoints.c.human_id == human_id)


def slug_of(endpoint_id: Any) -> Any:
    """The slug of the endpoint ``endpoint_id`` (a column of another table), as a scalar sub-select: a
    listing of another aggregate shows its endpoint's name without joining this table itself."""
    return select(endpoints.c.slug).where(endpoints.c.id == endpoint_id).scalar_subquery()


def verbs_of(endpoint_id: Any) -> Any:
    """The granted verbs (JSON) of the endpoint ``endpoint_id``, as a scalar sub-select: another
    aggregate's read checks a grant in its own statement."""
    return select(endpoints.c.verbs).where(endpoints.c.id == endpoint_id).scalar_subquery()


async def count_humans(conn: AsyncConnection) -> int:
    return int((await conn.execute(select(func.count()).select_from(humans))).scalar_one())


async def count_endpoints(conn: AsyncConnection, *, human_id: str | None = None) -> int:
    stmt = select(func.count()).select_from(endpoints)
    if human_id is not None:
        stmt = stmt.where(endpoints.c.human_id == human_id)
    return int((await conn.execute(stmt)).scalar_one())


async def delete_endpoint(conn: AsyncConnection, endpoint_id: str) -> bool:
    """Delete the endpoint row (its todos, hooks, routes, tasks and grants cascade). False: no such row."""
    return (await conn.execute(delete(endpoints).where(endpoints.c.id == endpoint_id))).rowcount == 1


async def lock_endpoint(conn: AsyncConnection, endpoint_id: str) -> None:
    """Lock the endpoint's row until commit (PostgreSQL; SQLite writers are serial): serialises writes
    that count something per endpoint, such as its notify hooks."""
    await conn.execute(select(endpoints.c.id).where(endpoints.c.id == endpoint_id).with_for_update())


async def id_and_owner(conn: AsyncConnection, slug: str) -> tuple[str, str] | None:
    """(endpoint id, owning human id) of the endpoint named ``slug``."""
    row = (
        await conn.execute(select(endpoints.c.id, endpoints.c.human_id).where(endpoints.c.slug == slug))
    ).first()
    return None if row is None else (row.id, row.human_id)


async def owns(conn: AsyncConnection, human_id: str, endpoint_id: str) -> bool:
    """Whether the endpoint exists and belongs to the human."""
    stmt = select(endpoints.c.id).where(endpoints.c.id == endpoint_id, endpoints.c.human_id == human_id)
    return (await conn.execute(stmt)).first() is not None


async def write_presence(
    conn: AsyncConnection, endpoint_id: str, values: dict[str, object], now_ms: int
) -> str:
    """Set the clocked state or the override (``values``); returns the effective presence afterwards."""
    await conn.execute(
        update(endpoints).where(endpoints.c.id == endpoint_id).values(**values, updated_at=now_ms)
    )
    stmt = select(endpoints.c.presence, endpoints.c.presence_override).where(endpoints.c.id == endpoint_id)
    row = (await conn.execute(stmt)).one()
    return str(row.presence_override or row.presence)


async def mark_presence_seen(conn: AsyncConnection, endpoint_id: str, effective: str) -> bool:
    """Record ``effective`` as seen: one conditional UPDATE, so exactly one caller moves it."""
    moved = await conn.execute(
        update(endpoints)
        .where(endpoints.c.id == endpoint_id, endpoints.c.presence_seen != effective)
        .values(presence_seen=effective)
        .returning(endpoints.c.id)
    )
    return moved.first() is not None
