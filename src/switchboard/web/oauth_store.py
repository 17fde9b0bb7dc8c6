"""MCP OAuth authorization codes, grants and tokens (registered clients: :mod:`.oauth_clients`); the
statements are in ``store/oauth.py``.

* Codes and tokens are 256-bit random values, minted here and stored as SHA-256; the clear value exists
  only in the response that hands it out.
* A code is consumed by a single conditional ``DELETE``: of two racing exchanges exactly one wins,
  on every instance.
* A refresh token is rotated by a single conditional ``UPDATE ... WHERE rotated_at IS NULL``; a second
  presentation of a rotated token is reuse, and revokes the whole grant.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.cred import Envelope
from switchboard.store import accounts, oauth
from switchboard.store.db import Database
from switchboard.store.oauth import CodeRecord, NewToken, TokenRecord
from switchboard.web.oauth_clients import OAuthClients
from switchboard.web.store import hash_id

__all__ = ["ACCESS", "REFRESH", "CodeRecord", "IssuedPair", "OAuthStore", "TokenRecord"]

ACCESS = "access"
REFRESH = "refresh"
ACCESS_PREFIX = "sboa_"
REFRESH_PREFIX = "sbor_"
CODE_PREFIX = "sboc_"
UNUSED_CLIENT_SECONDS = 24 * 3600  # a registration that never led to a grant is dropped after a day


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
        record = CodeRecord(
            client_id=client_id,
            human_id=human_id,
            endpoint_id=endpoint_id,
            verbs=tuple(verbs),
            code_challenge=code_challenge,
            redirect_uri=redirect_uri,
            redirect_uri_explicit=redirect_uri_explicit,
            resource=resource,
            expires_at=ms(now + lifetime_seconds),
        )
        await oauth.insert_code(self.db, hash_id(code), record, ms(now))
        return code

    async def code(self, code: str, client_id: str) -> CodeRecord | None:
        if not code.startswith(CODE_PREFIX) or len(code) > 100:
            return None
        return await oauth.live_code(self.db, hash_id(code), client_id, ms(self.clock.now()))

    async def exchange_code(self, code: str, record: CodeRecord) -> IssuedPair | None:
        """Consume the code and create the grant and its first token pair, in one transaction.

        ``None`` when the code was already used (or expired), or its endpoint no longer belongs to
        the human who approved it."""
        now = self.clock.now()
        async with self.db.begin() as conn:
            if not await oauth.consume_code_in(conn, hash_id(code), ms(now)):
                return None
            if not await accounts.owns(conn, record.human_id, record.endpoint_id):
                return None
            grant_id = new_id("og")
            await oauth.open_grant_in(conn, grant_id, record, ms(now))
            return await self._issue(conn, grant_id, record.verbs, now)

    # -- tokens ---------------------------------------------------------------------------------

    async def _issue(
        self, conn: AsyncConnection, grant_id: str, verbs: Sequence[str], now: float
    ) -> IssuedPair:
        access = ACCESS_PREFIX + secrets.token_urlsafe(32)
        refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
        access_expires = ms(now + self.access_seconds)
        tokens = [
            NewToken(hash_id(access), ACCESS, access_expires),
            NewToken(hash_id(refresh), REFRESH, ms(now + self.refresh_seconds)),
        ]
        await oauth.insert_tokens_in(conn, grant_id, verbs, tokens, ms(now))
        return IssuedPair(access, refresh, tuple(sorted(set(verbs))), access_expires)

    async def token(self, value: str, kind: str) -> TokenRecord | None:
        """A live token of this kind; rotated refresh tokens are returned (``rotated``) so the caller
        can detect reuse."""
        prefix = ACCESS_PREFIX if kind == ACCESS else REFRESH_PREFIX
        if not value.startswith(prefix) or len(value) > 100:
            return None
        return await oauth.live_token(self.db, hash_id(value), kind, ms(self.clock.now()))

    async def rotate(self, record: TokenRecord, verbs: Sequence[str]) -> IssuedPair | None:
        """Spend a refresh token for a new pair; ``None`` when it was spent already (reuse)."""
        now = self.clock.now()
        async with self.db.begin() as conn:
            if not await oauth.spend_refresh_in(conn, record, ms(now)):
                return None
            return await self._issue(conn, record.grant_id, verbs, now)

    async def revoke_grant(self, grant_id: str) -> None:
        await oauth.delete_grant(self.db, grant_id)

    async def revoke_grant_of_endpoint(self, grant_id: str, endpoint_id: str) -> bool:
        """The owning human's revoke from the endpoint card."""
        return await oauth.delete_grant(self.db, grant_id, endpoint_id=endpoint_id)

    async def sweep(self) -> None:
        """Drop expired codes and tokens, grants left without tokens, and registrations never used."""
        now = ms(self.clock.now())
        await oauth.sweep(self.db, now, now - UNUSED_CLIENT_SECONDS * 1000)
