"""The OAuth home (with ``store/oauth_clients.py``): MCP OAuth authorization codes, grants and tokens.

* Codes and tokens are stored as their SHA-256 only (the web layer mints and hashes them,
  ``switchboard.web.oauth_store``); the clear value exists only in the response that hands it out.
* A code is consumed by a single conditional ``DELETE``: of two racing exchanges exactly one wins,
  on every instance.
* A refresh token is spent by a single conditional ``UPDATE ... WHERE rotated_at IS NULL``: of two
  presentations exactly one spends it, and the other is reuse.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, exists, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.store import oauth_clients as clients
from switchboard.store.db import Database
from switchboard.store.schema_web import oauth_clients, oauth_codes, oauth_grants, oauth_tokens


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
class NewToken:
    token_hash: str
    kind: str
    expires_at: int


@dataclass(frozen=True, slots=True)
class GrantView:
    """A grant as the endpoint card shows it."""

    id: str
    client_name: str
    verbs: tuple[str, ...]
    created_at: int
    last_used_at: int | None


def _verbs_json(verbs: Sequence[str]) -> str:
    return json.dumps(sorted(set(verbs)))


# -- codes ---------------------------------------------------------------------------------------


async def insert_code(db: Database, code_hash: str, record: CodeRecord, now_ms: int) -> None:
    async with db.begin() as conn:
        await conn.execute(
            insert(oauth_codes).values(
                code_hash=code_hash,
                client_id=record.client_id,
                human_id=record.human_id,
                endpoint_id=record.endpoint_id,
                verbs=_verbs_json(record.verbs),
                code_challenge=record.code_challenge,
                redirect_uri=record.redirect_uri,
                redirect_uri_explicit=record.redirect_uri_explicit,
                resource=record.resource,
                expires_at=record.expires_at,
                created_at=now_ms,
            )
        )


async def live_code(db: Database, code_hash: str, client_id: str, now_ms: int) -> CodeRecord | None:
    """The client's unexpired code with this hash."""
    stmt = select(oauth_codes).where(
        oauth_codes.c.code_hash == code_hash,
        oauth_codes.c.client_id == client_id,
        oauth_codes.c.expires_at > now_ms,
    )
    async with db.read() as conn:
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


async def consume_code_in(conn: AsyncConnection, code_hash: str, now_ms: int) -> bool:
    """Spend an unexpired code; True for the one exchange that wins it."""
    consumed = await conn.execute(
        delete(oauth_codes).where(oauth_codes.c.code_hash == code_hash, oauth_codes.c.expires_at > now_ms)
    )
    return consumed.rowcount == 1


# -- grants and tokens ---------------------------------------------------------------------------


async def open_grant_in(conn: AsyncConnection, grant_id: str, record: CodeRecord, now_ms: int) -> None:
    """The grant an exchanged code approved, in the exchange's transaction."""
    await clients.mark_granted_in(conn, record.client_id, now_ms)
    await conn.execute(
        insert(oauth_grants).values(
            id=grant_id,
            client_id=record.client_id,
            human_id=record.human_id,
            endpoint_id=record.endpoint_id,
            verbs=json.dumps(sorted(record.verbs)),
            resource=record.resource,
            created_at=now_ms,
            last_used_at=now_ms,
        )
    )


async def insert_tokens_in(
    conn: AsyncConnection, grant_id: str, verbs: Sequence[str], tokens: Sequence[NewToken], now_ms: int
) -> None:
    await conn.execute(
        insert(oauth_tokens),
        [
            {
                "token_hash": t.token_hash,
                "grant_id": grant_id,
                "kind": t.kind,
                "verbs": _verbs_json(verbs),
                "expires_at": t.expires_at,
                "rotated_at": None,
                "created_at": now_ms,
            }
            for t in tokens
        ],
    )


async def live_token(db: Database, token_hash: str, kind: str, now_ms: int) -> TokenRecord | None:
    """An unexpired token of this kind with its grant; a spent refresh token comes back ``rotated``."""
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
            oauth_tokens.c.token_hash == token_hash,
            oauth_tokens.c.kind == kind,
            oauth_tokens.c.expires_at > now_ms,
        )
    )
    async with db.read() as conn:
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


async def spend_refresh_in(conn: AsyncConnection, record: TokenRecord, now_ms: int) -> bool:
    """Spend a refresh token and mark its grant used; False when it was spent already (reuse)."""
    spent = await conn.execute(
        update(oauth_tokens)
        .where(oauth_tokens.c.token_hash == record.token_hash, oauth_tokens.c.rotated_at.is_(None))
        .values(rotated_at=now_ms)
    )
    if spent.rowcount != 1:
        return False
    await conn.execute(
        update(oauth_grants).where(oauth_grants.c.id == record.grant_id).values(last_used_at=now_ms)
    )
    return True


async def delete_grant(db: Database, grant_id: str, *, endpoint_id: str | None = None) -> bool:
    """Revoke a grant (its tokens go with it); with ``endpoint_id``, only that endpoint's."""
    stmt = delete(oauth_grants).where(oauth_grants.c.id == grant_id)
    if endpoint_id is not None:
        stmt = stmt.where(oauth_grants.c.endpoint_id == endpoint_id)
    async with db.begin() as conn:
        gone = await conn.execute(stmt)
    return gone.rowcount == 1


async def sweep(db: Database, now_ms: int, unused_client_before_ms: int) -> None:
    """Drop expired codes and tokens, grants left without tokens, and registrations never used."""
    async with db.begin() as conn:
        await conn.execute(delete(oauth_codes).where(oauth_codes.c.expires_at <= now_ms))
        await conn.execute(delete(oauth_tokens).where(oauth_tokens.c.expires_at <= now_ms))
        has_token = exists().where(oauth_tokens.c.grant_id == oauth_grants.c.id)
        await conn.execute(delete(oauth_grants).where(~has_token))
        await clients.sweep_unused_in(conn, unused_client_before_ms)


# -- what the pages show --------------------------------------------------------------------------


async def grants_for_endpoint(db: Database, endpoint_id: str) -> list[GrantView]:
    """The endpoint's grants, newest first, each with its client's name."""
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
    async with db.read() as conn:
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


async def count_grants(conn: AsyncConnection, *, endpoint_id: str | None = None) -> int:
    stmt = select(func.count()).select_from(oauth_grants)
    if endpoint_id is not None:
        stmt = stmt.where(oauth_grants.c.endpoint_id == endpoint_id)
    return int((await conn.execute(stmt)).scalar_one())
