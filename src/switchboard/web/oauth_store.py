"""MCP OAuth SQL: authorization codes, grants and tokens (registered clients: :mod:`.oauth_clients`).

* Codes and tokens are 256-bit random values stored as SHA-256; the clear value exists only in the
  response that hands it out.
* A code is consumed by a single conditional ``DELETE``: of two racing exchanges exactly one wins,
  on every instance.
* A refresh token is rotated by a single conditional ``UPDATE ... WHERE rotated_at IS NULL``; a second
  presentation of a rotated token is reuse, and revokes the whole grant.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, exists, insert, select, update

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.cred import Envelope
from switchboard.store import accounts
from switchboard.store.db import Database
from switchboard.store.schema_web import oauth_clients, oauth_codes, oauth_grants, oauth_tokens
from switchboard.web.oauth_clients import OAuthClients
from switchboard.web.store import hash_id

ACCESS = "access"
REFRESH = "refresh"
ACCESS_PREFIX = "sboa_"
REFRESH_PREFIX = "sbor_"
CODE_PREFIX = "sboc_"
UNUSED_CLIENT_SECONDS = 24 * 3600  # a registration that never led to a grant is dropped after a day


@dataclass(frozen=True, slots=True)
class CodeRecord:
    client_id: str
    human_id: str
    endpoint_id: str
    verbs: tuple[str, ...]
    code_challenge: str
    redirect_uri: str
    redirect_uri_explicit: bool
    resource: str | None
    expires_at: int


@dataclass(frozen=True, slots=True)
class TokenRecord:
    token_hash: str
    grant_id: str
    kind: str
    verbs: tuple[str, ...]
    expires_at: int
    rotated: bool
    client_id: str
    endpoint_id: str
    resource: str | None


@dataclass(frozen=True, slots=True)
class IssuedPair:
    access_token: str
    refresh_token: str
    verbs: tuple[str, ...]
    access_expires_at: int


class OAuthStore(OAuthClients):
    """Clients (registration and lookup, in :class:`OAuthClients`), codes, grants and tokens."""

    def __init__(
        self, db: Database, envelope: Envelope, clock: Clock, *, access_seconds: float, refresh_seconds: float
    ) -> None:
        self.db, self.envelope, self.clock = db, envelope, clock
        self.access_seconds, self.refresh_seconds = access_seconds, refresh_seconds

    # -- codes ----------------------------------------------------------------------------------

    async def create_code(
        self,
        *,
        client_id: str,
        human_id: str,
        endpoint_id: str,
        verbs: Sequence[str],
        code_challenge: str,
        redirect_uri: str,
        redirect_uri_explicit: bool,
        resource: str | None,
        lifetime_seconds: float,
    ) -> str:
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        now = self.clock.now()
        async with self.db.begin() as conn:
            await conn.execute(
                insert(oauth_codes).values(
                    code_hash=hash_id(code),
                    client_id=client_id,
                    human_id=human_id,
                    endpoint_id=endpoint_id,
                    verbs=json.dumps(sorted(set(verbs))),
                    code_challenge=code_challenge,
                    redirect_uri=redirect_uri,
                    redirect_uri_explicit=redirect_uri_explicit,
                    resource=resource,
                    expires_at=ms(now + lifetime_seconds),
                    created_at=ms(now),
                )
            )
        return code

    async def code(self, code: str, client_id: str) -> CodeRecord | None:
        if not code.startswith(CODE_PREFIX) or len(code) > 100:
            return None
        stmt = select(oauth_codes).where(
            oauth_codes.c.code_hash == hash_id(code),
            oauth_codes.c.client_id == client_id,
            oauth_codes.c.expires_at > ms(self.clock.now()),
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return CodeRecord(
            client_id=row.client_id,
            human_id=row.human_id,
            endpoint_id=row.endpoint_id,
            verbs=tuple(json.loads(row.verbs)),
            code_challenge=row.code_challenge,
            redirect_uri=row.redirect_uri,
            redirect_uri_explicit=bool(row.redirect_uri_explicit),
            resource=row.resource,
            expires_at=row.expires_at,
        )

    async def exchange_code(self, code: str, record: CodeRecord) -> IssuedPair | None:
        """Consume the code and create the grant and its first token pair, in one transaction.

        ``None`` when the code was already used (or expired), or its endpoint no longer belongs to
        the human who approved it."""
        now = self.clock.now()
        async with self.db.begin() as conn:
            consumed = await conn.execute(
                delete(oauth_codes).where(
                    oauth_codes.c.code_hash == hash_id(code), oauth_codes.c.expires_at > ms(now)
                )
            )
            if consumed.rowcount != 1:
                return None
            if not await accounts.owns(conn, record.human_id, record.endpoint_id):
                return None
            grant_id = new_id("og")
            await conn.execute(
                update(oauth_clients)
                .where(oauth_clients.c.id == record.client_id, oauth_clients.c.first_grant_at.is_(None))
                .values(first_grant_at=ms(now))
            )
            await conn.execute(
                insert(oauth_grants).values(
                    id=grant_id,
                    client_id=record.client_id,
                    human_id=record.human_id,
                    endpoint_id=record.endpoint_id,
                    verbs=json.dumps(sorted(record.verbs)),
                    resource=record.resource,
                    created_at=ms(now),
                    last_used_at=ms(now),
                )
            )
            return await self._issue(conn, grant_id, record.verbs, now)

    # -- tokens ---------------------------------------------------------------------------------

    async def _issue(self, conn: Any, grant_id: str, verbs: Sequence[str], now: float) -> IssuedPair:
        access = ACCESS_PREFIX + secrets.token_urlsafe(32)
        refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
        verbs_json = json.dumps(sorted(set(verbs)))
        access_expires = ms(now + self.access_seconds)
        await conn.execute(
            insert(oauth_tokens),
            [
                {
                    "token_hash": hash_id(access),
                    "grant_id": grant_id,
                    "kind": ACCESS,
                    "verbs": verbs_json,
                    "expires_at": access_expires,
                    "rotated_at": None,
                    "created_at": ms(now),
                },
                {
                    "token_hash": hash_id(refresh),
                    "grant_id": grant_id,
                    "kind": REFRESH,
                    "verbs": verbs_json,
                    "expires_at": ms(now + self.refresh_seconds),
                    "rotated_at": None,
                    "created_at": ms(now),
                },
            ],
        )
        return IssuedPair(access, refresh, tuple(sorted(set(verbs))), access_expires)

    async def token(self, value: str, kind: str) -> TokenRecord | None:
        """A live token of this kind; rotated refresh tokens are returned (``rotated``) so the caller
        can detect reuse."""
        prefix = ACCESS_PREFIX if kind == ACCESS else REFRESH_PREFIX
        if not value.startswith(prefix) or len(value) > 100:
            return None
        stmt = (
            select(
                oauth_tokens.c.token_hash,
                oauth_tokens.c.grant_id,
                oauth_tokens.c.kind,
                oauth_tokens.c.verbs,
                oauth_tokens.c.expires_at,
                oauth_tokens.c.rotated_at,
                oauth_grants.c.client_id,
                oauth_grants.c.endpoint_id,
                oauth_grants.c.resource,
            )
            .join(oauth_grants, oauth_grants.c.id == oauth_tokens.c.grant_id)
            .where(
                oauth_tokens.c.token_hash == hash_id(value),
                oauth_tokens.c.kind == kind,
                oauth_tokens.c.expires_at > ms(self.clock.now()),
            )
        )
        async with self.db.read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return TokenRecord(
            token_hash=row.token_hash,
            grant_id=row.grant_id,
            kind=row.kind,
            verbs=tuple(json.loads(row.verbs)),
            expires_at=row.expires_at,
            rotated=row.rotated_at is not None,
            client_id=row.client_id,
            endpoint_id=row.endpoint_id,
            resource=row.resource,
        )

    async def rotate(self, record: TokenRecord, verbs: Sequence[str]) -> IssuedPair | None:
        """Spend a refresh token for a new pair; ``None`` when it was spent already (reuse)."""
        now = self.clock.now()
        async with self.db.begin() as conn:
            spent = await conn.execute(
                update(oauth_tokens)
                .where(oauth_tokens.c.token_hash == record.token_hash, oauth_tokens.c.rotated_at.is_(None))
                .values(rotated_at=ms(now))
            )
            if spent.rowcount != 1:
                return None
            await conn.execute(
                update(oauth_grants).where(oauth_grants.c.id == record.grant_id).values(last_used_at=ms(now))
            )
            return await self._issue(conn, record.grant_id, verbs, now)

    async def revoke_grant(self, grant_id: str) -> None:
        async with self.db.begin() as conn:
            await conn.execute(delete(oauth_grants).where(oauth_grants.c.id == grant_id))

    async def revoke_grant_of_endpoint(self, grant_id: str, endpoint_id: str) -> bool:
        """The owning human's revoke from the endpoint card."""
        async with self.db.begin() as conn:
            gone = await conn.execute(
                delete(oauth_grants).where(
                    oauth_grants.c.id == grant_id, oauth_grants.c.endpoint_id == endpoint_id
                )
            )
        return gone.rowcount == 1

    async def sweep(self) -> None:
        """Drop expired codes and tokens, grants left without tokens, and registrations never used."""
        now = ms(self.clock.now())
        async with self.db.begin() as conn:
            await conn.execute(delete(oauth_codes).where(oauth_codes.c.expires_at <= now))
            await conn.execute(delete(oauth_tokens).where(oauth_tokens.c.expires_at <= now))
            has_token = exists().where(oauth_tokens.c.grant_id == oauth_grants.c.id)
            await conn.execute(delete(oauth_grants).where(~has_token))
            await conn.execute(
                delete(oauth_clients).where(
                    oauth_clients.c.first_grant_at.is_(None),
                    oauth_clients.c.created_at <= now - UNUSED_CLIENT_SECONDS * 1000,
                )
            )
